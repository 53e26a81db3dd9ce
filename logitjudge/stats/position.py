"""Position preference: which *position* a judge favours, from exact option distributions.

Arrays (one criterion at a time):

* ``probs[item, ordering, option]`` - canonical option order, rows sum to 1 (``ScoreTable.probs[:, c]``);
* ``option_orders[ordering, position]`` - canonical option shown at each position;
* ``pbp[item, ordering, position]`` - ``probs_by_position(probs, option_orders)``.

Designs are detected from ``option_orders``: *balanced* (``is_balanced``: every option equally often at every
position), *fixed* (every row identical), else *random*.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from ..orderings import inverse
from ._result import (
    BALANCED,
    FIXED,
    RANDOM,
    ConfoundedDesignWarning,
    DesignError,
    RandomDesignWarning,
    Result,
    ShapeError,
    StatsError,
    as_array,
    as_float,
    as_rng,
    bootstrap_weights,
    check_choice,
    check_confidence,
    check_distributions,
    check_n_boot,
    check_orders,
    detect_design,
    mean_over_units,
    need_items,
    percentile_ci,
    softmax,
)

LABELS = ("first", "last", "middle", "none")


def probs_by_position(probs, option_orders) -> np.ndarray:
    """``[..., ordering, position]``: probability of the option shown at each position.

    ``probs`` is ``[..., ordering, option]`` in canonical order (any leading axes, e.g. items and criteria).
    """
    p = as_float(probs, "probs")
    if p.ndim < 2:
        raise ShapeError(f"probs must be at least 2-D [..., orderings, options], got shape {p.shape}")
    o = check_orders(option_orders, p.shape[-2], p.shape[-1])
    return np.take_along_axis(p, np.broadcast_to(o, p.shape), axis=-1)


def probs_from_positions(pbp, option_orders) -> np.ndarray:
    """Inverse of :func:`probs_by_position`: ``[..., ordering, position]`` back to canonical option order."""
    p = as_float(pbp, "pbp")
    if p.ndim < 2:
        raise ShapeError(f"pbp must be at least 2-D [..., orderings, positions], got shape {p.shape}")
    o = check_orders(option_orders, p.shape[-2], p.shape[-1])
    return np.take_along_axis(p, np.broadcast_to(inverse(o), p.shape), axis=-1)


def _pbp(pbp, name="pbp") -> np.ndarray:
    a = as_array(pbp, name, 3, "[items, orderings, positions]")
    check_distributions(a, name)
    if a.shape[2] < 2:
        raise ShapeError(f"{name} has {a.shape[2]} position; position preference needs at least 2 options")
    return a


# ---- mean positional distribution --------------------------------------------------------------------------
@dataclass(frozen=True)
class PositionDistributionResult(Result):
    """Exact mean probability of each position over items and orderings, with bootstrap CIs over items."""

    distribution: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    uniform: float
    n_items: int
    n_orderings: int
    confidence_level: float


def position_distribution(pbp, *, n_boot: int = 1000, confidence: float = 0.95, rng=None
                          ) -> PositionDistributionResult:
    """Mean of ``pbp`` over items and orderings (descriptive: a FIXED design mixes content and position)."""
    a = _pbp(pbp)
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    per_item = a.mean(axis=1)
    dist = per_item.mean(axis=0)
    if n_boot:
        need_items(a.shape[0], 2, "a bootstrap CI over items")
        lo, hi = percentile_ci(mean_over_units(per_item, n_boot, rng), confidence)
    else:
        lo = hi = np.full_like(dist, np.nan)
    return PositionDistributionResult(dist, lo, hi, 1.0 / a.shape[2], a.shape[0], a.shape[1], confidence)


# ---- chi-square goodness of fit on chosen positions --------------------------------------------------------
@dataclass(frozen=True)
class PositionChiSquareResult(Result):
    """Chi-square goodness of fit of the chosen positions against uniform, Cramér's V and a direction label.

    ``label`` is 'first' / 'last' / 'middle' for the position with the largest share when the test rejects at
    ``alpha`` and that share's CI lies above ``1/n``; otherwise 'none' (``label_reason`` says why).
    """

    statistic: float
    pvalue: float
    dof: int
    n: float
    counts: np.ndarray
    expected: np.ndarray
    shares: np.ndarray
    share_ci_low: np.ndarray
    share_ci_high: np.ndarray
    cramers_v: float
    cramers_v_ci_low: float
    cramers_v_ci_high: float
    label: str
    label_reason: str
    design: str
    reading: str
    alpha: float
    confidence_level: float


def cramers_v_gof(chi2, n, k):
    """Cramér's V for a goodness-of-fit test: sqrt(chi2 / (N (k - 1)))."""
    chi2, n = as_float(chi2, "chi2"), as_float(n, "n")
    if k < 2 or np.any(n <= 0) or np.any(chi2 < 0):
        raise StatsError(f"Cramér's V needs chi2 >= 0, N > 0 and k >= 2 categories, got k={k}")
    return np.sqrt(chi2 / (n * (k - 1)))


