"""Top-1 flips: does the best candidate among one prompt's candidates change with the option order?

A *group* is one prompt's candidates (e.g. several systems' answers to one question). Under each ordering the
judge scores every candidate; the candidates whose score is within ``tol`` of the group's maximum form its *top
set* (the winning set). A **flip is a change of the top set** between two orderings (or two strategies): a tie
that stays the same tie is no flip, so a group whose candidates all tie under both is no flip. Beside it:

* ``certain``: the two top sets are disjoint (the winner changed, whatever tie-break a user applies);
* ``possible``: not one identical, untied winner (some tie-break could change the winner);
  ``certain <= flip <= possible``;
* ``tied``: a tie at the top on either side (the share of comparisons whose winner a tie-break decides);
* ``tie_broken``: the probability that the winners differ when each side's ties are broken uniformly and
  independently. It counts tie-break noise as flips (an all-tied group of m candidates gives 1 - 1/m although
  no winner changed), so it is kept under this name only, for comparison.

Readings ('greedy' / 'expected': deterministic scores, each quantity a share of comparisons; 'sampled': each
side is one run of a judge sampling at ``temperature``, every answer drawn independently, and each quantity is
its exact probability over the two runs, :func:`top_set_probabilities`).

* :func:`top1_flips` - the study's top-1 flip: the canonical ordering against each other ordering;
* :func:`top1_change` - two per-item score vectors (FIXED against an aggregated strategy);
* :func:`top1_change_sampled` - the same for two sampling runs that average answers over given orderings;
* :func:`top1_change_random` - FIXED against RANDOM at budget K, the expectation over draws of K orders per
  item (Monte-Carlo with its standard error);
* :func:`top1_stability` - the same flips for the judging paradigms, whose input is per-group score lists
  ``scores[g][ordering, candidate]`` rather than a rubric table (see :class:`Top1StabilityResult`).

Every quantity is :func:`set_comparisons` of two top sets (:func:`top_sets`; :func:`winning_sets` for one
unmasked score array), so each is defined once here.
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
    group_score_list,
    percentile_ci,
)
from .expectation import _dists, draw_random_scores, mean_answer_distribution
from .readings import check_reading, draw_answers, read_scores, tempered

QUANTITIES = ("changed", "certain", "possible", "tied", "tie_broken")


# ---- groups and top sets -----------------------------------------------------------------------------------
def group_index(groups, n_items: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Padded candidate indices of the groups with >= 2 candidates: ``(idx[G, m], valid[G, m], n_groups)``
    (padding points at item 0 and is masked by ``valid``; ``n_groups`` counts every group, used or not)."""
    g = np.asarray(groups).astype(str)
    if g.shape != (n_items,):
        raise ShapeError(f"groups must give one label per item ({n_items}), got shape {g.shape}")
    names, inv, sizes = np.unique(g, return_inverse=True, return_counts=True)
    keep = np.flatnonzero(sizes >= 2)
    if keep.size == 0:
        raise InsufficientDataError("no group has 2 or more candidates; top-1 flips and rank stability need "
                                    "grouped items (several candidates for one prompt)")
    m = int(sizes[keep].max())
    idx = np.zeros((keep.size, m), dtype=np.int64)
    valid = np.zeros((keep.size, m), dtype=bool)
    for row, j in enumerate(keep):
        members = np.flatnonzero(inv.ravel() == j)
        idx[row, :members.size], valid[row, :members.size] = members, True
    return idx, valid, len(names)


def top_sets(scores, valid, tol: float = 1e-9) -> np.ndarray:
    """``[..., G, m]`` bool: the candidates within ``tol`` of their group's best valid score."""
    x = np.where(valid, scores, -np.inf)
    return (x >= x.max(axis=-1, keepdims=True) - tol) & valid


def set_comparisons(top_a: np.ndarray, top_b: np.ndarray) -> np.ndarray:
    """``[5, ...]``: (changed, certain, possible, tied, tie_broken) of two top-set masks ``[..., m]``, each 0/1
    except ``tie_broken`` (see the module doc). Computed from the overlap and the sizes of the two sets."""
    na, nb = top_a.sum(axis=-1), top_b.sum(axis=-1)
    both = (top_a & top_b).sum(axis=-1)
    same = (na == both) & (nb == both)
    return np.stack([~same, both == 0, ~(same & (na == 1)), (na > 1) | (nb > 1),
                     1.0 - both / (na * nb)]).astype(np.float64)


