"""Issue 35 item 4, the judges' inputs (issue 32): a GGUF file, an Ollama store, a built-in's packages and the model
cache, each broken the ways they break. Every case is one line on stderr, exit 2, nothing written (the output
folder and the cache), and refused before the model loads; the GGUF cases before any conversion starts.

Which faults are real and which simulated: the truncated, not-GGUF and other-architecture files, the Ollama
stores, the cache under a file and the wrong pinned hash are real files; a full disk (shutil.disk_usage reporting
1 MiB free, and ENOSPC raised while the conversion writes) and a read-only file system (EROFS raised while it
writes) are simulated by monkeypatching, because these tests run as root, which chmod does not stop.
"""

from __future__ import annotations

import errno
import json
import shutil
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from logitjudge import gguf as lj_gguf
from logitjudge import judges, models
from logitjudge.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from test_cli import write_texts  # noqa: E402

GEMMA = judges.BUILTINS["gemma-3-270m"]


@pytest.fixture(scope="module")
def gemma_gguf(tmp_path_factory):
    """The real Gemma-3-270M GGUF, assembled from its packages' chunks (read by path) and checked."""
    return judges.assemble(GEMMA, tmp_path_factory.mktemp("gguf") / "gemma-3-270m-q4_k_m.gguf")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty model cache; no model may load and no conversion may start unless a test allows it."""
    c = tmp_path / "cache"
    monkeypatch.setenv("LOGITJUDGE_CACHE", str(c))

    def fail(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(models, "load_model", fail)
    monkeypatch.setattr(lj_gguf, "_write", lambda *a, **k: fail())
    return c


def _files(folder: Path) -> dict:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()} if folder.exists() else {}


def refused(capsys, tmp_path, model: str, *words) -> str:
    """``logitjudge score --model MODEL``: exit 2, one line holding ``words``, no output, the cache as before."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    texts = write_texts(work / "texts.jsonl", 2)
    cache = Path(lj_gguf.cache_dir())
    before, cached = _files(work), _files(cache)
    capsys.readouterr()
    rc = main(["score", "--model", model, "--texts", str(texts), "--out", str(work / "t.npz"), "--quiet"])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (rc, err)
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert _files(work) == before  # no table, checkpoint, lock or dump
    assert _files(cache) == cached  # no converted folder, no assembled GGUF
    assert not [p for p in cache.rglob("*") if ".tmp" in p.name] if cache.is_dir() else True  # no half folder
    return lines[0]


# ---- GGUF files --------------------------------------------------------------------------------------------
def test_not_a_gguf(tmp_path, cache, capsys):
    p = tmp_path / "model.gguf"
    p.write_text("this is not a model\n")
    refused(capsys, tmp_path, str(p), "is not a GGUF file", "b'GGUF'")


def test_missing_gguf(tmp_path, cache, capsys):
    refused(capsys, tmp_path, str(tmp_path / "absent.gguf"), "does not exist")


@pytest.mark.parametrize("keep", [64, 50_000_000])
def test_truncated_gguf(tmp_path, cache, capsys, gemma_gguf, keep):
    """Cut in the header (the reader fails) and cut in the tensor data (the header reads, the tensors end past
    the file's end)."""
    p = tmp_path / "cut.gguf"
    with gemma_gguf.open("rb") as f:
        p.write_bytes(f.read(keep))
    refused(capsys, tmp_path, str(p), "truncated", "cut.gguf")


def _write_gguf(path: Path, arch: str) -> Path:
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), arch)
    w.add_name(f"a tiny {arch}")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_architecture_transformers_cannot_load(tmp_path, cache, capsys):
    assert "rwkv6" not in lj_gguf.supported_architectures()
    line = refused(capsys, tmp_path, str(_write_gguf(tmp_path / "rwkv.gguf", "rwkv6")), "'rwkv6'",
                   "not one transformers")
    assert "qwen2" in line and "llama" in line  # what it can load