def chosen_positions(pbp, *, reading: str = "argmax", rng=None, tol: float = 1e-12) -> np.ndarray:
    """``[items, orderings, positions]`` weights of the position each prompt chooses (each prompt sums to 1).

    'argmax': the most probable position; exact ties split the prompt equally between the tied positions (a
    first-index tie-break would itself favour position 0). 'draw': one position drawn from the exact
    distribution with ``rng`` (a sampling judge).
    """
    a = _pbp(pbp)
    check_choice("reading", reading, ("argmax", "draw"))
    if reading == "argmax":
        top = (a >= a.max(axis=2, keepdims=True) - tol).astype(np.float64)
        return top / top.sum(axis=2, keepdims=True)
    u = as_rng(rng).random(a.shape[:2] + (1,))
    pos = np.minimum((u > np.cumsum(a, axis=2)).sum(axis=2), a.shape[2] - 1)
    return np.eye(a.shape[2])[pos]


def _check_design(design: str, allow_confounded: bool, what: str) -> None:
    if design == FIXED:
        if not allow_confounded:
            raise DesignError(f"{what}: the orderings are FIXED (every prompt shows the options in the same "
                              "order), so score and position are confounded; score under balanced orderings, "
                              "or pass allow_confounded=True to compute it anyway")
        warnings.warn(f"{what} on a FIXED design: position is confounded with content",
                      ConfoundedDesignWarning, stacklevel=3)
    elif design == RANDOM:
        warnings.warn(f"{what} on a RANDOM design: valid in expectation, but content x position confounding "
                      "adds variance; balanced orderings give an exact null", RandomDesignWarning,
                      stacklevel=3)


def position_label(shares, ci_low, pvalue: float, alpha: float) -> tuple[str, str]:
    """Direction label from the shares, their CI lower bounds and the test's p-value (see the result doc)."""
    shares = as_float(shares, "shares")
    n = shares.size
    if n < 2 or not isinstance(pvalue, (int, float, np.number)):
        raise StatsError(f"position_label needs >= 2 shares and a numeric p-value, got {n} and {pvalue!r}")
    if not pvalue < alpha:
        return "none", f"not significant (p = {pvalue:.3g} >= alpha = {alpha})"
    top = int(np.argmax(shares))
    low = float(np.asarray(ci_low)[top])
    if np.isfinite(low) and not low > 1.0 / n:
        return "none", (f"significant, but the CI of the largest share (position {top}) does not lie above "
                        f"1/{n}")
    where = "first" if top == 0 else "last" if top == n - 1 else "middle"
    return where, f"position {top} has the largest share" + ("" if np.isfinite(low) else " (no bootstrap CI)")


