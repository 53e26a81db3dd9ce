"""Items to judge: a text, an optional context (source article, question), a group, optional human scores.

Every input of items ends in :func:`items_from_records` (the same checks and messages): a JSONL texts file, a CSV or
Parquet file (:func:`read_items`), and the Python API's DataFrame or list of dicts (:mod:`logitjudge.api`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

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


def cell_value(v):
    """A table cell as the item fields read it: numpy scalars as Python values, a missing value (None, NaN,
    pandas' NA or NaT) as None, so that a missing text or id is refused as missing and not read as 'nan'."""
    if isinstance(v, np.generic):
        v = v.item()
    if v is None or (isinstance(v, float) and math.isnan(v)) or type(v).__name__ in ("NAType", "NaTType"):
        return None
    return v


@dataclass(frozen=True)
class Fields:
    """Where an item's fields are read from: the key (a JSONL field, a column) of each.

    ``id`` None: each row's number (its position, from 0) is its id. ``context``/``group`` None: not read.
    ``columns``: the rows are a table's (a DataFrame, a CSV or Parquet file, a list of dicts): errors name
    columns and rows, a missing cell (None, NaN) is named as missing, and ``human``/``meta`` are not read.
    """

    text: str = "text"
    id: str | None = "id"
    context: str | None = "context"
    group: str | None = "group"
    columns: bool = False


JSONL = Fields()


def _id_of(d: dict, where: str, f: Fields, n: int):
    if f.id is None:
        return str(n)
    iid = cell_value(d[f.id]) if f.columns else d[f.id]
    if f.columns:  # a table: fixes name the column and its rows
        fix = f"give every row its own id in column {f.id!r} (a string or an integer)"
        if iid is None:
            raise ItemError(f"{where}: column {f.id!r} (the id) is missing (None/NaN); {fix}, or number the rows "
                            "(lj.score(..., id=None))")
    else:
        fix = 'give each item its own id, e.g. "id": "t1"'
    # an id is matched against human scores and checkpoints as a string: null would become "None", an object
    # its repr, and 1.0 would not match 1; only strings and integers name an item unambiguously
    if isinstance(iid, bool) or not isinstance(iid, (str, int)):
        raise ItemError(f"{where}: {f.id!r} must be a string or an integer, got {type(iid).__name__} "
                        f"({iid!r:.40}); {fix}")
    if isinstance(iid, str) and not iid.strip():
        raise ItemError(f"{where}: {f.id!r} is empty; {fix}")
    return iid


def _text_of(d: dict, where: str, f: Fields, iid) -> str:
    text = cell_value(d[f.text]) if f.columns else d[f.text]
    if f.columns and text is None:
        raise ItemError(f"{where} (id {iid!r}): column {f.text!r} (the text) is missing (None/NaN); drop the rows "
                        f"without a text (data.dropna(subset=[{f.text!r}])) or fill them")
    if not isinstance(text, str):
        fix = (f"convert the column to strings (data[{f.text!r}].astype(str)) or drop the row" if f.columns else
               "write the text as a JSON string")
        raise ItemError(f"{where} (id {iid!r}): {f.text!r} must be a string, got {type(text).__name__} "
                        f"({text!r:.40}); {fix}")
    if not text.strip():
        raise ItemError(f"{where} (id {iid!r}): {f.text!r} is empty; remove the item or give it a text")
    return text


def item_from_dict(d: dict, *, where: str = "item", fields: Fields = JSONL, n: int = 0) -> Item:
    """One item from a JSONL object or a table's row (``fields``: where each field is; ``n``: the row's number,
    the id when ``fields.id`` is None)."""
    f = fields
    if not isinstance(d, dict):
        raise ItemError(f"{where}: expected a JSON object with 'id' and 'text', got {type(d).__name__}")
    missing = [k for k in (f.id, f.text) if k is not None and k not in d]
    if missing:
        if f.columns:
            raise ItemError(f"{where}: no {missing} in this row (its keys: {sorted(map(str, d))[:20]}); give every "
                            f"row the id and text columns")
        raise ItemError(f"{where}: missing field(s) {missing}; each line needs 'id' and 'text' "
                        "(and optionally 'context', 'group', 'human')")
    iid = _id_of(d, where, f, n)
    text = _text_of(d, where, f, iid)
    extra = {}
    for name, key in (("context", f.context), ("group", f.group)):
        value = None if key is None else (cell_value(d.get(key)) if f.columns else d.get(key))
        if value is not None and not isinstance(value, (str, int, float)):
            raise ItemError(f"{where} (id {iid!r}): {key!r} must be a string, got {type(value).__name__}")
        extra[name] = str(value if value is not None else "")
    human = {} if f.columns else d.get("human") or {}
    if not isinstance(human, dict):
        raise ItemError(f"{where} (id {iid!r}): 'human' must be an object criterion -> score")
    for k, v in human.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ItemError(f"{where} (id {iid!r}): human score {k!r} = {v!r} is not a finite number; write "
                            "it as a number, or leave the criterion out")
    meta = {} if f.columns else d.get("meta") or {}
    if not isinstance(meta, dict):
        raise ItemError(f"{where} (id {iid!r}): 'meta' must be an object, got {type(meta).__name__}")
    return Item(str(iid), text, extra["context"], extra["group"],
                {str(k): float(v) for k, v in human.items()}, dict(meta))


def items_from_records(records, *, fields: Fields = JSONL, source: str = "data") -> list[Item]:
    """Items from ``(where, record)`` pairs (a JSONL file's lines, a table's rows): each checked by
    :func:`item_from_dict`, ids unique, at least one. Every input of items (the texts file, the Python API's
    DataFrame, list of dicts, CSV or Parquet file) ends here."""
    items, seen = [], set()
    for n, (where, d) in enumerate(records):
        it = item_from_dict(d, where=where, fields=fields, n=n)
        if it.id in seen:
            fix = "; give each row its own id, or number the rows (lj.score(..., id=None))" if fields.columns else ""
            raise ItemError(f"{where}: duplicate id {it.id!r}; ids must be unique{fix}")
        seen.add(it.id)
        items.append(it)
    if not items:
        raise ItemError(f"{source} has no rows; give it at least one" if fields.columns else f"{source} has no items")
    return items


def frame_records(frame, *, name: str = "data") -> list[tuple[str, dict]]:
    """A pandas DataFrame's rows as ``("data.iloc[i]", {column: value})`` pairs."""
    return [(f"{name}.iloc[{i}]", rec) for i, rec in enumerate(frame.to_dict("records"))]


def read_records(path: str | Path) -> tuple[list[tuple[str, dict]], list[str], bool]:
    """The rows of a texts file: ``.csv`` (every cell read as a string, an empty cell as ''), ``.parquet``, else
    JSONL. Returns (``(where, record)`` pairs, the columns, whether the rows are a table's)."""
    p = Path(path)
    if not p.exists():
        raise ItemError(f"texts file {p} does not exist")
    if p.is_dir():
        raise ItemError(f"texts file {p} is a folder; give a .jsonl, .csv or .parquet file")
    suffix = p.suffix.lower()
    if suffix in (".csv", ".parquet"):
        import pandas as pd

        try:
            if suffix == ".csv":  # strings as written: an id 007 stays "007", a text "NA" stays "NA"
                frame = pd.read_csv(p, dtype=str, keep_default_na=False)
            else:
                frame = pd.read_parquet(p)
        except ImportError:
            raise ItemError(f"{p}: reading Parquet needs pyarrow: pip install 'logitjudge[parquet]'") from None
        except (ValueError, OSError, UnicodeDecodeError) as e:
            raise ItemError(f"{p}: not a readable {suffix[1:].upper()} file ({str(e).splitlines()[0][:200]}); "
                            f"save it as {suffix[1:].upper()} with a header row") from None
        records = [(f"{p} row {i + 1}", rec) for i, rec in enumerate(frame.to_dict("records"))]
        return records, [str(c) for c in frame.columns], True
    records = list(iter_jsonl(p, error=ItemError, expect="the file must be JSONL, one object per line"))
    return records, sorted({str(k) for _, d in records for k in d}), False


def read_items(path: str | Path, *, fields: Fields | None = None) -> list[Item]:
    """Items from a texts file: JSONL (one object per line with ``id``, ``text`` and optional
    ``context``/``group``/``human``/``meta``), or a CSV or Parquet table with those columns."""
    records, _, table = read_records(path)
    fields = fields or Fields(columns=table)
    return items_from_records(records, fields=fields, source=f"texts file {Path(path)}")


def _pick(columns: list[str], name, default, what: str, source: str):
    """The column read for one field: ``name`` when it is a column; None when not asked (None) or when the default
    name is not a column (an optional field left out); any other name must be a column."""
    if name is None or (name == default and name not in columns):
        return None
    if name not in columns:
        left_out = " (the rows are then numbered)" if what == "id" else ""
        raise ItemError(f"{source} has no column {name!r} for the {what} (its columns: {columns[:20]}); name the "
                        f"column that holds the {what} ({what}=\"...\"), or pass {what}=None{left_out}")
    return name


def items_from_data(data, *, text: str = "text", id: str | None = "id", context: str | None = "context",
                    group: str | None = "group") -> tuple[list[Item], str | None]:
    """Items from a pandas DataFrame, a list of dicts, or a ``.jsonl``/``.csv``/``.parquet`` file, reading each
    field from the column (key) named: ``text`` must be a column; ``id``, ``context`` and ``group`` are read from
    their default columns when present, any other name must be a column, None leaves the field out (``id``: the
    rows are numbered 0, 1, ... as ``data.iloc``). Every row is checked as a texts file's line is
    (:func:`items_from_records`). Returns (items, the file's path or None)."""
    path = None
    if isinstance(data, (str, Path)):
        path = str(data)
        records, columns, table = read_records(data)
        source = f"texts file {path}"
    elif hasattr(data, "to_dict") and hasattr(data, "columns"):  # a pandas DataFrame, without importing pandas
        columns = [str(c) for c in data.columns]
        twice = sorted({c for c in columns if columns.count(c) > 1})
        if twice:
            raise ItemError(f"data has several columns named {twice[0]!r}; keep one (e.g. "
                            "data.loc[:, ~data.columns.duplicated()]) or rename the others")
        records, table, source = frame_records(data.rename(columns=str)), True, "data"
    elif isinstance(data, (list, tuple)):
        bad = next((i for i, d in enumerate(data) if not isinstance(d, dict)), None)
        if bad is not None:
            raise ItemError(f"data[{bad}]: expected a dict (one row: column -> value), got {type(data[bad]).__name__}; "
                            "pass a list of dicts, a DataFrame or a file path")
        records = [(f"data[{i}]", d) for i, d in enumerate(data)]
        columns, table, source = sorted({str(k) for d in data for k in d}), True, "data"
    else:
        raise ItemError(f"data must be a pandas DataFrame, a list of dicts or the path of a .jsonl, .csv or .parquet "
                        f"file, got {type(data).__name__}")
    if not isinstance(text, str) or text not in columns:
        raise ItemError(f"{source} has no column {text!r} for the texts (its columns: {columns[:20]}); name the "
                        "column that holds the texts, e.g. text=\"response\"")
    fields = Fields(text=text, id=_pick(columns, id, "id", "id", source),
                    context=_pick(columns, context, "context", "context", source),
                    group=_pick(columns, group, "group", "group", source), columns=table)
    return items_from_records(records, fields=fields, source=source), path


def human_and_systems(items: list[Item]) -> tuple[dict | None, dict | None]:
    """The items' human scores ({item id: {criterion: score}}; None: none has any) and, with human scores, each
    item's system (the model that wrote it) from the first of the meta keys model, model_id, system that every
    item has (None: no such key)."""
    human = {it.id: dict(it.human) for it in items if it.human} or None
    if human is not None:
        for key in ("model", "model_id", "system"):
            if all(key in it.meta for it in items):
                return human, {it.id: str(it.meta[key]) for it in items}
    return human, None
