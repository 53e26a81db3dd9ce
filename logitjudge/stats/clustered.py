"""Goodness of fit with items as the unit: Rao-Scott's corrected χ² and a bias-corrected Cramér's V.

``item_counts[item, category]``: how many of an item's prompts chose each category (position). An item's prompts
(its orderings) are not independent draws: an item whose content pulls its answers to one position puts all of
its prompts there, so the pooled counts vary more than a multinomial and Pearson's X² on them rejects far too
often (the per-prompt p-value). The items are the independent units (clusters).

* :func:`rao_scott_chisquare` - Pearson's X² of the pooled counts against uniform, with Rao and Scott's
  second-order correction (Rao & Scott 1981, 1984): the covariance of the pooled shares is estimated with items as
  clusters (the ratio estimator's linearisation, ``I/(I-1) sum_i e_i e_i^T / N^2`` with ``e_i = c_i - m_i p``),
  the generalised design effects ``delta_j`` are the eigenvalues of ``V0^-1 V`` (``V0`` the multinomial
  covariance under uniform shares), and ``X^2 / (mean(delta) (1 + a^2))`` is referred to χ² with
  ``(k-1) / (1 + a^2)`` degrees of freedom, ``a^2`` the squared coefficient of variation of the ``delta_j``.
  The design effect ``mean(delta)`` is how many times the pooled shares vary more than independent prompts'.
  The null is the study's: no *shared* position preference, i.e. the mean share of each position over the
  population of items is 1/k (each item may have a preference of its own). Asymptotic in the number of items.
* :func:`cramers_v_corrected` - the goodness-of-fit counterpart of Bergsma's (2013) bias correction of Cramér's
  V: ``phi^2 = X^2 / N`` less its expectation under no preference (``(k-1) delta / N`` with items as clusters,
  ``(k-1) / N`` for independent prompts), truncated at 0, over its maximum corrected alike, so that it is 0
  without a preference (and its bootstrap interval can reach 0) and 1 when every prompt chose one position.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from ._result import InsufficientDataError, Result, ShapeError, StatsError, as_array, as_float, need_items


@dataclass(frozen=True)
class RaoScottResult(Result):
    """Pearson's ``statistic`` (X² of the pooled counts against uniform, ``dof`` = k - 1) with its per-prompt
    ``pvalue_per_prompt`` (prompts treated as independent: not a test of the items), and the Rao-Scott
    second-order test with items as clusters: ``statistic_corrected`` on ``dof_corrected`` degrees of freedom,
    ``pvalue``; ``design_effect`` (mean of the generalised design effects ``eigenvalues``) and ``a_squared``
    (their squared coefficient of variation). ``n``: prompts; ``n_items``: items (clusters)."""

    statistic: float
    dof: int
    pvalue_per_prompt: float
    statistic_corrected: float
    dof_corrected: float
    pvalue: float
    design_effect: float
    a_squared: float
    eigenvalues: np.ndarray
    n: float
    n_items: int


def _item_counts(item_counts) -> np.ndarray:
    c = as_array(item_counts, "item_counts", 2, "[items, categories]")
    if not np.all(np.isfinite(c)) or np.any(c < 0):
        raise StatsError("item_counts must be finite non-negative counts")
    if c.shape[1] < 2:
        raise ShapeError(f"item_counts has {c.shape[1]} category; a goodness-of-fit test needs at least 2")
    need_items(c.shape[0], 2, "a test with items as clusters")
    if np.any(c.sum(axis=1) <= 0):
        raise StatsError("every item must have at least one prompt (a row of item_counts sums to 0)")
    return c


def _helmert(k: int) -> np.ndarray:
    """[k, k-1] orthonormal basis of the vectors that sum to 0 (the space the shares move in)."""
    q, _ = np.linalg.qr(np.eye(k)[:, :-1] - 1.0 / k)
    return q


def rao_scott_chisquare(item_counts) -> RaoScottResult:
    """Pearson's X² against uniform shares with Rao-Scott's second-order correction, items as clusters (see
    the module doc). Items may have different numbers of prompts. When the items' shares do not vary at all
    (design effect 0) the test is degenerate: p = 1 for X² = 0, else p = 0 (every item the same tilt)."""
    c = _item_counts(item_counts)
    n_items, k = c.shape
    m = c.sum(axis=1)
    n = float(m.sum())
    p = c.sum(axis=0) / n
    chi2 = float(n * k * np.sum((p - 1.0 / k) ** 2))
    e = c - m[:, None] * p[None, :]  # [items, k]: linearised residuals of the ratio estimator
    cov = n_items / (n_items - 1) * (e.T @ e) / n ** 2
    h = _helmert(k)
    delta = np.sort(np.clip(n * k * np.linalg.eigvalsh(h.T @ cov @ h), 0.0, None))[::-1]
    mean = float(delta.mean())
    per_prompt = float(sps.chi2.sf(chi2, k - 1))
    if mean <= 1e-12:  # the items' shares are identical: no between-item variation to refer X² to
        degenerate = chi2 <= 1e-12
        return RaoScottResult(chi2, k - 1, per_prompt, 0.0 if degenerate else float("inf"), float(k - 1),
                              1.0 if degenerate else 0.0, 0.0, 0.0, delta, n, n_items)
    a2 = float(delta.var() / mean ** 2)
    stat = chi2 / (mean * (1.0 + a2))
    dof = (k - 1) / (1.0 + a2)
    return RaoScottResult(chi2, k - 1, per_prompt, float(stat), float(dof), float(sps.chi2.sf(stat, dof)), mean,
                          a2, delta, n, n_items)


def chi2_and_design_effect(weights, item_counts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(X², design effect, N)`` of the pooled counts for each row of item ``weights[B, items]`` (bootstrap
    multiplicities: a resampled item counts as a cluster of its own each time), vectorised; at weights 1 the
    values of :func:`rao_scott_chisquare`. The design effect is ``N k tr(V) / (k - 1)`` (the mean eigenvalue)."""
    c = _item_counts(item_counts)
    w = as_float(weights, "weights")
    if w.ndim != 2 or w.shape[1] != c.shape[0]:
        raise ShapeError(f"weights must be [resamples, {c.shape[0]} items], got shape {w.shape}")
    n_items, k = c.shape
    m = c.sum(axis=1)
    n = w @ m  # [B]
    p = (w @ c) / n[:, None]  # [B, k]
    chi2 = n * k * np.sum((p - 1.0 / k) ** 2, axis=1)
    wm = w * m  # sum_i w_i |c_i - m_i p|^2 = w.|c|^2 - 2 p.(w m c) + (w.m^2) |p|^2
    ss = w @ np.sum(c * c, axis=1) - 2 * np.sum(p * (wm @ c), axis=1) + (w @ m ** 2) * np.sum(p * p, axis=1)
    units = w.sum(axis=1)  # clusters in each resample
    trace = units / np.maximum(units - 1, 1) * np.maximum(ss, 0.0) / n ** 2  # ss >= 0 up to rounding
    return chi2, n * k * trace / (k - 1), n


def cramers_v_corrected(chi2, n, k: int, *, design_effect=1.0):
    """Bias-corrected Cramér's V of a goodness-of-fit X² on ``n`` prompts in ``k`` categories (see the module
    doc): ``sqrt(max(0, X² - (k-1) d) / ((k-1) (n - d)))`` with ``d`` the ``design_effect`` (1: independent
    prompts; a :class:`RaoScottResult`'s ``design_effect`` for items as clusters). Works on arrays."""
    chi2, n, d = as_float(chi2, "chi2"), as_float(n, "n"), as_float(design_effect, "design_effect")
    if int(k) != k or k < 2:
        raise StatsError(f"Cramér's V needs k >= 2 categories, got k={k!r}")
    if np.any(chi2 < 0) or np.any(d < 0) or not np.all(np.isfinite(d)):
        raise StatsError("Cramér's V needs chi2 >= 0 and a finite design effect >= 0")
    if np.any(n <= d):
        raise InsufficientDataError("Cramér's V's bias correction needs more prompts than the design effect "
                                    f"(n={n}, design effect {d}); score more items")
    v = np.sqrt(np.maximum(chi2 - (k - 1) * d, 0.0) / ((k - 1) * (n - d)))
    return float(v) if np.ndim(v) == 0 else v
