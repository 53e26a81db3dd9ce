"""PNG plots of an analysis dict (:func:`logitjudge.analysis.analyze`), drawn with matplotlib's Agg canvas.

Each ``plot_*`` function draws one figure from the analysis and returns the PNG path, or raises
:class:`Skip` with the reason when the analysis has nothing to draw (the reason the analysis recorded under
``skipped``). :func:`make_plots` draws them all: ``{name: Path | reason}``.

No pyplot: figures are plain :class:`matplotlib.figure.Figure` objects, so the caller's backend and global
state are left alone.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

COLORS = {"fixed": "#8c8c8c", "random": "#1f77b4", "balanced": "#d62728", "all_orderings": "#2ca02c",
          "pride": "#9467bd"}
STRATEGY_LABELS = {"fixed": "FIXED (canonical order, 1 prompt)", "random": "RANDOM (1 random order)",
                   "balanced": "BALANCED (mean over the balanced orders)",
                   "all_orderings": "mean over all orderings", "pride": "PriDe (held-out items)"}
PLOTS = ("position", "criterion_position", "budget", "rank_stability", "alignment")
TITLES = {"position": "Position preference", "criterion_position": "Criterion-position effect",
          "budget": "Budget curves", "rank_stability": "Top-1 flips", "alignment": "Human alignment"}


class Skip(Exception):
    """Nothing to draw; the message is the reason."""


def skip_reason(result: dict, section: str) -> str:
    """The reason the analysis recorded for a skipped section (or for each of its criteria)."""
    skipped = result.get("skipped") or {}
    if section in skipped:
        return skipped[section]
    parts = [f"{k[len(section) + 1:]}: {v}" for k, v in skipped.items() if k.startswith(section + ".")]
    return "; ".join(parts) or "the analysis has no results for this section"


def _num(x) -> float:
    return float("nan") if x is None else float(x)


def _arr(xs) -> np.ndarray:
    return np.asarray([_num(x) for x in xs], dtype=np.float64)


def _yerr(mid, lo, hi) -> np.ndarray:
    """Error-bar lengths below/above (0 where a bound is undefined)."""
    m, lo, hi = _arr(mid), _arr(lo), _arr(hi)
    below = np.where(np.isfinite(lo) & np.isfinite(m), m - lo, 0.0)
    above = np.where(np.isfinite(hi) & np.isfinite(m), hi - m, 0.0)
    return np.vstack([np.maximum(below, 0), np.maximum(above, 0)])


def _grid(n: int, ncols: int = 3, panel=(4.2, 3.2)):
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(panel[0] * ncols, panel[1] * nrows), layout="constrained")
    axes = [fig.add_subplot(nrows, ncols, i + 1) for i in range(n)]
    return fig, axes


def _save(fig: Figure, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=100, metadata={"Software": None})
    return path


def _present(result: dict, section: str) -> dict:
    data = {k: v for k, v in (result.get(section) or {}).items() if v is not None}
    if not data:
        raise Skip(skip_reason(result, section))
    return data


# ---- the plots ---------------------------------------------------------------------------------------------
def plot_position(result: dict, path: Path) -> Path:
    """Mean probability of the option at each position, per criterion, with bootstrap CIs and the uniform
    line; the panel title gives the chi-square label and Cramér's V."""
    data = {k: v for k, v in _present(result, "position").items() if v.get("distribution")}
    if not data:
        raise Skip(skip_reason(result, "position"))
    fig, axes = _grid(len(data))
    for ax, (name, pos) in zip(axes, data.items()):
        d = pos["distribution"]
        mid = _arr(d["distribution"])
        x = np.arange(1, len(mid) + 1)
        ax.bar(x, mid, color="#4c72b0", yerr=_yerr(d["distribution"], d["ci_low"], d["ci_high"]), capsize=3)
        ax.axhline(_num(d["uniform"]), color="black", linestyle="--", linewidth=1, label="uniform")
        ax.set_xticks(x)
        ax.set_xlabel("position of the option in the prompt")
        ax.set_ylabel("mean probability")
        chi = pos.get("chi_square")
        sub = ""
        if chi:
            v = chi.get("cramers_v")
            label = chi["label"] if chi["label"] != "none" else "no clear favourite"
            sub = f"\n{label}; V = {v:.2f}" if v is not None else f"\n{label}"
        ax.set_title(f"{name}{sub}", fontsize=10)
        ax.legend(fontsize=8, loc="upper right")
    return _save(fig, path)


