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

from .hooks import ProbeError


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
    """Weights (d + 1, C) minimising :func:`logistic_loss` (L-BFGS, exact gradient)."""
    n, d = x.shape
    xb = np.hstack([x, np.ones((n, 1))])
    onehot = np.eye(n_classes)[y]
    res = minimize(logistic_loss, np.zeros((d + 1) * n_classes), args=(xb, onehot, l2), jac=True,
                   method="L-BFGS-B", options={"maxiter": 500})
    return res.x.reshape(d + 1, n_classes)


def predict(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.argmax(np.hstack([x, np.ones((len(x), 1))]) @ w, axis=1)


@dataclass(frozen=True)
class ProbeResult:
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
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    g = np.asarray(groups)
    if x.ndim != 2 or len(x) != len(y) or len(y) != len(g):
        raise ProbeError(f"features (N, d), labels (N,) and groups (N,) must agree; got {x.shape}, {y.shape}, "
                         f"{g.shape}")
    units = np.unique(g)
    if len(units) < 2:
        raise ProbeError("a held-out probe needs at least 2 items")
    rng = np.random.default_rng(rng)
    C = int(n_classes or y.max() + 1)
    k = min(n_folds, len(units))
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
    alpha = (1 - confidence) / 2
    if n_boot:
        idx = rng.integers(0, len(units), size=(n_boot, len(units)))
        boot = per_unit[idx].mean(axis=1)  # (B, 2)
        lo, hi = np.quantile(boot, [alpha, 1 - alpha], axis=0)
    else:
        lo = hi = np.full(2, np.nan)
    return ProbeResult(float(hit.mean()), float(lo[0]), float(hi[0]), float(base.mean()), float(lo[1]),
                       float(hi[1]), len(y), len(units), k)
