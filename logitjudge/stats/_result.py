"""Shared pieces of the statistics layer: errors, warnings, the result base class, bootstrap and design
helpers.

Undefined statistics (a correlation of constant scores, a gain whose denominator is zero) are never returned
as a bare NaN with a RuntimeWarning: results carry ``defined=False`` and a ``reason`` string, with the
statistic NaN. Bad *input* (wrong shapes, a single item, a design that cannot answer the question) raises a
``StatsError``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, fields

import numpy as np

from ..errors import LogitJudgeError
from ..orderings import OrderingError, is_balanced, is_complete, validate

BALANCED, SHARED_RANDOM, FIXED = "balanced", "shared-random", "fixed"
PER_ITEM_RANDOM = "per-item random"  # every item has its own (random) orders: content and position unconfounded


class StatsError(LogitJudgeError, ValueError):
    """Bad input to a statistic; the message says what is wrong and how to fix it."""


class ShapeError(StatsError):
    """Arrays whose shapes do not fit together."""


class DesignError(StatsError):
    """The ordering design cannot answer the question (e.g. a balanced-only statistic on random orderings)."""


class ConfoundedDesignError(DesignError):
    """The design confounds content with position (a FIXED order, or one random set shared by every item), so a
    test of position preference would read a content preference as a position bias."""


class InsufficientDataError(StatsError):
    """Too few items, groups or orderings for the statistic."""


class AlignmentError(StatsError):
    """Human scores that do not match the table (unknown ids, missing criteria)."""


class ConfoundedDesignWarning(UserWarning):
    """A FIXED design was analysed anyway: score and position are confounded."""


class RandomDesignWarning(UserWarning):
    """A shared-random design: the test is valid in expectation but content x position confounding adds
    variance."""


@dataclass(frozen=True)
class Result:
    """Base of every result: frozen, with a JSON-ready ``to_dict`` (arrays -> lists, NaN -> None)."""

    def to_dict(self) -> dict:
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}


def jsonable(x):
    """JSON-ready copy of ``x``: numpy -> lists/floats, NaN/inf -> None, results -> dicts."""
    if isinstance(x, Result):
        return x.to_dict()
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if math.isfinite(x) else None
    if x is None or isinstance(x, str):
        return x
    return str(x)


# ---- argument checks ---------------------------------------------------------------------------------------
def as_rng(rng) -> np.random.Generator:
    return np.random.default_rng(rng)


def check_confidence(confidence: float) -> float:
    if not 0.0 < float(confidence) < 1.0:
        raise StatsError(f"confidence must lie strictly between 0 and 1 (e.g. 0.95), got {confidence!r}")
    return float(confidence)


def check_n_boot(n_boot: int) -> int:
    if int(n_boot) != n_boot or n_boot < 0:
        raise StatsError(f"n_boot must be a non-negative integer (0 skips the bootstrap), got {n_boot!r}")
    return int(n_boot)


def check_choice(name: str, value: str, choices) -> str:
    if value not in choices:
        raise StatsError(f"{name}={value!r} is not one of {list(choices)}")
    return value


def as_float(x, name: str) -> np.ndarray:
    """``x`` as a float64 array; anything that is not numbers is bad input (StatsError), not a numpy error."""
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise StatsError(f"{name} must be numbers ({e})") from None


def as_orders(orders, name: str = "option_orders", *, per_item: bool = False) -> np.ndarray:
    """``orders`` validated as a (K, n) set of permutations (or with ``per_item=True`` also per item, (I, K, n));
    a bad one is a StatsError naming the argument."""
    try:
        a = validate(orders, per_item=per_item)
    except (OrderingError, TypeError, ValueError) as e:
        raise StatsError(f"{name}: {e}") from None
    if a.shape[-1] == 0:
        raise ShapeError(f"{name} has no options (shape {a.shape}); each row must order at least one option")
    return a


def as_array(x, name: str, ndim: int, what: str) -> np.ndarray:
    a = as_float(x, name)
    if a.ndim != ndim:
        raise ShapeError(f"{name} must be {ndim}-D {what}, got shape {a.shape}")
    return a


def check_distributions(p: np.ndarray, name: str, atol: float = 1e-6) -> None:
    """Rows along the last axis must be probability distributions (the table stores renormalised rows)."""
    if p.size == 0:
        raise ShapeError(f"{name} is empty (shape {p.shape})")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise StatsError(f"{name} contains negative or non-finite probabilities")
    bad = np.abs(p.sum(axis=-1) - 1.0) > atol
    if bad.any():
        example = p.sum(axis=-1)[bad].flat[0]
        raise StatsError(f"{name}: {int(bad.sum())} rows do not sum to 1 (e.g. {example:.6g}); "
                         "pass the renormalised ScoreTable.probs, not raw label probabilities")


def check_orders(option_orders, n_orderings: int, n_options: int, name: str = "option_orders", *,
                 n_items: int | None = None) -> np.ndarray:
    """Validated orders: (K, n), or per item (I, K, n) when ``n_items`` is given (a function that accepts
    per-item orders passes it)."""
    a = as_orders(option_orders, name, per_item=n_items is not None)
    want = (n_items, n_orderings, n_options) if a.ndim == 3 else (n_orderings, n_options)
    if a.shape != want:
        expect = f"({n_orderings}, {n_options})" + ("" if n_items is None else
                                                    f" or per item ({n_items}, {n_orderings}, {n_options})")
        raise ShapeError(f"{name} has shape {a.shape}, expected {expect} to match the items, orderings and "
                         "options of the probabilities")
    return a


def group_score_list(scores, name: str = "scores") -> list[np.ndarray]:
    """A [G, K, m] array or a sequence of G arrays [K_g, m_g] as a list of finite 2-D float arrays."""
    if isinstance(scores, np.ndarray) and scores.dtype != object:
        a = as_float(scores, name)
        if a.ndim != 3:
            raise ShapeError(f"{name} must be [groups, orderings, candidates] or a list of [orderings, "
                             f"candidates] arrays, got shape {a.shape}")
        out = list(a)
    else:
        try:
            out = [as_float(s, name) for s in scores]
        except TypeError:
            raise StatsError(f"{name} must be a sequence of [orderings, candidates] arrays") from None
    if not out:
        raise InsufficientDataError(f"{name} has no groups")
    for s in out:
        if s.ndim != 2 or s.shape[0] < 1 or not np.all(np.isfinite(s)):
            raise ShapeError(f"every group of {name} must be a finite [orderings, candidates] array, got "
                             f"shape {s.shape}")
    return out


def need_items(n: int, minimum: int, what: str) -> None:
    if n < minimum:
        raise InsufficientDataError(f"{what} needs at least {minimum} items, got {n}; "
                                    "score more items before computing it")


# ---- designs -----------------------------------------------------------------------------------------------
def _shared(a: np.ndarray) -> np.ndarray:
    """Per-item orders that are the same for every item, as one shared (K, n) set (else unchanged)."""
    return a[0] if a.ndim == 3 and np.all(a == a[:1]) else a


def detect_design(option_orders) -> str:
    """'balanced' when every option is at every position equally often (``is_balanced``; within every item for
    per-item orders; all n! orders included), 'fixed' when every row is the same order, 'per-item random' when
    items have different (not balanced) ordering sets, else 'shared-random' (one unbalanced set shared by every
    item). With a single option there are no positions: 'fixed'."""
    a = _shared(as_orders(option_orders, per_item=True))
    if a.shape[-1] > 1 and is_balanced(a):
        return BALANCED
    if a.ndim == 3:
        return PER_ITEM_RANDOM
    if np.all(a == a[0]):
        return FIXED
    return SHARED_RANDOM


def has_all_orders(option_orders) -> bool:
    """True when every item's orders are all n! permutations, each equally often (``orderings.is_complete``):
    a uniform draw among them is the study's uniformly random order."""
    return is_complete(as_orders(option_orders, per_item=True))