def pairwise_comparisons(top: np.ndarray) -> np.ndarray:
    """``[5, K, K, ...]`` :func:`set_comparisons` of every pair of the top-set masks ``top[K, ..., m]`` (one
    matrix product for the overlaps, no [K, K, ..., m] array)."""
    t = top.astype(np.float64)
    n = t.sum(axis=-1)  # [K, ...]
    both = np.einsum("a...m,b...m->ab...", t, t)
    na, nb = n[:, None], n[None, :]
    same = (na == both) & (nb == both)
    return np.stack([~same, both == 0, ~(same & (na == 1)), (na > 1) | (nb > 1),
                     1.0 - both / (na * nb)]).astype(np.float64)


# ---- exact probabilities for sampling judges ---------------------------------------------------------------
def _on_support(d: np.ndarray, v: np.ndarray):
    """(mass[candidates, distinct values], P(X < value)) of each candidate's score on the sorted values."""
    support, inv = np.unique(v, return_inverse=True)
    mass = np.zeros((d.shape[0], support.size))
    np.add.at(mass.T, inv.ravel(), d.T)
    return mass, np.cumsum(mass, axis=1) - mass


def win_probabilities(dists, values) -> np.ndarray:
    """``[candidates]``: exact probability that each candidate is the top-1 when every candidate's score is one
    independent draw from ``dists[candidate, option]`` over ``values[option]``, ties at the top broken
    uniformly. P(j wins) = sum_v d_j(v) * integral_0^1 prod_{i != j} (P(X_i < v) + P(X_i = v) z) dz (the
    integral averages 1/(1 + number tied with j))."""
    d, v = _dists(dists, values)
    mass, below = _on_support(d, v)
    m, s = mass.shape
    out = np.zeros(m)
    for j in range(m):
        poly = np.ones((s, 1))  # coefficients in z, per value v
        for i in range(m):
            if i != j:
                nxt = np.zeros((s, poly.shape[1] + 1))
                nxt[:, :-1] += poly * below[i][:, None]
                nxt[:, 1:] += poly * mass[i][:, None]
                poly = nxt
        out[j] = mass[j] @ (poly @ (1.0 / np.arange(1, poly.shape[1] + 1)))
    return out


def _singletons(mass: np.ndarray, below: np.ndarray) -> np.ndarray:
    """``[candidates]``: P(the top set is exactly {j})."""
    return np.asarray([mass[j] @ np.prod(np.delete(below, j, axis=0), axis=0) for j in range(len(mass))])


def top_set_probabilities(dists_a, dists_b, values) -> np.ndarray:
    """Exact (changed, certain, possible, tied, tie_broken) for two independent runs A and B of a judge that
    scores candidate j by one draw from ``dists_a[j]`` (run A) and ``dists_b[j]`` (run B) over ``values``.

    P(top sets equal) = sum_{v,w} [prod_i (a_i(v) b_i(w) + A_i(<v) B_i(<w)) - prod_i A_i(<v) B_i(<w)], where
    a_i(v) = P(X_i = v) and A_i(<v) = P(X_i < v) in run A (each candidate is in both top sets or in neither);
    P(disjoint) by inclusion-exclusion over the states 'in A's top only', 'in B's only', 'in neither'.
    """
    da, v = _dists(dists_a, values)
    db, _ = _dists(dists_b, values)
    if da.shape != db.shape:
        raise ShapeError(f"dists_a and dists_b must have one shape, got {da.shape} and {db.shape}")
    a, lo_a = _on_support(da, v)
    b, lo_b = _on_support(db, v)
    x = a[:, :, None] * lo_b[:, None, :]  # [candidates, v, w]: in A's top set only
    y = lo_a[:, :, None] * b[:, None, :]  # in B's top set only
    z = lo_a[:, :, None] * lo_b[:, None, :]  # in neither
    both = a[:, :, None] * b[:, None, :]
    prod = lambda t: np.prod(t, axis=0).sum()  # noqa: E731 - over candidates, then over (v, w)
    same = prod(both + z) - prod(z)
    disjoint = prod(x + y + z) - prod(y + z) - prod(x + z) + prod(z)
    sa, sb = _singletons(a, lo_a), _singletons(b, lo_b)
    tie_broken = 1.0 - win_probabilities(da, v) @ win_probabilities(db, v)
    out = np.array([1.0 - same, disjoint, 1.0 - sa @ sb, 1.0 - sa.sum() * sb.sum(), tie_broken])
    return np.clip(out, 0.0, 1.0)


