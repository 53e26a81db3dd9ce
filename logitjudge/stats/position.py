"""Position preference: which *position* a judge favours, from exact option distributions.

Arrays (one criterion at a time):

* ``probs[item, ordering, option]`` - canonical option order, rows sum to 1 (``ScoreTable.probs[:, c]``);
* ``option_orders[ordering, position]`` - canonical option shown at each position (or per item
  ``[item, ordering, position]``);
* ``pbp[item, ordering, position]`` - ``probs_by_position(probs, option_orders)``.

Designs are detected from ``option_orders`` (``detect_design``): *balanced* (every option equally often at
every position, for every item; all n! orders included), *per-item random* (every item its own random orders),
*random* (one unbalanced set shared by every item: content and position confounded) and *fixed*.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ..orderings import inverse
from ._result import (
    BALANCED,
    FIXED,
    PER_ITEM_RANDOM,
    SHARED_RANDOM,
    ConfoundedDesignError,
    ConfoundedDesignWarning,
    DesignError,
    InsufficientDataError,
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
from .clustered import bootstrap_v_and_shares, cramers_v_corrected, cramers_v_gof, rao_scott_chisquare
from .direction import direction
from .readings import check_reading, one_answer, tempered


def probs_by_position(probs, option_orders) -> np.ndarray:
    """``[..., ordering, position]``: probability of the option shown at each position.

    ``probs`` is ``[..., ordering, option]`` in canonical order (any leading axes, e.g. items and criteria).
    """
    p = as_float(probs, "probs")
    if p.ndim < 2:
        raise ShapeError(f"probs must be at least 2-D [..., orderings, options], got shape {p.shape}")
    o = _broadcast_orders(option_orders, p)
    return np.take_along_axis(p, np.broadcast_to(o, p.shape), axis=-1)


def _broadcast_orders(option_orders, p: np.ndarray, invert: bool = False) -> np.ndarray:
    """Orders (or their inverse) shaped to broadcast against ``p[..., ordering, option]``; per-item orders
    ``[item, K, n]`` align with ``p``'s first axis (items)."""
    o = check_orders(option_orders, p.shape[-2], p.shape[-1], n_items=p.shape[0] if p.ndim >= 3 else None)
    if invert:
        o = inverse(o)
    if o.ndim == 3:
        o = o.reshape(o.shape[:1] + (1,) * (p.ndim - 3) + o.shape[1:])
    return o


def probs_from_positions(pbp, option_orders) -> np.ndarray:
    """Inverse of :func:`probs_by_position`: ``[..., ordering, position]`` back to canonical option order."""
    p = as_float(pbp, "pbp")
    if p.ndim < 2:
        raise ShapeError(f"pbp must be at least 2-D [..., orderings, positions], got shape {p.shape}")
    o = _broadcast_orders(option_orders, p, invert=True)
    return np.take_along_axis(p, np.broadcast_to(o, p.shape), axis=-1)


def _pbp(pbp, name="pbp") -> np.ndarray:
    a = as_array(pbp, name, 3, "[items, orderings, positions]")
    check_distributions(a, name)
    if a.shape[2] < 2:
        raise ShapeError(f"{name} has {a.shape[2]} position; position preference needs at least 2 options")
    return a


# ---- mean positional distribution --------------------------------------------------------------------------
@dataclass(frozen=True)
class PositionDistributionResult(Result):
    """Exact mean share of each position over items and orderings, with bootstrap CIs over items: the
    probability mass ('expected'), the share of prompts whose argmax is there ('greedy', ties split) or the
    expected share of a judge sampling at ``temperature`` ('sampled'; at T=1 the probability mass)."""

    distribution: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    uniform: float
    n_items: int
    n_orderings: int
    confidence_level: float
    reading: str = "expected"
    temperature: float = 1.0


def position_distribution(pbp, *, reading: str = "expected", temperature: float = 1.0, n_boot: int = 1000,
                          confidence: float = 0.95, rng=None) -> PositionDistributionResult:
    """Mean of each prompt's position shares under ``reading`` over items and orderings (descriptive: a FIXED
    design mixes content and position)."""
    a = _pbp(pbp)
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    reading = check_reading(reading)
    if reading == "greedy":
        a = chosen_positions(a)
    elif reading == "sampled":
        a = tempered(a, temperature)
    per_item = a.mean(axis=1)
    dist = per_item.mean(axis=0)
    if n_boot:
        need_items(a.shape[0], 2, "a bootstrap CI over items")
        lo, hi = percentile_ci(mean_over_units(per_item, n_boot, rng), confidence)
    else:
        lo = hi = np.full_like(dist, np.nan)
    return PositionDistributionResult(dist, lo, hi, 1.0 / a.shape[2], a.shape[0], a.shape[1], confidence,
                                      reading, float(temperature))


