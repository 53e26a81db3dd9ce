"""The paradigm comparison as a Markdown table and a PNG plot, from a
:class:`logitjudge.stats.ParadigmComparison` (or its ``to_dict()``). Reads results only: no engine, no tables."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..sections._plot import arr, figure, save, yerr

COLORS = {"pointwise": "#1f77b4", "pairwise": "#d62728", "listwise": "#2ca02c"}


def _as_dict(result) -> dict:
    d = result.to_dict() if hasattr(result, "to_dict") else dict(result)
    if "paradigms" not in d:
        raise ValueError("not a paradigm comparison: it has no 'paradigms'")
    return d


def _fmt(x, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:.{digits}f}"


def _ci(d: dict, key: str, j: int, digits: int = 2) -> str:
    lo, hi = d.get(f"{key}_ci_low"), d.get(f"{key}_ci_high")
    mid = _fmt(d[key][j], digits)
    if lo is None or lo[j] is None or hi[j] is None:
        return mid
    return f"{mid} [{_fmt(lo[j], digits)}, {_fmt(hi[j], digits)}]"


def _p(x) -> str:
    if x is None:
        return "n/a"
    if x == 0:
        return "<1e-300"  # below double precision (or every cluster showing the same non-uniform shares)
    return f"{x:.2g}" if x >= 1e-3 else f"{x:.1e}"


def _count(x) -> str:
    return "n/a" if x is None else f"{x:,.0f}"


def comparison_table(result) -> str:
    """One row per paradigm: human agreement, position bias, top-1 stability, swap consistency and cost."""
    d = _as_dict(result)
    level = round(100 * d["confidence_level"])
    head = ["paradigm", f"Kendall tau-b vs humans [{level}% CI]", "top-1 = a human-best",
            "slot bias V [CI]", "p (cluster-robust)", "design effect", "first slot share (chance)",
            "top-1 flips [CI] (certain-possible)", "swap consistency", "forward calls", "trie tokens", "seconds"]
    rows = []
    for j, name in enumerate(d["paradigms"]):
        n_slots = d["n_slots"][j]
        se = d["top1_flip_se"][j]
        flips = (f"{_ci(d, 'top1_flip', j)}" + ("" if se is None else f" ± {_fmt(se, 3)} MC")
                 + f" ({_fmt(d['top1_flip_certain'][j])}-{_fmt(d['top1_flip_possible'][j])})")
        rows.append([name, _ci(d, "tau", j), _ci(d, "top1_human", j), _ci(d, "bias_v", j),
                     _p(d["bias_pvalue"][j]), _fmt(d["bias_design_effect"][j]),
                     f"{_fmt(d['first_slot_share'][j])} ({_fmt(1 / n_slots)})", flips,
                     _fmt(d["swap_consistency"][j]), _count(d["forward_calls"][j]), _count(d["trie_tokens"][j]),
                     _fmt(d["seconds"][j], 1)])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    units = ", ".join(f"{n}: {u}" for n, u in zip(d["paradigms"], d["bias_unit"]))
    notes = (f"Reading: {d['reading']}"
             + (f" (T = {d['temperature']:g})" if d["reading"] == "sampled" else "")
             + f". Kendall tau-b within each group, mean over the groups where it is defined, bootstrap CI over "
             f"groups. Slot bias: bias-corrected Cramér's V of the answered slot, Rao-Scott p with clusters = "
             f"{units}. A top-1 flip is a change of the winning set between two orderings (a tie that stays the "
             f"same tie is no flip; certain-possible: disjoint winners - anything but one same winner); '± SE MC': "
             f"the orderings are random draws (pairwise: one random order per pair) and the value a Monte-Carlo "
             f"estimate.")
    return "\n".join(lines) + "\n\n" + notes + "\n"


def plot_comparison(result, path) -> Path:
    """Four panels, one bar per paradigm: human agreement (Kendall tau-b, CI over groups), position bias of the
    answered slot (bias-corrected V with CI; p and design effect printed), top-1 flips under reordering (CI,
    certain/possible bounds as ticks) and cost (seconds, with forward calls and trie tokens printed)."""
    d = _as_dict(result)
    names = list(d["paradigms"])
    x = np.arange(len(names))
    colors = [COLORS.get(n, "#7f7f7f") for n in names]
    fig = figure(13.0, 3.6)
    axes = [fig.add_subplot(1, 4, i + 1) for i in range(4)]
    level = round(100 * d["confidence_level"])

    def bars(ax, key, title, ylabel, ylim=None):
        mid = arr(d[key])
        ax.bar(x, np.nan_to_num(mid), color=colors, alpha=0.85)
        ax.errorbar(x, mid, yerr=yerr(d[key], d.get(f"{key}_ci_low", d[key]), d.get(f"{key}_ci_high", d[key])),
                    fmt="none", ecolor="black", capsize=4)
        ax.set_xticks(x, names)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel)
        if ylim is not None:
            ax.set_ylim(*ylim)
        ax.axhline(0, color="black", linewidth=0.6)
        return mid

    bars(axes[0], "tau", "agreement with humans", f"mean Kendall tau-b ({level}% CI)", (-1, 1))
    v = bars(axes[1], "bias_v", "position bias of the answered slot", "bias-corrected Cramér's V")
    top = np.nanmax(np.r_[arr(d["bias_v_ci_high"]), v, 0.05])
    axes[1].set_ylim(0, 1.25 * top)
    for j in range(len(names)):
        axes[1].text(j, 1.05 * top, f"p={_p(d['bias_pvalue'][j])}\ndeff={_fmt(d['bias_design_effect'][j])}",
                     ha="center", va="bottom", fontsize=7)
    bars(axes[2], "top1_flip", "top-1 changes under reordering", "share of ordering pairs", (0, 1.05))
    axes[2].scatter(x, arr(d["top1_flip_certain"]), marker="_", s=200, color="black", label="certain")
    axes[2].scatter(x, arr(d["top1_flip_possible"]), marker="_", s=200, color="grey", label="possible")
    axes[2].legend(fontsize=7, loc="upper right")
    secs = arr(d["seconds"])
    axes[3].bar(x, np.nan_to_num(secs), color=colors, alpha=0.85)
    axes[3].set_xticks(x, names)
    axes[3].set_title("cost", fontsize=10)
    axes[3].set_ylabel("seconds")
    high = np.nanmax(np.r_[secs, 1.0]) if np.isfinite(secs).any() else 1.0
    axes[3].set_ylim(0, 1.35 * high)
    for j in range(len(names)):
        axes[3].text(j, np.nan_to_num(secs[j]) + 0.03 * high,
                     f"{_count(d['forward_calls'][j])} fwd\n{_count(d['trie_tokens'][j])} tok",
                     ha="center", va="bottom", fontsize=7)
    fig.suptitle(f"Pointwise, pairwise or listwise ({d['reading']} reading, {len(d['group_names'])} groups)",
                 fontsize=11)
    return save(fig, path)
