"""Goodness of fit with clusters as the unit: Rao-Scott's corrected χ² and a bias-corrected Cramér's V.

This module defines the position test that every other one calls: the rubric position test
(:func:`logitjudge.stats.position_chisquare`, items as clusters) and the answered-slot test of the judging
paradigms (:func:`logitjudge.stats.slot_chisquare`: items, pairs or groups as clusters).

``cluster_counts[cluster, category]``: the answered weight of each category (a position, a slot) in each cluster
(the unit whose prompts are reordered: an item's orderings, a pair's two orders, a group's lists). A cluster's
prompts are not independent draws: an item whose content pulls its answers to one position puts all of its
prompts there, so the pooled counts vary more than a multinomial and Pearson's X² on them rejects far too often
(the per-prompt p-value). The clusters are the independent units. A cluster may have weight 0 (its prompts all
answered outside the categories, e.g. the tie label of a pairwise template): it is a sampled cluster that adds
nothing, and counts in C.

* :func:`rao_scott_chisquare` - with N the total weight, p_j the pooled share of category j, k categories and
  C clusters: Pearson's X² = N k sum_j (p_j - 1/k)² against uniform shares (``statistic``, ``dof`` = k - 1),
  with Rao and Scott's second-order correction (Rao & Scott 1981, 1984; Satterthwaite). The covariance of the
  pooled shares is estimated with clusters as the unit (the ratio estimator's linearisation,
  V = C/(C-1) sum_c e_c e_c' / N² with e_c = y_c - m_c p, y_c the cluster's weight per category, m_c its total);
  the generalised design effects ``eigenvalues`` delta_j are the eigenvalues of D = P0^-1 V on the k - 1
  dimensional space the shares move in (P0 = (diag(1/k) - 1/k²) / N, the multinomial covariance under
  uniform shares). ``design_effect`` = mean(delta) = tr(D) / (k - 1): how many times the pooled shares vary
  more than independent prompts' (1 for independent prompts; k' for clusters of k' identical answers; below 1
  when a cluster's answers are spread more evenly than independent draws, as a balanced design does for a judge
  without position bias). ``a_squared``: the squared coefficient of variation of the delta_j.
  ``statistic_corrected`` = X² / (tr D² / tr D) on ``dof_corrected`` d = tr(D)² / tr(D²) = (k - 1) / (1 + a²)
  degrees of freedom, and ``pvalue`` refers it, as R's ``survey::svychisq`` does by default, to an F
  distribution: ``statistic_corrected`` / d = X² / tr(D) ~ F(d, d (C - 1))
  (``dof_denominator`` = d (C - 1)). The F reference allows for V being estimated from C clusters; its limit for
  many clusters is the χ²(d) reference, which from a dozen clusters gives absurdly small p (the study's tables
  have 3-66 items). With two categories it is exactly the cluster-robust t-test with C - 1 degrees of freedom.
  The null is the study's: no *shared* preference, i.e. the mean share of each category over the population of
  clusters is 1/k (each cluster may have a preference of its own). Rao-Scott rather than a permutation of the
  labels within each cluster: that relabelling is exchangeable under the null only when a cluster's orderings
  form a group acting on the positions (balanced designs) and every cluster's counts are exchangeable across
  positions, while Rao-Scott asks only for uniform mean shares, holds for any design (balanced, per-item
  random, pairs in both orders, ragged lists), is deterministic (no Monte-Carlo floor on small p-values) and
  yields the design effect. It is asymptotic in the number of clusters (``n_clusters`` is printed).
  When every cluster has the same shares, V = 0 (design effect 0; d undefined, NaN): p = 0 if those shares are
  not uniform (the same deviation in every cluster) and 1 if they are. ``pvalue_per_prompt``: the plain χ²(k-1)
  p-value of X², every prompt independent; printed for comparison, never a verdict.
* :func:`cramers_v_corrected` - the goodness-of-fit counterpart of Bergsma's (2013) bias correction of Cramér's
  V: phi² = X² / N less its expectation under no preference ((k - 1) d / N with d the design effect; (k - 1) / N
  for independent prompts), truncated at 0, over its maximum corrected alike:
  V = sqrt(max(0, X² - (k - 1) d) / ((k - 1) (N - d))). It is 0 without a preference (and its bootstrap interval
  can reach 0) and 1 when every prompt chose one category. :func:`cramers_v_gof` is the uncorrected
  sqrt(X² / (N (k - 1))).
* :func:`bootstrap_v_and_shares` - percentile bootstrap over clusters of the corrected V (the correction
  recomputed on every resample by :func:`chi2_and_design_effect`, one vectorised pass) and of each share.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from ._result import (
    InsufficientDataError,
    Result,
    ShapeError,
    StatsError,
    as_float,
    bootstrap_weights,
    need_items,
    percentile_ci,
)

_ZERO = 1e-12  # a design effect, or X² per unit weight, below this is zero


@dataclass(frozen=True)
class RaoScottResult(Result):
    """Pearson's ``statistic`` (X² of the pooled counts against uniform, ``dof`` = k - 1) with its per-prompt
    ``pvalue_per_prompt`` (prompts treated as independent: not a test of the clusters), and the Rao-Scott
    second-order test with clusters as the unit (module doc): ``statistic_corrected`` on ``dof_corrected`` = d
    degrees of freedom, ``pvalue`` from F(d, ``dof_denominator`` = d (C - 1)) of ``statistic_corrected`` / d;
    ``design_effect`` (mean of the generalised design effects ``eigenvalues``) and ``a_squared`` (their squared
    coefficient of variation). ``n``: the answered weight (prompts); ``n_clusters``: C."""

    statistic: float
    dof: int
    pvalue_per_prompt: float
    statistic_corrected: float
    dof_corrected: float
    dof_denominator: float
    pvalue: float
    design_effect: float
    a_squared: float
    eigenvalues: np.ndarray
    n: float
    n_clusters: int


def _cluster_counts(cluster_counts) -> np.ndarray:
    y = as_float(cluster_counts, "cluster_counts")
    if y.ndim != 2:
        raise ShapeError(f"cluster_counts must be 2-D [clusters, categories], got shape {y.shape}")
    if not np.all(np.isfinite(y)) or np.any(y < 0):
        raise StatsError("cluster_counts must be finite non-negative counts (answered weight per category)")
    if y.shape[1] < 2:
        raise ShapeError(f"cluster_counts has {y.shape[1]} category; a goodness-of-fit test needs at least 2")
    need_items(y.shape[0], 2, "a test with clusters as the unit (items, pairs or groups)")
    if y.sum() <= 0:
        raise InsufficientDataError("no prompt answered a category (every count is 0)")
    return y


def _helmert(k: int) -> np.ndarray:
    """[k, k-1] orthonormal basis of the vectors that sum to 0 (the space the shares move in)."""
    q, _ = np.linalg.qr(np.eye(k)[:, :-1] - 1.0 / k)
    return q


def rao_scott_chisquare(cluster_counts) -> RaoScottResult:
    """Pearson's X² against uniform shares with Rao-Scott's second-order correction referred to
    F(d, d (C - 1)), clusters as the unit (see the module doc). Clusters may differ in size."""
    y = _cluster_counts(cluster_counts)
    c, k = y.shape
    m = y.sum(axis=1)
    n = float(m.sum())
    p = y.sum(axis=0) / n
    chi2 = float(n * k * np.sum((p - 1.0 / k) ** 2))
    e = y - m[:, None] * p[None, :]  # [clusters, k]: linearised residuals of the ratio estimator
    cov = c / (c - 1) * (e.T @ e) / n ** 2
    h = _helmert(k)
    delta = np.sort(np.clip(n * k * np.linalg.eigvalsh(h.T @ cov @ h), 0.0, None))[::-1]
    mean = float(delta.mean())
    per_prompt = float(sps.chi2.sf(chi2, k - 1))
    nan = float("nan")
    if mean <= _ZERO:  # every cluster has the same shares: no between-cluster variation to refer X² to
        deviates = chi2 > _ZERO * n
        return RaoScottResult(chi2, k - 1, per_prompt, float("inf") if deviates else 0.0, nan, nan,
                              0.0 if deviates else 1.0, 0.0, nan, delta, n, c)
    a2 = float(delta.var() / mean ** 2)
    stat = chi2 / (mean * (1.0 + a2))  # X² / (tr D² / tr D)
    dof = (k - 1) / (1.0 + a2)  # tr(D)² / tr(D²)
    pvalue = float(sps.f.sf(stat / dof, dof, dof * (c - 1)))
    return RaoScottResult(chi2, k - 1, per_prompt, float(stat), float(dof), float(dof * (c - 1)), pvalue, mean,
                          a2, delta, n, c)


def chi2_and_design_effect(weights, cluster_counts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(X², design effect, N)`` of the pooled counts for each row of cluster ``weights[B, clusters]``
    (bootstrap multiplicities: a resampled cluster counts as a cluster of its own each time), vectorised; at
    weights 1 the values of :func:`rao_scott_chisquare`. The design effect is ``N k tr(V) / (k - 1)`` (the mean
    eigenvalue). A resample of total weight 0 gives NaN."""
    y = _cluster_counts(cluster_counts)
    w = as_float(weights, "weights")
    if w.ndim != 2 or w.shape[1] != y.shape[0]:
        raise ShapeError(f"weights must be [resamples, {y.shape[0]} clusters], got shape {w.shape}")
    k = y.shape[1]
    m = y.sum(axis=1)
    n = w @ m  # [B]
    with np.errstate(invalid="ignore", divide="ignore"):
        p = (w @ y) / n[:, None]  # [B, k]
        chi2 = n * k * np.sum((p - 1.0 / k) ** 2, axis=1)
        wm = w * m  # sum_c w_c |y_c - m_c p|^2 = w.|y|^2 - 2 p.(w m y) + (w.m^2) |p|^2
        ss = w @ np.sum(y * y, axis=1) - 2 * np.sum(p * (wm @ y), axis=1) + (w @ m ** 2) * np.sum(p * p, axis=1)
        units = w.sum(axis=1)  # clusters in each resample
        trace = units / np.maximum(units - 1, 1) * np.maximum(ss, 0.0) / n ** 2  # ss >= 0 up to rounding
        return chi2, n * k * trace / (k - 1), n


