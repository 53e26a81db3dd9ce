"""Items to judge: a text, an optional context (source article, question), a group, optional human scores."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from .errors import LogitJudgeError
from .jsonl import iter_jsonl


class ItemError(LogitJudgeError, ValueError):
    pass


@dataclass(frozen=True)
class Item:
    id: str
    text: str
    context: str = ""
    group: str = ""
    human: dict = field(default_factory=dict, compare=False)  # criterion name -> float (mean human score)
    meta: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        if not isinstance(self.id, str) or not self.id:
            raise ItemError(f"item id {self.id!r}: an item's id must be a non-empty string, got "
                            f"{type(self.id).__name__}; pass str(id)")
        for name in ("text", "context", "group"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise ItemError(f"item {self.id!r}: {name!r} must be a string, got {type(value).__name__} "
                                f"({value!r:.40}); pass a str")

    def to_json(self) -> dict:
        d = {"id": self.id, "text": self.text}
        if self.context:
            d["context"] = self.context
        if self.group:
            d["group"] = self.group
        if self.human:
            d["human"] = self.human
        if self.meta:
            d["meta"] = self.meta
        return d


def item_from_dict(d: dict, *, where: str = "item") -> Item:
    if not isinstance(d, dict):
        raise ItemError(f"{where}: expected a JSON object with 'id' and 'text', got {type(d).__name__}")
    missing = [k for k in ("id", "text") if k not in d]
    if missing:
        raise ItemError(f"{where}: missing field(s) {missing}; each line needs 'id' and 'text' "
                        "(and optionally 'context', 'group', 'human')")
    iid = d["id"]
    # an id is matched against human scores and checkpoints as a string: null would become "None", an object
    # its repr, and 1.0 would not match 1; only strings and integers name an item unambiguously
    if isinstance(iid, bool) or not isinstance(iid, (str, int)):
        raise ItemError(f"{where}: 'id' must be a string or an integer, got {type(iid).__name__} ({iid!r:.40}); "
                        'give each item its own id, e.g. "id": "t1"')
    if isinstance(iid, str) and not iid.strip():
        raise ItemError(f"{where}: 'id' is empty; give each item its own id, e.g. \"id\": \"t1\"")
    text = d["text"]
    if not isinstance(text, str):
        raise ItemError(f"{where} (id {d['id']!r}): 'text' must be a string, got {type(text).__name__} "
                        f"({text!r:.40}); write the text as a JSON string")
    if not text.strip():
        raise ItemError(f"{where} (id {d['id']!r}): 'text' is empty; remove the item or give it a text")
    for key in ("context", "group"):
        if d.get(key) is not None and not isinstance(d[key], (str, int, float)):
            raise ItemError(f"{where} (id {d['id']!r}): {key!r} must be a string, got {type(d[key]).__name__}")
    human = d.get("human") or {}
    if not isinstance(human, dict):
        raise ItemError(f"{where} (id {d['id']!r}): 'human' must be an object criterion -> score")
    for k, v in human.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ItemError(f"{where} (id {d['id']!r}): human score {k!r} = {v!r} is not a finite number; write "
                            "it as a number, or leave the criterion out")
    meta = d.get("meta") or {}
    if not isinstance(meta, dict):
        raise ItemError(f"{where} (id {d['id']!r}): 'meta' must be an object, got {type(meta).__name__}")
    return Item(str(iid), text, str(d.get("context") or ""), str(d.get("group") or ""),
                {str(k): float(v) for k, v in human.items()}, dict(meta))


def read_items(path: str | Path) -> list[Item]:
    """Items from a JSONL file: one object per line with ``id``, ``text`` and optional ``context``/``group``."""
    p = Path(path)
    if not p.exists():
        raise ItemError(f"texts file {p} does not exist")
    items, seen = [], set()
    for where, d in iter_jsonl(p, error=ItemError, expect="the file must be JSONL, one object per line"):
        it = item_from_dict(d, where=where)
        if it.id in seen:
            raise ItemError(f"{where}: duplicate id {it.id!r}; ids must be unique")
        seen.add(it.id)
        items.append(it)
    if not items:
        raise ItemError(f"texts file {p} has no items")
    return items
