"""Orderings of options (or criteria).

Convention: ``order[p]`` is the canonical index of the option shown at position ``p``. An ordering set is an
int array of shape (K, n) shared by every item, or (I, K, n) with one set per item (per-item random designs).
The same functions order criteria.

Designs (``parse``): ``balanced`` (the study's 2n cyclic rotations), ``all`` (every one of the n! orders),
``random:K`` (K uniform permutations drawn independently for every item: the study's RANDOM), ``shared-random:K``
(one set of K random orders shared by every item: the behaviour of ``random:K`` before per-item draws; it
confounds content and position), ``balanced+random:R`` (the 2n balanced orders and R per-item random ones in
one run) and ``fixed:K`` (the canonical order K times).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .errors import LogitJudgeError

MAX_ALL_N = 7  # 7! = 5,040 prompts per item; 8! = 40,320 is more than any run should score per text


class OrderingError(LogitJudgeError, ValueError):
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


def _check_k(k, spec: str) -> int:
    if int(k) != k or k < 1:
        raise OrderingError(f"{spec} needs at least 1 ordering, got {k!r}; use e.g. {spec}:10")
    return int(k)


def shared_random(n: int, k: int, rng=None) -> np.ndarray:
    """``shared-random:K``: one (k, n) set of uniformly random permutations (drawn independently, repeats
    possible) shared by every item when used as a table's orders; it confounds content and position (the
    study's RANDOM draws per item: :func:`random`)."""
    _check_n(n)
    k = _check_k(k, "shared-random")
    rng = np.random.default_rng(rng)
    return np.stack([rng.permutation(n) for _ in range(k)]).astype(np.int64)


def random(n: int, k: int, n_items: int, rng=None) -> np.ndarray:
    """``random:K``, the study's RANDOM: (n_items, k, n), k uniform permutations drawn independently for every
    item (with replacement, as the study draws K random variants). Item i's orders depend only on (rng, i, k,
    n), not on how many items follow, so a longer run with the same seed extends a shorter one."""
    _check_n(n)
    k = _check_k(k, "random")
    if int(n_items) != n_items or n_items < 1:
        raise OrderingError(f"per-item random orders need the number of items (>= 1), got n_items={n_items!r}")
    seed = np.random.SeedSequence(np.random.default_rng(rng).integers(0, 2**63))
    gens = [np.random.default_rng(s) for s in seed.spawn(int(n_items))]
    return np.stack([np.argsort(g.random((k, n)), axis=1) for g in gens]).astype(np.int64)


def all_orders(n: int) -> np.ndarray:
    """Every one of the n! orders, in lexicographic order (the identity first); refused above ``MAX_ALL_N``."""
    _check_n(n)
    if n > MAX_ALL_N:
        raise OrderingError(f"'all' orders of {n} options are {math.factorial(n):,} prompts per item; it is "
                            f"allowed up to n={MAX_ALL_N} ({math.factorial(MAX_ALL_N):,}); use random:K (per-item "
                            "random orders) or balanced for larger rubrics")
    return np.asarray(list(itertools.permutations(range(n))), dtype=np.int64).reshape(-1, n)


def fixed(n: int, k: int = 1) -> np.ndarray:
    """The canonical order k times."""
    _check_n(n)
    k = _check_k(k, "fixed")
    return np.tile(np.arange(n, dtype=np.int64), (k, 1))


def validate(orders, n: int | None = None, *, per_item: bool = False, n_items: int | None = None) -> np.ndarray:
    """Check that every row is a permutation of 0..n-1; returns an int64 (K, n) array, or with
    ``per_item=True`` a (K, n) or (I, K, n) array (one ordering set per item; ``n_items``: the I it must have)."""
    a = np.asarray(orders)
    if per_item and a.ndim == 3 and n_items is not None and a.shape[0] != n_items:
        raise OrderingError(f"per-item option orders have {a.shape[0]} rows of orders for {n_items} items")
    ok = (2, 3) if per_item else (2,)
    if a.ndim not in ok or a.size == 0:
        want = "(K, n) or per item (I, K, n)" if per_item else "(K, n)"
        raise OrderingError(f"orderings must be a non-empty {'/'.join(map(str, ok))}-D array {want}, "
                            f"got shape {a.shape}")
    if n is not None and a.shape[-1] != n:
        raise OrderingError(f"orderings have {a.shape[-1]} columns but the rubric has {n} options")
    rows = a.reshape(-1, a.shape[-1])
    ref = np.arange(a.shape[-1])
    bad = np.flatnonzero(~np.all(np.sort(rows, axis=1) == ref, axis=1))
    if bad.size:
        where = np.unravel_index(bad[0], a.shape[:-1])
        raise OrderingError(f"ordering {where[0] if len(where) == 1 else tuple(map(int, where))} = "
                            f"{rows[bad[0]].tolist()} is not a permutation of 0..{a.shape[-1] - 1}")
    return a.astype(np.int64)


