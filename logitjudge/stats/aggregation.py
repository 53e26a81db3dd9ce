"""Per-item scores from an ordering strategy and a budget of K prompts, and PriDe debiasing.

Arrays (one criterion): ``probs[item, ordering, option]`` canonical, ``values[option]``,
``option_orders[ordering, position]`` (or per item ``[item, ordering, position]``).

Strategies (the K prompts of each item):

* ``fixed``: the canonical ordering (identity row when present, else row 0) K times. With exact
  distributions the 'expected' and 'argmax' readings are identical across repeats; 'draw' readings differ.
* ``random``: K orderings drawn uniformly *with replacement* from the item's orderings, independently per
  item (repeats possible, like the study's RANDOM). This is one draw; the study's RANDOM figure is the
  expectation over draws: :mod:`logitjudge.stats.expectation`.
* ``balanced``: K consecutive orderings of :func:`balanced_sequence` (positions ``offset .. offset+K-1``,
  wrapping); K = all rows by default. For ``orderings.balanced(n)`` the sequence is the table's row order
  (the forward rotations, then the reversed ones); when option orders repeat (criterion orders crossed with
  option orders) it visits every distinct option order before repeating one, so that the first 2n prompts
  are a balanced set. Requires the table's orderings to be balanced.

Readings of one prompt (:mod:`logitjudge.stats.readings`): 'greedy' (the argmax label; 'argmax' is its old
name), 'sampled' (the exact expected value of a tempered draw), 'expected' (probability-weighted score), and
'draw' (one answer drawn with ``rng``: one realisation of a sampling judge).
Modes: 'scores' averages the K readings; 'probs' averages the K canonical distributions, then reads once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..orderings import balanced as balanced_orders
from ._result import (
    BALANCED,
    DesignError,
    Result,
    ShapeError,
    StatsError,
    _shared,
    as_array,
    as_float,
    as_orders,
    as_rng,
    canonical_index,
    check_choice,
    check_distributions,
    check_orders,
    detect_design,
    has_all_orders,
)
from .position import pride_prior, probs_by_position, probs_from_positions
from .readings import check_reading, read_scores

STRATEGIES = ("fixed", "random", "balanced")
READINGS = ("greedy", "sampled", "expected", "draw")
MODES = ("scores", "probs")


def _inputs(probs, values, option_orders, *, per_item: bool = True):
    p = as_array(probs, "probs", 3, "[items, orderings, options]")
    check_distributions(p, "probs")
    v = as_float(values, "values")
    if v.shape != (p.shape[2],):
        raise ShapeError(f"values has shape {v.shape}, expected ({p.shape[2]},) (one value per option)")
    return p, v, check_orders(option_orders, p.shape[1], p.shape[2], n_items=p.shape[0] if per_item else None)


def select_orderings(option_orders, n_items: int, *, strategy: str, k: int | None = None, offset: int = 0,
                     rng=None) -> np.ndarray:
    """``[items, K]`` indices of the orderings each item is scored under (see the module doc)."""
    check_choice("strategy", strategy, STRATEGIES)
    orders = _shared(as_orders(option_orders, per_item=True))
    n_ord = orders.shape[-2]
    if int(n_items) != n_items or n_items < 0:
        raise StatsError(f"n_items must be a non-negative integer, got {n_items!r}")
    if orders.ndim == 3 and len(orders) != n_items:
        raise ShapeError(f"per-item option_orders have {len(orders)} items, but n_items={n_items}")
    if k is None:
        k = 1 if strategy == "fixed" else n_ord
    if int(k) != k or k < 1:
        raise StatsError(f"budget k must be a positive integer, got {k!r}")
    k = int(k)
    if strategy == "fixed":
        return np.full((n_items, k), canonical_index(orders))
    if strategy == "random":
        return as_rng(rng).integers(0, n_ord, size=(n_items, k))
    if detect_design(orders) != BALANCED or orders.ndim == 3:
        raise DesignError("strategy='balanced' needs one balanced ordering set shared by every item (every "
                          "option at every position equally often); these are not - use strategy='random', "
                          "score with orderings.balanced(n), or select the balanced rows of a "
                          "balanced+random table (ScoreTable.select_orderings)")
    if k > n_ord:
        raise StatsError(f"balanced budget k={k} exceeds the {n_ord} orderings in the table")
    rows = balanced_sequence(orders)[(offset + np.arange(k)) % n_ord]
    return np.broadcast_to(rows, (n_items, k)).copy()


def balanced_sequence(option_orders) -> np.ndarray:
    """Row indices in the order BALANCED budgets take them: by occurrence of the row's option order (first
    occurrences of every distinct option order, in table order, then second occurrences, ...)."""
    orders = as_orders(option_orders)
    _, first, inv = np.unique(orders, axis=0, return_index=True, return_inverse=True)
    inv = inv.ravel()
    rank = np.argsort(np.argsort(first))[inv]  # rank of each row's option order by first appearance
    occurrence = np.zeros(len(orders), dtype=np.int64)
    seen: dict[int, int] = {}
    for row, key in enumerate(inv):
        occurrence[row] = seen.get(key, 0)
        seen[key] = occurrence[row] + 1
    return np.lexsort((rank, occurrence))


def balanced_rows(option_orders) -> np.ndarray | None:
    """Row indices of the study's BALANCED orderings (the 2n rotations and their reversals) inside a table's
    orders, in order, or None when the table does not hold them: picked out of a larger design (all n! orders,
    balanced+random; for per-item orders at the same rows of every item), else every row of a balanced table
    (``balanced_sequence``). ``option_orders``: (K, n) or per item (I, K, n)."""
    a = _shared(as_orders(option_orders, per_item=True))
    n = a.shape[-1]
    ref = balanced_orders(n)
    if a.ndim == 3:  # per-item orders: the balanced rows must sit at the same indices in every item
        rows = [np.flatnonzero(np.all(a[0] == r, axis=1)) for r in ref]
        if all(len(x) for x in rows):
            idx = np.asarray([x[0] for x in rows])
            if np.array_equal(a[:, idx], np.broadcast_to(ref, (a.shape[0],) + ref.shape)):
                return idx
        return None
    if detect_design(a) != BALANCED:
        return None
    if has_all_orders(a) and len(a) > len(ref):
        return np.asarray([int(np.flatnonzero(np.all(a == r, axis=1))[0]) for r in ref])
    return balanced_sequence(a)


@dataclass(frozen=True)
class AggregateResult(Result):
    """``scores[item]`` aggregated over ``orderings[item, K]`` (indices into the table's orderings) under
    ``reading`` (at ``temperature`` for 'sampled'/'draw'; under 'sampled' a score is the exact expectation of
    the mean of the K sampled answers)."""

    scores: np.ndarray
    orderings: np.ndarray
    strategy: str
    reading: str
    mode: str
    k: int
    temperature: float = 1.0


def aggregate_scores(probs, values, option_orders, *, strategy: str = "balanced", k: int | None = None,
                     reading: str = "expected", temperature: float = 1.0, mode: str = "scores",
                     offset: int = 0, rng=None) -> AggregateResult:
    """Per-item score from K prompts chosen by ``strategy`` (mean of readings, or reading of the mean)."""
    p, v, orders = _inputs(probs, values, option_orders)
    check_choice("mode", mode, MODES)
    reading = check_reading(reading, allow_draw=True)
    rng = as_rng(rng)
    idx = select_orderings(orders, p.shape[0], strategy=strategy, k=k, offset=offset, rng=rng)
    chosen = np.take_along_axis(p, idx[:, :, None], axis=1)  # [items, K, options]
    kw = dict(reading=reading, temperature=temperature, rng=rng)
    if mode == "scores":
        scores = read_scores(chosen, v, **kw).mean(axis=1)
    else:
        scores = read_scores(chosen.mean(axis=1), v, **kw)
    return AggregateResult(scores, idx, strategy, reading, mode, idx.shape[1], float(temperature))


# ---- PriDe debiasing ---------------------------------------------------------------------------------------
def debias_probs(probs, order, prior) -> np.ndarray:
    """Remove a positional prior from canonical ``probs[..., option]`` observed under one ``order``.

    p_debiased(option at position q) ∝ p_observed(position q) / prior[q], mapped back to canonical options.
    """
    p = as_float(probs, "probs")
    o = np.asarray(order)[None]
    pr = as_float(prior, "prior")
    if p.ndim < 1 or o.ndim != 2 or o.shape[1] != p.shape[-1] or pr.shape != (p.shape[-1],):
        raise ShapeError(f"order ({o.shape[1:]}) and prior ({pr.shape}) must match the {p.shape[-1]} options")
    if np.any(pr <= 0):
        raise StatsError("the prior must be strictly positive at every position")
    by_pos = probs_by_position(p[..., None, :], o)[..., 0, :] / pr
    by_pos /= by_pos.sum(axis=-1, keepdims=True)
    return probs_from_positions(by_pos[..., None, :], o)[..., 0, :]


@dataclass(frozen=True)
class DebiasResult(Result):
    """PriDe: prior from ``estimation_items`` (all their orderings), then debiased single-ordering scores.

    ``scores`` and ``raw_scores`` (same prompt, not debiased) are for ``items``; ``ordering`` is the row used.
    """

    scores: np.ndarray
    raw_scores: np.ndarray
    items: np.ndarray
    estimation_items: np.ndarray
    prior: np.ndarray
    ordering: int
    reading: str


def pride_debias(probs, values, option_orders, *, estimation_fraction: float = 0.2, estimation_items=None,
                 ordering: int | None = None, reading: str = "expected", average: str = "log",
                 floor: float = 1e-12, rng=None) -> DebiasResult:
    """Estimate the positional prior on a fraction of items from their cyclic/balanced orderings (PriDe), then
    debias the single-ordering scores of the remaining items.

    ``estimation_items`` (indices) overrides the random split of ``estimation_fraction`` of the items (at
    least one item on each side). ``ordering`` defaults to the canonical row. The table's orderings must be
    balanced.
    """
    p, v, orders = _inputs(probs, values, option_orders, per_item=False)
    reading = check_reading(reading, allow_draw=True)
    rng = as_rng(rng)
    n_items = p.shape[0]
    if n_items < 2:
        raise StatsError("PriDe needs at least 2 items: some to estimate the prior, the rest to debias")
    if detect_design(orders) != BALANCED:
        raise DesignError("PriDe estimates its prior from cyclic/balanced orderings; these orderings are not "
                          "balanced - score the estimation items under orderings.balanced(n)")
    if estimation_items is None:
        if not 0.0 < estimation_fraction < 1.0:
            raise StatsError(f"estimation_fraction must lie in (0, 1), got {estimation_fraction!r}")
        m = min(max(1, math.ceil(estimation_fraction * n_items)), n_items - 1)
        est = np.sort(rng.permutation(n_items)[:m])
    else:
        est = np.unique(np.asarray(estimation_items, dtype=np.int64))
        if est.size == 0 or est.size >= n_items or est.min() < 0 or est.max() >= n_items:
            raise StatsError(f"estimation_items must be valid item indices leaving at least one item to "
                             f"debias (got {est.size} of {n_items})")
    rest = np.setdiff1d(np.arange(n_items), est)
    ordering = canonical_index(orders) if ordering is None else int(ordering)
    if not 0 <= ordering < len(orders):
        raise StatsError(f"ordering={ordering} is not a row of the {len(orders)} orderings")
    log_pbp = np.log(np.maximum(probs_by_position(p[est], orders), floor))
    prior = pride_prior(log_pbp, option_orders=orders, average=average).prior
    observed = p[rest, ordering]
    debiased = debias_probs(observed, orders[ordering], prior)
    raw = read_scores(observed, v, reading=reading, rng=rng)
    return DebiasResult(read_scores(debiased, v, reading=reading, rng=rng), raw, rest, est, prior, ordering,
                        reading)
