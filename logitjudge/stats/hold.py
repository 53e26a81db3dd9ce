"""Picks that survive the order: the probability that a group's pick holds under K random orders.

A *group* is one prompt's candidates (best-of-N: N answers to one question). The *pick* is the group's top set
(the candidates within ``tol`` of the best score, as in :mod:`.top1`) under the order-debiased scores: each
candidate's mean score over the table's orders (BALANCED / all orders / the per-item random pool). A person who
scores the group with K random orders instead picks the top set of the K-order means. **The hold probability**
at K is the probability, over the draw of those K orders, that this top set equals the pick: a tie that stays the
same tie holds, anything else (a different winner, a tie broken or formed) does not.

How the K orders are drawn (``design``), each uniform over the group's pool rows, with replacement (as the
study's RANDOM draws K variants independently):

* ``independent``: every candidate draws its own K rows (``random:K`` per item: the pointwise run of
  best-of-N, each candidate an item with its own orders). Exact: each candidate's K-order mean has the
  distribution of a sum of K iid draws from its row scores (a convolution, at most C(R+K-1, K) values for R
  rows), and P(top set = T) = sum_v prod_{j in T} P(X_j = v) prod_{j not in T} P(X_j < v) over the common grid
  of values (values within ``tol`` are one value). Monte-Carlo with its standard error where a convolution's
  support passes ``max_outcomes``.
* ``shared``: one draw of K rows for the whole group (a listwise prompt shows every candidate in one order;
  shared orders). Exact by enumerating the C(R+K-1, K) multisets of rows with their multinomial probabilities
  when they are at most ``max_outcomes``, else Monte-Carlo.

:func:`pairwise_hold` is the same for a pairwise group: a K-order run shows each pair in K orientations drawn
uniformly from its two (independently per pair), and ranks by Bradley-Terry on the mean verdicts; exact over the
(K+1)^pairs outcomes (binomial counts of orientation 0) when they are at most ``max_outcomes``, else
Monte-Carlo. :func:`leaderboard` aggregates groups by system.

Everything is 0-based here (``*_index``); the report numbers candidates, systems and K from 1.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from ._result import (
    InsufficientDataError,
    Result,
    ShapeError,
    StatsError,
    as_float,
    as_rng,
    bootstrap_indices,
    check_choice,
    check_confidence,
    check_n_boot,
    percentile_ci,
)
from .pairwise import bradley_terry
from .top1 import top_sets

DESIGNS = ("independent", "shared")
METHODS = ("auto", "exact", "mc")


@dataclass(frozen=True)
class HoldResult(Result):
    """Hold probabilities of one group's pick (module doc). ``ks[i]`` orders per run, ``hold[i]`` the probability
    that a K-order run's top set equals ``pick_index`` (the debiased top set, 0-based candidate indices),
    ``hold_se[i]`` its Monte-Carlo standard error (0 where ``exact[i]``), ``outcomes[i]`` the outcomes enumerated
    (exact) or the draws (Monte-Carlo). ``min_k``: the smallest K in ``ks`` whose hold reaches ``stability``
    (None: not within the budget; a Monte-Carlo hold is compared by its estimate)."""

    ks: np.ndarray
    hold: np.ndarray
    hold_se: np.ndarray
    exact: np.ndarray
    outcomes: np.ndarray
    pick_index: np.ndarray
    debiased: np.ndarray
    min_k: int | None
    stability: float
    design: str
    n_rows: int


def check_stability(stability: float) -> float:
    s = float(stability)
    if not 0.0 < s <= 1.0:
        raise StatsError(f"stability must be a probability in (0, 1] (e.g. 0.95), got {stability!r}")
    return s


def _ks(ks, budget: int) -> np.ndarray:
    k = np.arange(1, budget + 1) if ks is None else np.atleast_1d(np.asarray(ks))
    if k.size == 0 or not np.issubdtype(k.dtype, np.integer) or k.min() < 1:
        raise StatsError(f"ks must be positive integers (orders per run), got {np.asarray(ks).tolist()}")
    return k.astype(np.int64)


def _check_args(method: str, max_outcomes: int, n_draws: int) -> None:
    check_choice("method", method, METHODS)
    if int(max_outcomes) != max_outcomes or max_outcomes < 1 or int(n_draws) != n_draws or n_draws < 2:
        raise StatsError(f"max_outcomes must be a positive integer and n_draws an integer >= 2, got "
                         f"{max_outcomes!r}, {n_draws!r}")


def _reference(debiased: np.ndarray, reference, tol: float) -> np.ndarray:
    if reference is None:
        return top_sets(debiased, True, tol)
    ref = np.zeros(debiased.size, dtype=bool)
    idx = np.atleast_1d(np.asarray(reference, dtype=np.int64))
    if idx.size == 0 or idx.min() < 0 or idx.max() >= debiased.size:
        raise StatsError(f"reference must be candidate indices below {debiased.size}, got {idx.tolist()}")
    ref[idx] = True
    return ref


def _min_k(ks: np.ndarray, hold: np.ndarray, stability: float) -> int | None:
    ok = np.flatnonzero(hold >= stability - 1e-12)
    return int(ks[ok[0]]) if ok.size else None


def _mc(samples: np.ndarray, ref: np.ndarray, tol: float) -> tuple[float, float]:
    """(hold, SE) from score vectors ``samples[n, m]``: the share whose top set equals ``ref``."""
    same = np.all(top_sets(samples, True, tol) == ref, axis=-1).astype(np.float64)
    n = same.size
    return float(same.mean()), float(same.std(ddof=1) / math.sqrt(n))


# ---- independent draws per candidate ------------------------------------------------------------------------
def _mean_distribution(x: np.ndarray, k: int, max_support: int):
    """(values, probs) of the mean of ``k`` iid uniform draws from ``x`` (exact convolution; float noise of the
    sums merged at 1e-10), or None when the support passes ``max_support``."""
    base_v, inv = np.unique(np.round(x, 12), return_inverse=True)
    base_p = np.bincount(inv.ravel(), minlength=base_v.size) / x.size
    v, p = np.zeros(1), np.ones(1)
    for _ in range(k):
        s = (v[:, None] + base_v[None, :]).ravel()
        w = (p[:, None] * base_p[None, :]).ravel()
        v, inv = np.unique(np.round(s, 10), return_inverse=True)
        if v.size > max_support:
            return None
        p = np.bincount(inv.ravel(), weights=w, minlength=v.size)
    return v / k, p


def _grid_ids(values: np.ndarray, tol: float) -> np.ndarray:
    """Cluster ids of ``values`` (sorted order kept): a new cluster where the gap to the previous passes tol."""
    order = np.argsort(values, kind="stable")
    gaps = np.diff(values[order]) > tol
    ids = np.empty(values.size, dtype=np.int64)
    ids[order] = np.r_[0, np.cumsum(gaps)]
    return ids


def _independent_exact(dists: list, ref: np.ndarray, tol: float) -> float:
    """P(top set == ref) for independent candidates with discrete score distributions (module doc)."""
    ids = _grid_ids(np.concatenate([v for v, _ in dists]), tol)
    n_grid = int(ids.max()) + 1
    mass = np.zeros((len(dists), n_grid))
    start = 0
    for j, (v, p) in enumerate(dists):
        np.add.at(mass[j], ids[start:start + v.size], p)
        start += v.size
    below = np.cumsum(mass, axis=1) - mass
    terms = np.where(ref[:, None], mass, below)
    return float(np.clip(np.prod(terms, axis=0).sum(), 0.0, 1.0))


def sample_scores(scores, *, k: int, n: int, design: str = "independent", rng=None) -> np.ndarray:
    """``[n, candidates]``: the K-order mean scores of ``n`` random runs of one group whose pool rows score
    ``scores[row, candidate]`` (``design`` as in the module doc; rows uniform with replacement)."""
    s = as_float(scores, "scores")
    gen = as_rng(rng)
    r, m = s.shape
    if check_choice("design", design, DESIGNS) == "shared":
        rows = gen.integers(0, r, size=(n, k))
        return s[rows].mean(axis=1)
    rows = gen.integers(0, r, size=(n, k, m))  # each candidate its own K rows
    return s[rows, np.arange(m)[None, None, :]].mean(axis=1)


def _shared_exact(s: np.ndarray, k: int, ref: np.ndarray, tol: float, chunk: int = 50_000) -> float:
    """P(top set == ref) over every multiset of ``k`` of the ``R`` rows, each with its multinomial probability."""
    r = s.shape[0]
    log_norm = math.lgamma(k + 1) - k * math.log(r)
    lg = np.asarray([math.lgamma(c + 1) for c in range(k + 1)])
    total = 0.0
    it = itertools.combinations_with_replacement(range(r), k)
    while True:
        block = np.asarray(list(itertools.islice(it, chunk)), dtype=np.int64)
        if block.size == 0:
            return float(np.clip(total, 0.0, 1.0))
        counts = np.stack([np.bincount(b, minlength=r) for b in block])
        logp = log_norm - lg[counts].sum(axis=1)
        same = np.all(top_sets(s[block].mean(axis=1), True, tol) == ref, axis=-1)
        total += float(np.exp(logp)[same].sum())


def hold_probability(scores, *, ks=None, design: str = "independent", reference=None, stability: float = 0.95,
                     method: str = "auto", tol: float = 1e-9, max_outcomes: int = 1_000_000,
                     n_draws: int = 20_000, rng=None) -> HoldResult:
    """Hold probability of one group's pick for K = ``ks`` orders per run (default 1..the number of rows).

    ``scores[row, candidate]``: every candidate's score under each pool row (one reading: expected score,
    answered label's value, a listwise answer weight); the pick is the top set of the row means unless
    ``reference`` (candidate indices) is given. ``method``: 'exact' (refused where the outcomes pass
    ``max_outcomes``), 'mc' (``n_draws`` draws with ``rng``) or 'auto' (exact where it fits)."""
    s = as_float(scores, "scores")
    if s.ndim != 2 or s.shape[0] < 1 or s.shape[1] < 2 or not np.all(np.isfinite(s)):
        raise ShapeError(f"scores must be finite [rows, candidates] with >= 2 candidates, got shape {s.shape}")
    design = check_choice("design", design, DESIGNS)
    _check_args(method, max_outcomes, n_draws)
    stability = check_stability(stability)
    ks = _ks(ks, s.shape[0])
    debiased = s.mean(axis=0)
    ref = _reference(debiased, reference, tol)
    gen = as_rng(rng)
    r = s.shape[0]
    hold, se, exact, outcomes = (np.zeros(ks.size) for _ in range(4))
    for i, k in enumerate(int(x) for x in ks):
        value = None
        if method != "mc":
            if design == "shared":
                count = math.comb(r + k - 1, k)
                if count <= max_outcomes:
                    value, outcomes[i] = _shared_exact(s, k, ref, tol), count
            else:
                dists = [_mean_distribution(s[:, j], k, max_outcomes) for j in range(s.shape[1])]
                if all(d is not None for d in dists):
                    value, outcomes[i] = _independent_exact(dists, ref, tol), sum(d[0].size for d in dists)
            if value is None and method == "exact":
                raise StatsError(f"K={k}: more than max_outcomes={max_outcomes} outcomes to enumerate; use "
                                 f"method='auto' or 'mc'")
        if value is not None:
            hold[i], exact[i] = value, 1
        else:
            hold[i], se[i] = _mc(sample_scores(s, k=k, n=int(n_draws), design=design, rng=gen), ref, tol)
            outcomes[i] = n_draws
    return HoldResult(ks, hold, se, exact.astype(bool), outcomes.astype(np.int64), np.flatnonzero(ref), debiased,
                      _min_k(ks, hold, stability), stability, design, r)


# ---- pairwise: Bradley-Terry on K orientations per pair ------------------------------------------------------
def _pair_inputs(verdicts, pairs, n_candidates):
    v = as_float(verdicts, "verdicts")
    if v.ndim != 3 or v.shape[1] != 2 or v.shape[2] not in (2, 3):
        raise ShapeError(f"verdicts must be [pairs, 2 orientations, 2 or 3 verdicts], got {v.shape}")
    if v.shape[2] == 2:
        v = np.concatenate([v, np.zeros(v.shape[:2] + (1,))], axis=2)
    ij = np.asarray(pairs, dtype=np.int64)
    m = int(n_candidates)
    if ij.shape != (v.shape[0], 2) or ij.min() < 0 or ij.max() >= m or np.any(ij[:, 0] == ij[:, 1]) or m < 2:
        raise ShapeError(f"pairs must be [pairs, 2] distinct candidate indices below n_candidates={m}")
    return v, ij, m


def bt_strengths(mixed: np.ndarray, pairs: np.ndarray, m: int, prior: float) -> np.ndarray:
    """Bradley-Terry log-strengths of ``m`` candidates from verdicts ``mixed[pair, v]`` (v: first of the pair
    preferred, second, tie counted half each), :func:`~logitjudge.stats.bradley_terry` with ``prior``."""
    wins = np.zeros((m, m))
    np.add.at(wins, (pairs[:, 0], pairs[:, 1]), mixed[:, 0] + mixed[:, 2] / 2)
    np.add.at(wins, (pairs[:, 1], pairs[:, 0]), mixed[:, 1] + mixed[:, 2] / 2)
    res = bradley_terry(wins, prior=prior)
    if not res.defined:
        raise StatsError(res.reason)
    return res.strength


def sample_pairwise(verdicts, pairs, n_candidates: int, *, k: int, n: int, prior: float = 0.1, rng=None
                    ) -> np.ndarray:
    """``[n, candidates]`` Bradley-Terry strengths of ``n`` random K-orientation runs (module doc)."""
    v, ij, m = _pair_inputs(verdicts, pairs, n_candidates)
    c = as_rng(rng).binomial(k, 0.5, size=(n, len(ij)))  # draws showing the pair in orientation 0
    return np.stack([bt_strengths((ci[:, None] * v[:, 0] + (k - ci)[:, None] * v[:, 1]) / k, ij, m, prior)
                     for ci in c])


def pairwise_hold(verdicts, pairs, n_candidates: int, *, ks=(1,), prior: float = 0.1, reference=None,
                  stability: float = 0.95, method: str = "auto", tol: float = 1e-9, max_outcomes: int = 4096,
                  n_draws: int = 400, rng=None) -> HoldResult:
    """Hold probability of a pairwise group's Bradley-Terry pick (module doc). ``verdicts[pair, orientation, v]``
    in canonical terms (v = 0: ``pairs[p, 0]`` preferred, 1: ``pairs[p, 1]``, 2: tie; orientation 0 shows
    ``pairs[p, 0]`` first), ``pairs`` 0-based candidate indices; the pick is the top set of Bradley-Terry on
    the mean of both orientations (the order-debiased preferences). ``max_outcomes`` bounds the Bradley-Terry
    fits of the exact path."""
    v, ij, m = _pair_inputs(verdicts, pairs, n_candidates)
    _check_args(method, max_outcomes, n_draws)
    stability = check_stability(stability)
    ks = _ks(ks, 2)
    debiased = bt_strengths(v.mean(axis=1), ij, m, prior)
    ref = _reference(debiased, reference, tol)
    gen = as_rng(rng)
    hold, se, exact, outcomes = (np.zeros(ks.size) for _ in range(4))
    for i, k in enumerate(int(x) for x in ks):
        count = (k + 1) ** len(ij)
        if method == "exact" and count > max_outcomes:
            raise StatsError(f"K={k}: {count} outcomes pass max_outcomes={max_outcomes}; use method='auto' or 'mc'")
        if method != "mc" and count <= max_outcomes:
            total = 0.0
            for c in itertools.product(range(k + 1), repeat=len(ij)):
                ca = np.asarray(c, dtype=np.float64)
                p = math.prod(math.comb(k, x) for x in c) / 2.0 ** (k * len(ij))
                s = bt_strengths((ca[:, None] * v[:, 0] + (k - ca)[:, None] * v[:, 1]) / k, ij, m, prior)
                total += p * bool(np.all(top_sets(s, True, tol) == ref))
            hold[i], exact[i], outcomes[i] = min(total, 1.0), 1, count
        else:
            hold[i], se[i] = _mc(sample_pairwise(v, ij, m, k=k, n=int(n_draws), prior=prior, rng=gen), ref, tol)
            outcomes[i] = n_draws
    return HoldResult(ks, hold, se, exact.astype(bool), outcomes.astype(np.int64), np.flatnonzero(ref), debiased,
                      _min_k(ks, hold, stability), stability, "pairwise", 2)


# ---- leaderboard --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LeaderboardResult(Result):
    """Systems over prompts (groups). ``score[s]``: the mean over the prompts system s answers of its debiased
    score, with a percentile bootstrap CI over prompts (``score_ci_low/high``); ``win_rate[s]``: the share of
    those prompts whose pick it is (a pick tied between t candidates counts 1/t to each), with its CI;
    ``n_prompts[s]``. ``top_index``: the systems tied at the top of the mean-score leaderboard. ``top_change``:
    the probability that the top set of the leaderboard built from a run with other random orders (the
    ``replicates``) differs from ``top_index``, a Monte-Carlo mean over ``n_draws`` runs with its standard error
    ``top_change_se`` (NaN without replicates)."""

    score: np.ndarray
    score_ci_low: np.ndarray
    score_ci_high: np.ndarray
    win_rate: np.ndarray
    win_rate_ci_low: np.ndarray
    win_rate_ci_high: np.ndarray
    n_prompts: np.ndarray
    top_index: np.ndarray
    top_change: float
    top_change_se: float
    n_draws: int
    n_groups: int
    confidence_level: float


def _board(x: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """(mean score per system [..., S], win share per system [..., S]) of ``x[..., G, S]`` (NaN: not in that
    prompt)."""
    present = np.isfinite(x)
    n = present.sum(axis=-2)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(present, x, 0).sum(axis=-2) / n
        top = top_sets(np.where(present, x, -np.inf), present, tol)
        win = (top / top.sum(axis=-1, keepdims=True)).sum(axis=-2) / n
    return mean, win


def leaderboard(debiased, *, replicates=None, tol: float = 1e-9, n_boot: int = 1000, confidence: float = 0.95,
                rng=None) -> LeaderboardResult:
    """Leaderboard of systems from ``debiased[group, system]`` (a candidate's order-debiased score; NaN where the
    system has no candidate for that prompt) and, optionally, ``replicates[draw, group, system]``: the scores
    of random-order runs (NaN at the same places) for the top-change probability (see
    :class:`LeaderboardResult`). CIs: percentile bootstrap over prompts with ``rng``."""
    x = as_float(debiased, "debiased")
    if x.ndim != 2 or x.shape[1] < 2:
        raise ShapeError(f"debiased must be [groups, systems] with >= 2 systems, got shape {x.shape}")
    if x.shape[0] < 1 or np.any(np.isfinite(x).sum(axis=0) == 0):
        raise InsufficientDataError("every system needs a candidate in at least one group")
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    gen = as_rng(rng)
    mean, win = _board(x, tol)
    s = x.shape[1]
    lo = hi = wlo = whi = np.full(s, np.nan)
    if n_boot and x.shape[0] >= 2:
        boot = x[bootstrap_indices(x.shape[0], n_boot, gen)]  # [B, G, S]
        bm, bw = _board(boot, tol)
        lo, hi = percentile_ci(bm, confidence)
        wlo, whi = percentile_ci(bw, confidence)
    top = top_sets(mean, True, tol)
    change = change_se = float("nan")
    n_draws = 0
    if replicates is not None:
        rep = as_float(replicates, "replicates")
        if rep.ndim != 3 or rep.shape[1:] != x.shape or np.any(np.isfinite(rep) != np.isfinite(x)[None]):
            raise ShapeError(f"replicates must be [draws, {x.shape[0]}, {x.shape[1]}] with NaN where debiased has "
                             f"NaN, got {rep.shape}")
        rm, _ = _board(rep, tol)
        changed = np.any(top_sets(rm, True, tol) != top, axis=-1).astype(np.float64)
        n_draws = changed.size
        change = float(changed.mean())
        change_se = float(changed.std(ddof=1) / math.sqrt(n_draws)) if n_draws > 1 else float("nan")
    return LeaderboardResult(mean, np.asarray(lo), np.asarray(hi), win, np.asarray(wlo), np.asarray(whi),
                             np.isfinite(x).sum(axis=0), np.flatnonzero(top), change, change_se, n_draws,
                             x.shape[0], confidence)
