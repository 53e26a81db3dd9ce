"""Human scores from a JSONL file, read beside the items they score (:mod:`logitjudge.items`)."""

from __future__ import annotations

import math
from pathlib import Path

from .errors import LogitJudgeError
from .jsonl import iter_jsonl

RESERVED = {"id", "group", "text", "context", "meta", "system", "human"}


class HumanScoresError(LogitJudgeError, ValueError):
    """A human-score file that cannot be read; the message names the line and the fix."""


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _line_scores(d: dict, where: str, iid: str, gkey: str) -> dict[str, float]:
    if "human" not in d:  # flat: every numeric field except the reserved ones is a criterion
        scores = {k: v for k, v in d.items() if k not in RESERVED | {gkey} and _is_number(v)}
    else:
        scores = d["human"]
        if not isinstance(scores, dict):
            raise HumanScoresError(f"{where} (id {iid!r}): 'human' must be an object criterion -> score")
        bad = [k for k, v in scores.items() if v is not None and not _is_number(v)]
        if bad:
            raise HumanScoresError(f"{where} (id {iid!r}): human scores {bad} are not numbers")
    # NaN or Infinity (which JSON readers accept) would pass into every correlation as a missing or infinite
    # score: a missing score is written null (or left out), never NaN
    bad = [k for k, v in scores.items() if v is not None and not math.isfinite(v)]
    if bad:
        raise HumanScoresError(f"{where} (id {iid!r}): human score {bad[0]!r} is {scores[bad[0]]!r}, not a finite "
                               "number; write a missing score as null or leave it out")
    return {str(k): float(v) for k, v in scores.items() if v is not None}


def read_human_scores(path, *, group_by: str | None = None) -> tuple[dict, dict | None]:
    """Read JSONL human scores -> (item_id -> criterion -> score, item_id -> group or None).

    Lines are ``{"id": ..., "human": {"Coherence": 3.3, ...}, "group": ...}`` or flat ``{"id": ...,
    "Coherence": 3.3, "doc": ...}`` (every numeric field except id/group is a criterion). ``group_by`` names
    the field holding the group (default: ``group`` when present); with ``group_by`` every line must have it.
    """
    p = Path(path)
    if not p.exists():
        raise HumanScoresError(f"human-score file {p} does not exist")
    records = iter_jsonl(p, error=HumanScoresError, expect="use one JSON object per line with an 'id'")
    return human_from_records(records, group_by=group_by, source=str(p))


def human_from_records(records, *, group_by: str | None = None, source: str = "human scores",
                       table: bool = False) -> tuple[dict, dict | None]:
    """:func:`read_human_scores` of ``(where, record)`` pairs: a JSONL file's lines, or (``table``) a table's rows
    (the Python API's DataFrame), where a missing cell (NaN) is a missing score, as null is in JSONL."""
    from .items import cell_value

    human, groups = {}, {}
    gkey = group_by or "group"
    for where, d in records:
        if table:  # a DataFrame's missing cell is NaN: a missing score there, never NaN passed on
            d = {k: cell_value(v) for k, v in d.items()}
        if "id" not in d:
            raise HumanScoresError(f"{where}: each line must be a JSON object with an 'id' field")
        if isinstance(d["id"], bool) or not isinstance(d["id"], (str, int)):  # as a texts file's ids (items.py)
            raise HumanScoresError(f"{where}: 'id' must be a string or an integer, got {type(d['id']).__name__} "
                                   f"({d['id']!r:.40}); use the id of the scored item")
        iid = str(d["id"])
        if iid in human:
            raise HumanScoresError(f"{where}: duplicate id {iid!r}; give each item one line")
        if group_by is not None and gkey not in d:
            raise HumanScoresError(f"{where} (id {iid!r}): no field {group_by!r} to group by; fields are "
                                   f"{sorted(d)}")
        if d.get(gkey) is not None:
            groups[iid] = str(d[gkey])
        human[iid] = _line_scores(d, where, iid, gkey)
    if not any(human.values()):
        raise HumanScoresError(f"{source} has no human scores: give each line a 'human' object or numeric "
                               "criterion fields")
    return human, (groups or None)
