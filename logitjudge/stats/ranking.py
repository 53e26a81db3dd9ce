"""Rank stability: do the judge's rankings of one question's candidates survive a change of option order?

Input ``scores[item, ordering]`` (e.g. the expected score of each item under each ordering's prompt) and
``groups[item]`` (the question each candidate answers). Within each group the candidates are ranked under
every ordering. Groups with fewer than 2 candidates are left out.

* Kendall tau-b between the rankings of two orderings, mean over pairs of orderings per group, then over
  groups. Undefined where one ranking is all ties (left out of the mean).
* Pairwise top-1 disagreement (``flip_rate`` of :func:`rank_stability`): the probability that the best
  candidate differs between two orderings, averaged over *every pair* of orderings. Scores within ``tol`` of
  the maximum are tied, and a tied top is taken as chosen uniformly among the tied candidates, so the value of a
  pair is 1 - sum_c P_a(c) P_b(c) (exactly 0/1 without ties). This is not the study's top-1 flip.
* The study's top-1 flip (:func:`top1_flips`): the fraction of prompts whose top-1 candidate changes between
  the canonical ordering and another, per reading, ties counted explicitly; :func:`top1_change` compares FIXED
  with an aggregated strategy.
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
    canonical_index,
    check_confidence,
    check_n_boot,
    percentile_ci,
)
from .readings import check_reading, read_scores, tempered


def _canonical(canonical, option_orders, k: int) -> int:
    """The canonical ordering's row: as given, else the identity row of ``option_orders`` (else row 0)."""
    if canonical is None:
        canonical = 0 if option_orders is None else canonical_index(option_orders)
    if not 0 <= int(canonical) < k:
        raise StatsError(f"canonical={canonical} is not one of the {k} orderings")
    return int(canonical)


def _prepare(scores, groups, canonical, option_orders):
    s = as_array(scores, "scores", 2, "[items, orderings]")
    if not np.all(np.isfinite(s)):
        raise StatsError("scores contain NaN or inf; pass finite per-prompt scores")
    n_items, k = s.shape
    g = np.asarray(groups).astype(str)
    if g.shape != (n_items,):
        raise ShapeError(f"groups must give one label per item ({n_items}), got shape {g.shape}")
    if k < 2:
        raise InsufficientDataError("rank stability needs at least 2 orderings to compare, got 1")
    canonical = _canonical(canonical, option_orders, k)
    names, inv, sizes = np.unique(g, return_inverse=True, return_counts=True)
    keep = np.flatnonzero(sizes >= 2)
    if keep.size == 0:
        raise InsufficientDataError("no group has 2 or more candidates; rank stability needs grouped items "
                                    "(several answers to one question)")
    m = int(sizes[keep].max())
    idx = np.zeros((keep.size, m), dtype=np.int64)  # padding points at item 0 and is masked by `valid`
    valid = np.zeros((keep.size, m), dtype=bool)
    for row, j in enumerate(keep):
        members = np.flatnonzero(inv == j)
        valid[row, :members.size] = True
        idx[row, :members.size] = members
    by_group = np.moveaxis(s[idx], 2, 0)  # [orderings, groups, candidates]
    return by_group, valid, canonical, len(names)


def _top_probs(by_group: np.ndarray, valid: np.ndarray, tol: float) -> np.ndarray:
    """[..., groups, candidates]: probability each candidate is picked as best (uniform among ties)."""
    x = np.where(valid, by_group, -np.inf)
    top = (x >= x.max(axis=-1, keepdims=True) - tol) & valid
    return top / top.sum(axis=-1, keepdims=True)


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
    t = _top_probs(by_group, valid, tol)
    flip = 1.0 - np.einsum("agc,bgc->abg", t, t)  # [K, K, G]
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
            t = _top_probs(bg[None], chosen[:, None], tol)  # [draws, K, G, m]
            f = 1.0 - np.einsum("dagc,dbgc->abdg", t, t)
            tot += f[upper].mean(axis=0).mean(axis=1).sum()
            tot_c += f[vs].mean(axis=0).mean(axis=1).sum()
            done += d
        flip[j], flip_c[j] = tot / n_draws, tot_c / n_draws
    return BestOfNResult(ns, flip, flip_c, used, int(n_draws), canonical)


