"""matplotlib helpers for the sections' plots: plain Figure objects on the Agg canvas (no pyplot, so the
caller's backend and global state are left alone), imported only when a plot is drawn."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

COLORS = {"fixed": "#8c8c8c", "random": "#1f77b4", "balanced": "#d62728", "all_orderings": "#2ca02c",
          "pride": "#9467bd"}
STRATEGY_LABELS = {"fixed": "FIXED (canonical order, 1 prompt)",
                   "random": "RANDOM (1 random order: expectation over orders)",
                   "balanced": "BALANCED (mean over the balanced orders)",
                   "all_orderings": "mean over all orderings", "pride": "PriDe (held-out items)"}


def num(x) -> float:
    return float("nan") if x is None else float(x)


def arr(xs) -> np.ndarray:
    return np.asarray([num(x) for x in xs], dtype=np.float64)


def yerr(mid, lo, hi) -> np.ndarray:
    """Error-bar lengths below/above (0 where a bound is undefined)."""
    m, lo, hi = arr(mid), arr(lo), arr(hi)
    below = np.where(np.isfinite(lo) & np.isfinite(m), m - lo, 0.0)
    above = np.where(np.isfinite(hi) & np.isfinite(m), hi - m, 0.0)
    return np.vstack([np.maximum(below, 0), np.maximum(above, 0)])


def figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


DPI = 150  # with the panel sizes below: a single panel is 840 x 630 px, labels at 10 pt stay legible


def grid(n: int, ncols: int = 2, panel=(5.6, 4.2)):
    """A figure with ``n`` panels, ``ncols`` a row."""
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    fig = figure(panel[0] * ncols, panel[1] * nrows)
    return fig, [fig.add_subplot(nrows, ncols, i + 1) for i in range(n)]


def save(fig, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=DPI, metadata={"Software": None})
    return path
