"""RANDOM as an exact expectation: a statistic of K orders drawn uniformly per item, averaged over the draws.

The study's RANDOM scores every item under K randomly ordered variants of the rubric. One draw of those orders
is noise; the quantity to compare with BALANCED or FIXED is its expectation over the draws. With a table that
holds every one of the n! orders of an item (``--orderings all``), a uniform draw among the item's rows *is* a
uniformly random order, so the expectation over the table's rows is the study's RANDOM exactly. With per-item
random orders (n too large for n!), the same expectation over each item's recorded orders estimates it (the
result's ``pool`` says which). Draws are independent per item, each of the K orders uniform over the item's
rows, with replacement by default (the study draws K random variants independently; ``replace=False`` draws
K distinct rows).

Arrays (one criterion): ``probs[item, ordering, option]`` canonical, ``values[option]``.

* :func:`random_item_scores` - per item, the exact expected mean score of K random prompts: the mean over the
  item's rows of the prompt's score (the same for every K and for both draw schemes; closed form).
* :func:`random_label_shares` - per item, the exact expected share of each answered label under RANDOM.
* :func:`random_expectation` - any statistic of the per-item scores (a correlation with humans...): closed form
  when the statistic is declared affine (``linear=True``); exact by enumeration when the draws have at most
  ``max_outcomes`` (1e6) joint outcomes (:func:`item_outcomes`: under the greedy reading at K=1 a finite sum over
  each item's distinct answers); else Monte-Carlo over independent draws until its standard error is at most
  ``precision``; the result carries the estimate, whether it is exact, its standard error, the number of draws
  (or outcomes) and whether the precision was reached. One ``rng`` seed gives the same number every time.
* :func:`random_rows` - the rows RANDOM draws from (a balanced+random table: its random rows).
* :func:`random_expectation_ref` - the plain reference: exact enumeration of every draw (tiny tables only).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from ._result import (
    BALANCED,
    FIXED,
    PER_ITEM_RANDOM,
    SHARED_RANDOM,
    Result,
    ShapeError,
    StatsError,
    as_array,
    as_float,
    as_orders,
    as_rng,
    check_distributions,
    detect_design,
    has_all_orders,
)
from .readings import answer_probs, check_reading, draw_answers, read_scores, tempered

DEFAULT_PRECISION = 0.005  # standard error of a Monte-Carlo RANDOM figure (e.g. a correlation), unless asked
MAX_OUTCOMES = 1_000_000  # joint outcomes of RANDOM's draws enumerated exactly; more: Monte-Carlo with its SE


def pool_kind(option_orders) -> str:
    """What a uniform draw among an item's rows is: 'all orders' (exactly a uniform random permutation),
    'per-item random orders' (an estimate of one), 'balanced orders', 'shared orders' or 'fixed order'."""
    if has_all_orders(option_orders):
        return "all orders"
    return {PER_ITEM_RANDOM: "per-item random orders", BALANCED: "balanced orders", SHARED_RANDOM: "shared orders",
            FIXED: "fixed order"}[detect_design(option_orders)]


def random_rows(option_orders) -> tuple[np.ndarray, str]:
    """``(rows, pool)``: the rows RANDOM draws an item's orders from, and what a uniform draw among them is
    (:func:`pool_kind`). Every row, except in a balanced+random table (per-item orders whose balanced rotations
    sit at the same rows of every item, followed by random ones), where RANDOM draws from the random rows only:
    the rotations are not uniformly random orders."""
    from .aggregation import balanced_rows  # aggregation imports readings and position, never this module

    orders = as_orders(option_orders, per_item=True)
    rows = np.arange(orders.shape[-2])
    bal = balanced_rows(orders)
    if orders.ndim == 3 and bal is not None and len(bal) < len(rows):
        rows = np.setdiff1d(rows, bal)
    return rows, pool_kind(orders[..., rows, :])


def _inputs(probs, values, reading, temperature):
    p = as_array(probs, "probs", 3, "[items, orderings, options]")
    check_distributions(p, "probs")
    v = as_float(values, "values")
    if v.shape != (p.shape[2],):
        raise ShapeError(f"values has shape {v.shape}, expected ({p.shape[2]},) (one value per option)")
    return p, v, check_reading(reading), float(temperature)


def _check_k(k, n_pool: int, replace: bool) -> int:
    if int(k) != k or k < 1:
        raise StatsError(f"budget k must be a positive integer, got {k!r}")
    if not replace and k > n_pool:
        raise StatsError(f"k={k} distinct orders drawn without replacement, but each item has {n_pool} rows; "
                         "use replace=True or a smaller k")
    return int(k)


def _dists(dists, values) -> tuple[np.ndarray, np.ndarray]:
    d, v = as_float(dists, "dists"), as_float(values, "values")
    if d.ndim != 2 or v.shape != d.shape[1:]:
        raise ShapeError(f"dists must be 2-D [rows, options] with one value per option, got shapes {d.shape} "
                         f"and {v.shape}")
    return d, v


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


def random_item_scores(probs, values, *, reading: str = "greedy", temperature: float = 1.0) -> np.ndarray:
    """``[items]``: exact expectation, over K orders drawn uniformly from each item's rows, of the item's mean
    score over those K prompts. Linear, so it is the mean over the item's rows of the prompt score under
    ``reading`` (for 'sampled', the tempered mean), whatever K and the draw scheme."""
    p, v, reading, t = _inputs(probs, values, reading, temperature)
    return read_scores(p, v, reading=reading, temperature=t).mean(axis=1)


def random_label_shares(probs, *, reading: str = "greedy", temperature: float = 1.0) -> np.ndarray:
    """``[items, options]``: exact expected share of the K answers of an item that are each option under
    RANDOM ('greedy': the argmax label; 'sampled': the tempered draw): the mean over the item's rows."""
    p = as_array(probs, "probs", 3, "[items, orderings, options]")
    check_distributions(p, "probs")
    return answer_probs(p, reading=reading, temperature=temperature).mean(axis=1)


