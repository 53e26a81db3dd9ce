"""What every judging paradigm shares: the position bias of the answered *slot* with the cluster (the thing
that is reordered: an item, a pair, a group) as the unit, and the stability of each group's winning set under
reordering.

A slot is a place an answer points at: the position of a rubric option (pointwise), the label "A" or "B"
(pairwise), a letter of a candidate list (listwise). People read slots from 1 (slot 1 = "A" = the first
shown); arrays index them from 0.

Position test of the answered slot (:func:`slot_chisquare`)
-----------------------------------------------------------
Input: ``answered[prompt, slot]``, the weight of the slot each prompt answered (one-hot; the greedy reading
splits an exact tie at the top equally; a row sums to less than 1 when the prompt answered no slot, e.g. the tie
label of a pairwise template) or ``answered[prompt] = slot_index`` with ``n_slots``; ``clusters[prompt]``, the
unit whose prompts are correlated. With N the answered weight, p_s the pooled share of slot s and k slots:

* ``statistic``, ``statistic_corrected``, ``pvalue`` (the verdict's p), ``design_effect``,
  ``pvalue_per_prompt`` (every prompt independent; printed for comparison, never the verdict): Pearson's X² of
  the pooled shares against uniform and its Rao-Scott second-order correction with the clusters as the unit,
  referred to F(d, d (C - 1)) - :func:`logitjudge.stats.rao_scott_chisquare`, whose module
  (:mod:`logitjudge.stats.clustered`) defines them. ``dof`` here is the corrected d (``dof_corrected`` of the
  :class:`~logitjudge.stats.RaoScottResult`), ``n_clusters`` is C.
* ``cramers_v``: the bias-corrected Cramér's V of :func:`logitjudge.stats.cramers_v_corrected`,
  sqrt(max(0, X^2 - (k-1) deff) / ((k-1) (N - deff))): near 0 for a judge without position bias (its interval
  can reach 0) and 1 when every prompt answered one slot. ``cramers_v_uncorrected`` = sqrt(X^2 / (N (k-1))).
  Intervals: percentile bootstrap over clusters (the correction recomputed on every resample).
* ``label``: :func:`logitjudge.stats.position_label` on the shares, their cluster-bootstrap lower bounds and
  the cluster-robust p.

Top-1 stability (:func:`top1_stability`)
----------------------------------------
Input per group ``scores[ordering, candidate]``: the judge's score of each candidate (canonical candidate
order) when the group is shown in that ordering. The winning set of an ordering is every candidate within
``tol`` of the best. A **flip** is a change of the winning set between two orderings: a tie that stays the same
tie is no flip, so a group whose candidates all tie contributes 0. ``flip_certain`` (disjoint winning sets) and
``flip_possible`` (anything but the same single winner) bound what a tie-break could make of it;
``flip_tie_broken`` breaks ties uniformly and independently (1 - u_a . u_b); ``tied`` is the share of compared
orderings with a tie at the top on either side. Per group the mean over every unordered pair of orderings (or
over (canonical, other) pairs with ``canonical``), then the mean over groups, with a bootstrap CI over groups.
With ``draws=True`` the orderings are independent random draws (per-item random orders; pairwise single-order
runs): the flip is then a Monte-Carlo estimate of the probability that two random orderings give different
winning sets, and ``flip_se`` is its delete-one-draw jackknife standard error (NaN for a fixed design, whose
pairs of orderings are enumerated exactly).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._result import (
    InsufficientDataError,
    Result,
    ShapeError,
    StatsError,
    as_float,
    as_rng,
    bootstrap_weights,
    check_confidence,
    check_n_boot,
    percentile_ci,
)
from .clustered import bootstrap_v_and_shares, cramers_v_corrected, cramers_v_gof, rao_scott_chisquare
from .position import position_label
from .readings import check_reading


# ---- the slot test on answered prompts ----------------------------------------------------------------------
@dataclass(frozen=True)
class SlotTestResult(Result):
    """Position bias of the answered slot with clusters as the unit (definitions in the module doc).

    ``counts[slot]`` / ``shares[slot]``: answered weight and share of each slot (slot 1 first), with percentile
    bootstrap CIs over clusters; ``label`` / ``label_reason`` as in the rubric position test;
    ``favoured_index`` (0-based: slot 1 is index 0): the slots whose share's lower bound lies above 1/k
    (without a bootstrap, the largest share). ``reading`` names how the prompts' answers were read; ``unit``
    what a cluster is.
    """

    statistic: float
    statistic_corrected: float
    pvalue: float
    dof: float
    design_effect: float
    pvalue_per_prompt: float
    cramers_v: float
    cramers_v_ci_low: float
    cramers_v_ci_high: float
    cramers_v_uncorrected: float
    counts: np.ndarray
    shares: np.ndarray
    share_ci_low: np.ndarray
    share_ci_high: np.ndarray
    n: float
    n_prompts: int
    n_clusters: int
    n_slots: int
    label: str
    label_reason: str
    favoured_index: tuple
    reading: str
    unit: str
    alpha: float
    confidence_level: float


def _answered(answered, n_slots) -> np.ndarray:
    a = np.asarray(answered)
    if a.ndim == 1:
        if n_slots is None or int(n_slots) != n_slots or n_slots < 2:
            raise StatsError("answered slot indices (1-D) need n_slots >= 2 (how many slots each prompt had)")
        if not np.issubdtype(a.dtype, np.integer) or a.min(initial=0) < 0 or a.max(initial=0) >= n_slots:
            raise StatsError(f"answered slot indices must be integers in [0, {n_slots}), got {a[:5].tolist()}")
        return np.eye(int(n_slots))[a]
    w = as_float(a, "answered")
    if w.ndim != 2 or w.shape[1] < 2:
        raise ShapeError(f"answered must be [prompts, slots] weights (>= 2 slots) or 1-D slot indices, "
                         f"got shape {w.shape}")
    if n_slots is not None and w.shape[1] != n_slots:
        raise ShapeError(f"answered has {w.shape[1]} slots, n_slots={n_slots}")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or np.any(w.sum(axis=1) > 1 + 1e-9):
        raise StatsError("answered weights must be finite, non-negative and sum to at most 1 per prompt")
    return w


def slot_chisquare(answered, clusters, *, n_slots: int | None = None, reading: str = "greedy",
                   unit: str = "item", alpha: float = 0.05, n_boot: int = 1000, confidence: float = 0.95,
                   rng=None) -> SlotTestResult:
    """Cluster-robust test that the answered slots are uniform, with the bias-corrected Cramér's V and
    bootstrap CIs over clusters (see the module doc). ``reading`` ('greedy' or 'sampled': one seeded run of a
    sampling judge) and ``unit`` are recorded."""
    w = _answered(answered, n_slots)
    cl = np.asarray(clusters).astype(str)
    if cl.shape != (w.shape[0],):
        raise ShapeError(f"clusters must give one id per prompt ({w.shape[0]}), got shape {cl.shape}")
    reading = check_reading(reading, allow_draw=True)
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    if not 0 < float(alpha) < 1:
        raise StatsError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    _, inv = np.unique(cl, return_inverse=True)
    y = np.zeros((inv.max() + 1, w.shape[1]))
    np.add.at(y, inv.ravel(), w)
    rs = rao_scott_chisquare(y)
    k = w.shape[1]
    counts = y.sum(axis=0)
    shares = counts / rs.n
    v = float(cramers_v_corrected(rs.statistic, rs.n, k, design_effect=rs.design_effect))
    v_raw = float(cramers_v_gof(rs.statistic, rs.n, k))
    v_lo, v_hi, s_lo, s_hi = bootstrap_v_and_shares(y, n_boot, confidence, as_rng(rng))
    label, why = position_label(shares, s_lo, rs.pvalue, float(alpha), counts=counts)
    fav = ()
    if label != "none":  # the slots the label rests on: CI above 1/k (without a bootstrap, the largest share)
        fav_mask = s_lo > 1.0 / k if np.all(np.isfinite(s_lo)) else shares >= shares.max()
        fav = tuple(int(j) for j in np.flatnonzero(fav_mask))
    return SlotTestResult(rs.statistic, rs.statistic_corrected, rs.pvalue, rs.dof_corrected, rs.design_effect,
                          rs.pvalue_per_prompt, v, v_lo, v_hi, v_raw, counts, shares, s_lo, s_hi, rs.n,
                          w.shape[0], y.shape[0], k, label, why, fav, reading, str(unit), float(alpha), confidence)


# ---- top-1 winning sets -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Top1StabilityResult(Result):
    """How often a group's winning set changes between orderings (definitions in the module doc): ``flip``
    with a percentile bootstrap CI over groups, its bounds ``flip_certain`` <= ``flip`` <= ``flip_possible``,
    ``flip_tie_broken`` and ``tied``; ``per_group`` flips; ``pairs`` 'all' or 'vs canonical'; ``flip_se`` the
    Monte-Carlo standard error when the orderings are random draws (else NaN). ``reading`` names how the
    scores were read."""

    flip: float
    flip_ci_low: float
    flip_ci_high: float
    flip_se: float
    flip_certain: float
    flip_possible: float
    flip_tie_broken: float
    tied: float
    per_group: np.ndarray
    n_groups: int
    n_groups_skipped: int
    pairs: str
    reading: str
    confidence_level: float


def group_score_list(scores, name: str = "scores") -> list[np.ndarray]:
    """A [G, K, m] array or a sequence of G arrays [K_g, m_g] as a list of finite 2-D float arrays."""
    if isinstance(scores, np.ndarray) and scores.dtype != object:
        a = as_float(scores, name)
        if a.ndim != 3:
            raise ShapeError(f"{name} must be [groups, orderings, candidates] or a list of [orderings, "
                             f"candidates] arrays, got shape {a.shape}")
        out = list(a)
    else:
        try:
            out = [as_float(s, name) for s in scores]
        except TypeError:
            raise StatsError(f"{name} must be a sequence of [orderings, candidates] arrays") from None
    if not out:
        raise InsufficientDataError(f"{name} has no groups")
    for s in out:
        if s.ndim != 2 or s.shape[0] < 1 or not np.all(np.isfinite(s)):
            raise ShapeError(f"every group of {name} must be a finite [orderings, candidates] array, got "
                             f"shape {s.shape}")
    return out


def winning_sets(scores, *, tol: float = 1e-9) -> np.ndarray:
    """``[..., candidate]`` True for every candidate within ``tol`` of the best score along the last axis."""
    s = as_float(scores, "scores")
    if s.ndim < 1 or s.shape[-1] == 0 or not np.all(np.isfinite(s)):
        raise ShapeError(f"scores must be finite with at least one candidate, got shape {s.shape}")
    return s >= s.max(axis=-1, keepdims=True) - tol


def _jackknife_se(mats: list[np.ndarray]) -> float:
    """Delete-one-draw jackknife SE of mean_g mean_{a<b} M_g[a, b] (symmetric 0/1 flip matrices, K draws)."""
    k = mats[0].shape[0]
    if k < 3:
        return float("nan")
    m = np.stack(mats)  # [G, K, K]
    total = m.sum(axis=(1, 2)) / 2  # per group: flips over all pairs
    loo = ((total[:, None] - m.sum(axis=2)) / ((k - 1) * (k - 2) / 2)).mean(axis=0)  # [K]
    return float(np.sqrt((k - 1) / k * ((loo - loo.mean()) ** 2).sum()))


def top1_stability(scores, *, canonical: int | None = None, draws: bool = False, reading: str = "greedy",
                   tol: float = 1e-9, n_boot: int = 1000, confidence: float = 0.95, rng=None
                   ) -> Top1StabilityResult:
    """Winning-set flips between orderings per group ``scores[g][ordering, candidate]`` (see the module doc).
    Groups with one candidate are skipped; every group needs at least 2 orderings (with ``draws``, the same
    number of draws)."""
    groups = group_score_list(scores)
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    reading = check_reading(reading)
    if draws and canonical is not None:
        raise StatsError("random draws of orderings have no canonical one: pass canonical=None with draws=True")
    rows, mats = [], []
    skipped = 0
    for s in groups:
        k, m = s.shape
        if m < 2:
            skipped += 1
            continue
        if k < 2:
            raise InsufficientDataError(f"top-1 stability needs at least 2 orderings per group, got {k}")
        if canonical is not None and not 0 <= int(canonical) < k:
            raise StatsError(f"canonical={canonical} is not one of the group's {k} orderings")
        win = winning_sets(s, tol=tol)
        a, b = np.triu_indices(k, 1)
        if canonical is not None:
            b = np.asarray([j for j in range(k) if j != int(canonical)])
            a = np.full(b.size, int(canonical))
        wa, wb = win[a], win[b]
        ua, ub = wa / wa.sum(axis=1, keepdims=True), wb / wb.sum(axis=1, keepdims=True)
        single_same = (wa.sum(axis=1) == 1) & np.all(wa == wb, axis=1)
        rows.append([np.mean(np.any(wa != wb, axis=1)), np.mean(~np.any(wa & wb, axis=1)),
                     np.mean(~single_same), np.mean(1.0 - (ua * ub).sum(axis=1)),
                     np.mean((wa.sum(axis=1) > 1) | (wb.sum(axis=1) > 1))])
        if draws:
            mats.append(np.any(win[:, None] != win[None, :], axis=-1).astype(np.float64))
    if not rows:
        raise InsufficientDataError("no group has 2 or more candidates; top-1 stability needs groups of "
                                    "candidates")
    if draws and len({m.shape for m in mats}) != 1:
        raise ShapeError("with draws=True every group needs the same number of draws (the jackknife deletes "
                         "one draw from every group)")
    r = np.asarray(rows)
    lo = hi = float("nan")
    if n_boot and len(r) >= 2:
        lo, hi = percentile_ci(bootstrap_weights(len(r), n_boot, rng) @ r[:, 0] / len(r), confidence)
    se = _jackknife_se(mats) if draws else float("nan")
    return Top1StabilityResult(float(r[:, 0].mean()), lo, hi, se, float(r[:, 1].mean()), float(r[:, 2].mean()),
                               float(r[:, 3].mean()), float(r[:, 4].mean()), r[:, 0], len(r), skipped,
                               "all" if canonical is None else "vs canonical", reading, confidence)