# ---- top-1 flips as the study counts them ------------------------------------------------------------------
def _group_rows(groups, n_items: int) -> list[np.ndarray]:
    g = np.asarray(groups).astype(str)
    if g.shape != (n_items,):
        raise ShapeError(f"groups must give one label per item ({n_items}), got shape {g.shape}")
    names, inv = np.unique(g, return_inverse=True)
    rows = [np.flatnonzero(inv.ravel() == j) for j in range(len(names))]
    rows = [r for r in rows if r.size >= 2]
    if not rows:
        raise InsufficientDataError("no group has 2 or more candidates; top-1 flips need grouped items "
                                    "(several candidates for one prompt)")
    return rows


def _top_sets(a: np.ndarray, b: np.ndarray, tol: float) -> tuple[float, float, float, bool]:
    """For one group's candidate scores under two readings/orderings: (changed for certain: the top sets are
    disjoint, changed possibly: not one identical untied top, changed with ties broken uniformly, tied)."""
    ta, tb = a >= a.max() - tol, b >= b.max() - tol
    pa, pb = ta / ta.sum(), tb / tb.sum()
    tied = bool(ta.sum() > 1 or tb.sum() > 1)
    certain = float(not np.any(ta & tb))
    possible = float(tied or not np.array_equal(ta, tb))
    return certain, possible, float(1.0 - pa @ pb), tied


def _dists(dists, values) -> tuple[np.ndarray, np.ndarray]:
    d, v = as_float(dists, "dists"), as_float(values, "values")
    if d.ndim != 2 or v.shape != d.shape[1:]:
        raise ShapeError(f"dists must be 2-D [rows, options] with one value per option, got shapes {d.shape} "
                         f"and {v.shape}")
    return d, v


def win_probabilities(dists, values) -> np.ndarray:
    """``[candidates]``: exact probability that each candidate is the top-1 when every candidate's score is one
    independent draw from ``dists[candidate, option]`` over ``values[option]``, ties at the top broken
    uniformly. P(j wins) = sum_v d_j(v) * integral_0^1 prod_{i != j} (P(X_i < v) + P(X_i = v) z) dz (the
    integral averages 1/(1 + number tied with j))."""
    d, v = _dists(dists, values)
    support, inv = np.unique(v, return_inverse=True)
    mass = np.zeros((d.shape[0], support.size))
    np.add.at(mass.T, inv.ravel(), d.T)  # [candidates, distinct values]
    below = np.cumsum(mass, axis=1) - mass  # P(X_i < v)
    m = d.shape[0]
    out = np.zeros(m)
    for j in range(m):
        poly = np.ones((support.size, 1))  # coefficients in z, per value v
        for i in range(m):
            if i != j:
                nxt = np.zeros((support.size, poly.shape[1] + 1))
                nxt[:, :-1] += poly * below[i][:, None]
                nxt[:, 1:] += poly * mass[i][:, None]
                poly = nxt
        integral = poly @ (1.0 / np.arange(1, poly.shape[1] + 1))
        out[j] = mass[j] @ integral
    return out


@dataclass(frozen=True)
class Top1FlipResult(Result):
    """The study's top-1 flip: the fraction of prompts (groups of candidates) whose top-1 candidate changes
    between the canonical ordering and another ordering, per other ordering (``per_ordering``) and averaged
    over them (``flip``, with a percentile bootstrap CI over groups).

    'greedy' / 'expected' readings (deterministic scores): ``flip`` counts ties at the top as broken
    uniformly (the expected fraction), ``flip_certain`` counts only groups whose top sets are disjoint (changed
    whatever the tie-break), ``flip_possible`` every group that is not one identical, untied top; ``tied`` is
    the fraction of (group, ordering) comparisons with a tie at the top on either side. 'sampled': ``flip`` is
    the exact probability that two sampling runs, one under each ordering, pick different top-1 candidates
    (answers drawn independently from the tempered distributions, ties broken uniformly); the certain/possible
    bounds do not apply (NaN). ``other`` lists the ordering indices compared with ``canonical``."""

    flip: float
    flip_ci_low: float
    flip_ci_high: float
    flip_certain: float
    flip_possible: float
    tied: float
    per_ordering: np.ndarray
    other: np.ndarray
    canonical: int
    n_groups: int
    reading: str
    temperature: float
    confidence_level: float