@dataclass(frozen=True)
class ExpectationResult(Result):
    """``value``: the expectation of a statistic of RANDOM(K) per-item scores over the random draws.

    ``exact`` True: a closed form, or every joint outcome of the draws enumerated (``n_draws`` outcomes;
    ``sd`` their exact spread); ``se`` is 0. Otherwise ``value`` is the mean of ``n_draws`` Monte-Carlo
    replicates and ``se`` its standard error (sd / sqrt(draws)); ``reached`` says whether ``se <= precision``.
    Replicates (or outcomes) where the statistic is undefined (NaN) are dropped and counted in ``n_undefined``
    (the value is then the expectation conditional on a defined statistic). ``pool`` is what the draws are taken
    from (see :func:`pool_kind`), ``replace`` the draw scheme. A printed RANDOM value says "exact" or "± se".
    """

    value: float
    se: float
    sd: float
    exact: bool
    n_draws: int
    n_undefined: int
    precision: float
    reached: bool
    k: int
    replace: bool
    reading: str
    temperature: float
    pool: str
    note: str


def draw_random_scores(probs, values, n_draws: int, *, k: int, reading: str = "greedy",
                       temperature: float = 1.0, replace: bool = True, rng=None) -> np.ndarray:
    """``[n_draws, items]`` per-item mean scores of K prompts drawn per item (one Monte-Carlo replicate per
    row). Under 'sampled' each prompt's answer is drawn too (from the tempered distribution)."""
    p, v, reading, t = _inputs(probs, values, reading, temperature)
    n_items, n_pool = p.shape[:2]
    k = _check_k(k, n_pool, replace)
    if int(n_draws) != n_draws or n_draws < 1:
        raise StatsError(f"n_draws must be a positive integer, got {n_draws!r}")
    gen = as_rng(rng)
    if replace:
        idx = gen.integers(0, n_pool, size=(n_draws, n_items, k))
    else:
        idx = np.argsort(gen.random((n_draws, n_items, n_pool)), axis=2)[:, :, :k]
    if reading == "sampled":
        q = tempered(p, t)[np.arange(n_items)[None, :, None], idx]  # [draws, items, K, options]
        return v[draw_answers(q, gen)].mean(axis=2)
    s = read_scores(p, v, reading=reading)  # [items, pool]
    return s[np.arange(n_items)[None, :, None], idx].mean(axis=2)


