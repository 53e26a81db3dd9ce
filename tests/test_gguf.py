"""Issue 32 items 1-2: ``--model FILE.gguf`` and ``--model ollama:NAME[:TAG]`` end to end through the CLI, on the
real Gemma-3-270M GGUF (assembled from its packages' chunks). The conversion runs once for the module (the cache
is keyed by the file's sha256, so the Ollama blob of the same file reuses it); an interrupted conversion first
leaves no half folder, and the next run converts."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from logitjudge import gguf as lj_gguf
from logitjudge import judges
from logitjudge.cli import main
from logitjudge.table import ScoreTable

sys.path.insert(0, str(Path(__file__).parent))
from test_cli import write_texts  # noqa: E402
from test_hostile_judges import ollama_store  # noqa: E402

pytestmark = pytest.mark.slow
ARGS = ["--orderings", "fixed:2", "--verify", "2", "--threads", "2", "--quiet"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """The GGUF file, a fresh model cache for the module, and two texts."""
    root = tmp_path_factory.mktemp("gguf-route")
    path = judges.assemble(judges.BUILTINS["gemma-3-270m"], root / "gemma-3-270m-q4_k_m.gguf")
    mp = pytest.MonkeyPatch()
    mp.setenv("LOGITJUDGE_CACHE", str(root / "cache"))
    yield path, root / "cache", write_texts(root / "texts.jsonl", 2), {}
    mp.undo()


def test_interrupted_conversion_then_gguf_route(env, tmp_path, monkeypatch, capsys):
    path, cache, texts, tables = env
    target = cache / "models" / f"gguf-{lj_gguf.sha256_file(path)[:16]}"

    def interrupted(header, folder, note):  # Ctrl-C while the weights are being written
        (folder / "model.safetensors").write_bytes(b"\0" * 4096)
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(lj_gguf, "_write", interrupted)
        assert main(["score", "--model", str(path), "--texts", str(texts), "--out", str(tmp_path / "x.npz"),
                     *ARGS]) == 130
    assert not target.exists() and list(target.parent.iterdir()) == []  # no half folder
    assert not (tmp_path / "x.npz").exists()
    # the next run converts, then scores
    out = tmp_path / "t.npz"
    assert main(["score", "--model", str(path), "--texts", str(texts), "--out", str(out), *ARGS]) == 0
    assert lj_gguf.converted(target) and [p.name for p in target.parent.iterdir()] == [target.name]
    record = lj_gguf.read_record(target)  # the GGUF's own BOS flag, kept whatever transformers converted it
    assert record["converter"] == lj_gguf.CONVERTER and record["tokens"]["add_bos"] is True
    assert all(ids[0] == record["tokens"]["bos_id"] == 2 for ids in record["probe_ids"])
    t = ScoreTable.load(out)
    assert t.shape == (2, 1, 2, 5) and np.allclose(t.probs.sum(-1), 1)
    assert t.meta["model_id"] == str(path) and lj_gguf.sha256_file(path) in t.meta["model_source"]["gguf"]
    assert t.meta["exactness_audit"]["max_abs_prob_diff"] <= 1e-5
    assert t.meta["chat"]["used"] is False  # the Gemma-3-270M GGUF (a base model) carries no chat template
    tables["file"] = out


def test_ollama_route(env, tmp_path, monkeypatch):
    """A store laid out as Ollama lays it out, its blob the same GGUF: found through the manifest, digest checked,
    and the converted folder of that sha256 reused; the scores equal the file route's."""
    path, cache, texts, tables = env
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama_store(tmp_path / "store", path)))
    outs = {"ollama:gemma3:270m": tmp_path / "ollama.npz", str(path): tables.get("file", tmp_path / "file.npz")}
    for model, out in outs.items():
        if not out.exists():  # the file route's table of the test above, else scored here
            assert main(["score", "--model", model, "--texts", str(texts), "--out", str(out), *ARGS]) == 0
    a, b = (ScoreTable.load(p) for p in outs.values())
    assert a.meta["model_id"] == "ollama:gemma3:270m" and b.meta["model_id"] == str(path)
    assert a.meta["model_source"]["source"] == b.meta["model_source"]["source"]  # one converted folder
    np.testing.assert_array_equal(a.probs, b.probs)
    assert len(list((cache / "models").iterdir())) == 1
