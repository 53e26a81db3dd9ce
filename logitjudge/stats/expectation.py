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
  when the statistic is declared affine (``linear=True``), else Monte-Carlo over independent draws until its
  standard error is at most ``precision``; the result carries the estimate, its standard error, the number of
  draws and whether the precision was reached. One ``rng`` seed gives the same number every time.
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
    as_rng,
    check_distributions,
    detect_design,
    has_all_orders,
)
from .readings import answer_probs, check_reading, draw_answers, read_scores, tempered

DEFAULT_PRECISION = 0.005  # standard error of a Monte-Carlo RANDOM figure (e.g. a correlation), unless asked


def pool_kind(option_orders) -> str:
    """What a uniform draw among an item's rows is: 'all orders' (exactly a uniform random permutation),
    'per-item random orders' (an estimate of one), 'balanced orders', 'shared orders' or 'fixed order'."""
    if has_all_orders(option_orders):
        return "all orders"
    return {PER_ITEM_RANDOM: "per-item random orders", BALANCED: "balanced orders", SHARED_RANDOM: "shared orders",
            FIXED: "fixed order"}[detect_design(option_orders)]


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

    ``exact`` True: closed form (``se`` 0). Otherwise ``value`` is the mean of ``n_draws`` Monte-Carlo
    replicates and ``se`` its standard error (sd / sqrt(draws)); ``reached`` says whether ``se <= precision``.
    Replicates where the statistic is undefined (NaN) are dropped and counted in ``n_undefined`` (the value is
    then the expectation conditional on a defined statistic). ``pool`` is
    what the draws are taken from (see :func:`pool_kind`), ``replace`` the draw scheme.
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
                       rng=None) -> ExpectationResult:
    """Expectation over RANDOM(K) draws of ``statistic(x)``, where ``x[draw, item]`` are the per-item mean
    scores of K orders drawn uniformly per item and ``statistic`` maps ``[B, items] -> [B]``.

    ``linear=True`` declares the statistic affine in ``x`` (a mean score, a share): the exact value is then the
    statistic of :func:`random_item_scores` (closed form, ``se`` 0; not for 'sampled' with a nonlinear map of
    one answer). Otherwise Monte-Carlo: batches of ``batch`` replicates until at least ``min_draws`` are
    drawn and the standard error is at most ``precision`` (or ``max_draws`` is reached: ``reached`` False and
    a note). ``option_orders`` (optional) only names the pool in the result.
    """
    p, v, reading, t = _inputs(probs, values, reading, temperature)
    k = _check_k(k, p.shape[1], replace)
    if not (float(precision) > 0):
        raise StatsError(f"precision must be a positive standard error, got {precision!r}")
    if int(min_draws) < 2 or int(max_draws) < int(min_draws) or int(batch) < 1:
        raise StatsError(f"need 2 <= min_draws <= max_draws and batch >= 1, got {min_draws}, {max_draws}, "
                         f"{batch}")
    pool = "the table's rows" if option_orders is None else pool_kind(option_orders)
    if linear:
        value = float(np.asarray(statistic(random_item_scores(p, v, reading=reading, temperature=t)[None]))[0])
        return ExpectationResult(value, 0.0, float("nan"), True, 0, 0, float(precision), True, k, bool(replace),
                                 reading, t, pool, "closed form (statistic declared affine in the scores)")
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
                                 float(precision), False, k, bool(replace), reading, t, pool,
                                 "the statistic is undefined in every draw")
    return ExpectationResult(float(allv.mean()), se, float(allv.std(ddof=1)) if allv.size >= 2 else 0.0, False,
                             drawn, undefined, float(precision), reached, k, bool(replace), reading, t, pool,
                             note)


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