# ---- the model cache ----------------------------------------------------------------------------------------
def test_cache_under_a_file(tmp_path, cache, capsys, gemma_gguf, monkeypatch):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    monkeypatch.setenv("LOGITJUDGE_CACHE", str(blocker / "cache"))
    refused(capsys, tmp_path, str(gemma_gguf), "the model cache", "LOGITJUDGE_CACHE", "lies under a file")
    assert blocker.read_text() == "a file, not a folder"


def test_cache_full_before_conversion(tmp_path, cache, capsys, gemma_gguf, monkeypatch):
    """Simulated: the file system reports 1 MiB free; the conversion (1 GiB of fp32 weights) is refused first."""
    monkeypatch.setattr(lj_gguf.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(1 << 40, 1 << 40, 1 << 20))
    refused(capsys, tmp_path, str(gemma_gguf), "GiB free", "LOGITJUDGE_CACHE", str(cache / "models"))


@pytest.mark.parametrize("code,why", [(errno.ENOSPC, "is full"), (errno.EROFS, "read-only")])
def test_cache_fails_while_converting(tmp_path, cache, capsys, gemma_gguf, monkeypatch, code, why):
    """Simulated: the disk fills up (or turns read-only) halfway through the write: one line, and the half-written
    folder is gone (the next run converts again)."""
    def half_written(header, folder, note):
        (folder / "model.safetensors").write_bytes(b"\0" * 1000)
        raise OSError(code, "simulated")

    monkeypatch.setattr(lj_gguf, "_write", half_written)
    refused(capsys, tmp_path, str(gemma_gguf), why, "LOGITJUDGE_CACHE")
    assert list((cache / "models").iterdir()) == []


# ---- built-in judges ----------------------------------------------------------------------------------------
def test_builtin_wrong_sha256_refused_before_load(tmp_path, cache, capsys, monkeypatch):
    monkeypatch.setitem(judges.BUILTINS, GEMMA.alias, replace(GEMMA, sha256="0" * 64))
    refused(capsys, tmp_path, GEMMA.alias, "sha256", "not the pinned 0000000000000000", "reinstall")
    assert not [p for p in cache.rglob("*") if p.is_file()]  # the assembled file is not kept


def test_builtin_made_once_by_two_first_uses_at_once(tmp_path, monkeypatch, caplog):
    """Two first uses at once on a fresh cache (pytest-xdist's workers, two first runs): one assembles and
    converts, the other waits for it and takes the folder made. Without the lock both assembled to one path and
    the first to finish removed the GGUF the other was still reading (a fresh clone's CI: 9 tests on the real
    Gemma-3-270M failed with transformers' "Unable to load vocabulary from file")."""
    monkeypatch.setenv("LOGITJUDGE_CACHE", str(tmp_path))
    caplog.set_level("INFO", logger="logitjudge.cache")
    made, converting, release = [], threading.Event(), threading.Event()
    monkeypatch.setattr(judges, "current", lambda folder: bool(made))

    def assemble(b, dest):
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(b"GGUF")
        return dest

    def convert(gguf, *, folder, **kw):
        assert gguf.read_bytes() == b"GGUF"  # nobody removed it meanwhile
        converting.set()
        assert release.wait(10)
        made.append(folder)
        return judges.target(folder)

    monkeypatch.setattr(judges, "assemble", assemble)
    monkeypatch.setattr(judges, "gguf_checkpoint", convert)
    got = []
    first = threading.Thread(target=lambda: got.append(judges.builtin_checkpoint(GEMMA.alias)))
    second = threading.Thread(target=lambda: got.append(judges.builtin_checkpoint(GEMMA.alias)))
    first.start()
    assert converting.wait(10)
    second.start()
    deadline = time.monotonic() + 10
    while "waiting for another process" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    first.join(10)
    second.join(10)
    assert "waiting for another process that is making the built-in judge gemma-3-270m" in caplog.text
    assert made == [GEMMA.alias]  # converted once
    assert got == [judges.target(GEMMA.alias)] * 2
    assert not list((tmp_path / "gguf").iterdir())  # the assembled GGUF removed, no lock file left


