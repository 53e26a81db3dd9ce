"""The ``Dataset`` container, ``DataError``, file-reading helpers and the subsetting rule of the loaders.

Every error raised while reading a data set is a :class:`DataError` whose message names the file (and line),
the fields the file must have, and where the data set can be obtained.

Subsetting rule (:func:`subset_items`), applied after a loader has built its items in canonical order:

1. The candidate groups are the distinct ``item.group`` values in order of first appearance (an item with an
   empty group is a group of its own, keyed by its id).
2. ``groups`` narrows them: a list (or a single id) keeps exactly those groups (unknown ids are an error); an
   int ``n`` keeps ``n`` groups drawn with ``random.Random(seed).sample``.
3. ``limit`` keeps whole groups, never part of one: the groups are taken in a seeded random order (the
   drawn order when ``groups`` is an int, else ``random.Random(seed).shuffle`` of the candidates) while the
   running total stays <= ``limit``; the first group is always taken, so a limit smaller than one group
   gives one group. E.g. ``limit=22`` on HANNA (11 stories per prompt) gives 2 prompts, ``limit=20`` gives
   1 prompt (11 items).
4. The kept items are returned in canonical order. The same arguments always give the same items in the same
   order; ``seed`` only matters when ``groups`` is an int or ``limit`` is given.
"""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import LogitJudgeError
from ..items import Item
from ..jsonl import iter_jsonl
from ..rubric import Rubric


class DataError(LogitJudgeError, ValueError):
    """A data file is missing or malformed, or a loader option is invalid; the message says how to fix it."""


@dataclass(frozen=True)
class Origin:
    """Where a data set comes from, quoted in error messages."""

    name: str  # display name, e.g. "HANNA"
    url: str  # upstream URL

    def hint(self) -> str:
        return (f"{self.name} can be obtained from {self.url} (the expected layout and field names are in "
                "the SOURCE.md of its folder in the logitjudge data folder; pass --data-dir or set "
                "LOGITJUDGE_DATA to the folder that holds it)")


@dataclass(frozen=True)
class Dataset:
    """Items to judge with the rubric that goes with them."""

    name: str
    items: list[Item]
    rubric: Rubric
    criteria: tuple[str, ...]
    has_human: bool
    description: str = ""
    source: str = ""  # upstream URL
    path: str = ""  # the folder the files were read from
    options: dict = field(default_factory=dict, compare=False)  # loader options used (models, turn, ...)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Item]:
        return iter(self.items)

    @property
    def group_ids(self) -> list[str]:
        """Distinct group ids in item order."""
        return list(dict.fromkeys(_group_key(it) for it in self.items))

    def subset(self, *, limit: int | None = None, groups=None, seed: int = 0) -> Dataset:
        """A copy holding the items chosen by :func:`subset_items` (see the module docstring for the rule)."""
        if limit is None and groups is None:
            return self
        items = subset_items(self.items, limit=limit, groups=groups, seed=seed)
        opts = dict(self.options, limit=limit, groups=groups, seed=seed)
        return replace(self, items=items, options=opts)


# ---- reading -----------------------------------------------------------------------------------------------
Row = tuple[str, dict]  # ("path:line", record)


def _fields(fields: Sequence[str]) -> str:
    return ", ".join(repr(f) for f in fields)


def require_file(path: Path, kind: str, fields: Sequence[str], origin: Origin) -> Path:
    if not path.is_file():
        what = "is a folder, not a file" if path.exists() else "does not exist"
        raise DataError(f"{origin.name} file {path} {what}; expected a {kind} file with fields "
                        f"[{_fields(fields)}]. {origin.hint()}")
    return path


def read_jsonl(path: str | Path, fields: Sequence[str], origin: Origin) -> list[Row]:
    """A JSONL file's records as ``(where, record)`` pairs; each record must be an object with ``fields``."""
    p = require_file(Path(path), "JSONL", fields, origin)
    rows: list[Row] = []
    expect = f"each line must be a JSON object with fields [{_fields(fields)}]"
    for where, rec in iter_jsonl(p, error=DataError, expect=expect, hint=origin.hint()):
        missing = [k for k in fields if k not in rec]
        if missing:
            raise DataError(f"{where}: missing field(s) [{_fields(missing)}]; {expect}. {origin.hint()}")
        rows.append((where, rec))
    if not rows:
        raise DataError(f"{origin.name} file {p} has no records; {expect}. {origin.hint()}")
    return rows


