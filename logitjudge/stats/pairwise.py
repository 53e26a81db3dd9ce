"""Pairwise judging: swap consistency, first-slot preference, the order-debiased preference and Bradley-Terry
rankings, from the exact label probabilities of every pair shown in both orders.

Arrays (the contract the engine fills; see also :mod:`logitjudge.stats.paradigms`):

* ``pair_probs[pair, order, label]`` float, shape (P, 2, L), L = 2 (labels "A", "B") or 3 ("A", "B", tie):
  the exact probability of each label, renormalised over the L labels. Order 0 shows ``pairs[pair, 0]``
  first (as "A") and ``pairs[pair, 1]`` second ("B"); order 1 shows them swapped.
* ``pairs[pair] = (i, j)`` int, shape (P, 2): item indices (rows of the items shared by every paradigm), i != j,
  both of one group, every unordered pair at most once.
* ``groups[item]``: the group label of every item (the candidates of a group are its items, in item order).

Readings of one prompt's answer: ``greedy`` (the argmax label; an exact tie at the top is split equally between
the tied labels) and ``sampled`` (a judge sampling at ``temperature``: the tempered label distribution; T = 1 is
the exact distribution). Verdicts are read in canonical terms: ``verdict[pair, order, v]`` with v = 0 for
``pairs[pair, 0]`` preferred, 1 for ``pairs[pair, 1]``, 2 for a tie (0 without a tie label).

* **Swap consistency** (per pair, mean over pairs): greedy: 1 when the winning verdict set (the argmax
  verdicts) is the same under both orders, else 0 (a tie that stays the same tie is consistent); sampled:
  sum_v P(v | order 0) P(v | order 1), the exact probability that two sampled verdicts, one per order, agree.
  A sampling judge does not agree with itself even without position bias: ``consistency_order_blind`` is the
  value an order-blind judge with the same debiased verdicts q = (v0 + v1) / 2 would get, sum_v q_v^2 (1 under
  greedy); the gap to it is sum_v ((v0 - v1) / 2)^2 >= 0, which only the order effect causes.
* **First-slot preference**: of the answers that name a slot ("A" or "B", not the tie label), the share that
  names the first-shown candidate (pooled over pairs and both orders; 0.5 = no preference); greedy: the share
  of prompts, sampled: the expected share of a sampling judge. ``tie_share``: the mean weight of the tie label.
* **Order-debiased preference** (per pair): the mean of the two orders' verdict distributions.
* **Bradley-Terry** (per group): the order-debiased preferences as fractional comparisons (a tie counted half
  a win for each side), plus ``prior`` pseudo-comparisons between every two candidates of the group (``prior``/2
  wins each way; a symmetric shrinkage towards equal strengths that keeps the maximum-likelihood estimate finite
  under complete separation and links candidates that were never compared, e.g. with ``--pairs K``). The
  log-strengths maximise sum_{a != b} W_ab log sigma(theta_a - theta_b) (Newton's method with a line search on
  this concave likelihood, centred to sum 0). ``separated`` says the data alone (``prior`` = 0) would have no
  finite, unique estimate (Zermelo/Ford: the graph "a beat b with positive weight" is not strongly connected).

Bootstrap CIs resample clusters: ``cluster='pair'`` (default; a pair's two orders are the unit that is
reordered, as items are for rubric options) or ``'group'`` (pairs that share candidates are correlated; more
conservative, needs enough groups).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse.csgraph import connected_components

from ._result import (
    InsufficientDataError,
    Result,
    ShapeError,
    StatsError,
    as_float,
    as_rng,
    bootstrap_weights,
    check_choice,
    check_confidence,
    check_distributions,
    check_n_boot,
    percentile_ci,
)
from .readings import answer_weights, check_reading, one_answer
from .slots import SlotTestResult, slot_chisquare

CLUSTERS = ("pair", "group")


def check_pairwise(pair_probs, pairs, groups) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The validated (pair_probs [P, 2, L], pairs [P, 2] int, groups [items] str) of the contract."""
    p = as_float(pair_probs, "pair_probs")
    if p.ndim != 3 or p.shape[1] != 2 or p.shape[2] not in (2, 3):
        raise ShapeError(f"pair_probs must be [pairs, 2 orders, 2 or 3 labels (A, B[, tie])], got {p.shape}")
    check_distributions(p, "pair_probs")
    g = np.asarray(groups).astype(str)
    if g.ndim != 1:
        raise ShapeError(f"groups must be 1-D (one label per item), got shape {g.shape}")
    try:
        ij = np.asarray(pairs)
        if not np.issubdtype(ij.dtype, np.integer):
            raise TypeError
    except TypeError:
        raise StatsError("pairs must be integer item indices [pairs, 2]") from None
    if ij.shape != (p.shape[0], 2):
        raise ShapeError(f"pairs must be [pairs, 2] item indices with one row per pair ({p.shape[0]}), got "
                         f"shape {ij.shape}")
    if ij.size and (ij.min() < 0 or ij.max() >= g.size):
        raise StatsError(f"pairs index items 0..{g.size - 1} (one group label each), got {ij.min()}..{ij.max()}")
    if np.any(ij[:, 0] == ij[:, 1]):
        raise StatsError("a pair compares an item with itself (pairs[p, 0] == pairs[p, 1])")
    if np.any(g[ij[:, 0]] != g[ij[:, 1]]):
        raise StatsError("a pair compares items of different groups; pairs are within one group")
    key = np.sort(ij, axis=1)
    if np.unique(key, axis=0).shape[0] != key.shape[0]:
        raise StatsError("an unordered pair appears twice; each pair is one row with both orders on axis 1")
    return p, ij.astype(np.int64), g


