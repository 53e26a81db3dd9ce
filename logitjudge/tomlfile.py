"""One TOML reader for rubrics, templates and experiment specs: every error names the file and the fix."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def read_toml(path: str | Path, *, what: str, error: type[Exception] = ValueError, hint: str = "") -> dict:
    """The table in the TOML file ``path``; ``error`` (named ``what``, e.g. "template file") if it is missing or
    not valid TOML. ``hint`` is appended to the missing-file message."""
    p = Path(path)
    if p.is_dir():
        inside = sorted(x.name for x in p.glob("*.toml"))[:5]
        raise error(f"{what} {p} is a folder, not a .toml file; give the file itself"
                    + (f", e.g. {p / inside[0]} (the folder holds {', '.join(inside)})" if inside else ""))
    if not p.is_file():
        raise error(f"{what} {p} does not exist{'; ' + hint if hint else ''}")
    raw = p.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:  # a binary file, or text saved in another encoding
        line = raw.count(b"\n", 0, e.start) + 1
        raise error(f"{what} {p} is not UTF-8 text (byte 0x{raw[e.start]:02x} on line {line}); a TOML file is "
                    "UTF-8: save it as UTF-8, or check that it is the file you meant") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise error(f"{what} {p} is not valid TOML: {e}") from None