def read_csv(path: str | Path, columns: Sequence[str], origin: Origin) -> list[Row]:
    """A CSV file's rows (after its header line) as ``(where, row)`` pairs; ``columns`` must be present."""
    p = require_file(Path(path), "CSV", columns, origin)
    expect = f"the header must name the columns [{_fields(columns)}]"
    rows: list[Row] = []
    with p.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [c for c in columns if c not in header]
        if missing:
            raise DataError(f"{p}: missing column(s) [{_fields(missing)}]; {expect}. {origin.hint()}")
        try:
            for rec in reader:
                where = f"{p}:{reader.line_num}"
                if None in rec or any(rec[c] is None for c in columns):
                    raise DataError(f"{where}: the row's number of values differs from the header's "
                                    f"{len(header)} columns; {expect}. {origin.hint()}")
                rows.append((where, rec))
        except csv.Error as e:
            raise DataError(f"{p}:{reader.line_num}: not valid CSV ({e}). {origin.hint()}") from None
    if not rows:
        raise DataError(f"{origin.name} file {p} has no rows; {expect}. {origin.hint()}")
    return rows


_KINDS = {"str": (str,), "int": (int,), "number": (int, float), "list": (list,), "dict": (dict,)}


def get(rec: dict, key: str, kind: str, where: str, origin: Origin, *, optional: bool = False):
    """``rec[key]`` checked to be of ``kind`` (str, int, number, list, dict); ``None`` ok when optional."""
    v = rec.get(key)
    if v is None and optional:
        return None
    ok = isinstance(v, _KINDS[kind]) and not (kind in ("int", "number") and isinstance(v, bool))
    if not ok:
        raise DataError(f"{where}: field {key!r} must be {'an' if kind[0] in 'aeiou' else 'a'} {kind}"
                        f"{' or null' if optional else ''}, got {json.dumps(v)[:60]}. {origin.hint()}")
    return v


def scores(value, criteria: Sequence[str], where: str, what: str, origin: Origin,
           lo: float = float("-inf"), hi: float = float("inf")) -> dict[str, float]:
    """A ``{criterion: number}`` object with all ``criteria`` as floats in ``[lo, hi]``."""
    if not isinstance(value, dict):
        raise DataError(f"{where}: {what} must be an object with keys [{_fields(criteria)}]. {origin.hint()}")
    out = {}
    for c in criteria:
        v = value.get(c)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
            rng = f" in [{lo:g}, {hi:g}]" if lo > float("-inf") else ""
            raise DataError(f"{where}: {what} needs a number{rng} for {c!r} (keys [{_fields(criteria)}]), "
                            f"got {json.dumps(v)}. {origin.hint()}")
        out[c] = float(v)
    return out


def unique_ids(items: list[Item]) -> list[Item]:
    """The items with unique ids: the k-th occurrence (k >= 2) of an id, in item order, gets ``#k``."""
    seen: dict[str, int] = {}
    out = []
    for it in items:
        k = seen.get(it.id, 0) + 1
        seen[it.id] = k
        out.append(it if k == 1 else replace(it, id=f"{it.id}#{k}", meta=dict(it.meta, duplicate_of=it.id)))
    return out


# ---- subsetting --------------------------------------------------------------------------------------------
def _group_key(it: Item) -> str:
    return it.group if it.group else f"\0{it.id}"


def subset_items(items: Sequence[Item], *, limit: int | None = None, groups=None,
                 seed: int = 0) -> list[Item]:
    """The items chosen by ``limit`` / ``groups`` / ``seed``: whole groups, in canonical order."""
    by_group: dict[str, list[Item]] = {}
    for it in items:
        by_group.setdefault(_group_key(it), []).append(it)
    cands = list(by_group)
    rng = random.Random(seed)
    drawn = False
    if groups is not None:
        if isinstance(groups, bool):
            raise DataError(f"groups={groups!r}: give a list of group ids or a number of groups")
        if isinstance(groups, int):
            if not 1 <= groups <= len(cands):
                raise DataError(f"groups={groups}: the data set has {len(cands)} groups; "
                                f"ask for 1..{len(cands)}")
            cands = rng.sample(cands, groups)
            drawn = True
        else:
            wanted = [str(groups)] if isinstance(groups, (str, int)) else [str(g) for g in _iter(groups)]
            unknown = [g for g in wanted if g not in by_group]
            if unknown:
                raise DataError(f"unknown group id(s) {unknown[:5]}; the data set has {len(cands)} groups, "
                                f"e.g. {cands[:5]}")
            keep = set(wanted)
            cands = [g for g in cands if g in keep]
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise DataError(f"limit={limit!r}: give a positive number of items")
        order = list(cands)
        if not drawn:
            rng.shuffle(order)
        taken, total = [], 0
        for g in order:
            n = len(by_group[g])
            if taken and total + n > limit:
                break
            taken.append(g)
            total += n
        cands = taken
    keep = set(cands)
    return [it for it in items if _group_key(it) in keep]


def _iter(groups) -> Iterable:
    try:
        return list(groups)
    except TypeError:
        raise DataError(f"groups={groups!r}: give a list of group ids or a number of groups") from None