def random_expectation(probs, values, statistic, *, k: int, reading: str = "greedy", temperature: float = 1.0,
                       replace: bool = True, linear: bool = False, precision: float = DEFAULT_PRECISION,
                       min_draws: int = 200, max_draws: int = 20000, batch: int = 200, option_orders=None,
                       max_outcomes: int = MAX_OUTCOMES, rng=None) -> ExpectationResult:
    """Expectation over RANDOM(K) draws of ``statistic(x)``, where ``x[draw, item]`` are the per-item mean
    scores of K orders drawn uniformly per item and ``statistic`` maps ``[B, items] -> [B]``.

    Exact where it is cheap: ``linear=True`` declares the statistic affine in ``x`` (a mean score, a share), and
    the value is then the statistic of :func:`random_item_scores` (closed form; not for 'sampled' with a
    nonlinear map of one answer). Otherwise, when the items' draws have at most ``max_outcomes`` joint outcomes
    (each item's distinct mean scores, :func:`item_outcomes`: under the greedy reading at K=1 the item's distinct
    answers), the expectation is their probability-weighted sum, enumerated (``exact``, ``se`` 0, ``n_draws``
    the outcomes). Else Monte-Carlo: batches of ``batch`` replicates until at least ``min_draws`` are drawn and
    the standard error is at most ``precision`` (or ``max_draws`` is reached: ``reached`` False and a note).
    ``option_orders`` (optional) only names the pool in the result; ``max_outcomes=0`` forces Monte-Carlo.
    """
    p, v, reading, t = _inputs(probs, values, reading, temperature)
    k = _check_k(k, p.shape[1], replace)
    if not (float(precision) > 0):
        raise StatsError(f"precision must be a positive standard error, got {precision!r}")
    if int(min_draws) < 2 or int(max_draws) < int(min_draws) or int(batch) < 1:
        raise StatsError(f"need 2 <= min_draws <= max_draws and batch >= 1, got {min_draws}, {max_draws}, "
                         f"{batch}")
    if int(max_outcomes) != max_outcomes or max_outcomes < 0:
        raise StatsError(f"max_outcomes must be a non-negative integer (0: always Monte-Carlo), got "
                         f"{max_outcomes!r}")
    pool = "the table's rows" if option_orders is None else pool_kind(option_orders)
    common = dict(k=k, replace=bool(replace), reading=reading, temperature=t, pool=pool)
    if linear:
        value = float(np.asarray(statistic(random_item_scores(p, v, reading=reading, temperature=t)[None]))[0])
        return ExpectationResult(value, 0.0, float("nan"), True, 0, 0, float(precision), True, note="closed form "
                                 "(statistic declared affine in the scores)", **common)
    supports = item_outcomes(p, v, k=k, reading=reading, temperature=t, replace=replace, limit=max_outcomes)
    if supports is not None:
        return _enumerated(supports, statistic, float(precision), common)
    gen = as_rng(rng)
    vals: list[np.ndarray] = []
    undefined = 0
    while True:
        x = draw_random_scores(p, v, int(batch), k=k, reading=reading, temperature=t, replace=replace, rng=gen)
        r = np.asarray(statistic(x), dtype=np.float64).reshape(-1)
        undefined += int((~np.isfinite(r)).sum())
        vals.append(r[np.isfinite(r)])
        allv = np.concatenate(vals)
        drawn = sum(len(a) for a in vals) + undefined
        se = float(allv.std(ddof=1) / math.sqrt(allv.size)) if allv.size >= 2 else float("inf")
        if drawn >= int(min_draws) and se <= precision or drawn >= int(max_draws):
            break
    reached = se <= precision
    note = "" if reached else (f"precision {precision} not reached after {drawn} draws (se {se:.3g}); raise "
                               "max_draws or accept a larger error")
    if not allv.size:
        return ExpectationResult(float("nan"), float("nan"), float("nan"), False, drawn, undefined,
                                 float(precision), False, note="the statistic is undefined in every draw", **common)
    return ExpectationResult(float(allv.mean()), se, float(allv.std(ddof=1)) if allv.size >= 2 else 0.0, False,
                             drawn, undefined, float(precision), reached, note=note, **common)


