"""Budget curves per criterion: the human correlation of K-prompt aggregated scores for K = 1 .. all orderings,
per strategy, with the share of the full gain reached at K=3 and K=5."""

from __future__ import annotations

import numpy as np

from .. import stats as st
from . import _plot
from ._base import Context, Section, Skip
from ._format import fmt, md_table, pct


class Budget(Section):
    name = "budget"
    title = "Budget curves"
    CAPTION = ("Correlation with human scores as a function of the number of prompts per item K, per ordering "
               "strategy (band: ±1 sd over random draws / balanced windows). Diamonds mark K=3 and K=5; the box "
               "gives the share of the full gain r(Kmax) - r(1) reached there. Judge scores use the {reading}.")
    NOTE = "Judge scores use the {reading}."
    needs = ("human",)

    def compute(self, ctx: Context, c: int | None = None) -> dict:
        hs = ctx.human_scores(c)
        t = ctx.table
        if t.probs.shape[2] < 2:
            raise Skip("a single ordering: no budget to vary")
        b = st.budget_curve(t.probs[hs.index, c], t.values[c], t.option_orders, hs.scores, method=ctx.method,
                            reading=ctx.reading, n_draws=ctx.n_draws, rng=ctx.rng)
        out = b.to_dict()
        out["gain_at"] = {s: {f"K={k}": b.gain[s].fraction[k - 1] for k in (3, 5) if k <= len(b.ks)}
                          for s in b.curves}
        return out

    def tables(self, res: dict, analysis: dict) -> list[str]:
        lines = []
        for name, b in res.items():
            strats = list(b["curves"])
            rows = [[str(k)] + [fmt(b["curves"][s][j]) for s in strats]
                    + [fmt(b["gain"][s]["fraction"][j], 2) for s in strats] for j, k in enumerate(b["ks"])]
            lines += [f"### {name} ({b['method']})", ""]
            lines += md_table(["K"] + [f"r {s}" for s in strats] + [f"gain {s}" for s in strats], rows) + [""]
            lines += [f"- {note}" for note in b.get("notes") or []]
            if b.get("variance_share") is not None:
                lines += [f"- RANDOM reaches {b['variance_share']:.0%} of BALANCED's gain over FIXED at "
                          f"K={b['ks'][-1]}."]
            lines.append("")
        return lines

    def summary(self, analysis: dict) -> list[str]:
        return [f"{c}: gain at K=3 / K=5: " + ", ".join(f"{s.upper()} {pct(g.get('K=3'))} / {pct(g.get('K=5'))}"
                                                        for s, g in b.get("gain_at", {}).items()
                                                        if any(v is not None for v in g.values()))
                for c, b in self.results(analysis).items()]

    def plot(self, analysis: dict, path):
        """Human correlation against K per strategy (±1 sd over draws/windows), with the gain fractions at K=3
        and K=5."""
        data = self.results(analysis)
        if not data:
            return None
        fig, axes = _plot.grid(len(data))
        for ax, (name, b) in zip(axes, data.items()):
            ks = np.asarray(b["ks"], dtype=float)
            lines = []
            for strat, curve in b["curves"].items():
                y, sd = _plot.arr(curve), _plot.arr(b["curves_sd"].get(strat, [0] * len(curve)))
                color = _plot.COLORS.get(strat, None)
                ax.plot(ks, y, marker="o", markersize=3, color=color, label=strat.upper())
                ax.fill_between(ks, y - np.nan_to_num(sd), y + np.nan_to_num(sd), color=color, alpha=0.15)
                for k in (3, 5):
                    if k <= len(ks) and np.isfinite(y[k - 1]):
                        ax.plot([k], [y[k - 1]], marker="D", markersize=6, color=color, markeredgecolor="black")
                gains = b.get("gain_at", {}).get(strat, {})
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
        return _plot.save(fig, path)


BUDGET = Budget()
