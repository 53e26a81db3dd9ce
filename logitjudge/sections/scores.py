"""Per-item scores: one row per (item, criterion) with the score of every strategy, for a leaderboard, a reward
model or any analysis of one's own (``logitjudge analyze TABLE --scores FILE``, ``scores.csv`` of a run).

Columns (a column the table cannot give is left out; ``reading`` says how every score was read):

* ``item_id``, ``group`` ('' where the item has none), ``criterion``, ``reading``;
* ``fixed``: the canonical prompt's score (tables with a canonical row);
* ``balanced``: the mean over the 2n balanced rotations (tables that hold them: balanced, all, balanced+random);
* ``random``: RANDOM's expected score at the table's budget ``random_k`` (the 2n balanced rotations' count when
  the table holds them, else the rows of RANDOM's pool): an item's mean over K orders drawn uniformly from its
  RANDOM pool has the same expectation for every K, so it is exact (closed form); ``random_se``: the standard
  error of one K-prompt RANDOM run's score of the item around it (the sd of one drawn prompt's score over the
  pool, answers drawn too under 'sampled', over sqrt(K); draws with replacement);
* ``pride``: the canonical prompt debiased with the PriDe prior (Zheng et al., ICLR 2024) estimated on the
  balanced rotations of every item (the position section's ``pride_prior``; tables with balanced rotations);
* ``human``: the human score of the criterion (with human scores; empty where an item has none);
* ``label_mass``: the total probability of the labels before renormalising, mean over the item's prompts (how
  much of the judge's next-token mass the rubric's labels take).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import stats as st
from ..stats._result import AlignmentError, DesignError
from ..table import ScoreTable
from ._base import Context

COLUMNS = ("item_id", "group", "criterion", "reading", "fixed", "balanced", "random", "random_k", "random_se",
           "pride", "human", "label_mass")


def _random_se(ctx: Context, c: int, k: int) -> np.ndarray:
    """[items]: sd of one drawn prompt's score (row uniform over the pool; its answer drawn under 'sampled')
    over sqrt(k)."""
    t, rows = ctx.table, ctx.random_pool()[0]
    p, v = t.probs[:, c][:, rows], t.values[c]
    if ctx.reading == "sampled":
        q = st.tempered(p)
        m1, m2 = (q @ v).mean(axis=1), (q @ v ** 2).mean(axis=1)
    else:
        s = st.read_scores(p, v, reading=ctx.reading)
        m1, m2 = s.mean(axis=1), (s ** 2).mean(axis=1)
    return np.sqrt(np.maximum(m2 - m1 ** 2, 0.0) / k)


def _pride(ctx: Context, c: int) -> np.ndarray | None:
    """[items]: the canonical prompt read after dividing out the PriDe prior of the balanced rotations."""
    t, bal = ctx.table, ctx.balanced_part()
    if bal is None:
        return None
    try:
        canon = st.canonical_index(t.option_orders)
    except DesignError:
        return None
    pbp = st.probs_by_position(t.probs[:, c], t.option_orders)[:, bal[0]]
    prior = st.pride_prior(np.log(np.maximum(pbp, 1e-12)), option_orders=bal[1]).prior
    order = t.option_orders[canon] if t.option_orders.ndim == 2 else t.option_orders[0, canon]
    debiased = st.debias_probs(t.probs[:, c, canon], order, prior)
    return st.read_scores(debiased, t.values[c], reading=ctx.reading)


def _human(ctx: Context, c: int) -> np.ndarray | None:
    if not ctx.human:
        return None
    out = np.full(ctx.table.n_items, np.nan)
    try:
        hs = ctx.human_scores(c)
    except AlignmentError:  # no human score for this criterion
        return out
    out[hs.index] = hs.scores
    return out


def item_scores(table: ScoreTable, *, reading: str = "expected", human: dict | None = None,
                groups: dict | None = None):
    """A pandas DataFrame with one row per (item, criterion), items in table order (see the module doc for the
    columns). ``human``: item_id -> criterion -> score; ``groups``: item_id -> group (default: the table's)."""
    import pandas as pd

    ctx = Context.build(table, human=human, groups=groups, n_boot=0, reading=reading)
    k = ctx.budget_k()
    parts = []
    for c, name in enumerate(ctx.criteria):
        scores = ctx.strategy_scores(c)
        cols = {"item_id": table.item_ids, "group": ctx.groups if ctx.groups is not None else "",
                "criterion": name, "reading": ctx.reading, "fixed": scores.get("fixed"),
                "balanced": scores.get("balanced"), "random": scores["random"], "random_k": k,
                "random_se": _random_se(ctx, c, k), "pride": _pride(ctx, c), "human": _human(ctx, c),
                "label_mass": table.label_mass[:, c].mean(axis=1)}
        frame = pd.DataFrame({key: v for key, v in cols.items() if v is not None}, index=np.arange(table.n_items))
        frame["_item"] = np.arange(table.n_items)
        parts.append(frame)
    out = pd.concat(parts, ignore_index=True).sort_values(["_item"], kind="stable").drop(columns="_item")
    return out.reset_index(drop=True)[[c for c in COLUMNS if c in out.columns]]


def write_item_scores(frame, path):
    """Write :func:`item_scores` to ``path``: .csv, or .parquet (needs pyarrow). Returns the frame."""
    p = Path(path)
    if p.suffix not in (".csv", ".parquet"):
        raise ValueError(f"{p}: a scores file must end in .csv or .parquet")
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.suffix == ".csv":
        frame.to_csv(p, index=False)
    else:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ValueError("Parquet output needs pyarrow: pip install 'logitjudge[parquet]', or write .csv") \
                from None
        frame.to_parquet(p, index=False)
    return frame
