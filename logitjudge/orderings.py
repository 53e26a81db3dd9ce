"""Orderings of options (or criteria).

Convention: ``order[p]`` is the canonical index of the option shown at position ``p``. An ordering set is an
int array of shape (K, n). The same functions order criteria.
"""

from __future__ import annotations

import numpy as np


class OrderingError(ValueError):
    pass


def _check_n(n: int) -> None:
    if int(n) != n or n < 1:
        raise OrderingError(f"number of options must be a positive integer, got {n!r}")


def balanced(n: int) -> np.ndarray:
    """The 2n balanced orders: n forward cyclic rotations of the canonical order, then n rotations of the reverse.

    n=5: [0,1,2,3,4], [1,2,3,4,0], ..., [4,3,2,1,0], [3,2,1,0,4], ... Each option appears at each position twice.
    For n=1 the single order is returned once; for n=2 forward and reversed rotations coincide and are kept
    (2n rows) so that K is 2n for every n.
    """
    _check_n(n)
    fwd = np.arange(n)
    rev = fwd[::-1]
    rows = [np.roll(fwd, -k) for k in range(n)] + [np.roll(rev, -k) for k in range(n)]
    return np.asarray(rows, dtype=np.int64).reshape(-1, n) if n > 1 else np.zeros((1, 1), np.int64)


def random(n: int, k: int, rng=None) -> np.ndarray:
    """k uniformly random permutations (drawn independently; repeats possible, as in the study's RANDOM)."""
    _check_n(n)
    if k < 1:
        raise OrderingError(f"need at least one ordering, got k={k}")
    rng = np.random.default_rng(rng)
    return np.stack([rng.permutation(n) for _ in range(k)]).astype(np.int64)


def fixed(n: int, k: int = 1) -> np.ndarray:
    """The canonical order k times."""
    _check_n(n)
    if k < 1:
        raise OrderingError(f"need at least one ordering, got k={k}")
    return np.tile(np.arange(n, dtype=np.int64), (k, 1))


def validate(orders, n: int | None = None) -> np.ndarray:
    """Check that every row is a permutation of 0..n-1; returns an int64 (K, n) array."""
    a = np.asarray(orders)
    if a.ndim != 2 or a.shape[0] == 0:
        raise OrderingError(f"orderings must be a non-empty 2-D array (K, n), got shape {a.shape}")
    if n is not None and a.shape[1] != n:
        raise OrderingError(f"orderings have {a.shape[1]} columns but the rubric has {n} options")
    ref = np.arange(a.shape[1])
    for i, row in enumerate(a):
        if not np.array_equal(np.sort(row), ref):
            raise OrderingError(f"ordering {i} = {row.tolist()} is not a permutation of 0..{a.shape[1] - 1}")
    return a.astype(np.int64)


def position_counts(orders) -> np.ndarray:
    """counts[option, position]: how often each canonical option is shown at each position."""
    a = validate(orders)
    k, n = a.shape
    counts = np.zeros((n, n), dtype=np.int64)
    np.add.at(counts, (a, np.broadcast_to(np.arange(n), (k, n))), 1)
    return counts


def is_balanced(orders) -> bool:
    """True when every option appears at every position equally often."""
    c = position_counts(orders)
    return bool(np.all(c == c.flat[0]))


def inverse(orders) -> np.ndarray:
    """pos[k, option] = the position at which option is shown in ordering k."""
    a = validate(orders)
    inv = np.empty_like(a)
    np.put_along_axis(inv, a, np.broadcast_to(np.arange(a.shape[1]), a.shape), axis=1)
    return inv


def parse(spec: str, n: int, *, seed: int | None = 0) -> np.ndarray:
    """`balanced`, `random:K`, `fixed:K` (K defaults to 2n for random and 1 for fixed)."""
    s = spec.strip().lower()
    kind, _, arg = s.partition(":")
    try:
        k = int(arg) if arg else None
    except ValueError:
        raise OrderingError(f"ordering spec {spec!r}: {arg!r} is not an integer; use e.g. random:10") from None
    if k is not None and k < 1:
        raise OrderingError(f"ordering spec {spec!r}: the count must be at least 1; use e.g. random:10 or fixed:1")
    if kind == "balanced":
        if k is not None:
            raise OrderingError("'balanced' takes no count: it is always the 2n cyclic rotations")
        return balanced(n)
    if kind in ("random", "fixed") and k is not None and k < 1:
        raise OrderingError(f"ordering spec {spec!r}: the count must be at least 1; use e.g. {kind}:10, or {kind} "
                            f"alone for the default ({'2n' if kind == 'random' else 1})")
    if kind == "random":
        return random(n, 2 * n if k is None else k, rng=seed)
    if kind == "fixed":
        return fixed(n, 1 if k is None else k)
    raise OrderingError(f"unknown ordering spec {spec!r}; use balanced, random:K or fixed:K")


def cross(option_orders, criterion_orders) -> tuple[np.ndarray, np.ndarray]:
    """All pairs (option order, criterion order) as two aligned arrays of K_o*K_c rows."""
    o = np.asarray(option_orders)
    c = np.asarray(criterion_orders)
    return np.repeat(o, len(c), axis=0), np.tile(c, (len(o), 1))
