"""Everything a ScoreTable supports, as one JSON-ready dict: the sections of :mod:`logitjudge.sections`, run
on one :class:`~logitjudge.sections.Context`.

A section that cannot be computed (no human scores, a single criterion, no groups, a FIXED design, an
estimator refusing its input with a StatsError) is left out, with the reason under ``skipped`` (keyed by the
section, ``section.criterion`` or ``section.criterion.part``); the other sections go on. Markdown:
:func:`format_markdown`; human scores from a file: :func:`read_human_scores`.
"""

from __future__ import annotations

import warnings

import numpy as np

from .candidates import known_ids
from .human import HumanScoresError, read_human_scores
from .sections import SECTIONS, Context, Partial, Section, Skip, format_markdown
from .stats._result import StatsError, jsonable
from .table import ScoreTable

__all__ = ["HumanScoresError", "analyze", "format_markdown", "read_human_scores"]


def _run(section: Section, ctx: Context, c: int | None, skipped: dict):
    """The section's result for criterion ``c`` (None: the table), or None with the reason under ``skipped``."""
    names = (section.name,) if c is None else (section.name, ctx.criteria[c])
    key = ".".join(names)
    try:
        res = section.compute(ctx.for_part(*names), c)
    except (Skip, StatsError) as e:
        skipped[key] = str(e)
        return None
    if isinstance(res, Partial):
        skipped.update({f"{key}.{part}": why for part, why in res.skipped.items()})
        res = res.value
    return res


def _compute(ctx: Context) -> tuple[dict, dict]:
    """{section name: {criterion: result} or result or None}, and the reasons for what was skipped."""
    applies = [s for s in SECTIONS if ctx.paradigm in s.paradigms]  # the others read another kind of table
    skipped = {s.name: s.requires(ctx) for s in applies}
    active = [s for s in applies if skipped[s.name] is None]
    skipped = {k: v for k, v in skipped.items() if v is not None}
    out: dict = {s.name: None for s in SECTIONS}
    for s in active:
        if s.per_criterion:
            each = {name: _run(s, ctx, c, skipped) for c, name in enumerate(ctx.criteria)}
            out[s.name] = {name: res for name, res in each.items() if res is not None} or None
        else:
            out[s.name] = _run(s, ctx, None, skipped)
    return out, skipped


def analyze(table: ScoreTable, *, human: dict | None = None, groups: dict | None = None,
            systems: dict | None = None, rng=0, n_boot: int = 1000, method: str = "pearson",
            n_draws: int = 100, reading: str = "expected") -> dict:
    """Every statistic the table supports, as a JSON-serialisable dict (NaN -> None) with a ``verdict``
    string.

    human: item_id -> criterion -> score (alignment, budget curves). groups: item_id -> group (defaults to
    ``table.item_groups``; grouped correlation and rank stability). systems: item_id -> system (system-level
    correlation). ``method`` is the correlation for grouped/system/paired/budget results (item level reports
    all three). ``reading`` ('greedy' | 'sampled' | 'expected', see :mod:`logitjudge.stats.readings`) is how every
    section turns a prompt's exact distribution into a score (``settings.reading``; a reproduction of the study,
    whose judges answer one label, uses 'greedy'). Sections that cannot be
    computed are None, with the reason under ``skipped``.
    """
    ctx = Context.build(table, human=human, groups=groups, systems=systems, rng=rng, n_boot=n_boot,
                        method=method, n_draws=n_draws, reading=reading)
    result: dict = {"verdict": "", "table": {
        "n_items": table.n_items, "n_criteria": len(ctx.criteria), "n_orderings": table.probs.shape[2],
        "n_options": table.n_options, "criteria": ctx.criteria, "design": ctx.design,
        "criterion_order_varies": bool(np.any(table.criterion_orders != table.criterion_orders[0])),
        "paradigm": ctx.paradigm, "n_candidates": len(known_ids(table)),
        "n_groups": 0 if ctx.groups is None else int(np.unique(ctx.groups[ctx.groups != ""]).size)},
        "settings": {"n_boot": ctx.n_boot, "rng": jsonable(rng) if isinstance(rng, int) else str(rng),
                     "method": method, "n_draws": n_draws, "reading": ctx.reading}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sections, skipped = _compute(ctx)
    result.update(sections)
    result["skipped"] = skipped
    result["warnings"] = sorted({str(w.message) for w in caught})
    result = jsonable(result)
    result["verdict"] = "; ".join(v for s in SECTIONS if ctx.paradigm in s.paradigms for v in s.verdict(result))
    return result
