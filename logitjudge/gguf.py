"""GGUF judges: any GGUF file transformers can load, converted once into the logitjudge cache.

transformers de-quantises a GGUF to fp32 on every load (~45 s for Gemma-3-270M with its tokenizer); the converted
safetensors folder loads in ~2 s and holds the de-quantised weights exactly. The conversion is keyed by the
file's sha256 (``<cache>/models/gguf-<sha256[:16]>``), so a renamed or moved file is not converted again and a
changed one is. The header is read with the ``gguf`` package before anything else: a file that is not a GGUF,
is truncated, or has an architecture transformers cannot load is refused in one line before any conversion.
The conversion writes a temporary folder beside the target and renames it into place, so an interrupted or
failed conversion leaves no half folder (the next run converts again); a cache that cannot be written (read
only, full) is refused in one line naming the folder and the fix ($LOGITJUDGE_CACHE).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import mmap
import os
import shutil
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import LogitJudgeError

log = logging.getLogger("logitjudge.gguf")

MAGIC = b"GGUF"
# llama.cpp's architecture names that transformers' GGUF loader renames (modeling_gguf_pytorch_utils)
RENAMED = {"qwen2moe": "qwen2_moe", "gpt-oss": "gpt_oss", "qwen3moe": "qwen3_moe", "minimax-m2": "minimax_m2"}
# in transformers' GGUF table but not causal language models (or not models at all)
NOT_CAUSAL = {"general", "tokenizer", "t5", "umt5", "t5encoder"}
FIX = "set LOGITJUDGE_CACHE to a writable folder with room for it"


class GGUFError(LogitJudgeError, RuntimeError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("LOGITJUDGE_CACHE", Path.home() / ".cache" / "logitjudge"))


@dataclass(frozen=True)
class Header:
    """What the GGUF header says, read without loading a tensor."""

    path: Path
    architecture: str
    name: str
    chat_template: str | None
    fp32_bytes: int  # the de-quantised fp32 size of its tensors: what the converted folder will take


# GGUF value types (gguf.GGUFValueType): fixed sizes in bytes, and the struct format of the scalars read here
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


class _Cursor:
    """Reads a GGUF header from a memory map, skipping what it does not need (the tokenizer's arrays of 262k
    strings): gguf's GGUFReader parses every element into Python objects, ~40 s for Gemma-3-270M's header."""

    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise ValueError(f"the header ends early, at byte {len(self.buf):,}")
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return v

    def string(self, keep: bool = True):
        n = self.take("<Q")
        if self.pos + n > len(self.buf):
            raise ValueError(f"a string runs past the end of the file (byte {len(self.buf):,})")
        self.pos += n
        return bytes(self.buf[self.pos - n:self.pos]).decode("utf-8", "replace") if keep else None

    def value(self, vtype: int, keep: bool):
        if vtype == STRING:
            return self.string(keep)
        if vtype == ARRAY:
            etype, n = self.take("<I"), self.take("<Q")
            if etype in _SIZES:
                self.pos += n * _SIZES[etype]
            else:
                for _ in range(n):
                    self.value(etype, False)
            return None
        if vtype not in _FORMATS:
            raise ValueError(f"unknown value type {vtype}")
        return self.take(_FORMATS[vtype])


def _parse(buf) -> tuple[dict, int, int]:
    """(the scalar and string fields, the end of the tensor data, its element count) of a GGUF header."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    c = _Cursor(buf)
    c.pos = 4
    version, n_tensors, n_kv = c.take("<I"), c.take("<Q"), c.take("<Q")
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version} (logitjudge reads versions 2 and 3)")
    fields = {}
    for _ in range(n_kv):
        key = c.string()
        fields[key] = c.value(c.take("<I"), True)
    tensors = []
    for _ in range(n_tensors):
        c.string(False)
        dims = [c.take("<Q") for _ in range(c.take("<I"))]
        qtype, offset = c.take("<I"), c.take("<Q")
        tensors.append((dims, qtype, offset))
    align = fields.get("general.alignment") or 32
    start = -(-c.pos // align) * align
    end, elements = start, 0
    for dims, qtype, offset in tensors:
        n = int(np.prod(dims, dtype=np.int64)) if dims else 1
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
        end, elements = max(end, start + offset + n // block * size), elements + n
    return fields, end, elements


def read_header(path: str | Path) -> Header:
    """The GGUF header of ``path``; one line (GGUFError) for a file that is not a GGUF or is truncated."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise GGUFError(f"GGUF file {p} does not exist; pass the path of a .gguf file")
    with p.open("rb") as f:
        magic = f.read(4)
    if magic != MAGIC:
        raise GGUFError(f"{p} is not a GGUF file (it starts with {magic!r}, not b'GGUF'); pass a .gguf file as "
                        "llama.cpp, LM Studio or Ollama store them")
    try:
        with p.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            fields, end, n_elements = _parse(buf)
    except (ValueError, KeyError, struct.error, OSError) as e:
        raise GGUFError(f"{p} is a damaged or truncated GGUF file ({str(e)[:120]}); download or copy it "
                        "again") from None
    size = p.stat().st_size
    if end > size:
        raise GGUFError(f"{p} is a truncated GGUF file: its tensors end at byte {end:,} but the file has "
                        f"{size:,} bytes; download or copy it again")
    arch, name, chat = (fields.get(k) for k in ("general.architecture", "general.name", "tokenizer.chat_template"))
    if not isinstance(arch, str) or not arch:
        raise GGUFError(f"{p}: the GGUF header names no general.architecture; it is not a model file")
    return Header(p, arch, name if isinstance(name, str) else "", chat if isinstance(chat, str) else None,
                  4 * n_elements)


def supported_architectures() -> list[str]:
    """The GGUF architectures transformers loads as causal language models."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return sorted(a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in NOT_CAUSAL)


def check_architecture(header: Header) -> None:
    """Refuse, before any conversion, a GGUF whose architecture transformers cannot load as a causal LM."""
    known = supported_architectures()
    if header.architecture in known or RENAMED.get(header.architecture) in known:
        return
    import transformers

    raise GGUFError(f"{header.path.name}: GGUF architecture {header.architecture!r} is not one transformers "
                    f"{transformers.__version__} can load ({', '.join(known)}); use a GGUF of one of those, or the "
                    "model's Hugging Face folder")


_HASHES: dict[tuple, str] = {}  # (path, size, mtime) -> sha256: a run resolves its model more than once


def sha256_file(path: Path, *, what: str = "") -> str:
    """The file's sha256, with a bar on a terminal for large files (hashing runs at ~1 GB/s)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key in _HASHES:
        return _HASHES[key]
    from tqdm import tqdm

    h = hashlib.sha256()
    show = st.st_size > 64 << 20 and sys.stderr.isatty()
    with path.open("rb") as f, tqdm(total=st.st_size, unit="B", unit_scale=True, desc=f"sha256 {what or path.name}",
                                    disable=not show, leave=False) as bar:
        for block in iter(lambda: f.read(8 << 20), b""):
            h.update(block)
            bar.update(len(block))
    _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def remember_hash(path: Path, sha: str) -> None:
    """A hash computed while the file was written (a built-in's assembly), so that it is not read twice."""
    st = path.stat()
    _HASHES[(str(path.resolve()), st.st_size, st.st_mtime_ns)] = sha


def converted(folder: Path) -> bool:
    """A finished conversion (the rename is the last step, so a complete folder has all of these)."""
    return (folder / "config.json").exists() and (folder / "tokenizer.json").exists() and \
        any(folder.glob("*.safetensors"))


def cache_problem(e: OSError, folder: Path) -> GGUFError:
    """One line for a cache that cannot take the conversion."""
    why = {errno.ENOSPC: "is full", errno.EDQUOT: "is over its quota", errno.EROFS: "is on a read-only file system",
           errno.EACCES: "is not writable", errno.EPERM: "is not writable",
           errno.ENOTDIR: "lies under a file, not a folder"}.get(e.errno, f"cannot be written ({e.strerror or e})")
    return GGUFError(f"the model cache {folder} {why}; {FIX}")


def _remove_stale(target: Path) -> None:
    """Temporary folders of conversions whose process is gone (a kill -9 leaves one behind)."""
    for tmp in target.parent.glob(target.name + ".tmp*"):
        pid = tmp.name.rsplit(".tmp", 1)[-1]
        try:
            os.kill(int(pid), 0)
            alive = int(pid) != os.getpid()
        except (ValueError, ProcessLookupError):
            alive = False
        except PermissionError:
            alive = True
        if not alive:
            shutil.rmtree(tmp, ignore_errors=True)


def convert(header: Header, target: Path, *, source_note: str) -> Path:
    """De-quantise ``header.path`` into the transformers folder ``target`` (atomic: a temporary folder renamed into
    place). The GGUF's chat template, which transformers' GGUF tokenizer loader drops, is kept."""
    root = target.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
        _remove_stale(target)
        free = shutil.disk_usage(root).free
    except OSError as e:
        raise cache_problem(e, root) from None
    need = header.fp32_bytes + (64 << 20)
    if free < need:
        raise GGUFError(f"the model cache {root} has {free / 2**30:.1f} GiB free but converting {header.path.name} "
                        f"takes about {need / 2**30:.1f} GiB; {FIX}")
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    t0 = time.time()
    log.info("converting %s (%s, %s) once into %s: about %.1f GiB of fp32 weights", header.path.name,
             header.name or "unnamed", header.architecture, target, header.fp32_bytes / 2**30)
    try:
        tmp.mkdir()
        _write(header, tmp, source_note)
        if target.exists():
            shutil.rmtree(target)
        tmp.replace(target)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR):
            raise cache_problem(e, root) from None
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # an interrupted or failed conversion leaves no half folder
    log.info("converted %s in %.0f s (once; later runs load %s)", header.path.name, time.time() - t0, target)
    return target


def _write(header: Header, folder: Path, source_note: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = header.path
    try:
        tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
        model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch.float32)
    except (ValueError, KeyError, RuntimeError, NotImplementedError) as e:
        raise GGUFError(f"transformers could not load {src.name} ({header.architecture}): "
                        f"{str(e).splitlines()[0][:200]}") from None
    if header.chat_template and not getattr(tok, "chat_template", None):
        tok.chat_template = header.chat_template
    # The de-quantised weights are plain fp32 tensors; drop the GGUF marker so that they can be saved.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.logitjudge_source = source_note
    model.save_pretrained(folder)
    tok.save_pretrained(folder)


def gguf_checkpoint(path: str | Path, *, expected_sha256: str | None = None, folder: str | None = None,
                    source_note: str | None = None, what: str = "") -> Path:
    """The converted transformers folder of a GGUF file (converted on first use). ``expected_sha256``: refuse a
    file with another hash (a built-in's pinned hash, an Ollama blob's digest); ``folder``: the cache folder's
    name (default ``gguf-<sha256[:16]>``)."""
    header = read_header(path)
    check_architecture(header)
    target = cache_dir() / "models" / folder if folder else None
    if target is not None and converted(target) and expected_sha256 is None:
        return target
    sha = sha256_file(header.path, what=what)
    if expected_sha256 is not None and sha != expected_sha256:
        raise GGUFError(f"{what or header.path}: sha256 {sha[:16]}... is not the expected {expected_sha256[:16]}...; "
                        "the file is damaged or not the one named: download or install it again")
    target = target or cache_dir() / "models" / f"gguf-{sha[:16]}"
    if converted(target):
        return target
    return convert(header, target, source_note=source_note or f"{header.path.name} (sha256 {sha})")