def test_builtin_missing_package(tmp_path, cache, capsys, monkeypatch):
    b = replace(judges.BUILTINS["qwen2.5-coder-0.5b-instruct"],
                parts=(("logitjudge-no-such-part1", "data/part01.bin"),))
    monkeypatch.setitem(judges.BUILTINS, b.alias, b)
    refused(capsys, tmp_path, b.alias, "logitjudge-no-such-part1==0.9.0", "pip install 'logitjudge[judges]'")


def test_builtin_other_version(tmp_path, cache, capsys, monkeypatch):
    """A part installed at another version than the pinned one (gemma's part1 is 1.0.0; pin it to 9.9.9)."""
    monkeypatch.setitem(judges.BUILTINS, GEMMA.alias, replace(GEMMA, version="9.9.9"))
    refused(capsys, tmp_path, GEMMA.alias, "==9.9.9", "is installed")


# ---- the Ollama store ---------------------------------------------------------------------------------------
def ollama_store(root: Path, gguf_path: Path, *, digest: str | None = None, layers=None, blob: bool = True) -> Path:
    """A store laid out as Ollama lays it out: one model, gemma3:270m."""
    digest = digest or lj_gguf.sha256_file(gguf_path)
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / "gemma3" / "270m"
    manifest.parent.mkdir(parents=True)
    if layers is None:
        layers = [{"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
                   "size": gguf_path.stat().st_size},
                  {"mediaType": "application/vnd.ollama.image.license", "digest": "sha256:" + "1" * 64, "size": 9}]
    manifest.write_text(json.dumps({"schemaVersion": 2, "mediaType":
                                    "application/vnd.docker.distribution.manifest.v2+json", "layers": layers}))
    (root / "blobs").mkdir()
    if blob:
        (root / "blobs" / f"sha256-{digest}").symlink_to(gguf_path)
    return root


def test_ollama_store_missing(tmp_path, cache, capsys, monkeypatch):
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "nowhere"))
    refused(capsys, tmp_path, "ollama:gemma3:270m", "no Ollama model store", "OLLAMA_MODELS")


def test_ollama_manifest_missing(tmp_path, cache, capsys, monkeypatch, gemma_gguf):
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama_store(tmp_path / "store", gemma_gguf)))
    refused(capsys, tmp_path, "ollama:qwen2.5:0.5b", "no model qwen2.5:0.5b", "it has gemma3:270m")
    refused(capsys, tmp_path, "ollama:gemma3", "no model gemma3:latest")


def test_ollama_manifest_without_model_layer(tmp_path, cache, capsys, monkeypatch, gemma_gguf):
    layers = [{"mediaType": "application/vnd.ollama.image.license", "digest": "sha256:" + "1" * 64, "size": 9}]
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama_store(tmp_path / "store", gemma_gguf, layers=layers)))
    refused(capsys, tmp_path, "ollama:gemma3:270m", "has no model layer", "application/vnd.ollama.image.model")


def test_ollama_blob_missing(tmp_path, cache, capsys, monkeypatch, gemma_gguf):
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama_store(tmp_path / "store", gemma_gguf, blob=False)))
    refused(capsys, tmp_path, "ollama:gemma3:270m", "lacks the blob sha256-", "ollama pull gemma3:270m")


def test_ollama_blob_digest_mismatch(tmp_path, cache, capsys, monkeypatch, gemma_gguf):
    """The blob's content is not what its manifest's digest names: refused when hashed, before conversion."""
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama_store(tmp_path / "store", gemma_gguf, digest="ab" * 32)))
    refused(capsys, tmp_path, "ollama:gemma3:270m", "is not the expected abababababababab")


@pytest.mark.parametrize("name", ["ollama:", "ollama:a/b/c/d", "ollama:gemma3:", "ollama:bad name"])
def test_ollama_bad_name(tmp_path, cache, capsys, name):
    refused(capsys, tmp_path, name, "is not an Ollama model name")