def position_chisquare(pbp, option_orders, *, reading: str = "argmax", alpha: float = 0.05,
                       n_boot: int = 1000, confidence: float = 0.95, rng=None, allow_confounded: bool = False
                       ) -> PositionChiSquareResult:
    """Chi-square test (``scipy.stats.chisquare``) that the chosen positions are uniform.

    Balanced design: a judge without position preference chooses every position equally often, so the test is
    valid (and conservative, because items' distributions differ: counts are less variable than multinomial).
    Random design: valid in expectation, but content x position confounding adds variance (warns).
    Fixed design: position is confounded with content; refused unless ``allow_confounded=True`` (then warns).
    Cramér's V and the position shares get percentile bootstrap CIs over items (``n_boot=0`` skips them).
    """
    a = _pbp(pbp)
    orders = check_orders(option_orders, a.shape[1], a.shape[2])
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    rng = as_rng(rng)
    design = detect_design(orders)
    _check_design(design, allow_confounded, "position chi-square")
    per_item = chosen_positions(a, reading=reading, rng=rng).sum(axis=1)  # [items, positions]
    counts = per_item.sum(axis=0)
    n_total, k = float(counts.sum()), a.shape[2]
    test = sps.chisquare(counts)
    chi2, p = float(test.statistic), float(test.pvalue)
    v = float(cramers_v_gof(chi2, n_total, k))
    share = counts / n_total
    if n_boot:
        need_items(a.shape[0], 2, "a bootstrap CI over items")
        cb = bootstrap_weights(a.shape[0], n_boot, rng) @ per_item
        exp = n_total / k  # every item contributes the same number of prompts, so N is fixed across resamples
        vb = cramers_v_gof(((cb - exp) ** 2 / exp).sum(axis=1), n_total, k)
        v_lo, v_hi = percentile_ci(vb, confidence)
        s_lo, s_hi = percentile_ci(cb / n_total, confidence)
    else:
        v_lo = v_hi = float("nan")
        s_lo = s_hi = np.full(k, np.nan)
    label, why = position_label(share, s_lo, p, alpha)
    return PositionChiSquareResult(chi2, p, k - 1, n_total, counts, np.full(k, n_total / k), share, s_lo,
                                   s_hi, v, v_lo, v_hi, label, why, design, reading, float(alpha), confidence)


# ---- log-linear position-effect model ----------------------------------------------------------------------
@dataclass(frozen=True)
class PositionEffectResult(Result):
    """Fit of log p(option | order) = content(item, option) + bias(position) + normaliser(item, ordering).

    ``bias`` is identified up to a constant and reported centred (sum 0); ``prior = softmax(bias)``.
    ``log_odds[p] = bias[p] - mean_{q != p} bias[q]``: the log-probability an option gains at position p over
    its average at the other positions (0 = no preference). CIs are percentile bootstrap over items.
    ``rmse`` is the root-mean-square residual of the double-centred log-probabilities (0 when the model is
    exact).
    """

    bias: np.ndarray
    prior: np.ndarray
    log_odds: np.ndarray
    log_odds_ci_low: np.ndarray
    log_odds_ci_high: np.ndarray
    rmse: float
    design: str
    n_items: int
    n_orderings: int
    confidence_level: float


def _double_centre(x: np.ndarray) -> np.ndarray:
    """Remove row (per-ordering normaliser) and column (per-option content) effects of the last two axes."""
    return (x - x.mean(axis=-1, keepdims=True) - x.mean(axis=-2, keepdims=True)
            + x.mean(axis=(-2, -1), keepdims=True))


def _position_design(orders: np.ndarray) -> np.ndarray:
    """[K*n, n] double-centred indicators of the position of each (ordering, option) cell."""
    k, n = orders.shape
    onehot = np.eye(n)[inverse(orders)]  # [K, n options, n positions]
    return _double_centre(np.moveaxis(onehot, 2, 0)).reshape(n, k * n).T