def item_outcomes(probs, values, *, k: int, reading: str = "greedy", temperature: float = 1.0,
                  replace: bool = True, limit: int = MAX_OUTCOMES):
    """Each item's exact distribution of its RANDOM(K) mean score, ``[(support, probabilities)]`` per item, or
    None when the joint outcomes (the product of the support sizes) exceed ``limit`` or cannot be enumerated
    cheaply (K > 1 drawn without replacement). Greedy / expected: the item's distinct prompt scores, each with
    the share of the item's rows that give it; 'sampled': each draw's answer is random too (the mixture of the
    rows' tempered distributions). K > 1 (with replacement): the mean of K independent such draws
    (:func:`mean_answer_distribution`, whose sums are rounded at 1e-9 so that equal means merge: exact for
    integer-valued greedy scores, within 1e-9 of each mean otherwise)."""
    p, v, reading, t = _inputs(probs, values, reading, temperature)
    k = _check_k(k, p.shape[1], replace)
    if limit < 1 or (k > 1 and not replace):
        return None
    if reading == "sampled":
        rows = tempered(p, t).mean(axis=1)  # [items, options]: one draw = a row, then its answer
        per_item = [(v, r) for r in rows]
    else:
        s = np.round(read_scores(p, v, reading=reading), 12)  # [items, pool]
        per_item = []
        for row in s:
            support, counts = np.unique(row, return_counts=True)
            per_item.append((support, counts / row.size))
    out, total = [], 1
    for support, prob in per_item:
        if k > 1:
            grid = np.unique(support)
            dist = np.zeros(grid.size)
            np.add.at(dist, np.searchsorted(grid, support), prob)
            support, prob = mean_answer_distribution(np.tile(dist, (k, 1)), grid, max_support=limit)
        keep = prob > 0
        out.append((support[keep], prob[keep]))
        total *= int(keep.sum())
        if total > limit:
            return None
    return out


def _enumerated(supports, statistic, precision: float, common: dict, chunk: int = 20000) -> ExpectationResult:
    """The exact expectation over every joint outcome of the items' ``supports`` (probability-weighted, in
    chunks of ``chunk`` outcomes), conditional on a defined statistic; ``sd`` is its exact spread over draws."""
    sizes = [len(a) for a, _ in supports]
    total = math.prod(sizes)
    mass = first = second = 0.0
    undefined, undefined_mass = 0, 0.0
    for start in range(0, total, chunk):
        digits = np.unravel_index(np.arange(start, min(start + chunk, total)), sizes)
        x = np.stack([a[d] for (a, _), d in zip(supports, digits)], axis=1)  # [outcomes, items]
        w = np.prod(np.stack([pr[d] for (_, pr), d in zip(supports, digits)], axis=1), axis=1)
        r = np.asarray(statistic(x), dtype=np.float64).reshape(-1)
        ok = np.isfinite(r)
        undefined += int((~ok).sum())
        undefined_mass += float(w[~ok].sum())
        mass, first, second = mass + w[ok].sum(), first + w[ok] @ r[ok], second + w[ok] @ (r[ok] ** 2)
    note = f"exact: every one of the {total:,} joint outcomes of the draws enumerated"
    if not mass > 0:
        return ExpectationResult(float("nan"), float("nan"), float("nan"), True, total, undefined, precision,
                                 True, note=note + "; the statistic is undefined in every outcome", **common)
    if undefined:
        note += f" (undefined with probability {undefined_mass:.3g}: the value is conditional on a defined one)"
    mean = first / mass
    return ExpectationResult(float(mean), 0.0, float(np.sqrt(max(second / mass - mean ** 2, 0.0))), True, total,
                             undefined, precision, True, note=note, **common)


