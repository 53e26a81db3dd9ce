"""Single-criterion scoring (the batch step is in :mod:`logitjudge.steps`)."""

from __future__ import annotations

from .engine import Engine
from .run import Run

__all__ = ["score"]


def score(lm, items, rubric, option_orders=None, *, template=None, engine: Engine | None = None, out=None,
          progress: bool = True, meta: dict | None = None):
    """Exact option distributions of every (item, criterion, ordering) in one ScoreTable.

    ``option_orders``: (K, n) shared by every item or (I, K, n) per item (default: the canonical order once).
    With ``out``, finished batches are checkpointed and the table is saved there; an interrupted run started
    again with the same ``out`` continues where it stopped. A :class:`logitjudge.run.Run`.
    """
    return Run(lm, items, rubric, option_orders, template=template, engine=engine, out=out, progress=progress,
               meta=meta).execute()