def pair_verdicts(pair_probs, *, reading: str = "sampled", temperature: float = 1.0) -> np.ndarray:
    """``verdict[pair, order, v]``: the weight of each verdict in canonical terms (v = 0: ``pairs[p, 0]``
    preferred, 1: ``pairs[p, 1]``, 2: tie) under each order, read as ``reading``."""
    p = as_float(pair_probs, "pair_probs")
    if p.ndim != 3 or p.shape[1] != 2 or p.shape[2] not in (2, 3):
        raise ShapeError(f"pair_probs must be [pairs, 2 orders, 2 or 3 labels (A, B[, tie])], got {p.shape}")
    check_distributions(p, "pair_probs")
    a = answer_weights(p, reading=reading, temperature=temperature)
    tie = a[..., 2] if a.shape[2] == 3 else np.zeros(a.shape[:2])
    v = np.empty(a.shape[:2] + (3,))
    v[:, 0] = np.stack([a[:, 0, 0], a[:, 0, 1], tie[:, 0]], axis=-1)  # order 0: A = pairs[p, 0]
    v[:, 1] = np.stack([a[:, 1, 1], a[:, 1, 0], tie[:, 1]], axis=-1)  # order 1: A = pairs[p, 1]
    return v


def _clusters(cluster: str, pairs: np.ndarray, groups: np.ndarray) -> np.ndarray:
    check_choice("cluster", cluster, CLUSTERS)
    return np.arange(len(pairs)).astype(str) if cluster == "pair" else groups[pairs[:, 0]]


def _cluster_boot(num: np.ndarray, den: np.ndarray, cl: np.ndarray, n_boot: int, confidence: float, rng):
    """Percentile CI of sum(num) / sum(den) with clusters ``cl`` resampled."""
    _, inv = np.unique(cl, return_inverse=True)
    c = inv.max() + 1
    if c < 2:
        return float("nan"), float("nan")
    nc, dc = np.bincount(inv, num, c), np.bincount(inv, den, c)
    w = bootstrap_weights(c, n_boot, rng)
    with np.errstate(invalid="ignore", divide="ignore"):
        return percentile_ci((w @ nc) / (w @ dc), confidence)


