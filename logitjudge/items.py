"""Items to judge: a text, an optional context (source article, question), a group, optional human scores."""

from __future__ import annotations

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
    return Item(str(d["id"]), text, str(d.get("context") or ""), str(d.get("group") or ""),
                {str(k): float(v) for k, v in human.items()}, dict(d.get("meta") or {}))


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
