"""Budget curves: human correlation as a function of the number of prompts K per item, per ordering strategy.

* FIXED(K): the canonical prompt K times (flat for 'greedy'/'expected' readings; under 'sampled' the K
  answers are independent draws, Monte-Carlo).
* RANDOM(K): the study's RANDOM, K orders drawn uniformly per item (with replacement by default) from the
  item's rows, as an expectation over the draws (:mod:`.expectation`): Monte-Carlo until its standard error
  (``curves_se``) is at most ``precision``. Exactly the study's RANDOM on a table with all n! orders; an
  estimate of it from per-item random orders (of a balanced+random table: its random rows only); on a shared
  or balanced set only the rows it holds (noted).
* BALANCED(K): K consecutive orders of the study's 2n cyclic rotations (cyclic windows), averaged over all 2n
  window starts so that no option is favoured by which rotation comes first. On a table with all n! orders
  (or balanced+random) the balanced rows are picked out of it.

Gains with their sign: ``gain_over_fixed[s][K] = r_s(K) - r_FIXED(1)``, with percentile bootstrap CIs over
items (groups at the grouped level) at K = 3, 5 and Kmax. The share of the full gain, ``gain[s].fraction[K] =
gain_s(K) / gain_s(Kmax)``, is reported only where the full gain is positive and its CI excludes 0 (the study's
"about 2/3 at K=3, 85% at K=5" is about judges that benefit); elsewhere it is undefined with the reason.
RANDOM vs BALANCED at equal K separates what averaging over orderings buys (variance reduction, which RANDOM
gets too) from what exact balancing adds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._result import (
    DesignError,
    InsufficientDataError,
    Result,
    ShapeError,
    StatsError,
    as_float,
    as_rng,
    bootstrap_indices,
    canonical_index,
    check_choice,
    check_confidence,
    check_n_boot,
    percentile_ci,
    weights_from_indices,
)
from .aggregation import _inputs, balanced_rows
from .alignment import METHODS, MIN_N, _corr_rows
from .expectation import (
    DEFAULT_PRECISION,
    ExpectationResult,
    draw_random_scores,
    random_expectation,
    random_rows,
)
from .readings import check_reading, draw_answers, read_scores, tempered

REPORT_KS = (3, 5)


@dataclass(frozen=True)
class GainResult(Result):
    """Share of the full gain: ``fraction[j] = (r[j] - baseline) / (r[-1] - baseline)`` (baseline r[0] unless
    given). Defined only when the full gain ``r[-1] - baseline`` is positive and, when a CI is given, its lower
    bound is above 0; else ``fraction`` is NaN, ``defined`` False and ``reason`` says why."""

    fraction: np.ndarray
    defined: bool
    reason: str
    r_first: float
    r_last: float
    full_gain: float = float("nan")
    full_gain_ci_low: float = float("nan")
    full_gain_ci_high: float = float("nan")


def gain_fraction(r, *, baseline: float | None = None, ci=None, tol: float = 1e-12) -> GainResult:
    """Share of the full gain r(Kmax) - baseline reached at each K of a curve ``r`` (r[0]: K=1, r[-1]: Kmax;
    baseline r[0] by default, r_FIXED(1) in budget curves). A falling or flat correlation, or a gain whose
    ``ci`` (low, high) includes 0, has no share (the study's shares are for judges that benefit)."""
    a = as_float(r, "r")
    if a.ndim != 1 or a.size < 2:
        raise ShapeError(f"r must be a 1-D curve with at least 2 budgets, got shape {a.shape}")
    first = float(a[0] if baseline is None else baseline)
    last = float(a[-1])
    lo, hi = (float("nan"), float("nan")) if ci is None else (float(ci[0]), float(ci[1]))
    full = last - first

    def undefined(why):
        return GainResult(np.full(a.size, np.nan), False, why, first, last, full, lo, hi)

    if not (np.isfinite(first) and np.isfinite(last)):
        return undefined("r(1) or r(Kmax) is undefined")
    if abs(full) <= tol:
        return undefined(f"no gain to share: r(Kmax) = r(1) = {first:.4g}")
    if full < 0:
        return undefined(f"the correlation falls from {first:.4g} to {last:.4g}: a loss, not a gain to share")
    if ci is not None and not lo > 0:
        return undefined(f"the gain {full:.4g} has a CI [{lo:.4g}, {hi:.4g}] that does not exclude 0")
    return GainResult((a - first) / full, True, "", first, last, full, lo, hi)


@dataclass(frozen=True)
class BudgetCurveResult(Result):
    """Correlation with humans at each budget ``ks`` per strategy (``curves``), the Monte-Carlo standard error of
    each point (``curves_se``, 0 where exact), whether each point is exact (``curves_exact``: deterministic
    window means, RANDOM's enumerated K=1 expectation; else Monte-Carlo) and the spread over draws / balanced
    windows (``curves_sd``).

    ``gain_over_fixed[s]``: r_s(K) - r_FIXED(1) per K; ``gain_ci[s]``: {"K=k": [low, high]} bootstrap CIs at
    K = 3, 5, Kmax; ``gain[s]``: :class:`GainResult`, the share of the full gain (defined only for a positive
    gain whose CI excludes 0). ``variance_share`` = (RANDOM - FIXED) / (BALANCED - FIXED) at Kmax.
    ``reading`` / ``temperature`` say how each prompt was read, ``pool`` what RANDOM draws from.
    """

    ks: np.ndarray
    curves: dict
    curves_sd: dict
    gain: dict
    random_minus_fixed: np.ndarray
    balanced_minus_random: np.ndarray
    variance_share: float
    variance_share_defined: bool
    variance_share_reason: str
    method: str
    level: str
    reading: str
    n_draws: int
    notes: tuple[str, ...]
    curves_se: dict | None = None
    gain_over_fixed: dict | None = None
    gain_ci: dict | None = None
    temperature: float = 1.0
    precision: float = DEFAULT_PRECISION
    replace: bool = True
    pool: str = ""
    confidence_level: float = 0.95
    curves_exact: dict | None = None


class CorrelationStatistic:
    """The correlation of replicate score vectors ``x[B, items]`` with the human scores ``human[items]``, at
    item level (``groups=None``) or as the mean within-group correlation (``groups``: one label per item);
    calling it gives ``[B]``; ``boot`` gives its bootstrap replicates (items or whole groups). The statistic
    :func:`~logitjudge.stats.random_expectation` takes for RANDOM's expected correlation."""

    def __init__(self, human, *, method: str = "pearson", groups=None):
        check_choice("method", method, METHODS)
        y = as_float(human, "human")
        if y.ndim != 1 or not np.all(np.isfinite(y)):
            raise StatsError(f"human must be 1-D finite scores, one per item (shape {y.shape})")
        if groups is not None and len(groups) != len(y):
            raise ShapeError(f"groups has {len(groups)} labels for {len(y)} items")
        level = "item" if groups is None else "grouped"
        self.y, self.method, self.level = y, method, level
        if level == "grouped":
            names, inv = np.unique(np.asarray(groups).astype(str), return_inverse=True)
            self.members = [np.flatnonzero(inv.ravel() == j) for j in range(len(names))]

    def _per_group(self, x):  # [B, groups], NaN where a group's correlation is undefined
        out = np.full((x.shape[0], len(self.members)), np.nan)
        for j, m in enumerate(self.members):
            if m.size >= MIN_N:
                out[:, j] = _corr_rows(x[:, m], np.broadcast_to(self.y[m], (x.shape[0], m.size)), self.method)
        return out

    def __call__(self, x):
        x = np.atleast_2d(x)
        if self.level == "item":
            return _corr_rows(x, np.broadcast_to(self.y, x.shape), self.method)
        g = self._per_group(x)
        ok = np.isfinite(g)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(ok, g, 0).sum(axis=1) / ok.sum(axis=1)  # NaN where no group is defined

    def boot(self, x, idx):
        """[n_boot]: mean over replicates ``x[R, items]`` of the statistic on each bootstrap resample."""
        if self.level == "grouped":
            g = self._per_group(x)  # [R, G]
            w = weights_from_indices(idx, g.shape[1])  # [B, G]
            ok = np.isfinite(g)
            with np.errstate(invalid="ignore", divide="ignore"):
                per = (w @ np.where(ok, g, 0).T) / (w @ ok.T)  # [B, R]
            return np.nanmean(per, axis=1)
        if self.method == "pearson":  # weighted sums: one matrix product per moment, no resampled copies
            w = weights_from_indices(idx, x.shape[1])  # [B, items]
            n, y = x.shape[1], self.y
            sx, sxx, sxy = w @ x.T, w @ (x * x).T, w @ (x * y).T  # [B, R]
            sy, syy = (w @ y)[:, None], (w @ (y * y))[:, None]
            with np.errstate(invalid="ignore", divide="ignore"):
                r = (n * sxy - sx * sy) / np.sqrt((n * sxx - sx**2) * (n * syy - sy**2))
            return np.nanmean(np.where(np.isfinite(r), np.clip(r, -1, 1), np.nan), axis=1)
        out = np.zeros(idx.shape[0])
        x = x[:20]  # rank correlations resample each replicate: 20 replicates bound the cost
        for r in range(x.shape[0]):
            with np.errstate(invalid="ignore"):
                out += np.nan_to_num(_corr_rows(x[r][idx], self.y[idx], self.method), nan=0.0)
        return out / x.shape[0]


def _mc(draw, stat, min_draws, max_draws, precision, keep=200, batch=200):
    """Monte-Carlo mean of ``stat(draw(B))`` until its standard error <= precision: (mean, se, sd, kept), kept
    being up to ``keep`` of the drawn replicate score vectors (for the bootstrap)."""
    vals, kept, n = [], [], 0
    while True:
        x = draw(batch)
        r = stat(x)
        ok = np.isfinite(r)
        vals.append(r[ok])
        if sum(len(k) for k in kept) < keep:
            kept.append(x[ok][: keep - sum(len(k) for k in kept)])
        n += batch
        allv = np.concatenate(vals)
        se = allv.std(ddof=1) / np.sqrt(allv.size) if allv.size >= 2 else np.inf
        if (n >= min_draws and se <= precision) or n >= max_draws:
            break
    if not allv.size:
        return np.nan, np.nan, np.nan, np.zeros((0,) + x.shape[1:])
    return float(allv.mean()), float(se), float(allv.std()), np.concatenate(kept)


def _check_budget_args(p, human, method, level, groups, n_draws) -> np.ndarray:
    y = as_float(human, "human")
    if y.ndim != 1 or not np.all(np.isfinite(y)):
        raise ShapeError(f"human must be a 1-D array of finite scores, got shape {y.shape}")
    if len(y) != p.shape[0]:
        raise ShapeError(f"human has {len(y)} scores for {p.shape[0]} items; align them first (align_human)")
    if len(y) < MIN_N:
        raise InsufficientDataError(f"a budget curve needs at least {MIN_N} items with human scores, "
                                    f"got {len(y)}")
    check_choice("method", method, METHODS)
    check_choice("level", level, ("item", "grouped"))
    if level == "grouped" and groups is None:
        raise StatsError("level='grouped' needs groups (one label per item)")
    if int(n_draws) != n_draws or n_draws < 2:
        raise StatsError(f"n_draws must be an integer >= 2, got {n_draws!r}")
    return y


def budget_curve(probs, values, option_orders, human, *, method: str = "pearson", level: str = "item",
                 groups=None, reading: str = "expected", temperature: float = 1.0, k_max: int | None = None,
                 strategies=None, n_draws: int = 200, precision: float = DEFAULT_PRECISION,
                 max_draws: int = 20000, replace: bool = True, n_boot: int = 1000, confidence: float = 0.95,
                 random_first: ExpectationResult | None = None, rng=None) -> BudgetCurveResult:
    """Correlation of K-prompt aggregated scores with ``human[item]`` for K = 1 .. k_max (see the module doc).

    ``level`` 'item' (correlation over items) or 'grouped' (mean within-group correlation, needs ``groups``).
    ``k_max`` defaults to the number of orderings, or 2n (the balanced budget) when the table holds more orders
    than the balanced ones (all n!, balanced+random). Monte-Carlo points use at least ``n_draws`` draws and stop
    at standard error ``precision`` (or ``max_draws``). BALANCED is left out (noted) when the table holds no
    balanced rows; FIXED when per-item orders have no common canonical row. RANDOM at K=1 is
    :func:`~logitjudge.stats.random_expectation` (exact where the draws have at most 1e6 joint outcomes, else
    Monte-Carlo); ``random_first`` passes one already computed (the same statistic on the same rows: the
    analysis passes the alignment section's, so that one estimate is printed in both places).
    """
    p, v, orders = _inputs(probs, values, option_orders)
    y = _check_budget_args(p, human, method, level, groups, n_draws)
    reading = check_reading(reading)
    if random_first is not None and (random_first.k != 1 or random_first.reading != reading):
        raise StatsError(f"random_first must be RANDOM's K=1 expectation under the {reading} reading, got K="
                         f"{random_first.k} under {random_first.reading}")
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    rng = as_rng(rng)
    n_items, n_ord, n = p.shape
    bal_rows = balanced_rows(orders)
    if k_max is None:
        k_max = n_ord if bal_rows is None or len(bal_rows) == n_ord else len(bal_rows)
    k_max = int(k_max)
    if k_max < 2:
        raise InsufficientDataError("a budget curve needs k_max >= 2 (the table has a single ordering?)")
    notes = []
    if strategies is None:
        strategies = ["fixed", "random", "balanced"]
        if bal_rows is None:
            strategies.remove("balanced")
            notes.append("orderings are not balanced: no BALANCED curve")
        try:
            canonical_index(orders)
        except DesignError as e:
            strategies.remove("fixed")
            notes.append(f"no FIXED curve: {e}")
    strategies = tuple(strategies)
    for s in strategies:
        check_choice("strategy", s, ("fixed", "random", "balanced"))
    if "balanced" in strategies and (bal_rows is None or k_max > len(bal_rows)):
        raise StatsError(f"k_max={k_max} exceeds the {0 if bal_rows is None else len(bal_rows)} balanced "
                         "orderings available to BALANCED")
    canon = canonical_index(orders) if "fixed" in strategies else 0
    pool_rows, pool = random_rows(orders)  # balanced+random: RANDOM draws from the random rows only
    p_random = p[:, pool_rows]
    if "random" in strategies and pool != "all orders":
        notes.append(f"RANDOM draws from the table's {pool}" + ("" if pool == "per-item random orders" else
                     ": not uniformly random permutations (score with --orderings all or random:K)"))
    stat = CorrelationStatistic(y, method=method, groups=groups if level == "grouped" else None)
    exact_scores = None if reading == "sampled" else read_scores(p, v, reading=reading)  # [items, orderings]
    ks = np.arange(1, k_max + 1)
    mc_kw = dict(reading=reading, temperature=temperature)

    q = tempered(p, temperature) if reading == "sampled" else None

    def windows(s, k):  # [W, k] rows of each deterministic replicate
        if s == "fixed":
            return np.full((1, k), canon)
        return np.stack([bal_rows[(o + np.arange(k)) % len(bal_rows)] for o in range(len(bal_rows))])

    def replicates(s, k):
        """(value, se, sd, kept replicate score vectors [R, items]) of strategy s at budget k."""
        if s == "random" and k == 1:  # exact where the draws can be enumerated; one estimate with the caller's
            e = random_first or random_expectation(p_random, v, stat, k=1, replace=replace, precision=precision,
                                                   min_draws=n_draws, max_draws=max_draws, rng=rng, **mc_kw)
            return e.value, e.se, e.sd, None, e.exact
        if s == "random":
            def draw(b):
                return draw_random_scores(p_random, v, b, k=k, replace=replace, rng=rng, **mc_kw)
        elif exact_scores is not None:
            x = exact_scores[:, windows(s, k)].mean(axis=2).T  # [windows, items]
            r = stat(x)
            ok = r[np.isfinite(r)]
            return (float(ok.mean()) if ok.size else np.nan, 0.0, float(ok.std()) if ok.size else 0.0, x, True)
        else:  # sampled FIXED / BALANCED: a uniformly chosen window, each prompt's answer drawn
            rows = windows(s, k)

            def draw(b):
                w = rows[rng.integers(0, len(rows), size=b)]  # [b, k]
                return v[draw_answers(q[:, w], rng)].mean(axis=2).T  # [b, items]
        return (*_mc(draw, stat, n_draws, max_draws, precision), False)

    curves, ses, sds, kept, exact = {}, {}, {}, {}, {}
    report = sorted({k for k in REPORT_KS if k <= k_max} | {k_max})
    for s in strategies:
        mean, se, sd = np.full(k_max, np.nan), np.zeros(k_max), np.zeros(k_max)
        exact[s] = np.zeros(k_max, dtype=bool)
        for j, k in enumerate(ks):
            mean[j], se[j], sd[j], x, exact[s][j] = replicates(s, k)
            if k in report or (s == "fixed" and k == 1):
                kept[s, k] = x
            if not np.isfinite(mean[j]):
                notes.append(f"{s} K={k}: correlation undefined in every replicate")
        curves[s], ses[s], sds[s] = mean, se, sd
    base = curves["fixed"][0] if "fixed" in strategies else np.nan
    gain_over = {s: curves[s] - base for s in strategies}
    gain_ci = _gain_cis(stat, kept, strategies, report, n_items, level, n_boot, confidence, rng)
    gain = _shares(curves, gain_ci, strategies, k_max)
    nan = np.full(k_max, np.nan)
    rmf = curves["random"] - curves["fixed"] if {"random", "fixed"} <= set(strategies) else nan
    bmr = curves["balanced"] - curves["random"] if {"random", "balanced"} <= set(strategies) else nan
    share, share_ok, why = float("nan"), False, "needs FIXED, RANDOM and BALANCED curves"
    if {"fixed", "random", "balanced"} <= set(strategies):
        den = curves["balanced"][-1] - curves["fixed"][-1]
        if np.isfinite(den) and den > 1e-12:
            share, share_ok, why = float((curves["random"][-1] - curves["fixed"][-1]) / den), True, ""
        elif np.isfinite(den) and den < -1e-12:
            why = "BALANCED correlates less than FIXED at Kmax: a loss, not a balancing gain to share"
        else:
            why = "BALANCED and FIXED correlate equally at Kmax: no balancing gain to share"
    return BudgetCurveResult(ks, curves, sds, gain, rmf, bmr, share, share_ok, why, method, level, reading,
                             int(n_draws), tuple(notes), ses, gain_over, gain_ci, float(temperature),
                             float(precision), bool(replace), pool, confidence, exact)



def _gain_cis(stat, kept, strategies, report, n_items, level, n_boot, confidence, rng) -> dict:
    """{strategy: {"K=k": [low, high]}}: percentile bootstrap CIs of r_s(k) - r_FIXED(1), both computed on the
    same resamples of items (whole groups at the grouped level)."""
    if not n_boot or "fixed" not in strategies:
        return {}
    units = n_items if level == "item" else len(stat.members)
    idx = bootstrap_indices(units, n_boot, rng)
    base_b = stat.boot(kept["fixed", 1], idx)
    return {s: {f"K={k}": list(percentile_ci(stat.boot(kept[s, k], idx) - base_b, confidence)) for k in report}
            for s in strategies}


def _shares(curves, gain_ci, strategies, k_max) -> dict:
    """{strategy: GainResult}: the share of the gain over FIXED(1), only for a positive gain whose CI at Kmax
    excludes 0."""
    gain = {}
    for s in strategies:
        if "fixed" not in strategies:
            gain[s] = GainResult(np.full(k_max, np.nan), False, "no FIXED curve: the gain is measured over FIXED "
                                 "at K=1", float("nan"), float(curves[s][-1]))
            continue
        ci = gain_ci.get(s, {}).get(f"K={k_max}")
        g = gain_fraction(curves[s], baseline=curves["fixed"][0], ci=ci)
        if ci is None and g.defined:
            g = GainResult(np.full(k_max, np.nan), False, "no bootstrap CI of the gain (n_boot=0): a share is "
                           "reported only for a gain whose CI excludes 0", g.r_first, g.r_last, g.full_gain)
        gain[s] = g
    return gain
