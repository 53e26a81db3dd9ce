"""Cross-validated linear probes: is a label linearly decodable from a hidden state?

The probe is an L2-regularised multinomial logistic regression (scipy L-BFGS on the exact gradient) on features
standardised with the training fold's mean and standard deviation. Folds hold out whole items (every ordering of
an item is in the same fold), so a probe cannot pass by recognising the item. Accuracy is the share of held-out
prompts predicted right; its CI is a percentile bootstrap over items (prompts of an item are not independent).
Chance is the accuracy of always predicting the training fold's most frequent label, computed with the same
folds (so it is the bar a probe must clear, not 1/n, when labels are unbalanced).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import logsumexp

from ._result import (
    Result,
    ShapeError,
    StatsError,
    as_array,
    as_rng,
    check_confidence,
    check_distributions,
    check_n_boot,
    check_orders,
    mean_over_units,
    need_items,
    percentile_ci,
)
from .probing import chosen_option


def logistic_loss(w: np.ndarray, xb: np.ndarray, onehot: np.ndarray, l2: float) -> tuple[float, np.ndarray]:
    """Mean cross-entropy + l2/(2N) |W|^2 (bias row not penalised) and its gradient; ``xb`` (N, d + 1) ends in
    a column of ones, ``w`` is the flattened (d + 1, C) weight matrix."""
    n, C = onehot.shape
    w = w.reshape(xb.shape[1], C)
    z = xb @ w  # (N, C)
    lse = logsumexp(z, axis=1, keepdims=True)
    p = np.exp(z - lse)
    reg = w[:-1]
    f = float((lse[:, 0] - (z * onehot).sum(1)).sum() + 0.5 * l2 * (reg ** 2).sum()) / n
    g = xb.T @ (p - onehot)
    g[:-1] += l2 * reg
    return f, (g / n).ravel()


def fit_logistic(x: np.ndarray, y: np.ndarray, n_classes: int, *, l2: float = 1.0) -> np.ndarray:
    """Weights (d + 1, C) minimising :func:`logistic_loss` (L-BFGS, exact gradient).

    With more features than samples (hidden states of every option line: d ~ 3,000 for ~100 prompts) the fit
    runs in the span of the training rows: for l2 > 0 the penalised weights of the optimum lie there (a part
    orthogonal to every row changes no logit and only adds to the penalty), so fitting the coordinates in an
    orthonormal basis V of that span (x @ V, r <= N columns) and mapping back (V @ w') is the same optimum,
    reached in r instead of d dimensions."""
    n, d = x.shape
    basis = None
    if l2 > 0 and d > n:
        _, sv, vt = np.linalg.svd(x, full_matrices=False)  # (r, d) rows spanning the training rows
        basis = vt[sv > sv[0] * 1e-10].T if sv[0] > 0 else np.zeros((d, 0))  # (d, r)
        x = x @ basis  # (N, r)
    xb = np.hstack([x, np.ones((n, 1))])
    onehot = np.eye(n_classes)[y]
    k = x.shape[1]
    res = minimize(logistic_loss, np.zeros((k + 1) * n_classes), args=(xb, onehot, l2), jac=True,
                   method="L-BFGS-B", options={"maxiter": 500})
    w = res.x.reshape(k + 1, n_classes)
    if basis is None:
        return w
    return np.vstack([basis @ w[:-1], w[-1:]])  # back to the d features, bias row last


def predict(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.argmax(np.hstack([x, np.ones((len(x), 1))]) @ w, axis=1)


@dataclass(frozen=True)
class ProbeResult(Result):
    """Held-out accuracy of a linear probe and of the majority baseline, with bootstrap CIs over items."""

    accuracy: float
    ci_low: float
    ci_high: float
    chance: float
    chance_ci_low: float
    chance_ci_high: float
    n_prompts: int
    n_items: int
    n_folds: int


def probe_accuracy(features, labels, groups, *, n_classes: int | None = None, n_folds: int = 5,
                   l2: float = 1.0, n_boot: int = 1000, confidence: float = 0.95, rng=None) -> ProbeResult:
    """Grouped K-fold probe of ``labels`` (N,) from ``features`` (N, d); ``groups`` (N,) are item ids."""
    x = as_array(features, "features", 2, "(N, d) features")
    try:
        y = np.asarray(labels).astype(np.int64, casting="safe")
    except TypeError:
        raise StatsError("labels must be integer class indices") from None
    g = np.asarray(groups)
    if len(x) != len(y) or y.shape != g.shape or y.ndim != 1:
        raise ShapeError(f"features (N, d), labels (N,) and groups (N,) must agree; got {x.shape}, {y.shape}, "
                         f"{g.shape}")
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    units = np.unique(g)
    need_items(len(units), 2, "a held-out probe")
    C = int(n_classes or y.max() + 1)
    if y.min() < 0 or y.max() >= C or int(n_folds) < 2 or l2 < 0:
        raise StatsError(f"labels must lie in 0..{C - 1}, n_folds >= 2 and l2 >= 0")
    rng = as_rng(rng)
    k = min(int(n_folds), len(units))
    fold_of = dict(zip(rng.permutation(units), np.arange(len(units)) % k))
    fold = np.array([fold_of[u] for u in g])
    hit = np.zeros(len(y))
    base = np.zeros(len(y))
    for f in range(k):
        tr, te = fold != f, fold == f
        mu, sd = x[tr].mean(0), x[tr].std(0) + 1e-8
        w = fit_logistic((x[tr] - mu) / sd, y[tr], C, l2=l2)
        hit[te] = predict(w, (x[te] - mu) / sd) == y[te]
        base[te] = np.bincount(y[tr], minlength=C).argmax() == y[te]
    per_unit = np.array([[hit[g == u].mean(), base[g == u].mean()] for u in units])  # (I, 2)
    if n_boot:
        lo, hi = percentile_ci(mean_over_units(per_unit, n_boot, rng), confidence)
    else:
        lo = hi = np.full(2, np.nan)
    return ProbeResult(float(hit.mean()), float(lo[0]), float(hi[0]), float(base.mean()), float(lo[1]),
                       float(hi[1]), len(y), len(units), k)


@dataclass(frozen=True)
class LinearSummary(Result):
    """Per exported layer (``layers``) and feature site ('answer': the answer position; 'line ends': every option
    line's end, concatenated by position), the held-out accuracy of a linear probe (:func:`probe_accuracy`) for
    the labels 'chosen position' (the position of the option the model ranks first) and 'chosen option' (that
    option's canonical index). ``results[(label, site)]``: one ProbeResult per layer."""

    layers: np.ndarray
    results: dict


def linear_summary(hidden, layers, probs, option_orders, *, l2: float = 1.0, n_folds: int = 5,
                   n_boot: int = 1000, confidence: float = 0.95, rng=None) -> LinearSummary:
    """``hidden[I, K, len(layers), 1 + n, d]`` (answer position, then each option line's end by position) and
    the model's ``probs[I, K, n]`` (the labels)."""
    h = as_array(hidden, "hidden", 5, "[items, orderings, layers, 1 + options, d]")
    p = as_array(probs, "probs", 3, "[items, orderings, options]")
    check_distributions(p, "probs")
    I, K, Lh, sites, d = h.shape
    n = p.shape[2]
    ly = np.asarray(layers)
    if (I, K) != p.shape[:2] or sites != 1 + n or ly.shape != (Lh,):
        raise ShapeError(f"hidden {h.shape} must be (I, K, {len(ly)} layers, 1 + n, d) for probs {p.shape}")
    orders = check_orders(option_orders, K, n, n_items=I)
    rng = as_rng(rng)
    opt, pos = chosen_option(p, orders)
    groups = np.repeat(np.arange(I), K)
    labels = {"chosen position": pos.ravel(), "chosen option": opt.ravel()}
    results: dict[tuple, list[ProbeResult]] = {}
    for name, y in labels.items():
        for site in ("answer", "line ends"):
            results[(name, site)] = [
                probe_accuracy((h[:, :, i, 0] if site == "answer" else h[:, :, i, 1:]).reshape(I * K, -1), y,
                               groups, n_classes=n, n_folds=n_folds, l2=l2, n_boot=n_boot,
                               confidence=confidence, rng=rng)
                for i in range(Lh)]
    return LinearSummary(ly, results)