def _v(chi2, n, k: int, d):
    """The corrected V's formula (module doc) on arrays, without checks: 0 where X² <= (k - 1) d (there
    X² <= (k - 1) N gives N - d >= 0 too), NaN where an input is NaN."""
    excess = chi2 - (k - 1) * d
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(excess > 0, np.sqrt(excess / ((k - 1) * (n - d))), np.where(np.isnan(excess), np.nan, 0.0))


def cramers_v_corrected(chi2, n, k: int, *, design_effect=1.0):
    """Bias-corrected Cramér's V of a goodness-of-fit X² on ``n`` prompts in ``k`` categories (see the module
    doc): ``sqrt(max(0, X² - (k-1) d) / ((k-1) (n - d)))`` with ``d`` the ``design_effect`` (1: independent
    prompts; a :class:`RaoScottResult`'s ``design_effect`` for clusters as the unit). Works on arrays."""
    chi2, n, d = as_float(chi2, "chi2"), as_float(n, "n"), as_float(design_effect, "design_effect")
    if int(k) != k or k < 2:
        raise StatsError(f"Cramér's V needs k >= 2 categories, got k={k!r}")
    if np.any(chi2 < 0) or np.any(d < 0) or not np.all(np.isfinite(d)):
        raise StatsError("Cramér's V needs chi2 >= 0 and a finite design effect >= 0")
    if np.any(n <= d):
        raise InsufficientDataError("Cramér's V's bias correction needs more prompts than the design effect "
                                    f"(n={n}, design effect {d}); score more items")
    v = _v(chi2, n, int(k), d)
    return float(v) if np.ndim(v) == 0 else v


