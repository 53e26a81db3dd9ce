"""Several criteria in one prompt (the slot algorithms are in :mod:`logitjudge.steps`)."""

from __future__ import annotations

from .engine import Engine
from .run import Run
from .steps import SLOT_MODES, MultiCriteriaError, marginal_cost

__all__ = ["SLOT_MODES", "MultiCriteriaError", "marginal_cost", "score_multi"]


def score_multi(lm, items, rubric, option_orders, criterion_orders, *, template=None, engine: Engine | None = None,
                out=None, slots: str = "greedy", max_continuations: int = 20000, progress: bool = True,
                meta: dict | None = None):
    """Per-slot distributions, indexed by the canonical criterion: ``probs[item, criterion, ordering, option]``.

    ``option_orders`` and ``criterion_orders`` are aligned (K rows each); use ``orderings.cross`` to combine
    every option order with every criteria order. A :class:`logitjudge.run.Run` (sharded, resumable).
    """
    return Run(lm, items, rubric, option_orders, criterion_orders=criterion_orders, template=template, engine=engine,
               out=out, slots=slots, max_continuations=max_continuations, progress=progress, meta=meta).execute()
