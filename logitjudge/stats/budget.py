"""Budget curves: human correlation as a function of the number of prompts K per item, per ordering strategy.

* FIXED(K): the canonical prompt K times (flat for 'expected'/'argmax' readings; 'draw' readings improve).
* RANDOM(K): K orderings drawn with replacement per item, averaged over ``n_draws`` random draws.
* BALANCED(K): K consecutive orderings of the balanced table (cyclic windows), averaged over all
  ``n_orderings`` window starts, so that no option is favoured by which rotation comes first.

``gain_fraction`` = (r(K) - r(1)) / (r(Kmax) - r(1)): the share of the full gain reached at K (the study's
claim: about 2/3 at K=3 and 85% at K=5). RANDOM vs BALANCED at equal K separates what averaging over orderings
buys (variance reduction, which RANDOM gets too) from what exact balancing adds (systematic cancellation of
the positional bias); FIXED is the no-averaging baseline.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._result import (
    BALANCED,
    InsufficientDataError,
    Result,
    ShapeError,
    StatsError,
    as_float,
    as_rng,
    check_choice,
    detect_design,
)
from .aggregation import _inputs, read_scores, select_orderings
from .alignment import METHODS, MIN_N, _corr, per_group_correlations, undefined_reason


@dataclass(frozen=True)
class GainResult(Result):
    """``fraction[j] = (r[j] - r[0]) / (r[-1] - r[0])``; NaN with ``defined=False`` when r[-1] == r[0]."""

    fraction: np.ndarray
    defined: bool
    reason: str
    r_first: float
    r_last: float


def gain_fraction(r, *, tol: float = 1e-12) -> GainResult:
    """Share of the full gain r(Kmax) - r(1) reached at each K of a curve ``r`` (r[0]: K=1, r[-1]: Kmax)."""
    a = as_float(r, "r")
    if a.ndim != 1 or a.size < 2:
        raise ShapeError(f"r must be a 1-D curve with at least 2 budgets, got shape {a.shape}")
    first, last = float(a[0]), float(a[-1])
    if not (np.isfinite(first) and np.isfinite(last)):
        return GainResult(np.full(a.size, np.nan), False, "r(1) or r(Kmax) is undefined", first, last)
    if abs(last - first) <= tol:
        return GainResult(np.full(a.size, np.nan), False,
                          f"no gain to share: r(Kmax) = r(1) = {first:.4g}", first, last)
    return GainResult((a - first) / (last - first), True, "", first, last)


@dataclass(frozen=True)
class BudgetCurveResult(Result):
    """Correlation with humans at each budget ``ks`` for each strategy (``curves``; ``curves_sd`` is the
    spread over random draws / balanced windows), the gain fraction per strategy, and the
    RANDOM/BALANCED/FIXED contrasts. ``variance_share`` = (RANDOM - FIXED) / (BALANCED - FIXED) at Kmax: the
    share of the balancing gain that plain averaging over random orderings also reaches."""

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


def _score_corr(x, y, method, level, groups) -> float:
    if level == "grouped":
        r = per_group_correlations(x, y, groups, method=method).statistic
        r = r[np.isfinite(r)]
        return float(r.mean()) if r.size else float("nan")
    return float("nan") if undefined_reason(x, y) else _corr(x, y, method)


def budget_curve(probs, values, option_orders, human, *, method: str = "pearson", level: str = "item",
                 groups=None, reading: str = "expected", k_max: int | None = None, strategies=None,
                 n_draws: int = 200, rng=None) -> BudgetCurveResult:
    """Correlation of K-prompt aggregated scores with ``human[item]`` for K = 1 .. k_max (default: all
    orderings).

    ``level`` 'item' (correlation over items) or 'grouped' (mean within-group correlation, needs ``groups``).
    BALANCED is left out (noted) when the table's orderings are not balanced.
    """
    p, v, orders = _inputs(probs, values, option_orders)
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
    check_choice("reading", reading, ("expected", "argmax", "draw"))
    if level == "grouped" and groups is None:
        raise StatsError("level='grouped' needs groups (one label per item)")
    if int(n_draws) != n_draws or n_draws < 1:
        raise StatsError(f"n_draws must be a positive integer, got {n_draws!r}")
    rng = as_rng(rng)
    n_items, n_ord = p.shape[:2]
    k_max = n_ord if k_max is None else int(k_max)
    if k_max < 2:
        raise InsufficientDataError("a budget curve needs k_max >= 2 (the table has a single ordering?)")
    notes = []
    balanced_ok = detect_design(orders) == BALANCED
    if strategies is None:
        strategies = ("fixed", "random", "balanced") if balanced_ok else ("fixed", "random")
        if not balanced_ok:
            notes.append("orderings are not balanced: no BALANCED curve")
    for s in strategies:
        check_choice("strategy", s, ("fixed", "random", "balanced"))
    if "balanced" in strategies and k_max > n_ord:
        raise StatsError(f"k_max={k_max} exceeds the {n_ord} orderings available to BALANCED")
    ks = np.arange(1, k_max + 1)
    prompt_scores = None if reading == "draw" else read_scores(p, v, reading=reading)  # [items, orderings]

    def corr_of(idx):
        if prompt_scores is not None:
            x = np.take_along_axis(prompt_scores, idx, axis=1).mean(axis=1)
        else:
            chosen = np.take_along_axis(p, idx[:, :, None], axis=1)
            x = read_scores(chosen, v, reading="draw", rng=rng).mean(axis=1)
        return _score_corr(x, y, method, level, groups)

    curves, sds = {}, {}
    for s in strategies:
        mean, sd = np.full(k_max, np.nan), np.zeros(k_max)
        for j, k in enumerate(ks):
            if s == "fixed":
                reps = [corr_of(select_orderings(orders, n_items, strategy="fixed", k=k))
                        for _ in range(1 if prompt_scores is not None else n_draws)]
            elif s == "random":
                reps = [corr_of(select_orderings(orders, n_items, strategy="random", k=k, rng=rng))
                        for _ in range(n_draws)]
            else:
                reps = [corr_of(select_orderings(orders, n_items, strategy="balanced", k=k, offset=o))
                        for o in range(n_ord)]
            reps = np.asarray(reps)
            ok = reps[np.isfinite(reps)]
            if ok.size:
                mean[j], sd[j] = ok.mean(), ok.std()
            else:
                notes.append(f"{s} K={k}: correlation undefined in every replicate")
        curves[s], sds[s] = mean, sd
    gain = {s: gain_fraction(curves[s]) for s in strategies}
    nan = np.full(k_max, np.nan)
    rmf = curves["random"] - curves["fixed"] if {"random", "fixed"} <= set(strategies) else nan
    bmr = curves["balanced"] - curves["random"] if {"random", "balanced"} <= set(strategies) else nan
    share, share_ok, why = float("nan"), False, "needs FIXED, RANDOM and BALANCED curves"
    if {"fixed", "random", "balanced"} <= set(strategies):
        den = curves["balanced"][-1] - curves["fixed"][-1]
        if np.isfinite(den) and abs(den) > 1e-12:
            share, share_ok, why = float((curves["random"][-1] - curves["fixed"][-1]) / den), True, ""
        else:
            why = "BALANCED and FIXED correlate equally at Kmax: no balancing gain to share"
    return BudgetCurveResult(ks, curves, sds, gain, rmf, bmr, share, share_ok, why, method, level, reading,
                             int(n_draws), tuple(notes))