def _on_grid(parts) -> tuple[np.ndarray, np.ndarray]:
    """Candidates given as (support, probabilities) pairs, on one common grid: (dists, grid)."""
    grid = np.unique(np.concatenate([s for s, _ in parts]))
    dists = np.zeros((len(parts), grid.size))
    for j, (s, w) in enumerate(parts):
        np.add.at(dists[j], np.searchsorted(grid, s), w)
    return dists, grid


# ---- results -----------------------------------------------------------------------------------------------
def _group_ci(per_group: np.ndarray, n_boot: int, confidence: float, rng) -> tuple[float, float]:
    if not n_boot or len(per_group) < 2:
        return float("nan"), float("nan")
    return percentile_ci(bootstrap_weights(len(per_group), n_boot, rng) @ per_group / len(per_group), confidence)


@dataclass(frozen=True)
class Top1FlipResult(Result):
    """The study's top-1 flip: the share of prompts (groups of candidates) whose top set under the canonical
    ordering differs from the top set under another ordering, averaged over the other orderings (``flip``, with
    a percentile bootstrap CI over groups; ``per_ordering`` per other ordering). ``flip_certain`` (disjoint top
    sets) and ``flip_possible`` (not one identical untied winner) bound it; ``tied`` is the share of
    comparisons with a tie at the top on either side; ``flip_tie_broken`` counts ties broken uniformly (not a
    flip measure: see the module doc). Under 'sampled' each is the exact probability for two sampling runs.
    ``other`` lists the ordering indices compared with ``canonical``."""

    flip: float
    flip_ci_low: float
    flip_ci_high: float
    flip_certain: float
    flip_possible: float
    tied: float
    flip_tie_broken: float
    per_ordering: np.ndarray
    other: np.ndarray
    canonical: int
    n_groups: int
    reading: str
    temperature: float
    confidence_level: float


def _canonical(canonical, option_orders, k: int) -> int:
    """The canonical ordering's row: as given, else the identity row of ``option_orders`` (else row 0)."""
    if canonical is None:
        canonical = 0 if option_orders is None else canonical_index(option_orders)
    if not 0 <= int(canonical) < k:
        raise StatsError(f"canonical={canonical} is not one of the {k} orderings")
    return int(canonical)


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
    idx, valid, _ = group_index(groups, n_items)
    other = np.asarray([j for j in range(k) if j != canonical])
    if reading == "sampled":
        q = tempered(p, temperature)
        comp = np.zeros((5, other.size, len(idx)))
        for g, (r, ok) in enumerate(zip(idx, valid)):
            cand = q[r[ok]]  # [candidates, orderings, options]
            for j, o in enumerate(other):
                comp[:, j, g] = top_set_probabilities(cand[:, canonical], cand[:, o], values)
    else:
        s = np.moveaxis(read_scores(p, values, reading=reading)[idx], 2, 0)  # [orderings, groups, m]
        top = top_sets(s, valid, tol)
        comp = set_comparisons(top[canonical][None], top[other])  # [5, other, groups]
    per_group = comp.mean(axis=1)  # [5, groups]
    lo, hi = _group_ci(per_group[0], n_boot, confidence, rng)
    flip, certain, possible, tied, broken = (float(x) for x in per_group.mean(axis=1))
    return Top1FlipResult(flip, lo, hi, certain, possible, tied, broken, comp[0].mean(axis=1), other, canonical,
                          len(idx), reading, float(temperature), confidence)


