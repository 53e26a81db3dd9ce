"""Rank stability: do the judge's rankings of one question's candidates survive a change of option order?

Input ``scores[item, ordering]`` (e.g. each prompt's score of each item) and ``groups[item]`` (the question each
candidate answers). Within each group the candidates are ranked under every ordering. Groups with fewer than 2
candidates are left out.

* Kendall tau-b between the rankings of two orderings, mean over pairs of orderings per group, then over
  groups. Undefined where one ranking is all ties (left out of the mean).
* Pairwise top-1 disagreement (``flip_rate`` of :func:`rank_stability`): the share of *pairs* of orderings whose
  top sets differ (scores within ``tol`` of the maximum tie; a tie that stays the same tie is no change, as in
  :mod:`.top1`), averaged over every pair of orderings, then over groups. This is not the study's top-1 flip
  (:func:`~logitjudge.stats.top1_flips`: the canonical ordering against each other one).
* "vs canonical" compares every other ordering with the canonical one: the identity ordering when
  ``option_orders`` has it, else ordering 0 (or the ``canonical`` index given).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._result import (
    InsufficientDataError,
    Result,
    ShapeError,
    StatsError,
    as_array,
    as_float,
    as_rng,
    bootstrap_weights,
    check_confidence,
    check_n_boot,
    percentile_ci,
)
from .readings import check_reading
from .top1 import _canonical, group_index, pairwise_comparisons, top_sets


def _prepare(scores, groups, canonical, option_orders):
    s = as_array(scores, "scores", 2, "[items, orderings]")
    if not np.all(np.isfinite(s)):
        raise StatsError("scores contain NaN or inf; pass finite per-prompt scores")
    n_items, k = s.shape
    if k < 2:
        raise InsufficientDataError("rank stability needs at least 2 orderings to compare, got 1")
    idx, valid, n_groups = group_index(groups, n_items)
    canonical = _canonical(canonical, option_orders, k)
    by_group = np.moveaxis(s[idx], 2, 0)  # [orderings, groups, candidates]
    return by_group, valid, canonical, n_groups


def _pair_masks(k: int, canonical: int) -> tuple[np.ndarray, np.ndarray]:
    upper = np.triu(np.ones((k, k), dtype=bool), 1)
    vs = np.zeros((k, k), dtype=bool)
    vs[canonical] = True
    vs[canonical, canonical] = False
    return upper, vs


def kendall_tau_matrix(by_group: np.ndarray, valid: np.ndarray, tol: float = 1e-9) -> np.ndarray:
    """[orderings, orderings, groups] Kendall tau-b between the rankings of every pair of orderings."""
    by_group, valid = as_float(by_group, "by_group"), np.asarray(valid, dtype=bool)
    if by_group.ndim != 3 or valid.shape != by_group.shape[1:]:
        raise ShapeError(f"by_group must be [orderings, groups, candidates] and valid [groups, candidates], "
                         f"got {by_group.shape} and {valid.shape}")
    d = by_group[..., :, None] - by_group[..., None, :]  # [K, G, m, m]
    sign = np.where(np.abs(d) > tol, np.sign(d), 0.0) * (valid[:, :, None] & valid[:, None, :])
    num = np.einsum("agij,bgij->abg", sign, sign)
    untied = np.abs(sign).sum(axis=(2, 3))  # [K, G]: twice the pairs not tied in each ranking
    den = np.sqrt(untied[:, None] * untied[None, :])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


@dataclass(frozen=True)
class RankStabilityResult(Result):
    """Kendall tau and top-1 flip rate between orderings (means over pairs of orderings and over groups), with
    percentile bootstrap CIs over groups. ``defined`` is False (tau NaN, ``reason``) when all rankings tie."""

    kendall_tau: float
    kendall_tau_ci_low: float
    kendall_tau_ci_high: float
    tau_vs_canonical: float
    flip_rate: float
    flip_rate_ci_low: float
    flip_rate_ci_high: float
    flip_rate_vs_canonical: float
    n_groups: int
    n_groups_used: int
    n_orderings: int
    n_pairs: int
    canonical: int
    defined: bool
    reason: str
    confidence_level: float
    reading: str = "expected"


def rank_stability(scores, groups, *, canonical: int | None = None, option_orders=None, tol: float = 1e-9,
                   reading: str = "expected", n_boot: int = 1000, confidence: float = 0.95, rng=None
                   ) -> RankStabilityResult:
    """Stability of within-group rankings across orderings (see the module doc for definitions). ``flip_rate``
    is the pairwise top-1 disagreement, not the study's top-1 flip (:func:`top1_flips`). ``reading`` names how
    ``scores`` were read (recorded in the result)."""
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    by_group, valid, canonical, n_groups = _prepare(scores, groups, canonical, option_orders)
    k, g = by_group.shape[:2]
    upper, vs = _pair_masks(k, canonical)
    flip = pairwise_comparisons(top_sets(by_group, valid, tol))[0]  # [K, K, G]: the top sets differ
    flip_g = flip[upper].mean(axis=0)
    tau = kendall_tau_matrix(by_group, valid, tol)
    with np.errstate(invalid="ignore"):
        tau_ok = np.isfinite(tau)
        tau_g = np.where(tau_ok, tau, 0)[upper].sum(axis=0) / tau_ok[upper].sum(axis=0)  # NaN if none defined
        tau_c = np.where(tau_ok, tau, 0)[vs].sum() / tau_ok[vs].sum() if tau_ok[vs].any() else np.nan
    defined = bool(np.isfinite(tau_g).any())
    reason = "" if defined else "every ranking is all ties: Kendall tau undefined"
    nan = float("nan")
    t_lo = t_hi = f_lo = f_hi = nan
    if n_boot and g >= 2:
        rng = as_rng(rng)
        w = bootstrap_weights(g, n_boot, rng)
        f_lo, f_hi = percentile_ci(w @ flip_g / g, confidence)
        ok = np.isfinite(tau_g)
        if ok.sum() >= 2:
            wt = bootstrap_weights(int(ok.sum()), n_boot, rng)
            t_lo, t_hi = percentile_ci(wt @ tau_g[ok] / ok.sum(), confidence)
    tau_mean = float(np.nanmean(tau_g)) if defined else nan
    return RankStabilityResult(tau_mean, t_lo, t_hi, float(tau_c), float(flip_g.mean()), f_lo, f_hi,
                               float(flip[vs].mean()), n_groups, g, k, int(upper.sum()), canonical, defined,
                               reason, confidence, check_reading(reading))


@dataclass(frozen=True)
class BestOfNResult(Result):
    """Top-1 flip rate among N candidates subsampled per group (mean over draws, ordering pairs, groups)."""

    ns: np.ndarray
    flip_rate: np.ndarray
    flip_rate_vs_canonical: np.ndarray
    n_groups_used: np.ndarray
    n_draws: int
    canonical: int


def best_of_n_instability(scores, groups, *, ns=None, n_draws: int = 200, canonical: int | None = None,
                          option_orders=None, tol: float = 1e-9, rng=None) -> BestOfNResult:
    """How often best-of-N selection changes with the option order, as a function of N.

    For each N, every group with >= N candidates has N of them drawn without replacement (``n_draws`` times,
    ``rng``); the flip rate is computed on those N as in :func:`rank_stability`. ``ns`` defaults to 2 .. the
    largest group size.
    """
    if int(n_draws) != n_draws or n_draws < 1:
        raise StatsError(f"n_draws must be a positive integer, got {n_draws!r}")
    by_group, valid, canonical, _ = _prepare(scores, groups, canonical, option_orders)
    rng = as_rng(rng)
    k = by_group.shape[0]
    sizes = valid.sum(axis=1)
    ns = np.arange(2, sizes.max() + 1) if ns is None else np.asarray(ns, dtype=np.int64).ravel()
    if ns.size == 0 or ns.min() < 1:
        raise StatsError(f"ns must be positive candidate counts, got {ns.tolist()}")
    upper, vs = _pair_masks(k, canonical)
    flip, flip_c, used = np.full(ns.size, np.nan), np.full(ns.size, np.nan), np.zeros(ns.size, dtype=np.int64)
    for j, n in enumerate(ns):
        rows = np.flatnonzero(sizes >= n)
        used[j] = rows.size
        if rows.size == 0:
            continue
        bg, vg = by_group[:, rows], valid[rows]
        chunk = max(1, int(4e6 // max(1, k * bg[0].size)))  # bound memory: draws are vectorised in chunks
        tot, tot_c, done = 0.0, 0.0, 0
        while done < n_draws:
            d = min(chunk, n_draws - done)
            keys = np.where(vg, rng.random((d,) + vg.shape), np.inf)
            chosen = np.argsort(np.argsort(keys, axis=-1), axis=-1) < n  # n random valid candidates per group
            top = top_sets(bg[None], chosen[:, None], tol)  # [draws, K, G, m]
            f = pairwise_comparisons(np.moveaxis(top, 1, 0))[0]  # [K, K, draws, G]
            tot += f[upper].mean(axis=0).mean(axis=1).sum()
            tot_c += f[vs].mean(axis=0).mean(axis=1).sum()
            done += d
        flip[j], flip_c[j] = tot / n_draws, tot_c / n_draws
    return BestOfNResult(ns, flip, flip_c, used, int(n_draws), canonical)
