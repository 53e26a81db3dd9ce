"""Criterion-position effect: several criteria scored in one prompt, with the criteria order permuted.

Input ``scores[item, criterion, ordering]`` (e.g. expected scores, ``ScoreTable.expected_score()``) and
``criterion_orders[ordering, position]`` (canonical criterion shown at each position).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from ..orderings import inverse
from ._result import (
    DesignError,
    Result,
    StatsError,
    as_array,
    as_rng,
    check_choice,
    check_confidence,
    check_n_boot,
    check_orders,
    mean_over_units,
    need_items,
    percentile_ci,
)
from .readings import check_reading


@dataclass(frozen=True)
class CriterionPositionResult(Result):
    """Mean score of each criterion at each position and how much it moves with position.

    ``matrix[criterion, position]``: mean over items of the per-item mean score at that position (NaN where
    the criterion is never shown there). ``spread[criterion]``: max - min over the observed positions, in
    points, with percentile bootstrap CIs over items. ``statistic``/``pvalue`` per criterion come from
    ``test`` ('friedman': ``scipy.stats.friedmanchisquare`` on item x position means, needs >= 3 positions;
    'permutation': the spread under within-item permutations of the orderings). Undefined tests are NaN and
    listed in ``notes``.

    Max - min over a few noisy item means is biased upward: even a judge whose scores ignore the criterion order
    shows a positive spread. ``null_spread_mean`` / ``null_spread_high`` (its ``confidence`` quantile) are the
    spread of the same data with the orderings shuffled within every item (``n_perm`` shuffles): the spread that
    noise alone produces. ``excess_spread = spread - null_spread_mean`` is the part to read as an effect, and a
    spread below ``null_spread_high`` is within noise.
    """

    matrix: np.ndarray
    spread: np.ndarray
    spread_ci_low: np.ndarray
    spread_ci_high: np.ndarray
    statistic: np.ndarray
    pvalue: np.ndarray
    test: str
    n_items: int
    n_orderings: int
    confidence_level: float
    notes: tuple[str, ...]
    null_spread_mean: np.ndarray | None = None
    null_spread_high: np.ndarray | None = None
    excess_spread: np.ndarray | None = None
    n_perm: int = 0
    reading: str = "expected"


def _item_position_means(scores: np.ndarray, onehot: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """[items, criteria, positions] mean score over the orderings that show criterion c at position p."""
    with np.errstate(invalid="ignore", divide="ignore"):  # never-observed (c, p) cells are NaN by design
        return np.einsum("ick,kcp->icp", scores, onehot) / counts[None]


def _spread(matrix: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """max - min over the observed positions of the last axis."""
    hi = np.where(observed, matrix, -np.inf).max(axis=-1)
    lo = np.where(observed, matrix, np.inf).min(axis=-1)
    return hi - lo


def criterion_position_effect(scores, criterion_orders, *, test: str = "auto", n_perm: int = 1000,
                              reading: str = "expected", n_boot: int = 1000, confidence: float = 0.95, rng=None
                              ) -> CriterionPositionResult:
    """Criterion x position mean-score matrix, per-criterion spread with CIs, and a within-item test.

    ``test='auto'`` uses Friedman when every criterion is seen at >= 3 positions, else the permutation test.
    The permutation test shuffles, independently within each item, which ordering each prompt's scores belong
    to; its null is that scores do not depend on the ordering at all (including option order, if that varies
    too). p-values are ``(1 + #{perm >= observed}) / (1 + n_perm)``. ``reading`` names how ``scores`` were
    read (recorded in the result).
    """
    s = as_array(scores, "scores", 3, "[items, criteria, orderings]")
    if not np.all(np.isfinite(s)):
        raise StatsError("scores contain NaN or inf; pass finite expected scores")
    i, c, k = s.shape
    need_items(i, 2, "the criterion-position effect")
    orders = check_orders(criterion_orders, k, c, "criterion_orders")
    check_choice("test", test, ("auto", "friedman", "permutation"))
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    if int(n_perm) != n_perm or n_perm < 1:
        raise StatsError(f"n_perm must be a positive integer, got {n_perm!r}")
    rng = as_rng(rng)
    onehot = np.eye(c)[inverse(orders)]  # [orderings, criteria, positions]
    counts = onehot.sum(axis=0)  # [criteria, positions]
    observed = counts > 0
    n_seen = observed.sum(axis=1)
    if c < 2 or not np.any(n_seen >= 2):
        raise DesignError("no criterion is shown at more than one position: the criterion order never "
                          "varies, so there is no criterion-position effect to measure; score with permuted "
                          "criterion orders")
    per_item = _item_position_means(s, onehot, counts)
    matrix = per_item.mean(axis=0)
    spread = _spread(matrix, observed)
    notes = []
    spread = np.where(n_seen >= 2, spread, np.nan)
    for j in np.flatnonzero(n_seen < 2):
        notes.append(f"criterion {j} is shown at a single position: no spread")
    if n_boot:
        boot = mean_over_units(np.nan_to_num(per_item), n_boot, rng)  # NaN cells are masked by `observed`
        lo, hi = percentile_ci(np.where(n_seen >= 2, _spread(boot, observed), np.nan), confidence)
    else:
        lo = hi = np.full(c, np.nan)
    if test == "auto":
        test = "friedman" if np.all(n_seen[n_seen >= 2] >= 3) else "permutation"
    stat, pval = np.full(c, np.nan), np.full(c, np.nan)
    if test == "friedman":
        for j in range(c):
            cols = per_item[:, j, observed[j]]
            if cols.shape[1] < 3:
                notes.append(f"criterion {j}: Friedman needs >= 3 positions, it is shown at {cols.shape[1]}")
            elif np.all(np.ptp(cols, axis=1) == 0):
                notes.append(f"criterion {j}: every item scores the same at every position; Friedman "
                             "undefined")
            else:
                res = sps.friedmanchisquare(*cols.T)
                stat[j], pval[j] = res.statistic, res.pvalue
    valid = n_seen >= 2
    null = _null_spreads(s, onehot, counts, observed, int(n_perm), rng)  # [n_perm, criteria]
    if test == "permutation":
        stat = np.where(valid, spread, np.nan)
        exceed = (null >= spread - 1e-12).sum(axis=0)  # tolerance: ties with the observed value count
        pval = np.where(valid, (1 + exceed) / (1 + n_perm), np.nan)
    null_mean = np.where(valid, null.mean(axis=0), np.nan)
    null_high = np.where(valid, np.quantile(null, confidence, axis=0), np.nan)
    return CriterionPositionResult(matrix, spread, lo, hi, stat, pval, test, i, k, confidence, tuple(notes),
                                   null_mean, null_high, spread - null_mean, int(n_perm),
                                   check_reading(reading))


def _null_spreads(s, onehot, counts, observed, n_perm: int, rng) -> np.ndarray:
    """[n_perm, criteria] spreads with the orderings shuffled independently within every item."""
    i, _, k = s.shape
    out = np.empty((n_perm, s.shape[1]))
    for b in range(n_perm):
        perm = np.argsort(rng.random((i, k)), axis=1)
        sp = np.take_along_axis(s, perm[:, None, :], axis=2)
        out[b] = _spread(_item_position_means(sp, onehot, counts).mean(axis=0), observed)
    return out
