"""GGUF judges: any GGUF file transformers can load, converted once into the logitjudge cache.

transformers de-quantises a GGUF to fp32 on every load (~45 s for Gemma-3-270M with its tokenizer); the converted
safetensors folder loads in ~2 s and holds the de-quantised weights exactly. The conversion is keyed by the
file's sha256 (``<cache>/models/gguf-<sha256[:16]>``), so a renamed or moved file is not converted again and a
changed one is. The header is read with the ``gguf`` package before anything else: a file that is not a GGUF,
is truncated, or has an architecture transformers cannot load is refused in one line before any conversion.
The conversion writes a temporary folder beside the target and renames it into place, so an interrupted or
failed conversion leaves no half folder (the next run converts again); a cache that cannot be written (read
only, full) is refused in one line naming the folder and the fix ($LOGITJUDGE_CACHE). A tokenizer that does not
encode the GGUF's own word pieces to their ids (transformers 5.17 on Gemma-3) is refused before the weights load.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import mmap
import os
import re
import shutil
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .cache_lock import one_maker
from .errors import LogitJudgeError
from .gguf_once import one_reader
from .tokens import RECORD, check_pieces, observed, read_record, sample_words

log = logging.getLogger("logitjudge.gguf")

MAGIC = b"GGUF"
# llama.cpp's architecture names that transformers' GGUF loader renames (modeling_gguf_pytorch_utils)
RENAMED = {"qwen2moe": "qwen2_moe", "gpt-oss": "gpt_oss", "qwen3moe": "qwen3_moe", "minimax-m2": "minimax_m2"}
# in transformers' GGUF table but not causal language models (or not models at all)
NOT_CAUSAL = {"general", "tokenizer", "t5", "umt5", "t5encoder"}
FIX = "set LOGITJUDGE_CACHE to a writable folder with room for it"
# logitjudge's conversion, recorded in each converted folder: 2 keeps the GGUF's BOS/EOS flags and records the
# token ids it gives (folders made by 1, without a record, lost Gemma-3's <bos> under some transformers versions);
# 3 checks the tokenizer against the GGUF's own vocabulary and records the pieces checked (a folder made by 2 under
# transformers 5.17 holds a tokenizer that splits Gemma-3's words into characters, under every transformers)
CONVERTER = 3
# texts whose token ids a converted folder records: BOS/EOS, spaces, digits, brackets, newlines, non-ASCII
PROBES = ("Hello world", " 5", "1. Worst\n2. Poor\n\nScore: [[3]]", "Qualität: élevée, 品質 — ok?")


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
    tokens: dict = field(default_factory=dict)  # the tokenizer's flags: add_bos, add_eos, bos_id, eos_id (None: unset)


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
                  4 * n_elements, token_flags(fields))


def token_flags(fields: dict) -> dict:
    """The GGUF's tokenizer conventions (llama.cpp's ``tokenizer.ggml.*`` keys); None where the file is silent."""
    def get(key, kind):
        v = fields.get(f"tokenizer.ggml.{key}")
        return v if isinstance(v, kind) else None

    return {"add_bos": get("add_bos_token", bool), "add_eos": get("add_eos_token", bool),
            "bos_id": get("bos_token_id", int), "eos_id": get("eos_token_id", int)}


# Ordinary word pieces of a GGUF vocabulary: ASCII letters (the same bytes in a sentencepiece and a byte-level
# vocabulary), after an optional space marker (sentencepiece's U+2581, byte-level BPE's U+0120)
_WORD = re.compile(rb"(?:\xe2\x96\x81|\xc4\xa0)?[A-Za-z]{2,16}")
NORMAL = 1  # llama.cpp's token type of an ordinary piece (not control, byte, unused or user-defined)


def read_vocabulary(path: str | Path) -> dict:
    """The GGUF's own tokenizer as the file holds it: ``model`` (``tokenizer.ggml.model``: llama, gpt2, ...) and
    ``words``: (piece, id) of every ordinary word piece (:data:`_WORD`, typed normal): the ground truth a
    converted tokenizer is checked against (:func:`logitjudge.tokens.check_pieces`). ~0.3 s for Gemma-3's 262k
    pieces, once per conversion."""
    with Path(path).open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        c = _Cursor(buf)
        c.pos = 4
        _, _, n_kv = c.take("<I"), c.take("<Q"), c.take("<Q")
        fields, words, types = {}, [], None
        for _ in range(n_kv):
            key, vtype = c.string(), c.take("<I")
            if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type") and vtype == ARRAY:
                etype, n = c.take("<I"), c.take("<Q")
                if key.endswith("tokens") and etype == STRING:
                    words = _words(c, n)
                    continue
                if etype in (4, 5) and c.pos + 4 * n <= len(buf):  # (u)int32, as llama.cpp writes token_type
                    types = np.frombuffer(buf, "<i4", n, c.pos).copy()
                c.pos -= 12  # let value() skip the array
            fields[key] = c.value(vtype, True)
    if types is not None:
        words = [(w, i) for w, i in words if i < len(types) and types[i] == NORMAL]
    model = fields.get("tokenizer.ggml.model")
    return {"model": model if isinstance(model, str) else None, "words": words}


def _words(c: _Cursor, n: int) -> list[tuple[str, int]]:
    """The (piece, id) of the ordinary word pieces of a string array of ``n`` pieces at the cursor."""
    buf, pos, out = c.buf, c.pos, []
    for i in range(n):
        (size,) = struct.unpack_from("<Q", buf, pos)
        pos += 8
        if pos + size > len(buf):
            raise ValueError(f"a string runs past the end of the file (byte {len(buf):,})")
        if size <= 18 and _WORD.fullmatch(buf, pos, pos + size):
            out.append((bytes(buf[pos:pos + size]).decode("utf-8"), i))
        pos += size
    c.pos = pos
    return out


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


def current(folder: Path) -> bool:
    """A finished conversion that this logitjudge and this transformers read as it was made (:func:`why_stale`)."""
    return why_stale(folder) is None


_CHECKED: dict[tuple, str | None] = {}  # (folder, its record's mtime) -> why_stale's answer, once per process


def why_stale(folder: Path) -> str | None:
    """None where ``folder`` is a finished conversion whose record names :data:`CONVERTER` and which the
    transformers installed now either made or checked, or tokenizes :data:`PROBES` to the recorded ids (then it
    joins the record's ``verified_under``); else why not. A stale folder is converted again, never reused
    silently: a folder made under another transformers may not give its maker's tokens."""
    if not converted(folder):
        return "not converted yet"
    try:
        key = (str(folder), (folder / RECORD).stat().st_mtime_ns)
    except OSError:
        return "converted by an older logitjudge, without a conversion record"
    if key not in _CHECKED:
        _CHECKED[key] = _check_record(folder)
    return _CHECKED[key]


def _check_record(folder: Path) -> str | None:
    import transformers

    rec = read_record(folder) or {}
    if rec.get("converter") != CONVERTER:
        return f"made by conversion {rec.get('converter')}, not {CONVERTER}"
    if transformers.__version__ in rec.get("verified_under", ()):
        return None
    if probe_ids(_load_tokenizer(folder)) != rec.get("probe_ids"):
        return (f"made under transformers {rec.get('transformers')}, whose token ids transformers "
                f"{transformers.__version__} does not give")
    rec["verified_under"] = [*rec.get("verified_under", ()), transformers.__version__]
    try:
        _write_record(folder, rec)
    except OSError:  # a read-only cache: checked again next time
        pass
    return None


def probe_ids(tok) -> list[list[int]]:
    return [list(tok(text, add_special_tokens=True)["input_ids"]) for text in PROBES]


def _load_tokenizer(folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def _write_record(folder: Path, rec: dict) -> None:
    tmp = folder / f"{RECORD}.tmp{os.getpid()}"
    tmp.write_text(json.dumps(rec, indent=1) + "\n", encoding="utf-8")
    tmp.replace(folder / RECORD)


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


def convert(header: Header, target: Path, *, source_note: str, why: str = "not converted yet") -> Path:
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
    log.info("converting %s (%s, %s) once into %s (%s): about %.1f GiB of fp32 weights", header.path.name,
             header.name or "unnamed", header.architecture, target, why, header.fp32_bytes / 2**30)
    try:
        tmp.mkdir()
        with one_reader():  # transformers reads the file three times: its metadata is parsed once (gguf_once)
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
    unloadable = (ValueError, KeyError, RuntimeError, NotImplementedError)
    try:
        tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    except unloadable as e:
        raise _unloadable(header, e) from None
    words = sample_words(read_vocabulary(src))
    if not words:
        log.warning("%s: its vocabulary holds no ASCII word pieces to check the tokenizer against", src.name)
    check_pieces(tok, words, what=src.name)  # before the weights are de-quantised (~45 s): refused early
    try:
        model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch.float32)
    except unloadable as e:
        raise _unloadable(header, e) from None
    if header.chat_template and not getattr(tok, "chat_template", None):
        tok.chat_template = header.chat_template
    _keep_token_flags(tok, header)
    # The de-quantised weights are plain fp32 tensors; drop the GGUF marker so that they can be saved.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.logitjudge_source = source_note
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    _record_conversion(folder, header, source_note, words)


def _unloadable(header: Header, e: Exception) -> GGUFError:
    return GGUFError(f"transformers could not load {header.path.name} ({header.architecture}): "
                     f"{str(e).splitlines()[0][:200]}")


def _keep_token_flags(tok, header: Header) -> None:
    """The tokenizer made to add BOS / EOS as the GGUF says (transformers' GGUF converter has dropped
    ``add_bos_token`` in some versions: Gemma-3 lost its ``<bos>`` under 5.19). Setting the flag rebuilds the
    post-processor; :func:`_record_conversion` checks the saved folder."""
    for key in ("bos", "eos"):
        want, token_id = header.tokens.get(f"add_{key}"), header.tokens.get(f"{key}_id")
        if token_id is not None and getattr(tok, f"{key}_token_id") != token_id:
            setattr(tok, f"{key}_token", tok.convert_ids_to_tokens(token_id))
        if want is not None:
            setattr(tok, f"add_{key}_token", want)


def _record_conversion(folder: Path, header: Header, source_note: str, words: list) -> None:
    """Check the saved tokenizer against the GGUF's flags and its vocabulary's ``words`` (as read back: a save
    can lose merges) and write the conversion record (:data:`RECORD`): the converter, the transformers that made
    it, the flags, the probe texts' token ids and the words, which every load checks again. ``add_bos_token`` /
    ``add_eos_token`` go into tokenizer_config.json explicitly, so that every transformers rebuilds the same
    post-processor from them. A folder whose tokenizer still breaks the flags is refused, not cached."""
    import transformers

    flags = dict(header.tokens)
    cfg_path = folder / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    for key in ("bos", "eos"):
        if flags.get(f"add_{key}") is not None:
            cfg[f"add_{key}_token"] = flags[f"add_{key}"]
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tok = _load_tokenizer(folder)
    check_pieces(tok, words, what=header.path.name)
    seen = dict(zip(("add_bos", "add_eos"), observed(tok)))
    for key, was in seen.items():
        if flags.get(key) is None:
            flags[key] = was  # the file is silent: the converted tokenizer's own behaviour is the convention
        elif flags[key] != was:
            raise GGUFError(f"{header.path.name}: the GGUF says {key}_token = {flags[key]} but transformers "
                            f"{transformers.__version__} converts its tokenizer to {key} = {was}; its prompts would "
                            "not start as the model expects. Use another transformers version (the lock's)")
    for key in ("bos", "eos"):
        if flags.get(f"{key}_id") is None:
            flags[f"{key}_id"] = getattr(tok, f"{key}_token_id")
    _write_record(folder, {"converter": CONVERTER, "transformers": transformers.__version__, "source": source_note,
                           "tokens": flags, "probes": list(PROBES), "probe_ids": probe_ids(tok), "words": words,
                           "verified_under": [transformers.__version__]})


def gguf_checkpoint(path: str | Path, *, expected_sha256: str | None = None, folder: str | None = None,
                    source_note: str | None = None, what: str = "") -> Path:
    """The converted transformers folder of a GGUF file (converted on first use). ``expected_sha256``: refuse a
    file with another hash (a built-in's pinned hash, an Ollama blob's digest); ``folder``: the cache folder's
    name (default ``gguf-<sha256[:16]>``)."""
    header = read_header(path)
    check_architecture(header)
    target = cache_dir() / "models" / folder if folder else None
    if target is not None and expected_sha256 is None and current(target):
        return target
    sha = sha256_file(header.path, what=what)
    if expected_sha256 is not None and sha != expected_sha256:
        raise GGUFError(f"{what or header.path}: sha256 {sha[:16]}... is not the expected {expected_sha256[:16]}...; "
                        "the file is damaged or not the one named: download or install it again")
    target = target or cache_dir() / "models" / f"gguf-{sha[:16]}"
    if why_stale(target) is None:  # a finished folder loads without waiting for another conversion's lock
        return target
    with one_maker(target.parent, str(target), refuse=cache_problem):  # no folder replaced while another reads it
        why = why_stale(target)
        if why is None:  # another process made it while this one waited
            return target
        return convert(header, target, source_note=source_note or f"{header.path.name} (sha256 {sha})", why=why)