def top1_flips(probs, values, groups, *, reading: str = "greedy", temperature: float = 1.0,
               canonical: int | None = None, option_orders=None, tol: float = 1e-9, n_boot: int = 1000,
               confidence: float = 0.95, rng=None) -> Top1FlipResult:
    """Top-1 flips between the canonical ordering and every other one (see :class:`Top1FlipResult`).

    ``probs[item, ordering, option]`` canonical, ``values[option]``, ``groups[item]`` (the prompt each candidate
    answers; groups with one candidate are left out). ``canonical`` defaults to the identity row of
    ``option_orders`` (else row 0).
    """
    p = as_array(probs, "probs", 3, "[items, orderings, options]")
    reading = check_reading(reading)
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    n_items, k = p.shape[:2]
    if k < 2:
        raise InsufficientDataError("top-1 flips need at least 2 orderings to compare, got 1")
    canonical = _canonical(canonical, option_orders, k)
    rows = _group_rows(groups, n_items)
    other = np.asarray([j for j in range(k) if j != canonical])
    flip = np.zeros((len(rows), other.size))
    certain, possible, tied = np.zeros_like(flip), np.zeros_like(flip), np.zeros_like(flip)
    if reading == "sampled":
        q = tempered(p, temperature)
        for g, r in enumerate(rows):
            wc = win_probabilities(q[r, canonical], values)
            for j, o in enumerate(other):
                flip[g, j] = 1.0 - wc @ win_probabilities(q[r, o], values)
        certain[:] = possible[:] = np.nan
    else:
        s = read_scores(p, values, reading=reading)  # [items, orderings]
        for g, r in enumerate(rows):
            for j, o in enumerate(other):
                certain[g, j], possible[g, j], flip[g, j], tied[g, j] = _top_sets(s[r, canonical], s[r, o], tol)
    per_group = flip.mean(axis=1)
    lo = hi = float("nan")
    if n_boot and len(rows) >= 2:
        lo, hi = percentile_ci(bootstrap_weights(len(rows), n_boot, rng) @ per_group / len(rows), confidence)
    return Top1FlipResult(float(per_group.mean()), lo, hi, float(certain.mean()), float(possible.mean()),
                          float(tied.mean()) if reading != "sampled" else float("nan"), flip.mean(axis=0),
                          other, canonical, len(rows), reading, float(temperature), confidence)


@dataclass(frozen=True)
class Top1ChangeResult(Result):
    """Fraction of prompts (groups) whose top-1 candidate differs between two score vectors (e.g. FIXED and an
    aggregated strategy): ``changed`` with ties at the top broken uniformly, ``changed_certain`` (top sets
    disjoint), ``changed_possible`` (not one identical untied top), ``tied`` (a tie at the top on either side),
    with a percentile bootstrap CI over groups for ``changed``. ``reading`` names how both were read."""

    changed: float
    changed_ci_low: float
    changed_ci_high: float
    changed_certain: float
    changed_possible: float
    tied: float
    n_groups: int
    reading: str
    confidence_level: float


def top1_change(scores_a, scores_b, groups, *, reading: str, tol: float = 1e-9, n_boot: int = 1000,
                confidence: float = 0.95, rng=None) -> Top1ChangeResult:
    """Top-1 changes between two per-item score vectors (FIXED vs BALANCED / all-orders / RANDOM scores) over
    the groups of candidates; ``reading`` is recorded (the scores are already read)."""
    reading = check_reading(reading)
    a = as_float(scores_a, "scores_a")
    b = as_float(scores_b, "scores_b")
    if a.ndim != 1 or a.shape != b.shape or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ShapeError(f"scores_a and scores_b must be finite 1-D arrays of one length, got {a.shape}, {b.shape}")
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    rows = _group_rows(groups, a.size)
    res = np.asarray([_top_sets(a[r], b[r], tol) for r in rows], dtype=np.float64)  # [groups, 4]
    lo = hi = float("nan")
    if n_boot and len(rows) >= 2:
        lo, hi = percentile_ci(bootstrap_weights(len(rows), n_boot, rng) @ res[:, 2] / len(rows), confidence)
    return Top1ChangeResult(float(res[:, 2].mean()), lo, hi, float(res[:, 0].mean()), float(res[:, 1].mean()),
                            float(res[:, 3].mean()), len(rows), str(reading), confidence)