@dataclass(frozen=True)
class Top1ChangeResult(Result):
    """Share of prompts (groups) whose top set differs between two scorings (e.g. FIXED and an aggregated
    strategy): ``changed`` (a change of the top set, with a percentile bootstrap CI over groups), bounded by
    ``changed_certain`` (disjoint top sets) and ``changed_possible`` (not one identical untied winner);
    ``tied`` (a tie at the top on either side); ``changed_tie_broken`` (ties broken uniformly: not a change
    measure). ``reading`` names how both were read; under 'sampled' each is an exact probability."""

    changed: float
    changed_ci_low: float
    changed_ci_high: float
    changed_certain: float
    changed_possible: float
    tied: float
    changed_tie_broken: float
    n_groups: int
    reading: str
    confidence_level: float


def _change_result(per_group: np.ndarray, reading: str, n_boot: int, confidence: float, rng) -> Top1ChangeResult:
    """``per_group[5, groups]`` -> the result (means over groups, bootstrap CI of ``changed``)."""
    lo, hi = _group_ci(per_group[0], n_boot, confidence, rng)
    changed, certain, possible, tied, broken = (float(x) for x in per_group.mean(axis=1))
    return Top1ChangeResult(changed, lo, hi, certain, possible, tied, broken, per_group.shape[1], reading,
                            confidence)


def top1_change(scores_a, scores_b, groups, *, reading: str, tol: float = 1e-9, n_boot: int = 1000,
                confidence: float = 0.95, rng=None) -> Top1ChangeResult:
    """Top-set changes between two per-item score vectors (FIXED vs BALANCED / all-orders scores) over the
    groups of candidates; ``reading`` is recorded (the scores are already read)."""
    reading = check_reading(reading)
    a, b = as_float(scores_a, "scores_a"), as_float(scores_b, "scores_b")
    if a.ndim != 1 or a.shape != b.shape or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ShapeError(f"scores_a and scores_b must be finite 1-D arrays of one length, got {a.shape}, {b.shape}")
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    idx, valid, _ = group_index(groups, a.size)
    per_group = set_comparisons(top_sets(a[idx], valid, tol), top_sets(b[idx], valid, tol))
    return _change_result(per_group, reading, n_boot, confidence, rng)


def _rows(rows, name: str) -> np.ndarray:
    try:
        return np.atleast_1d(np.asarray(rows, dtype=np.int64))
    except (TypeError, ValueError) as e:
        raise StatsError(f"{name} must be ordering indices ({e})") from None


def top1_change_sampled(probs, values, groups, rows_a, rows_b, *, temperature: float = 1.0, n_boot: int = 1000,
                        confidence: float = 0.95, rng=None) -> Top1ChangeResult:
    """Exact top-set change between two runs of a judge sampling at ``temperature``: run A scores every
    candidate by the mean of its answers under the orderings ``rows_a`` (FIXED: ``[canonical]``), run B under
    ``rows_b`` (BALANCED: the balanced rows; all orders: every row), every answer drawn independently; each
    quantity is its exact probability (:func:`top_set_probabilities` on the exact distributions of the mean
    answers, :func:`mean_answer_distribution`), averaged over groups."""
    p = as_array(probs, "probs", 3, "[items, orderings, options]")
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    ra, rb = _rows(rows_a, "rows_a"), _rows(rows_b, "rows_b")
    if ra.size == 0 or rb.size == 0 or min(ra.min(), rb.min()) < 0 or max(ra.max(), rb.max()) >= p.shape[1]:
        raise StatsError(f"rows_a and rows_b must be non-empty ordering indices below {p.shape[1]}")
    q = tempered(p, temperature)
    idx, valid, _ = group_index(groups, p.shape[0])
    per_group = np.zeros((5, len(idx)))
    for g, (r, ok) in enumerate(zip(idx, valid)):
        parts = [mean_answer_distribution(q[i, rows], values) for rows in (ra, rb) for i in r[ok]]
        dists, grid = _on_grid(parts)
        m = int(ok.sum())
        per_group[:, g] = top_set_probabilities(dists[:m], dists[m:], grid)
    return _change_result(per_group, "sampled", n_boot, confidence, rng)


