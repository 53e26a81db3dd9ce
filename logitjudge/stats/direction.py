"""Direction of a position preference: which positions are favoured, and the shape of that set.

Positions are numbered 1..n in every reason a person reads; the 0-based indices stay inside the arrays.
"""

from __future__ import annotations

import numpy as np
from scipy import stats as sps

from ._result import ShapeError, StatsError, as_float

LABELS = ("first", "last", "edges", "middle", "mixed", "none")


def _favoured(counts, ci_low, alpha: float, design_effect: float = 1.0) -> np.ndarray:
    """Positions favoured by the judge. With bootstrap CIs: those whose share's CI lies above 1/n. Without:
    those whose share is above 1/n and not significantly below the largest share (two-sided z-test at
    ``alpha`` on the difference of two multinomial counts, its variance times the ``design_effect`` of items as
    clusters), so that positions tied at the top stay together (a U-shape is both ends, not the first)."""
    counts = np.asarray(counts, dtype=np.float64)
    n = counts.size
    low = np.asarray(ci_low, dtype=np.float64)
    if np.all(np.isfinite(low)):
        return low > 1.0 / n
    total = counts.sum()
    top = counts.max()
    p_top, p = top / total, counts / total
    deff = max(float(design_effect), 1e-12) if np.isfinite(design_effect) else 1.0
    sd = np.sqrt(np.maximum(deff * total * (p_top + p - (p_top - p) ** 2), 1e-300))
    tied_with_top = (top - counts) / sd < sps.norm.ppf(1.0 - alpha / 2)
    return tied_with_top & (p > 1.0 / n)


def count_list(counts) -> list:
    """Counts as a person reads them: integers where they are whole (ties split make halves)."""
    c = np.asarray(counts, dtype=np.float64)
    return [int(round(x)) if abs(x - round(x)) < 1e-9 else round(float(x), 2) for x in c.ravel()]


def _shape_label(fav: np.ndarray) -> str:
    """'first' (a block starting at position 0), 'last' (a block ending at n-1), 'edges' (both ends), 'middle'
    (a contiguous interior block), 'mixed' (anything else)."""
    n = fav.size
    pos = np.flatnonzero(fav)
    if fav[0] and fav[-1]:
        return "edges"
    contiguous = pos.size and np.all(np.diff(pos) == 1)
    if fav[0] and contiguous:
        return "first"
    if fav[-1] and contiguous:
        return "last"
    if contiguous and 0 < pos[0] and pos[-1] < n - 1:
        return "middle"
    return "mixed"


def _place_list(idx: np.ndarray, names) -> str:
    """Places numbered from 1, with their names where given: '[1, 5]' or '[1 (A), 5 (E)]'."""
    if names is None:
        return str((idx + 1).tolist())
    return "[" + ", ".join(f"{j + 1} ({names[j]})" for j in idx) + "]"


def direction(shares, ci_low, pvalue: float, alpha: float, *, counts=None, design_effect: float = 1.0,
              noun: str = "position", names=None) -> tuple[str, str, tuple[int, ...]]:
    """``(label, reason, favoured_index)``: :func:`position_label`'s label and reason, and the 0-based indices
    of the favoured places the label rests on (empty when the label is 'none')."""
    shares = as_float(shares, "shares")
    n = shares.size
    if shares.ndim != 1 or n < 2 or not isinstance(pvalue, (int, float, np.number)):
        raise StatsError(f"position_label needs >= 2 shares and a numeric p-value, got {n} and {pvalue!r}")
    cnt = shares if counts is None else as_float(counts, "counts")
    if cnt.shape != shares.shape:
        raise ShapeError(f"counts has shape {cnt.shape}, expected {shares.shape} (one per {noun})")
    low = as_float(ci_low, "ci_low")
    if low.shape != shares.shape:
        raise ShapeError(f"ci_low has shape {low.shape}, expected {shares.shape} (one per {noun})")
    if names is not None and (len(names) != n or not all(isinstance(x, str) for x in names)):
        raise StatsError(f"names must be {n} strings, one per {noun}, got {names!r}")
    quote = ""
    if counts is not None:
        shown = count_list(cnt) if names is None else \
            "[" + ", ".join(f"{x}: {c}" for x, c in zip(names, count_list(cnt))) + "]"
        quote = f"; counts by {noun} {shown}"
    if not pvalue < alpha:
        return "none", f"not significant (p = {pvalue:.3g} >= alpha = {alpha}){quote}", ()
    has_ci = bool(np.all(np.isfinite(low)))
    if not has_ci and counts is None:  # no CI and no counts: the largest share(s), tied ones together
        fav = (shares >= shares.max()) & (shares > 1.0 / n)
    else:
        fav = _favoured(cnt, low, alpha, design_effect)
    if not fav.any():
        return "none", (f"significant, but no {noun}'s share lies above 1/{n}"
                        + (" (CI lower bounds)" if has_ci else "") + quote), ()
    how = "a share whose CI lies above" if has_ci else "the largest share (or one tied with it), above"
    idx = np.flatnonzero(fav)
    return _shape_label(fav), f"{noun}s {_place_list(idx, names)} have {how} 1/{n}{quote}", tuple(int(j) for j in idx)


def position_label(shares, ci_low, pvalue: float, alpha: float, *, counts=None, design_effect: float = 1.0,
                   noun: str = "position", names=None) -> tuple[str, str]:
    """Direction label from the shares, their CI lower bounds and the test's p-value.

    'none' unless the test rejects at ``alpha`` and some position is favoured (see ``_favoured``: the share's CI
    lies above 1/n, or without CIs the share is above 1/n and tied with the largest one given ``counts``). The
    favoured set is then 'first' (a block from position 0), 'last' (a block ending at the last position),
    'edges' (both ends favoured: a U-shape), 'middle' (an interior block) or 'mixed'. The reason numbers the
    positions 1..n and quotes the counts the verdict rests on; ``design_effect`` widens the no-CI z-test for
    items as clusters. ``noun`` names a place in the reason ('slot' for the paradigms' slot test) and ``names``
    adds each place's label (e.g. 'A', 'B'): "slots [1 (A)] have ...; counts by slot [A: 54, B: 26]".
    """
    label, why, _ = direction(shares, ci_low, pvalue, alpha, counts=counts, design_effect=design_effect,
                              noun=noun, names=names)
    return label, why