def mean_answer_distribution(dists, values, *, max_support: int = 100_000) -> tuple[np.ndarray, np.ndarray]:
    """Exact distribution of the mean of independent answers, one drawn from each row of
    ``dists[k, option]`` over ``values[option]``: (support, probabilities), by repeated convolution. Refused
    when the support exceeds ``max_support`` points (non-integer values can make it grow as n^K)."""
    d, v = _dists(dists, values)
    support, prob = np.zeros(1), np.ones(1)
    for row in d:
        s = (support[:, None] + v[None, :]).ravel()
        w = (prob[:, None] * row[None, :]).ravel()
        keep = w > 0  # impossible answers add no support
        support, inv = np.unique(np.round(s[keep], 9), return_inverse=True)
        prob = np.bincount(inv.ravel(), weights=w[keep])
        if support.size > max_support:
            raise StatsError(f"the mean of {len(d)} answers has more than {max_support:,} distinct values; its "
                             "exact distribution is too large (use integer-valued scores or fewer orders)")
    return support / len(d), prob


def _win_on_supports(parts) -> np.ndarray:
    """win_probabilities for candidates given as (support, probabilities) pairs on their own supports."""
    grid = np.unique(np.concatenate([s for s, _ in parts]))
    dists = np.zeros((len(parts), grid.size))
    for j, (s, w) in enumerate(parts):
        np.add.at(dists[j], np.searchsorted(grid, s), w)
    return win_probabilities(dists, grid)


def _rows(rows, name: str) -> np.ndarray:
    try:
        return np.atleast_1d(np.asarray(rows, dtype=np.int64))
    except (TypeError, ValueError) as e:
        raise StatsError(f"{name} must be ordering indices ({e})") from None


def top1_change_sampled(probs, values, groups, rows_a, rows_b, *, temperature: float = 1.0, n_boot: int = 1000,
                        confidence: float = 0.95, rng=None) -> Top1ChangeResult:
    """Exact probability that the top-1 candidate differs between two runs of a judge sampling at
    ``temperature``: run A scores every candidate by the mean of its answers under the orderings ``rows_a``
    (FIXED: ``[canonical]``), run B under ``rows_b`` (BALANCED: the balanced rows; all orders: every row),
    every answer drawn independently, ties at the top broken uniformly. Per group 1 - sum_c P_A(c) P_B(c),
    averaged over groups (``changed``; the certain/possible/tied counts do not apply and are NaN)."""
    p = as_array(probs, "probs", 3, "[items, orderings, options]")
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    ra, rb = _rows(rows_a, "rows_a"), _rows(rows_b, "rows_b")
    if ra.size == 0 or rb.size == 0 or min(ra.min(), rb.min()) < 0 or max(ra.max(), rb.max()) >= p.shape[1]:
        raise StatsError(f"rows_a and rows_b must be non-empty ordering indices below {p.shape[1]}")
    q = tempered(p, temperature)
    rows = _group_rows(groups, p.shape[0])
    changed = np.empty(len(rows))
    for g, r in enumerate(rows):
        wa = _win_on_supports([mean_answer_distribution(q[i, ra], values) for i in r])
        wb = _win_on_supports([mean_answer_distribution(q[i, rb], values) for i in r])
        changed[g] = 1.0 - wa @ wb
    lo = hi = float("nan")
    if n_boot and len(rows) >= 2:
        lo, hi = percentile_ci(bootstrap_weights(len(rows), n_boot, rng) @ changed / len(rows), confidence)
    nan = float("nan")
    return Top1ChangeResult(float(changed.mean()), lo, hi, nan, nan, nan, len(rows), "sampled", confidence)