@dataclass(frozen=True)
class SwapConsistencyResult(Result):
    """Swap consistency and first-slot preference of a pairwise judge (definitions in the module doc), with
    percentile bootstrap CIs over ``cluster`` units. ``per_pair`` is each pair's consistency;
    ``consistency_order_blind`` its value for an order-blind judge with the same debiased verdicts."""

    consistency: float
    consistency_ci_low: float
    consistency_ci_high: float
    consistency_order_blind: float
    first_slot_preference: float
    first_slot_ci_low: float
    first_slot_ci_high: float
    tie_share: float
    per_pair: np.ndarray
    n_pairs: int
    n_clusters: int
    cluster: str
    reading: str
    temperature: float
    confidence_level: float


def swap_consistency(pair_probs, pairs, groups, *, reading: str = "greedy", temperature: float = 1.0,
                     cluster: str = "pair", tol: float = 1e-12, n_boot: int = 1000, confidence: float = 0.95,
                     rng=None) -> SwapConsistencyResult:
    """Does the verdict survive the swap? (see the module doc for both readings)."""
    p, ij, g = check_pairwise(pair_probs, pairs, groups)
    reading = check_reading(reading)
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    cl = _clusters(cluster, ij, g)
    if reading == "greedy":
        top = pair_verdicts(p, reading="greedy") > 0
        per_pair = np.all(top[:, 0] == top[:, 1], axis=1).astype(np.float64)
        blind = 1.0
    else:
        v = pair_verdicts(p, reading="sampled", temperature=temperature)
        per_pair = (v[:, 0] * v[:, 1]).sum(axis=1)
        blind = float((v.mean(axis=1) ** 2).sum(axis=1).mean())
    a = answer_weights(p, reading=reading, temperature=temperature, tol=tol)
    first = a[..., 0].sum(axis=1)  # per pair: weight of "A" over both orders
    named = a[..., :2].sum(axis=(1, 2))  # weight of answers naming a slot
    tie = float(a[..., 2].mean()) if a.shape[2] == 3 else 0.0
    nan = float("nan")
    pref = float(first.sum() / named.sum()) if named.sum() > 0 else nan
    c_lo = c_hi = f_lo = f_hi = nan
    n_cl = np.unique(cl).size
    if n_boot:
        rng = as_rng(rng)
        c_lo, c_hi = _cluster_boot(per_pair, np.ones_like(per_pair), cl, n_boot, confidence, rng)
        f_lo, f_hi = _cluster_boot(first, named, cl, n_boot, confidence, rng)
    return SwapConsistencyResult(float(per_pair.mean()), c_lo, c_hi, blind, pref, f_lo, f_hi, tie, per_pair, len(ij),
                                 n_cl, cluster, reading, float(temperature), confidence)


def pairwise_slot_test(pair_probs, pairs, groups, *, reading: str = "greedy", temperature: float = 1.0,
                       cluster: str = "pair", alpha: float = 0.05, n_boot: int = 1000, confidence: float = 0.95,
                       rng=None) -> SlotTestResult:
    """Position bias of the answered slot ("A" = slot 1, "B" = slot 2) with pairs (or groups) as clusters
    (:func:`logitjudge.stats.slot_chisquare`); answers of the tie label name no slot and are left out.
    'greedy': the argmax (ties split); 'sampled': one seeded run of a judge sampling at ``temperature``
    (``rng``). Showing every pair in both orders balances the design: every candidate is at every slot once."""
    p, ij, g = check_pairwise(pair_probs, pairs, groups)
    reading = check_reading(reading)
    if reading == "expected":
        raise StatsError("the slot test counts answered labels: reading='greedy' or 'sampled'")
    rng = as_rng(rng)
    cl = np.repeat(_clusters(cluster, ij, g), 2)
    a = one_answer(p.reshape(-1, p.shape[2]), reading=reading, temperature=temperature, rng=rng)
    return slot_chisquare(a[:, :2], cl, reading=reading, unit=cluster, slot_names=("A", "B"), alpha=alpha,
                          n_boot=n_boot, confidence=confidence, rng=rng)