def orders_per_item(orders, n_items: int) -> np.ndarray:
    """(I, K, n) view of a shared (K, n) or per-item (I, K, n) ordering set."""
    a = validate(orders, per_item=True)
    if a.ndim == 2:
        return np.broadcast_to(a, (int(n_items),) + a.shape)
    if a.shape[0] != n_items:
        raise OrderingError(f"per-item orderings are given for {a.shape[0]} items, expected {n_items}")
    return a


def position_counts(orders) -> np.ndarray:
    """counts[option, position] (or [item, option, position] for per-item orders): how often each canonical
    option is shown at each position."""
    a = validate(orders, per_item=True)
    n = a.shape[-1]
    onehot = np.eye(n, dtype=np.int64)[a]  # [..., K, position, option]
    return np.swapaxes(onehot.sum(axis=-3), -1, -2)


def is_balanced(orders) -> bool:
    """True when every option appears at every position equally often (for per-item orders: within every
    item)."""
    c = position_counts(orders)
    flat = c.reshape(-1, c.shape[-1] * c.shape[-2])  # [items (1 when shared), options * positions]
    return bool(np.all(flat == flat[:, :1]))


def is_complete(orders) -> bool:
    """True when the orders (of every item, for per-item orders) are all n! permutations, each equally often:
    a uniform draw of one of them is a uniform random permutation."""
    a = validate(orders, per_item=True)
    n = a.shape[-1]
    if n > MAX_ALL_N:
        return False
    sets = a[None] if a.ndim == 2 else a
    nf = math.factorial(n)
    if sets.shape[1] % nf:
        return False
    code = (sets * n ** np.arange(n)).sum(axis=-1)  # [items, K]: a unique integer per permutation
    return all(np.all(np.unique(row, return_counts=True)[1] == sets.shape[1] // nf)
               and np.unique(row).size == nf for row in code)


def inverse(orders) -> np.ndarray:
    """pos[..., k, option] = the position at which option is shown in ordering k."""
    a = validate(orders, per_item=True)
    inv = np.empty_like(a)
    np.put_along_axis(inv, a, np.broadcast_to(np.arange(a.shape[-1]), a.shape), axis=-1)
    return inv


SPECS = "balanced, all, random:K, balanced+random:R, shared-random:K or fixed:K"


def parse(spec: str, n: int, *, seed: int | None = 0, n_items: int | None = None) -> np.ndarray:
    """Ordering set of a spec (see the module doc): (K, n) for designs shared by every item (``balanced``,
    ``all``, ``shared-random:K``, ``fixed:K``), (n_items, K, n) for per-item designs (``random:K``,
    ``balanced+random:R``), which need ``n_items``. The random designs need their count (K is the budget); fixed
    defaults to 1; a count must be >= 1. ``seed`` makes the random draws reproducible."""
    s = spec.strip().lower()
    kind, _, arg = s.partition(":")
    if not arg.strip() and kind in ("random", "shared-random", "balanced+random"):  # K is the budget: no silent 2n
        raise OrderingError(f"ordering spec {spec!r} needs a count: {kind}:{'R' if '+' in kind else 'K'}, e.g. "
                            f"{kind}:{2 * n} ({2 * n} = 2n, as many orders as balanced)")
    try:
        k = int(arg) if arg else None
    except ValueError:
        raise OrderingError(f"ordering spec {spec!r}: {arg!r} is not an integer; use e.g. random:10") from None
    if k is not None:
        try:
            _check_k(k, kind)
        except OrderingError as e:
            raise OrderingError(f"ordering spec {spec!r}: {e}") from None
    if kind in ("balanced", "all"):
        if k is not None:
            raise OrderingError(f"'{kind}' takes no count: it is always "
                                + ("the 2n cyclic rotations" if kind == "balanced" else "all n! orders"))
        return balanced(n) if kind == "balanced" else all_orders(n)
    if kind == "fixed":
        return fixed(n, k or 1)
    if kind == "shared-random":
        return shared_random(n, k, rng=seed)
    if kind in ("random", "balanced+random"):
        if n_items is None:
            raise OrderingError(f"'{spec}' draws orders independently for every item, so it needs the number "
                                "of items (parse(..., n_items=...)); use shared-random:K for one set shared by "
                                "every item")
        r = random(n, k, n_items, rng=seed)
        if kind == "random":
            return r
        return np.concatenate([np.broadcast_to(balanced(n), (int(n_items),) + balanced(n).shape), r], axis=1)
    raise OrderingError(f"unknown ordering spec {spec!r}; use {SPECS}")


def cross(option_orders, criterion_orders) -> tuple[np.ndarray, np.ndarray]:
    """All pairs (option order, criterion order) as two aligned arrays of K_o*K_c rows. Per-item option orders
    (I, K_o, n) cross within every item: (I, K_o*K_c, n) and one shared (K_o*K_c, c) criteria order set."""
    o = np.asarray(option_orders)
    c = np.asarray(criterion_orders)
    return np.repeat(o, len(c), axis=-2), np.tile(c, (o.shape[-2], 1))
