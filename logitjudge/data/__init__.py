"""Loaders for the benchmark data sets: HANNA, SummEval, MT-Bench and Vicuna-Bench.

``load_dataset(name, data_dir=None, *, limit=None, groups=None, seed=0, **options)`` reads
``<data_dir>/<name>/`` (the layout of the shared data folder; each folder's SOURCE.md gives its files and
fields) and returns a :class:`Dataset`: the items, the built-in rubric of the data set, its criteria and
whether it has human scores. The data folder is ``data_dir`` if given, else ``$LOGITJUDGE_DATA``, else
``../shared/data`` relative to the working directory (see :func:`default_data_dir`). ``data_dir`` may also be
the data set's own folder. ``limit`` / ``groups`` / ``seed`` choose a subset of whole groups (the rule is in
:mod:`logitjudge.data.base`).

Options: ``mt_bench``: ``models``, ``turn`` (1 or 2), ``with_reference``; ``vicuna_bench``: ``models``,
``with_reference``; ``hanna`` and ``summeval``: none.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

from . import hanna, mt_bench, summeval, vicuna_bench
from .base import DataError, Dataset, Origin, read_csv, read_jsonl, subset_items

_MODULES = {m.NAME: m for m in (hanna, summeval, mt_bench, vicuna_bench)}
DATASETS: tuple[str, ...] = tuple(_MODULES)
ENV_VAR = "LOGITJUDGE_DATA"

__all__ = [
    "DATASETS", "DataError", "Dataset", "ENV_VAR", "Origin", "dataset_dir", "default_data_dir",
    "load_dataset", "read_csv", "read_jsonl", "subset_items",
]


def _module(name: str):
    key = str(name).strip().lower().replace("-", "_")
    if key not in _MODULES:
        raise DataError(f"unknown data set {name!r}; available: {list(DATASETS)}")
    return _MODULES[key]


def default_data_dir() -> Path:
    """``$LOGITJUDGE_DATA`` if set, else ``../shared/data`` relative to the working directory if it exists."""
    env = os.environ.get(ENV_VAR)
    if env:
        p = Path(env).expanduser()
        if not p.is_dir():
            raise DataError(f"{ENV_VAR}={env!r} is not a folder; point it at the folder that holds "
                            f"{', '.join(f'{d}/' for d in DATASETS)} (or pass --data-dir)")
        return p.resolve()
    p = Path.cwd().parent / "shared" / "data"
    if p.is_dir():
        return p.resolve()
    raise DataError(f"no data folder: pass --data-dir (data_dir=...) or set {ENV_VAR} to the folder that "
                    f"holds {', '.join(f'{d}/' for d in DATASETS)}; the fallback {p} does not exist")


def dataset_dir(name: str, data_dir: str | Path | None = None) -> Path:
    """The folder a data set is read from: ``<data_dir>/<name>``, or ``data_dir`` itself if it holds the data
    set's main file."""
    mod = _module(name)
    base = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    sub = base / mod.NAME
    if not sub.is_dir() and (base / mod.MAIN_FILE).is_file() and (base / mod.MARKER).exists():
        return base
    return sub


def load_dataset(name: str, data_dir: str | Path | None = None, *, limit: int | None = None, groups=None,
                 seed: int = 0, **options) -> Dataset:
    """Load a data set by name (one of :data:`DATASETS`; ``-`` and ``_`` are interchangeable)."""
    mod = _module(name)
    allowed = [p for p in inspect.signature(mod.load).parameters if p != "root"]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise DataError(f"{mod.NAME} has no option(s) {unknown}; its options are {allowed or 'none'}")
    ds = mod.load(dataset_dir(mod.NAME, data_dir), **options)
    return ds.subset(limit=limit, groups=groups, seed=seed)