def debiased_preference(pair_probs, *, reading: str = "sampled", temperature: float = 1.0) -> np.ndarray:
    """``[pair, v]``: the order-debiased verdict (v = 0: ``pairs[p, 0]`` preferred, 1: ``pairs[p, 1]``,
    2: tie), the mean over both orders of :func:`pair_verdicts`."""
    return pair_verdicts(pair_probs, reading=reading, temperature=temperature).mean(axis=1)


# ---- Bradley-Terry --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BradleyTerryResult(Result):
    """Bradley-Terry log-strengths ``strength[candidate]`` (centred to sum 0; P(a beats b) =
    sigma(strength[a] - strength[b])) fitted to ``wins`` plus ``prior`` pseudo-comparisons per pair (module
    doc). ``separated``: the data alone have no finite unique estimate. ``defined`` is False (strengths NaN,
    ``reason``) only with ``prior`` = 0 on separated data."""

    strength: np.ndarray
    separated: bool
    prior: float
    iterations: int
    defined: bool
    reason: str


def _bt_loglik(theta: np.ndarray, w: np.ndarray) -> float:
    d = theta[:, None] - theta[None, :]
    return float(-(w * np.logaddexp(0.0, -d)).sum())


def bradley_terry(wins, *, prior: float = 0.1, tol: float = 1e-12, max_iter: int = 200) -> BradleyTerryResult:
    """Maximum-likelihood Bradley-Terry log-strengths from ``wins[a, b]``, the (fractional) number of times
    candidate a beat candidate b (the diagonal must be 0), with ``prior`` pseudo-comparisons between every two
    candidates (see the module doc)."""
    w = as_float(wins, "wins")
    if w.ndim != 2 or w.shape[0] != w.shape[1] or w.shape[0] < 2:
        raise ShapeError(f"wins must be a square [candidates, candidates] matrix of >= 2 candidates, got {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or np.any(np.diag(w) != 0):
        raise StatsError("wins must be finite and non-negative with a zero diagonal (a candidate never meets "
                         "itself)")
    if not (np.isfinite(prior) and prior >= 0):
        raise StatsError(f"prior must be a non-negative number of pseudo-comparisons per pair, got {prior!r}")
    if int(max_iter) != max_iter or max_iter < 1:
        raise StatsError(f"max_iter must be a positive integer, got {max_iter!r}")
    m = w.shape[0]
    n_comp, _ = connected_components(w > 0, directed=True, connection="strong")
    separated = bool(n_comp > 1)
    if separated and prior == 0:
        return BradleyTerryResult(np.full(m, np.nan), True, 0.0, 0, False,
                                  "complete separation or disconnected comparisons: no finite maximum-likelihood "
                                  "estimate without a prior (pass prior > 0)")
    wt = w + (prior / 2.0) * (1.0 - np.eye(m))
    n = wt + wt.T
    theta = np.zeros(m)
    ll = _bt_loglik(theta, wt)
    it = 0
    while it < int(max_iter):
        it += 1
        s = 1.0 / (1.0 + np.exp(-(theta[:, None] - theta[None, :])))  # P(a beats b)
        grad = wt.sum(axis=1) - (n * s).sum(axis=1)
        if np.max(np.abs(grad)) <= tol * max(1.0, n.sum()):
            break
        h = n * s * s.T
        lap = np.diag(h.sum(axis=1)) - h  # minus the Hessian: a weighted graph Laplacian (null space: 1)
        step = np.linalg.lstsq(lap, grad, rcond=None)[0]
        step -= step.mean()
        t = 1.0
        while t > 1e-10:
            new = _bt_loglik(theta + t * step, wt)
            if new >= ll - 1e-15 * abs(ll):
                break
            t /= 2.0
        theta, ll = theta + t * step, new
        theta -= theta.mean()
    return BradleyTerryResult(theta, separated, float(prior), it, True, "")


def group_candidates(groups) -> tuple[np.ndarray, list[np.ndarray]]:
    """(group names sorted, item indices of each group's candidates in item order)."""
    g = np.asarray(groups).astype(str)
    if g.ndim != 1:
        raise ShapeError(f"groups must be 1-D (one label per item), got shape {g.shape}")
    names, inv = np.unique(g, return_inverse=True)
    return names, [np.flatnonzero(inv.ravel() == j) for j in range(len(names))]


@dataclass(frozen=True)
class PairwiseRankingResult(Result):
    """Bradley-Terry log-strength of every item within its group (``scores[item]``; NaN for items of groups
    without a pair) from the order-debiased preferences, read as ``reading``; ``separated[g]`` per group.

    Reordering a pairwise run means presenting each pair in one of its two orders. ``orientations[draw, pair]``
    (0: ``pairs[pair, 0]`` first, 1: swapped) are ``n_orientations`` independent uniform draws of one order per
    pair (``rng``): each is a single-order pairwise run a user could have made. ``by_orientation[g]`` is
    [draws, m_g]: the Bradley-Terry log-strengths of group ``group_names[g]``'s candidates (item indices
    ``candidates[g]``) from each draw's verdicts alone; top-1 stability compares them. (Every pair as given
    against every pair swapped is the extreme of these and favours whichever items the pair list puts first;
    swap consistency measures that swap pair by pair.)"""

    scores: np.ndarray
    by_orientation: tuple
    orientations: np.ndarray
    candidates: tuple
    group_names: np.ndarray
    separated: np.ndarray
    prior: float
    reading: str
    temperature: float


def _group_fit(verdicts: np.ndarray, ij: np.ndarray, members: np.ndarray, rows: np.ndarray, prior, tol):
    pos = {int(it): c for c, it in enumerate(members)}
    m = members.size
    wins = np.zeros((m, m))
    for r in rows:
        a, b = pos[int(ij[r, 0])], pos[int(ij[r, 1])]
        wins[a, b] += verdicts[r, 0] + verdicts[r, 2] / 2
        wins[b, a] += verdicts[r, 1] + verdicts[r, 2] / 2
    return bradley_terry(wins, prior=prior, tol=tol)


def pairwise_ranking(pair_probs, pairs, groups, *, reading: str = "sampled", temperature: float = 1.0,
                     prior: float = 0.1, n_orientations: int = 20, tol: float = 1e-12, rng=None
                     ) -> PairwiseRankingResult:
    """Bradley-Terry per group from the order-debiased preferences, and from each of ``n_orientations`` random
    single-order runs (see :class:`PairwiseRankingResult` and the module doc)."""
    p, ij, g = check_pairwise(pair_probs, pairs, groups)
    if int(n_orientations) != n_orientations or n_orientations < 2:
        raise StatsError(f"n_orientations must be an integer >= 2 (random single-order runs to compare), got "
                         f"{n_orientations!r}")
    v = pair_verdicts(p, reading=check_reading(reading), temperature=temperature)  # [P, 2, 3]
    orient = as_rng(rng).integers(0, 2, size=(int(n_orientations), len(ij)))
    names, members = group_candidates(g)
    pair_group = np.searchsorted(names, g[ij[:, 0]])
    scores = np.full(g.size, np.nan)
    by_orient, cands, used, sep = [], [], [], []
    for j, mem in enumerate(members):
        rows = np.flatnonzero(pair_group == j)
        if rows.size == 0:
            continue
        deb = _group_fit(v.mean(axis=1), ij, mem, rows, prior, tol)
        if not deb.defined:
            raise StatsError(f"group {names[j]!r}: {deb.reason}")
        scores[mem] = deb.strength
        fits = [_group_fit(v[np.arange(len(ij)), o], ij, mem, rows, prior, tol) for o in orient]
        bad = [f.reason for f in fits if not f.defined]
        if bad:
            raise StatsError(f"group {names[j]!r}, a single-order run: {bad[0]}")
        by_orient.append(np.stack([f.strength for f in fits]))
        cands.append(mem)
        used.append(names[j])
        sep.append(deb.separated)
    if not used:
        raise InsufficientDataError("no group has a pair")
    return PairwiseRankingResult(scores, tuple(by_orient), orient, tuple(cands), np.asarray(used),
                                 np.asarray(sep), float(prior), check_reading(reading), float(temperature))