def plot_criterion_heatmap(result: dict, path: Path) -> Path:
    """Mean score of each criterion at each criterion position minus the criterion's mean over positions."""
    cp = result.get("criterion_position")
    if not cp:
        raise Skip(skip_reason(result, "criterion_position"))
    m = np.asarray([[_num(x) for x in row] for row in cp["matrix"]])
    with np.errstate(invalid="ignore"):
        rows_ok = np.isfinite(m).any(axis=1)
        shift = m - np.where(rows_ok, np.nanmean(np.where(np.isfinite(m), m, np.nan), axis=1), 0)[:, None]
    names = result["table"]["criteria"]
    fig = Figure(figsize=(1.2 * m.shape[1] + 3.5, 0.5 * m.shape[0] + 2.0), layout="constrained")
    ax = fig.add_subplot()
    vmax = float(np.nanmax(np.abs(shift))) if np.isfinite(shift).any() else 1.0
    vmax = vmax if vmax > 0 else 1.0
    im = ax.imshow(np.ma.masked_invalid(shift), cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto")
    for (i, j), v in np.ndenumerate(shift):
        dark = np.isfinite(v) and abs(v) > 0.6 * vmax
        ax.text(j, i, "—" if not np.isfinite(v) else f"{v:+.2f}", ha="center", va="center", fontsize=9,
                color="white" if dark else "black")
    ax.set_xticks(range(m.shape[1]), [str(p + 1) for p in range(m.shape[1])])
    ax.set_yticks(range(m.shape[0]), names)
    ax.set_xlabel("position of the criterion in the prompt")
    spread = _arr(cp["spread"])
    top = np.nanmax(spread) if np.isfinite(spread).any() else float("nan")
    ax.set_title(f"Score shift by criterion position (largest spread {top:.2f} points)", fontsize=10)
    fig.colorbar(im, ax=ax, label="points vs the criterion's mean")
    return _save(fig, path)


def plot_budget(result: dict, path: Path) -> Path:
    """Human correlation against the number of prompts K per strategy (±1 sd over draws/windows), with the
    gain fractions at K=3 and K=5."""
    data = _present(result, "budget")
    fig, axes = _grid(len(data))
    for ax, (name, b) in zip(axes, data.items()):
        ks = np.asarray(b["ks"], dtype=float)
        lines = []
        for strat, curve in b["curves"].items():
            y, sd = _arr(curve), _arr(b["curves_sd"].get(strat, [0] * len(curve)))
            color = COLORS.get(strat, None)
            ax.plot(ks, y, marker="o", markersize=3, color=color, label=strat.upper())
            ax.fill_between(ks, y - np.nan_to_num(sd), y + np.nan_to_num(sd), color=color, alpha=0.15)
            gains = b.get("gain_at", {}).get(strat, {})
            for k in (3, 5):
                if k <= len(ks) and np.isfinite(y[k - 1]):
                    ax.plot([k], [y[k - 1]], marker="D", markersize=6, color=color, markeredgecolor="black")
            if all(v is None for v in gains.values()):
                continue  # a flat curve (FIXED with an expected reading) has no gain to share
            lines.append(f"{strat.upper():>8}: " + " / ".join(
                "—" if gains.get(f"K={k}") is None else f"{gains[f'K={k}']:.0%}" for k in (3, 5)))
        for k in (3, 5):
            if k <= len(ks):
                ax.axvline(k, color="black", linestyle=":", linewidth=0.8)
        ax.text(0.98, 0.03, "gain at K=3 / K=5\n" + "\n".join(lines), transform=ax.transAxes, ha="right",
                va="bottom", fontsize=7, family="monospace",
                bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.8})
        ax.set_xlabel("prompts per item (K)")
        ax.set_ylabel(f"{b.get('method', '')} r with humans")
        ax.set_title(name, fontsize=10)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=len(b["curves"]),
                  frameon=False)
    return _save(fig, path)


