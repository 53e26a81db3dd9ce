"""The analysis sections, one object each, and the one registry that :func:`logitjudge.analysis.analyze`, the
Markdown rendering (:func:`format_markdown`) and the report (:mod:`logitjudge.report`) loop over.

Adding a section: a module with a :class:`Section` subclass (``name``, ``title``, ``CAPTION``, ``NOTE``;
``compute`` on a :class:`Context`, ``tables``; optionally ``needs``, ``plot``, ``summary``, ``verdict``), and one
line in ``SECTIONS``. Sections run in registry order,
per criterion or once for the table; each (section, criterion) draws from a generator of its own
(:meth:`Context.for_part`), so a new section changes no other section's numbers.
"""

from __future__ import annotations

from ._base import Context, Partial, Section, Skip
from .aggregation import AGGREGATION
from .alignment import ALIGNMENT
from .budget import BUDGET
from .criterion_position import CRITERION_POSITION
from .paradigms import LISTWISE, PAIRWISE, paradigm_shape
from .position import POSITION
from .rank_stability import RANK_STABILITY

SECTIONS: list[Section] = [POSITION, CRITERION_POSITION, AGGREGATION, ALIGNMENT, BUDGET, RANK_STABILITY, PAIRWISE,
                           LISTWISE]


def format_markdown(result: dict) -> str:
    """The verdict first, then each section's tables (with confidence intervals), what was skipped and why,
    and the warnings."""
    t = result["table"]
    crit = "criterion" if t["n_criteria"] == 1 else "criteria"
    shape = (f"{t['n_items']} items, {t['n_criteria']} {crit}, {t['n_orderings']} orderings of {t['n_options']} "
             f"options ({t['design']} design).")
    if t.get("paradigm", "pointwise") != "pointwise":  # a candidate table's items are pairs or lists
        shape = paradigm_shape(t)
    parts = [result["verdict"], shape]
    parts += [md for md in (s.markdown(result) for s in SECTIONS) if md]
    if result.get("skipped"):
        parts.append("\n".join(["## Skipped", ""] + [f"- {k}: {v}" for k, v in result["skipped"].items()]))
    if result.get("warnings"):
        parts.append("\n".join(["## Warnings", ""] + [f"- {w}" for w in result["warnings"]]))
    return "\n\n".join(parts) + "\n"


__all__ = ["SECTIONS", "Context", "Partial", "Section", "Skip", "format_markdown"]
