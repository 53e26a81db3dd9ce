"""Agreement of judge scores with human scores: item, system and per-group correlations, paired comparisons.

A correlation that is undefined (constant scores on either side) is returned with ``defined=False``, statistic
NaN and a ``reason``; bootstrap resamples where it is undefined are dropped and counted
(``n_boot_undefined``). Too few items (< 3) is bad input and raises InsufficientDataError.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from ._result import (
    AlignmentError,
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
    weights_from_indices,
)

METHODS = ("pearson", "spearman", "kendall")
MIN_N = 3


# ---- core correlation (no warnings, NaN when undefined) ----------------------------------------------------
def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    xm = x - x.mean(axis=-1, keepdims=True)
    ym = y - y.mean(axis=-1, keepdims=True)
    den = np.sqrt((xm * xm).sum(axis=-1) * (ym * ym).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (xm * ym).sum(axis=-1) / den
    return np.where(den > 0, np.clip(r, -1.0, 1.0), np.nan)


def _corr_rows(x: np.ndarray, y: np.ndarray, method: str) -> np.ndarray:
    """Correlation of each row pair of 2-D ``x``, ``y`` (NaN where a row is constant)."""
    x, y = np.atleast_2d(x), np.atleast_2d(y)
    if method == "pearson":
        return _pearson_rows(x, y)
    if method == "spearman":
        return _pearson_rows(sps.rankdata(x, axis=1), sps.rankdata(y, axis=1))
    return _kendall_rows(x, y)


def _kendall_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of each row pair (scipy's default): (concordant - discordant) / sqrt(pairs untied in x *
    pairs untied in y), over all pairs at once for short rows (the many replicates of an enumeration or a
    Monte-Carlo expectation); long rows go to scipy's O(n log n) algorithm one by one."""
    x, y = np.broadcast_arrays(x, y)
    if x.shape[1] > 64:
        out = np.full(x.shape[0], np.nan)
        for b in range(x.shape[0]):
            if np.ptp(x[b]) > 0 and np.ptp(y[b]) > 0:
                out[b] = sps.kendalltau(x[b], y[b]).statistic
        return out
    i, j = np.triu_indices(x.shape[1], 1)
    out = np.full(x.shape[0], np.nan)
    step = max(1, int(4e6 // max(i.size, 1)))
    for s in range(0, x.shape[0], step):
        dx, dy = np.sign(x[s:s + step, i] - x[s:s + step, j]), np.sign(y[s:s + step, i] - y[s:s + step, j])
        den = np.sqrt(np.count_nonzero(dx, axis=1) * np.count_nonzero(dy, axis=1).astype(np.float64))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[s:s + step] = np.where(den > 0, (dx * dy).sum(axis=1) / den, np.nan)
    return np.clip(out, -1.0, 1.0)


def _corr(x: np.ndarray, y: np.ndarray, method: str) -> float:
    return float(_corr_rows(x[None], y[None], method)[0])


def undefined_reason(x, y, *, min_n: int = MIN_N) -> str:
    """Why the correlation of ``x`` and ``y`` is undefined ('' when it is defined)."""
    if len(x) < min_n:
        return f"fewer than {min_n} items ({len(x)})"
    if np.ptp(x) == 0:
        return "judge scores are constant"
    if np.ptp(y) == 0:
        return "human scores are constant"
    return ""


def _pair(x, y, name="x") -> tuple[np.ndarray, np.ndarray]:
    a, b = as_float(x, name), as_float(y, "human scores")
    if a.ndim != 1 or a.shape != b.shape:
        raise ShapeError(f"{name} and human scores must be 1-D arrays of the same length, got {a.shape} and "
                         f"{b.shape}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise StatsError(f"{name} or the human scores contain NaN/inf; drop those items first")
    return a, b


def _labels(labels, n: int, name: str) -> np.ndarray:
    g = np.asarray(labels).astype(str)
    if g.shape != (n,):
        raise ShapeError(f"{name} must give one label per item ({n}), got shape {g.shape}")
    return g


def _pvalue(x, y, method) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # only reached when defined; silence small-sample notes from scipy
        f = {"pearson": sps.pearsonr, "spearman": sps.spearmanr, "kendall": sps.kendalltau}[method]
        return float(f(x, y).pvalue)


# ---- item and system level ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class CorrelationResult(Result):
    """A correlation with scipy's p-value and a percentile bootstrap CI (``level``: 'item' or 'system')."""

    statistic: float
    pvalue: float
    ci_low: float
    ci_high: float
    n: int
    method: str
    level: str
    defined: bool
    reason: str
    n_boot: int
    n_boot_undefined: int
    confidence_level: float


def _undefined(n, method, level, reason, n_boot, confidence) -> CorrelationResult:
    nan = float("nan")
    return CorrelationResult(nan, nan, nan, nan, n, method, level, False, reason, n_boot, n_boot, confidence)


def correlation(x, y, *, method: str = "pearson", n_boot: int = 1000, confidence: float = 0.95, rng=None
                ) -> CorrelationResult:
    """Item-level correlation of judge scores ``x`` with human scores ``y`` (bootstrap over items)."""
    x, y = _pair(x, y)
    check_choice("method", method, METHODS)
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    if len(x) < MIN_N:
        raise InsufficientDataError(f"a correlation needs at least {MIN_N} items with human scores, "
                                    f"got {len(x)}")
    reason = undefined_reason(x, y)
    if reason:
        return _undefined(len(x), method, "item", reason, n_boot, confidence)
    r = _corr(x, y, method)
    lo = hi = float("nan")
    bad = 0
    if n_boot:
        idx = bootstrap_indices(len(x), n_boot, rng)
        rb = _corr_rows(x[idx], y[idx], method)
        bad = int(np.isnan(rb).sum())
        lo, hi = percentile_ci(rb, confidence)
    return CorrelationResult(r, _pvalue(x, y, method), lo, hi, len(x), method, "item", True, "", n_boot, bad,
                             confidence)


def _system_means(x, y, systems) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    names, inv = np.unique(systems, return_inverse=True)
    cnt = np.bincount(inv)
    return np.bincount(inv, x) / cnt, np.bincount(inv, y) / cnt, inv


def _system_boot(x, y, inv, n_sys, idx, method) -> np.ndarray:
    """System-level correlation per resample of items; systems absent from a resample are dropped."""
    onehot = np.eye(n_sys)[inv]
    w = weights_from_indices(idx, len(x))
    cnt = w @ onehot
    with np.errstate(invalid="ignore", divide="ignore"):
        mx, my = (w * x) @ onehot / cnt, (w * y) @ onehot / cnt
    out = np.full(len(idx), np.nan)
    for b in range(len(idx)):
        keep = cnt[b] > 0
        if keep.sum() >= MIN_N and not undefined_reason(mx[b, keep], my[b, keep]):
            out[b] = _corr(mx[b, keep], my[b, keep], method)
    return out


def system_correlation(x, y, systems, *, method: str = "pearson", n_boot: int = 1000,
                       confidence: float = 0.95, rng=None) -> CorrelationResult:
    """System-level correlation: mean judge and human score per system first (bootstrap resamples items)."""
    x, y = _pair(x, y)
    check_choice("method", method, METHODS)
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    s = _labels(systems, len(x), "systems")
    mx, my, inv = _system_means(x, y, s)
    if len(mx) < MIN_N:
        raise InsufficientDataError(f"a system-level correlation needs at least {MIN_N} systems, "
                                    f"got {len(mx)}")
    reason = undefined_reason(mx, my)
    if reason:
        return _undefined(len(mx), method, "system", reason.replace("items", "systems"), n_boot, confidence)
    lo = hi = float("nan")
    bad = 0
    if n_boot:
        rb = _system_boot(x, y, inv, len(mx), bootstrap_indices(len(x), n_boot, rng), method)
        bad = int(np.isnan(rb).sum())
        lo, hi = percentile_ci(rb, confidence)
    return CorrelationResult(_corr(mx, my, method), _pvalue(mx, my, method), lo, hi, len(mx), method,
                             "system", True, "", n_boot, bad, confidence)


# ---- per-group (SummEval style) ----------------------------------------------------------------------------
@dataclass(frozen=True)
class GroupedCorrelationResult(Result):
    """Correlation within each group, averaged over the groups where it is defined (bootstrap over groups).

    ``skipped`` counts the groups left out by reason; ``n_groups_used + sum(skipped) == n_groups``.
    """

    statistic: float
    ci_low: float
    ci_high: float
    n_groups: int
    n_groups_used: int
    skipped: dict
    method: str
    defined: bool
    reason: str
    confidence_level: float


@dataclass(frozen=True)
class PerGroupCorrelations(Result):
    """``statistic[j]``: the correlation within group ``groups[j]`` (NaN where undefined; ``skipped`` counts
    those by reason)."""

    groups: np.ndarray
    statistic: np.ndarray
    skipped: dict
    method: str


def per_group_correlations(x, y, groups, *, method: str = "pearson", min_size: int = MIN_N
                           ) -> PerGroupCorrelations:
    """The correlation within each group (groups smaller than ``min_size`` or constant are skipped)."""
    x, y = _pair(x, y)
    check_choice("method", method, METHODS)
    g = _labels(groups, len(x), "groups")
    names, inv = np.unique(g, return_inverse=True)
    r = np.full(len(names), np.nan)
    skipped: dict[str, int] = {}
    for j in range(len(names)):
        m = inv == j
        reason = undefined_reason(x[m], y[m], min_n=min_size)
        if reason:
            key = reason.split(" (")[0]
            skipped[key] = skipped.get(key, 0) + 1
        else:
            r[j] = _corr(x[m], y[m], method)
    return PerGroupCorrelations(names, r, skipped, method)


def grouped_correlation(x, y, groups, *, method: str = "pearson", min_size: int = MIN_N, n_boot: int = 1000,
                        confidence: float = 0.95, rng=None) -> GroupedCorrelationResult:
    """Mean over groups (e.g. SummEval source documents) of the within-group correlation."""
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    per = per_group_correlations(x, y, groups, method=method, min_size=min_size)
    names, r, skipped = per.groups, per.statistic, per.skipped
    used = r[np.isfinite(r)]
    nan = float("nan")
    if used.size == 0:
        why = "no group has a defined correlation (" + ", ".join(f"{v} {k}" for k, v in skipped.items()) + ")"
        return GroupedCorrelationResult(nan, nan, nan, len(names), 0, skipped, method, False, why, confidence)
    lo = hi = nan
    if n_boot and used.size >= 2:
        # resampling whole groups leaves each within-group correlation unchanged: resample the values
        w = weights_from_indices(bootstrap_indices(used.size, n_boot, rng), used.size)
        lo, hi = percentile_ci(w @ used / used.size, confidence)
    return GroupedCorrelationResult(float(used.mean()), lo, hi, len(names), int(used.size), skipped, method,
                                    True, "", confidence)


# ---- paired comparison -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CorrelationDifferenceResult(Result):
    """r_a - r_b with a paired bootstrap (the same resamples for both) CI and two-sided p-value.

    ``pvalue = min(1, 2 * min((1 + #{d* <= 0}) / (B + 1), (1 + #{d* >= 0}) / (B + 1)))`` over the B defined
    resamples ``d*`` of the difference.
    """

    statistic: float
    pvalue: float
    ci_low: float
    ci_high: float
    r_a: float
    r_b: float
    method: str
    level: str
    n_boot: int
    n_boot_used: int
    defined: bool
    reason: str
    confidence_level: float


def compare_correlations(x_a, x_b, y, *, method: str = "pearson", level: str = "item", groups=None,
                         systems=None, n_boot: int = 1000, confidence: float = 0.95, rng=None
                         ) -> CorrelationDifferenceResult:
    """Does judge strategy A correlate better with humans than B? Paired bootstrap over items ('item',
    'system') or groups ('grouped', with ``groups``; groups undefined for either strategy are left out)."""
    x_a, y = _pair(x_a, y, "x_a")
    x_b, _ = _pair(x_b, y, "x_b")
    check_choice("method", method, METHODS)
    check_choice("level", level, ("item", "system", "grouped"))
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    if n_boot < 1:
        raise StatsError("a paired bootstrap test needs n_boot >= 1")
    rng = as_rng(rng)
    nan = float("nan")

    def undefined(reason, ra=nan, rb=nan):
        return CorrelationDifferenceResult(nan, nan, nan, nan, ra, rb, method, level, n_boot, 0, False,
                                           reason, confidence)

    if level == "grouped":
        if groups is None:
            raise StatsError("level='grouped' needs groups (one label per item)")
        ra_g = per_group_correlations(x_a, y, groups, method=method).statistic
        rb_g = per_group_correlations(x_b, y, groups, method=method).statistic
        both = np.isfinite(ra_g) & np.isfinite(rb_g)
        if both.sum() < 2:
            return undefined(f"only {int(both.sum())} groups have a defined correlation for both strategies")
        ra_g, rb_g = ra_g[both], rb_g[both]
        ra, rb = float(ra_g.mean()), float(rb_g.mean())
        w = weights_from_indices(bootstrap_indices(ra_g.size, n_boot, rng), ra_g.size)
        d = w @ (ra_g - rb_g) / ra_g.size
    else:
        if len(y) < MIN_N:
            raise InsufficientDataError(f"comparing correlations needs at least {MIN_N} items, got {len(y)}")
        if level == "system":
            if systems is None:
                raise StatsError("level='system' needs systems (one label per item)")
            s = _labels(systems, len(y), "systems")
            ma, my, inv = _system_means(x_a, y, s)
            mb, _, _ = _system_means(x_b, y, s)
            if len(my) < MIN_N:
                raise InsufficientDataError(f"a system-level comparison needs at least {MIN_N} systems")
            reason = undefined_reason(ma, my) or undefined_reason(mb, my)
            if reason:
                return undefined(reason)
            ra, rb = _corr(ma, my, method), _corr(mb, my, method)
            idx = bootstrap_indices(len(y), n_boot, rng)
            d = (_system_boot(x_a, y, inv, len(my), idx, method)
                 - _system_boot(x_b, y, inv, len(my), idx, method))
        else:
            reason = undefined_reason(x_a, y) or undefined_reason(x_b, y)
            if reason:
                return undefined(reason)
            ra, rb = _corr(x_a, y, method), _corr(x_b, y, method)
            idx = bootstrap_indices(len(y), n_boot, rng)
            d = _corr_rows(x_a[idx], y[idx], method) - _corr_rows(x_b[idx], y[idx], method)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return undefined("no bootstrap resample had a defined difference", ra, rb)
    lo, hi = percentile_ci(d, confidence)
    p = min(1.0, 2 * min((1 + np.sum(d <= 0)) / (d.size + 1), (1 + np.sum(d >= 0)) / (d.size + 1)))
    return CorrelationDifferenceResult(ra - rb, float(p), lo, hi, ra, rb, method, level, n_boot, int(d.size),
                                       True, "", confidence)


# ---- matching human scores to table items ------------------------------------------------------------------
@dataclass(frozen=True)
class HumanScores(Result):
    """One criterion's human scores aligned with the table: ``scores[j]`` is for item ``index[j]``."""

    index: np.ndarray
    scores: np.ndarray
    criterion: str
    n_missing: int


def align_human(item_ids, human: dict, criterion: str) -> HumanScores:
    """Align ``human`` (item_id -> criterion -> score) with ``item_ids``.

    Every human id must be a table id (AlignmentError lists the unknown ones); table items without a score for
    ``criterion`` are left out and counted in ``n_missing``.
    """
    ids = [str(i) for i in np.asarray(item_ids).astype(str)]
    pos = {iid: j for j, iid in enumerate(ids)}
    unknown = [k for k in human if str(k) not in pos]
    if unknown:
        raise AlignmentError(f"{len(unknown)} human-score ids are not in the table (e.g. {unknown[:3]}); the "
                             "ids in the human-score file must match the item ids of the scored texts")
    index, scores = [], []
    for iid, crit in human.items():
        if not isinstance(crit, dict):
            raise AlignmentError(f"human scores of {iid!r} must map criterion -> score, "
                                 f"got {type(crit).__name__}")
        if criterion in crit and crit[criterion] is not None:
            v = crit[criterion]
            number = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
            if not number or not np.isfinite(v):
                raise AlignmentError(f"human score of {iid!r} for {criterion!r} is not a finite number: "
                                     f"{v!r}")
            index.append(pos[str(iid)])
            scores.append(float(v))
    if not index:
        names = sorted({c for d in human.values() if isinstance(d, dict) for c in d})
        raise AlignmentError(f"no human scores for criterion {criterion!r}; the human scores have {names}")
    order = np.argsort(index)
    index, scores = np.asarray(index)[order], np.asarray(scores)[order]
    return HumanScores(index, scores, criterion, len(ids) - len(index))