def fit_position_effect(probs, option_orders, *, n_boot: int = 1000, confidence: float = 0.95, rng=None,
                        floor: float = 1e-12) -> PositionEffectResult:
    """Exact least-squares fit of per-position log biases from canonical ``probs[item, ordering, option]``.

    Per item, content and normaliser are two-way effects of the (ordering, option) table of log-probabilities,
    so double-centring removes them and the bias is a small linear regression. The estimator is linear in the
    data, so it is the mean of per-item fits and the bootstrap over items is one matrix product. On a balanced
    design it equals the centred mean log-probability at each position (:func:`pride_prior`'s closed form).
    Probabilities are floored at ``floor`` before the log. A FIXED design is not identifiable (DesignError).
    """
    p = as_array(probs, "probs", 3, "[items, orderings, options]")
    check_distributions(p, "probs")
    i, k, n = p.shape
    if n < 2:
        raise ShapeError("the position-effect model needs at least 2 options")
    orders = check_orders(option_orders, k, n)
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    x = _position_design(orders)
    if np.linalg.matrix_rank(x) < n - 1:
        raise DesignError("position bias is not identifiable from these orderings (a FIXED design, or too "
                          "little variation in where each option is shown); score under balanced or random "
                          "orderings")
    y = _double_centre(np.log(np.maximum(p, floor))).reshape(i, k * n)
    per_item = y @ np.linalg.pinv(x).T  # [items, n]; pinv's minimum-norm solution already sums to 0
    per_item -= per_item.mean(axis=1, keepdims=True)
    bias = per_item.mean(axis=0)
    rmse = float(np.sqrt(np.mean((y - bias @ x.T) ** 2)))
    scale = n / (n - 1)  # with sum(bias) = 0: bias[p] - mean of the others = bias[p] * n / (n - 1)
    if n_boot:
        need_items(i, 2, "a bootstrap CI over items")
        lo, hi = percentile_ci(scale * mean_over_units(per_item, n_boot, rng), confidence)
    else:
        lo = hi = np.full(n, np.nan)
    return PositionEffectResult(bias, softmax(bias), scale * bias, lo, hi, rmse, detect_design(orders), i, k,
                                confidence)


# ---- PriDe prior -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PriorResult(Result):
    """PriDe positional prior ``prior[position]`` (sums to 1) and its centred log ``log_prior``."""

    prior: np.ndarray
    log_prior: np.ndarray
    average: str
    n_items: int
    n_orderings: int


def pride_prior(log_probs_by_position, *, option_orders=None, average: str = "log") -> PriorResult:
    """PriDe prior from log-probabilities by position over cyclic (or balanced) orderings.

    Over cyclic permutations every option visits every position, so the mean log-probability at a position is
    bias + constant. ``average='log'`` (default): softmax of the mean over items and orderings - the closed
    form of :func:`fit_position_effect` on a balanced design. ``average='prob'``: the original PriDe, softmax
    per item then the mean over items. Input ``[items, orderings, positions]`` (or
    ``[orderings, positions]``); pass ``option_orders`` to have the design checked (DesignError when not
    balanced).
    """
    check_choice("average", average, ("log", "prob"))
    lp = as_float(log_probs_by_position, "log_probs_by_position")
    if lp.ndim == 2:
        lp = lp[None]
    if lp.ndim != 3:
        raise ShapeError(f"log_probs_by_position must be [items, orderings, positions], got shape {lp.shape}")
    if not np.all(np.isfinite(lp)):
        raise ShapeError("log_probs_by_position has -inf/NaN entries; floor the probabilities before the log "
                         "(e.g. np.log(np.maximum(p, 1e-12)))")
    if option_orders is not None:
        orders = check_orders(option_orders, lp.shape[1], lp.shape[2])
        if detect_design(orders) != BALANCED:
            raise DesignError("the PriDe prior needs cyclic/balanced orderings (every option at every "
                              "position equally often); use orderings.balanced(n) or fit_position_effect for "
                              "other designs")
    if average == "log":
        prior = softmax(lp.mean(axis=(0, 1)))
    else:
        prior = softmax(lp.mean(axis=1), axis=-1).mean(axis=0)
    log_prior = np.log(prior)
    return PriorResult(prior, log_prior - log_prior.mean(), average, lp.shape[0], lp.shape[1])