def _item_support(s: np.ndarray, q: np.ndarray | None, v: np.ndarray, k: int, replace: bool):
    """Exact distribution of one item's mean of K draws: (support values, probabilities).

    ``s[pool]``: prompt scores (greedy/expected); with ``q[pool, options]`` (sampled) each draw's answer is
    random as well, so a draw with replacement is one value from the mixture of the rows' answer
    distributions, and without replacement every subset of rows is combined with every answer tuple."""
    n_pool = len(s) if q is None else len(q)
    if q is None:
        atoms, weights = [s], [np.full(n_pool, 1.0 / n_pool)]
    if replace:
        if q is not None:
            atoms, weights = [v], [q.mean(axis=0)]
        tuples = itertools.product(range(len(atoms[0])), repeat=k)
        pts = [(atoms[0][list(tup)].mean(), np.prod(weights[0][list(tup)])) for tup in tuples]
    else:
        subsets = list(itertools.combinations(range(n_pool), k))
        pts = []
        for sub in subsets:
            if q is None:
                pts.append((s[list(sub)].mean(), 1.0 / len(subsets)))
                continue
            for ans in itertools.product(range(len(v)), repeat=k):
                pr = np.prod([q[r, a] for r, a in zip(sub, ans)]) / len(subsets)
                if pr > 0:
                    pts.append((v[list(ans)].mean(), pr))
    x = np.round(np.array([a for a, _ in pts]), 12)
    w = np.array([b for _, b in pts])
    support, inv = np.unique(x, return_inverse=True)
    return support, np.bincount(inv.ravel(), weights=w)


def random_expectation_ref(probs, values, statistic, *, k: int, reading: str = "greedy",
                           temperature: float = 1.0, replace: bool = True, max_combinations: int = 5_000_000
                           ) -> float:
    """Exact E[statistic] over RANDOM(K) draws by enumerating every joint outcome of the items (the plain
    reference for :func:`random_expectation`; tiny tables only, refused above ``max_combinations``). Outcomes
    where the statistic is undefined are left out (the expectation is conditional on a defined statistic, as
    the Monte-Carlo estimate, which drops undefined replicates and counts them)."""
    p, v, reading, t = _inputs(probs, values, reading, temperature)
    k = _check_k(k, p.shape[1], replace)
    s = read_scores(p, v, reading="greedy" if reading == "greedy" else "expected")
    q = tempered(p, t) if reading == "sampled" else None
    sup = [_item_support(s[i], None if q is None else q[i], v, k, replace) for i in range(p.shape[0])]
    total = math.prod(len(a) for a, _ in sup)
    if total > max_combinations:
        raise StatsError(f"exact enumeration needs {total:,} joint outcomes (> {max_combinations:,}); use "
                         "random_expectation (Monte-Carlo with its standard error)")
    grids = np.meshgrid(*[a for a, _ in sup], indexing="ij")
    wgrid = np.meshgrid(*[w for _, w in sup], indexing="ij")
    x = np.stack([g.ravel() for g in grids], axis=1)  # [outcomes, items]
    w = np.prod(np.stack([g.ravel() for g in wgrid], axis=1), axis=1)
    r = np.asarray(statistic(x), dtype=np.float64)
    ok = np.isfinite(r)
    if not ok.any():
        raise StatsError("the statistic is undefined in every outcome")
    return float(w[ok] @ r[ok] / w[ok].sum())  # conditional on a defined statistic, as the Monte-Carlo drops NaN