def cramers_v_gof(chi2, n, k):
    """Cramér's V for a goodness-of-fit test, uncorrected: sqrt(chi2 / (N (k - 1)))."""
    chi2, n = as_float(chi2, "chi2"), as_float(n, "n")
    if k < 2 or np.any(n <= 0) or np.any(chi2 < 0):
        raise StatsError(f"Cramér's V needs chi2 >= 0, N > 0 and k >= 2 categories, got k={k}")
    return np.sqrt(chi2 / (n * (k - 1)))


def bootstrap_v_and_shares(cluster_counts, n_boot: int, confidence: float, rng):
    """Percentile bootstrap CIs over clusters: ``(v_low, v_high, share_low[k], share_high[k])`` of the
    corrected Cramér's V (the correction recomputed on every resample) and of each category's share; NaN
    without resamples (``n_boot`` = 0)."""
    y = _cluster_counts(cluster_counts)
    k = y.shape[1]
    if not n_boot:
        return float("nan"), float("nan"), np.full(k, np.nan), np.full(k, np.nan)
    w = bootstrap_weights(y.shape[0], n_boot, rng)
    chi2, deff, n = chi2_and_design_effect(w, y)
    v_lo, v_hi = percentile_ci(_v(chi2, n, k, deff), confidence)
    with np.errstate(invalid="ignore", divide="ignore"):
        s_lo, s_hi = percentile_ci((w @ y) / n[:, None], confidence)
    return v_lo, v_hi, s_lo, s_hi