@dataclass(frozen=True)
class Top1ChangeRandomResult(Result):
    """FIXED against RANDOM at budget ``k``: the expectation, over draws of ``k`` orders per item (uniform over
    the item's ``pool`` rows, with replacement unless ``replace`` is False), of the share of groups whose top
    set changes between the canonical prompt's scores and the mean of the k drawn prompts' scores. Each
    quantity (as in :class:`Top1ChangeResult`) is a Monte-Carlo mean of ``n_draws`` replicates with its
    standard error (``*_se``); ``reached`` says whether ``changed_se <= precision``. Under 'sampled' both runs'
    answers are drawn too (two sampling runs per replicate)."""

    changed: float
    changed_se: float
    changed_certain: float
    changed_certain_se: float
    changed_possible: float
    changed_possible_se: float
    tied: float
    tied_se: float
    changed_tie_broken: float
    changed_tie_broken_se: float
    k: int
    n_draws: int
    precision: float
    reached: bool
    replace: bool
    pool: str
    canonical: int
    n_groups: int
    reading: str
    temperature: float


def top1_change_random(probs, values, groups, *, k: int, canonical: int | None = None, option_orders=None,
                       pool_rows=None, pool: str = "the table's rows", reading: str = "greedy",
                       temperature: float = 1.0, replace: bool = True, precision: float = 0.005,
                       min_draws: int = 200, max_draws: int = 20000, batch: int = 200, tol: float = 1e-9,
                       rng=None) -> Top1ChangeRandomResult:
    """Top-set change between FIXED (the ``canonical`` prompt, default the identity row of ``option_orders``)
    and RANDOM(k), as an expectation over RANDOM's draws (see :class:`Top1ChangeRandomResult`): batches of
    ``batch`` replicates until at least ``min_draws`` are drawn and the standard error of ``changed`` is at most
    ``precision`` (or ``max_draws``). ``pool_rows`` are the rows RANDOM draws from (default every row; a
    balanced+random table passes its random rows), ``pool`` names them in the result."""
    p = as_array(probs, "probs", 3, "[items, orderings, options]")
    reading = check_reading(reading)
    canonical = _canonical(canonical, option_orders, p.shape[1])
    rows = np.arange(p.shape[1]) if pool_rows is None else _rows(pool_rows, "pool_rows")
    if rows.size == 0 or rows.min() < 0 or rows.max() >= p.shape[1]:
        raise StatsError(f"pool_rows must be non-empty ordering indices below {p.shape[1]}")
    if not (float(precision) > 0) or int(min_draws) < 2 or int(max_draws) < int(min_draws) or int(batch) < 1:
        raise StatsError(f"need precision > 0, 2 <= min_draws <= max_draws and batch >= 1, got {precision}, "
                         f"{min_draws}, {max_draws}, {batch}")
    idx, valid, _ = group_index(groups, p.shape[0])
    gen = as_rng(rng)
    v = as_float(values, "values")
    fixed = read_scores(p[:, canonical], v, reading="expected" if reading == "sampled" else reading)
    q_fixed = tempered(p[:, canonical], temperature) if reading == "sampled" else None
    sums, sq, n = np.zeros(5), np.zeros(5), 0
    while True:
        x = draw_random_scores(p[:, rows], v, int(batch), k=k, reading=reading, temperature=temperature,
                               replace=replace, rng=gen)  # [batch, items]
        a = v[draw_answers(np.broadcast_to(q_fixed, x.shape + q_fixed.shape[-1:]), gen)] if q_fixed is not None \
            else np.broadcast_to(fixed, x.shape)
        rep = set_comparisons(top_sets(a[:, idx], valid, tol), top_sets(x[:, idx], valid, tol)).mean(axis=2)
        sums, sq, n = sums + rep.sum(axis=1), sq + (rep ** 2).sum(axis=1), n + rep.shape[1]
        mean = sums / n
        se = np.sqrt(np.maximum(sq / n - mean ** 2, 0.0) * n / (n - 1) / n)
        if n >= int(min_draws) and se[0] <= precision or n >= int(max_draws):
            break
    vals = [float(x) for pair in zip(mean, se) for x in pair]
    return Top1ChangeRandomResult(*vals, int(k), n, float(precision), bool(se[0] <= precision), bool(replace),
                                  pool, canonical, len(idx), reading, float(temperature))



