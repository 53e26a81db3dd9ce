"""One JSONL reader for texts, human scores and data sets: every bad line names the file, the line and the fix."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path


def iter_jsonl(path: str | Path, *, error: type[Exception] = ValueError,
               expect: str = "each line must be a JSON object", hint: str = "") -> Iterator[tuple[str, dict]]:
    """Yield ``("file:line", record)`` for each non-blank line; raise ``error`` on invalid JSON or non-objects."""
    p = Path(path)
    tail = f"; {expect}{'. ' + hint if hint else ''}"
    with p.open("rb") as f:
        for n, raw in enumerate(f, 1):
            where = f"{p}:{n}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise error(f"{where}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1}); "
                            "save the file as UTF-8") from None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise error(f"{where}: not valid JSON ({e}){tail}") from None
            if not isinstance(rec, dict):
                raise error(f"{where}: got a JSON {type(rec).__name__}{tail}")
            yield where, rec