# ---- chi-square goodness of fit on chosen positions --------------------------------------------------------
@dataclass(frozen=True)
class PositionChiSquareResult(Result):
    """Goodness of fit of the chosen positions against uniform with items as the unit, Cramér's V and a
    direction label.

    ``counts[position]``: how many prompts chose each position (``reading`` 'greedy': the argmax, exact ties
    split; 'sampled': one seeded run of a judge sampling at ``temperature``). ``statistic``: Pearson's X² of the
    pooled counts (``dof`` = n - 1). ``pvalue``: Rao-Scott's second-order test with items as clusters
    (:func:`~logitjudge.stats.rao_scott_chisquare`, defined in :mod:`logitjudge.stats.clustered`:
    ``statistic_corrected`` on ``dof_corrected`` = d degrees of freedom, referred to F(d, d (``n_items`` - 1));
    ``design_effect`` is how many times the pooled shares vary more than independent prompts') - the p-value
    every verdict uses. ``pvalue_per_prompt``: the plain χ² p-value with prompts treated as
    independent, kept for comparison only (an item's orderings are correlated, so it is far too small).
    ``cramers_v``: bias-corrected (:func:`~logitjudge.stats.cramers_v_corrected`, items as clusters), with a
    percentile bootstrap CI over items that can reach 0; ``cramers_v_raw``: the uncorrected sqrt(X²/(N(n-1))).
    ``expected_shares``: the exact expected share of each position under the reading. ``favoured``: the
    positions (1..n, as a person counts them) whose share's bootstrap CI lies above 1/n (without a bootstrap:
    above 1/n and tied with the largest share); ``favoured_index`` the same 0-based. ``label``
    (:func:`position_label`): 'first' / 'last' / 'edges' / 'middle' / 'mixed' when ``pvalue`` < ``alpha`` and
    some position is favoured, else 'none'; ``label_reason`` says why and quotes the counts.
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
    expected_shares: np.ndarray | None = None
    favoured: tuple[int, ...] = ()
    temperature: float = 1.0
    pvalue_per_prompt: float = float("nan")
    statistic_corrected: float = float("nan")
    dof_corrected: float = float("nan")
    design_effect: float = float("nan")
    cramers_v_raw: float = float("nan")
    favoured_index: tuple[int, ...] = ()
    n_items: int = 0
    test: str = "Rao-Scott second-order χ² referred to F(d, d(C-1)), C items as clusters"


def chosen_positions(pbp, *, reading: str = "greedy", temperature: float = 1.0, rng=None,
                     tol: float = 1e-12) -> np.ndarray:
    """``[items, orderings, positions]`` weights of the position each prompt chooses (each prompt sums to 1).

    'greedy' ('argmax'): the most probable position; exact ties split the prompt equally between the tied
    positions (a first-index tie-break would itself favour position 0). 'sampled' ('draw'): one position drawn
    from the tempered distribution with ``rng`` (one run of a sampling judge). The reading of any label
    distribution: :func:`~logitjudge.stats.readings.one_answer`.
    """
    a = _pbp(pbp)
    if check_reading(reading, allow_draw=True) == "expected":
        raise StatsError("chosen positions need an answered label: reading='greedy' or 'sampled' (the "
                         "probability mass by position is position_distribution)")
    return one_answer(a, reading=reading, temperature=temperature, rng=rng, tol=tol)


def _check_design(design: str, allow_confounded: bool, what: str, *, n_prompts: int | None = None,
                  n_places: int | None = None, unit: str = "item", things: str = "options",
                  place: str = "position") -> None:
    """The designs a position test of ``what`` accepts (the rubric test; the paradigms' slot tests with
    ``unit`` 'group', ``things`` 'candidates', ``place`` 'slot'): FIXED and one random set shared by every
    ``unit`` confound content with position (DesignError / ConfoundedDesignError; ``allow_confounded``
    computes them with a ConfoundedDesignWarning); per-``unit`` random orders need an expected count of 5 per
    ``place`` (``n_prompts`` >= 5 ``n_places``; InsufficientDataError)."""
    if design == FIXED:
        if not allow_confounded:
            raise DesignError(f"{what}: the orderings are FIXED (every prompt shows the {things} in the same "
                              "order), so score and position are confounded; score under balanced orderings, "
                              "or pass allow_confounded=True to compute it anyway")
        warnings.warn(f"{what} on a FIXED design: position is confounded with content",
                      ConfoundedDesignWarning, stacklevel=3)
    elif design == SHARED_RANDOM:
        if not allow_confounded:
            raise ConfoundedDesignError(
                f"{what}: the random orders are shared by every {unit}, so content and position are confounded "
                f"(a judge that always picks the same {things[:-1]} is mapped onto the positions those few orders "
                f"put it at, and reads as a position bias); score with per-{unit} random orders (random:K), "
                "balanced or all orders, or pass allow_confounded=True to compute it anyway")
        warnings.warn(f"{what} on a shared random design: content and position are confounded",
                      ConfoundedDesignWarning, stacklevel=3)
    elif design == PER_ITEM_RANDOM and n_prompts is not None and n_prompts < 5 * n_places:
        raise InsufficientDataError(f"{what} on per-{unit} random orders needs an expected count of at least 5 "
                                    f"per {place} ({5 * n_places} prompts); the table has {n_prompts}: score "
                                    f"more {unit}s or more orders per {unit}")


def position_chisquare(pbp, option_orders, *, reading: str = "greedy", temperature: float = 1.0,
                       alpha: float = 0.05, n_boot: int = 1000, confidence: float = 0.95, rng=None,
                       allow_confounded: bool = False) -> PositionChiSquareResult:
    """Test that the chosen positions are uniform, with items as the unit (see
    :class:`PositionChiSquareResult`).

    The verdict's p-value is Rao-Scott's second-order correction of Pearson's X² with items as clusters,
    referred to F(d, d (C - 1)) (:func:`~logitjudge.stats.rao_scott_chisquare`; the definition, and why
    Rao-Scott rather than a permutation of position labels within items, are in
    :mod:`logitjudge.stats.clustered`): an item's prompts share its content, so they are not independent draws,
    and the null is the study's - no position preference shared by the items (the mean share of each position
    over items is 1/n; an item may prefer a position of its own).
    Valid designs: balanced (every option at every position equally often for every item; all n! orders
    included) and per-item random orders (which need an expected count of at least 5 per position:
    InsufficientDataError otherwise). A random set shared by every item confounds content and position
    (ConfoundedDesignError), as does a FIXED design (DesignError); ``allow_confounded=True`` computes them
    anyway with a warning. Cramér's V (bias-corrected) and the position shares get percentile bootstrap CIs
    over items (``n_boot=0`` skips them).
    """
    a = _pbp(pbp)
    orders = check_orders(option_orders, a.shape[1], a.shape[2], n_items=a.shape[0])
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    reading = check_reading(reading, allow_draw=True)
    rng = as_rng(rng)
    design = detect_design(orders)
    k = a.shape[2]
    _check_design(design, allow_confounded, "position chi-square", n_prompts=a.shape[0] * a.shape[1], n_places=k)
    need_items(a.shape[0], 2, "the position test with items as clusters")
    per_item = chosen_positions(a, reading=reading, temperature=temperature, rng=rng).sum(axis=1)
    exp_share = (chosen_positions(a) if reading == "greedy" else tempered(a, temperature)).mean(axis=(0, 1))
    counts = per_item.sum(axis=0)
    n_total = float(counts.sum())
    rs = rao_scott_chisquare(per_item)
    v = cramers_v_corrected(rs.statistic, n_total, k, design_effect=rs.design_effect)
    share = counts / n_total
    v_lo, v_hi, s_lo, s_hi = bootstrap_v_and_shares(per_item, n_boot, confidence, rng)
    label, why, fav = direction(share, s_lo, rs.pvalue, alpha, counts=counts, design_effect=rs.design_effect)
    return PositionChiSquareResult(rs.statistic, rs.pvalue, k - 1, n_total, counts, np.full(k, n_total / k), share,
                                   s_lo, s_hi, v, v_lo, v_hi, label, why, design, reading, float(alpha), confidence,
                                   exp_share, tuple(j + 1 for j in fav), float(temperature),
                                   rs.pvalue_per_prompt, rs.statistic_corrected, rs.dof_corrected,
                                   rs.design_effect, float(cramers_v_gof(rs.statistic, n_total, k)),
                                   fav, a.shape[0])


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


def _identifiable(design: np.ndarray, n: int) -> bool:
    """Whether the stacked double-centred position indicators ``design[rows, n]`` have rank n - 1 (the biases
    less their mean). The rank counts singular values above 1e-9 sqrt(rows): an identifiable design's are of order
    sqrt(rows) (a balanced one's all sqrt(K)), while a FIXED design's are rounding noise (~1e-16 sqrt(rows)),
    which ``numpy.linalg.matrix_rank``'s tolerance, relative to the largest of them, reads as full rank."""
    design = design.reshape(-1, n)
    return int(np.linalg.matrix_rank(design, tol=1e-9 * np.sqrt(design.shape[0]))) >= n - 1


def fit_position_effect(probs, option_orders, *, n_boot: int = 1000, confidence: float = 0.95, rng=None,
                        floor: float = 1e-12) -> PositionEffectResult:
    """Exact least-squares fit of per-position log biases from canonical ``probs[item, ordering, option]``.

    Per item, content and normaliser are two-way effects of the (ordering, option) table of log-probabilities,
    so double-centring removes them and the bias is a small linear regression. The estimator is linear in the
    data, so it is the mean of per-item fits and the bootstrap over items is one matrix product. On a balanced
    design it equals the centred mean log-probability at each position (:func:`pride_prior`'s closed form).
    Probabilities are floored at ``floor`` before the log. A FIXED design is not identifiable (DesignError).
    Per-item orders ``[items, orderings, positions]``: one least-squares fit pooled over the items' own designs
    (the bootstrap refits it on each resample).
    """
    p = as_array(probs, "probs", 3, "[items, orderings, options]")
    check_distributions(p, "probs")
    i, k, n = p.shape
    if n < 2:
        raise ShapeError("the position-effect model needs at least 2 options")
    orders = check_orders(option_orders, k, n, n_items=i)
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    y = _double_centre(np.log(np.maximum(p, floor))).reshape(i, k * n)
    if orders.ndim == 2:
        x = _position_design(orders)
        if not _identifiable(x, n):
            raise DesignError("position bias is not identifiable from these orderings (a FIXED design, or too "
                              "little variation in where each option is shown); score under balanced or random "
                              "orderings")
        per_item = y @ np.linalg.pinv(x).T  # [items, n]; pinv's minimum-norm solution already sums to 0
        xs = np.broadcast_to(x, (i,) + x.shape)
    else:  # per-item orders: one least-squares fit pooled over items (each item's design is its own)
        xs = np.stack([_position_design(o) for o in orders])  # [items, K*n, n]
        gram, rhs = np.einsum("ikn,ikm->inm", xs, xs), np.einsum("ikn,ik->in", xs, y)
        if not _identifiable(xs, n):
            raise DesignError("position bias is not identifiable from these per-item orderings (every item "
                              "shows each option at the same position); score random or balanced orders")
        per_item = None
    if per_item is not None:
        per_item -= per_item.mean(axis=1, keepdims=True)
        bias = per_item.mean(axis=0)
    else:
        bias = np.linalg.pinv(gram.sum(axis=0)) @ rhs.sum(axis=0)
        bias -= bias.mean()
    rmse = float(np.sqrt(np.mean((y - np.einsum("n,ijn->ij", bias, xs)) ** 2)))
    scale = n / (n - 1)  # with sum(bias) = 0: bias[p] - mean of the others = bias[p] * n / (n - 1)
    if n_boot:
        need_items(i, 2, "a bootstrap CI over items")
        if per_item is not None:
            boot = mean_over_units(per_item, n_boot, rng)
        else:  # the pooled fit on each resample: weighted normal equations, one small solve per resample
            w = bootstrap_weights(i, n_boot, rng)
            boot = np.einsum("bnm,bm->bn", np.linalg.pinv(np.einsum("bi,inm->bnm", w, gram)), w @ rhs)
            boot -= boot.mean(axis=1, keepdims=True)
        lo, hi = percentile_ci(scale * boot, confidence)
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