# ---- per-group score lists (the judging paradigms) ---------------------------------------------------------
@dataclass(frozen=True)
class Top1StabilityResult(Result):
    """Top-1 flips of the judging paradigms (:mod:`logitjudge.stats.paradigms`), from per-group score lists
    ``scores[g][ordering, candidate]`` (canonical candidate order: the scores of each ordering row; pairwise:
    the Bradley-Terry strengths of one single-order run per row; listwise: the answer weights of each row).
    The quantities are those of the module doc, per group the mean over every unordered pair of orderings
    (``pairs`` 'all') or over the (canonical, other) pairs ('vs canonical'), then the mean over groups:
    ``flip`` with a percentile bootstrap CI over groups, its bounds ``flip_certain`` <= ``flip`` <=
    ``flip_possible``, ``flip_tie_broken`` and ``tied``; ``per_group`` flips. When the orderings are independent
    random draws (per-item random orders; pairwise single-order runs), ``flip`` is a Monte-Carlo estimate of
    the probability that two random orderings give different winning sets and ``flip_se`` its delete-one-draw
    jackknife standard error (NaN for a fixed design, whose pairs are enumerated exactly). ``reading`` names
    how the scores were read."""

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


def winning_sets(scores, *, tol: float = 1e-9) -> np.ndarray:
    """``[..., candidate]`` True for every candidate within ``tol`` of the best score along the last axis
    (:func:`top_sets` of finite scores with every candidate valid)."""
    s = as_float(scores, "scores")
    if s.ndim < 1 or s.shape[-1] == 0 or not np.all(np.isfinite(s)):
        raise ShapeError(f"scores must be finite with at least one candidate, got shape {s.shape}")
    return top_sets(s, True, tol)


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
    """Winning-set flips between orderings per group ``scores[g][ordering, candidate]`` (see
    :class:`Top1StabilityResult`; :func:`top1_flips` is the same for a rubric table). Groups with one candidate
    are skipped; every group needs at least 2 orderings (with ``draws``, the same number of draws)."""
    groups = group_score_list(scores)
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    reading = check_reading(reading)
    if draws and canonical is not None:
        raise StatsError("random draws of orderings have no canonical one: pass canonical=None with draws=True")
    rows, mats = [], []
    for s in groups:
        k, m = s.shape
        if m < 2:
            continue
        if k < 2:
            raise InsufficientDataError(f"top-1 stability needs at least 2 orderings per group, got {k}")
        if canonical is not None and not 0 <= int(canonical) < k:
            raise StatsError(f"canonical={canonical} is not one of the group's {k} orderings")
        win = top_sets(s, True, tol)
        a, b = np.triu_indices(k, 1)
        if canonical is not None:
            b = np.asarray([j for j in range(k) if j != int(canonical)])
            a = np.full(b.size, int(canonical))
        rows.append(set_comparisons(win[a], win[b]).mean(axis=1))  # (changed, certain, possible, tied, broken)
        if draws:
            mats.append(pairwise_comparisons(win)[0])  # [K, K]: the winning sets differ
    if not rows:
        raise InsufficientDataError("no group has 2 or more candidates; top-1 stability needs groups of "
                                    "candidates")
    if draws and len({m.shape for m in mats}) != 1:
        raise ShapeError("with draws=True every group needs the same number of draws (the jackknife deletes "
                         "one draw from every group)")
    r = np.asarray(rows)  # [groups, 5]
    lo, hi = _group_ci(r[:, 0], n_boot, confidence, rng)
    se = _jackknife_se(mats) if draws else float("nan")
    flip, certain, possible, tied, broken = (float(x) for x in r.mean(axis=0))
    return Top1StabilityResult(flip, lo, hi, se, certain, possible, broken, tied, r[:, 0], len(r),
                               len(groups) - len(r), "all" if canonical is None else "vs canonical", reading,
                               confidence)