def canonical_index(option_orders) -> int:
    """The canonical ordering: the identity row when present (for per-item orders: at the same row of every
    item), else row 0 (shared orders only; per-item orders without a common identity row are refused)."""
    a = _shared(as_orders(option_orders, per_item=True))
    ident = np.all(a == np.arange(a.shape[-1]), axis=-1)  # [..., K]
    if a.ndim == 2:
        hits = np.flatnonzero(ident)
        return int(hits[0]) if hits.size else 0
    common = np.flatnonzero(ident.all(axis=0))
    if not common.size:
        raise DesignError("these per-item orders have no canonical ordering (the identity at the same row for "
                          "every item); score with balanced+random:R, which starts every item with the "
                          "balanced rows, or pass the canonical row explicitly")
    return int(common[0])


# ---- bootstrap ---------------------------------------------------------------------------------------------
def bootstrap_indices(n_units: int, n_boot: int, rng) -> np.ndarray:
    """[n_boot, n_units] resampled unit indices (with replacement)."""
    return as_rng(rng).integers(0, n_units, size=(n_boot, n_units))


def weights_from_indices(idx: np.ndarray, n_units: int) -> np.ndarray:
    """[n_boot, n_units] multiplicities of each unit in each resample, so that a bootstrap mean of per-unit
    statistics is ``w @ stat / n_units`` (one matrix product instead of a Python loop)."""
    n_boot = idx.shape[0]
    flat = idx + n_units * np.arange(n_boot)[:, None]
    return np.bincount(flat.ravel(), minlength=n_boot * n_units).reshape(n_boot, n_units).astype(np.float64)


def bootstrap_weights(n_units: int, n_boot: int, rng) -> np.ndarray:
    return weights_from_indices(bootstrap_indices(n_units, n_boot, rng), n_units)


def percentile_ci(samples: np.ndarray, confidence: float) -> tuple[np.ndarray | float, np.ndarray | float]:
    """Percentile interval along axis 0, ignoring NaN resamples (NaN where none is defined)."""
    s = np.asarray(samples, dtype=np.float64)
    if s.shape[0] == 0:
        nan = np.full(s.shape[1:], np.nan)
        return (float("nan"), float("nan")) if nan.ndim == 0 else (nan, nan.copy())
    alpha = (1.0 - confidence) / 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns give NaN, which is what we report
        lo = np.nanquantile(s, alpha, axis=0)
        hi = np.nanquantile(s, 1.0 - alpha, axis=0)
    if np.ndim(lo) == 0:
        return float(lo), float(hi)
    return lo, hi


def mean_over_units(per_unit: np.ndarray, n_boot: int, rng) -> np.ndarray:
    """Bootstrap replicates of the mean over axis 0 of ``per_unit`` ([units, ...]) -> [n_boot, ...]."""
    n = per_unit.shape[0]
    w = bootstrap_weights(n, n_boot, rng)
    return np.tensordot(w, per_unit, axes=(1, 0)) / n


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    z = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)