def plot_flips(result: dict, path: Path) -> Path:
    """Top-1 flip rate between orderings per criterion (bars with CIs) and best-of-N instability vs N."""
    data = _present(result, "rank_stability")
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    names = list(data)
    s = [data[n]["stability"] for n in names]
    x = np.arange(len(names))
    left.bar(x, _arr([r["flip_rate"] for r in s]), color="#dd8452",
             yerr=_yerr([r["flip_rate"] for r in s], [r["flip_rate_ci_low"] for r in s],
                        [r["flip_rate_ci_high"] for r in s]), capsize=4)
    left.set_xticks(x, names, rotation=20 if len(names) > 3 else 0)
    left.set_ylabel("top-1 flip rate between orderings")
    left.set_ylim(0, 1)
    left.set_title("How often the best candidate changes with the option order", fontsize=10)
    for name in names:
        bon = data[name].get("best_of_n")
        if bon:
            right.plot(np.asarray(bon["ns"]), _arr(bon["flip_rate"]), marker="o", label=name)
    right.xaxis.set_major_locator(MaxNLocator(integer=True))
    right.set_xlabel("candidates per group (N)")
    right.set_ylabel("top-1 flip rate")
    right.set_ylim(0, 1)
    right.set_title("Best-of-N instability", fontsize=10)
    if right.lines:
        right.legend(fontsize=8)
    return _save(fig, path)


def plot_alignment(result: dict, path: Path) -> Path:
    """Item-level correlation with humans per aggregation strategy, per criterion, with bootstrap CIs."""
    data = _present(result, "alignment")
    method = result.get("settings", {}).get("method", "pearson")
    strategies: list[str] = []
    for al in data.values():
        for s in list(al["item"]) + (["pride"] if al.get("pride") else []):
            if s not in strategies:
                strategies.append(s)
    fig = Figure(figsize=(max(8.0, 0.9 * len(data) * len(strategies) + 2), 4.2),
                 layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / len(strategies)
    names = list(data)
    for j, strat in enumerate(strategies):
        mids, los, his = [], [], []
        for name in names:
            al = data[name]
            c = al["pride"]["correlation"].get(method) if strat == "pride" and al.get("pride") else \
                al["item"].get(strat, {}).get(method)
            c = c or {}
            mids.append(c.get("statistic"))
            los.append(c.get("ci_low"))
            his.append(c.get("ci_high"))
        x = np.arange(len(names)) + (j - (len(strategies) - 1) / 2) * width
        ax.bar(x, _arr(mids), width, yerr=_yerr(mids, los, his), capsize=3, color=COLORS.get(strat),
               label=STRATEGY_LABELS.get(strat, strat))
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(np.arange(len(names)), names)
    ax.set_ylabel(f"{method} r with human scores")
    ax.set_title("Human correlation per aggregation strategy", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2,
              frameon=False)
    return _save(fig, path)


FUNCS = {"position": plot_position, "criterion_position": plot_criterion_heatmap, "budget": plot_budget,
         "rank_stability": plot_flips, "alignment": plot_alignment}


def make_plots(result: dict, folder) -> dict:
    """Every plot the analysis supports as ``folder/<name>.png``: ``{name: Path | reason it was skipped}``."""
    folder = Path(folder)
    out: dict = {}
    for name in PLOTS:
        path = folder / f"{name}.png"
        try:
            out[name] = FUNCS[name](result, path)
        except Skip as e:
            if path.exists():
                path.unlink()  # a stale plot from an earlier run would contradict the report
            out[name] = str(e)
    return out
