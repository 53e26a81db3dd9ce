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
    if not p.is_file():
        raise error(f"{what} {p} does not exist{'; ' + hint if hint else ''}")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise error(f"{what} {p} is not valid TOML: {e}") from None
