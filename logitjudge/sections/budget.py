"""Budget curves per criterion: the human correlation of K-prompt aggregated scores for K = 1 .. Kmax per
strategy (RANDOM as the expectation over draws, with its Monte-Carlo standard error), the gain over FIXED at K=1
with bootstrap CIs at K = 3, 5, Kmax, and the share of the full gain reached at K=3 and K=5 where the gain is
positive and its CI excludes 0."""

from __future__ import annotations

import numpy as np

from .. import stats as st
from . import _plot
from ._base import Context, Section, Skip
from ._format import expectation, fmt, md_table, pct


def _r_cell(b: dict, s: str, j: int) -> str:
    """r of strategy ``s`` at the j-th budget; a RANDOM point says whether it is exact or ± its MC SE (as does
    any other Monte-Carlo point, e.g. under the sampled reading)."""
    exact = ((b.get("curves_exact") or {}).get(s) or [True] * (j + 1))[j]
    se = ((b.get("curves_se") or {}).get(s) or [0] * (j + 1))[j]
    if s == "random" or not exact:
        return expectation(b["curves"][s][j], se, exact)
    return fmt(b["curves"][s][j])


def _box_lines(b: dict) -> list[str]:
    """The plot's box: each strategy's gain over FIXED(1) at K=3 / K=5 (points of r), and its share of the full
    gain where one is reported, else why not."""
    gof = b.get("gain_over_fixed") or {}
    lines = []
    for s in b["curves"]:
        if s == "fixed" or s not in gof:
            continue
        gains = [gof[s][k - 1] if k <= len(gof[s]) else None for k in (3, 5)]
        text = " / ".join("—" if g is None else f"{g:+.3f}" for g in gains)
        share = b.get("gain_at", {}).get(s, {})
        if s in b.get("share_for", []):
            text += " (share " + " / ".join("—" if share.get(f"K={k}") is None else f"{share[f'K={k}']:.0%}"
                                            for k in (3, 5)) + ")"
        else:
            text += " (no share: gain CI includes 0)"
        lines.append(f"{s.upper():>8}: {text}")
    return lines or ["no FIXED curve: no gain over FIXED(1)"]


class Budget(Section):
    name = "budget"
    title = "Budget curves"
    CAPTION = ("Correlation with human scores as a function of the number of prompts per item K, per ordering "
               "strategy (RANDOM: the expectation over uniformly drawn orders; band: ±1 sd over random draws / "
               "balanced windows). Diamonds mark K=3 and K=5; the box gives each strategy's gain in r over FIXED "
               "at K=1 there, and the share of the full gain r(Kmax) - r_FIXED(1) only where that gain is "
               "positive and its 95% CI excludes 0. "
               "Judge scores use the {reading}.")
    NOTE = ("Judge scores use the {reading}. RANDOM is the expectation over orders drawn uniformly per item: "
            "'(exact)' where every joint outcome of the draws was enumerated, else '± SE' (Monte-Carlo); its K=1 "
            "point is the one the human-alignment table prints. Gains are over FIXED at K=1, with percentile "
            "bootstrap CIs over items.")
    needs = ("human",)

    def compute(self, ctx: Context, c: int | None = None) -> dict:
        hs = ctx.human_scores(c)
        t = ctx.table
        if t.probs.shape[2] < 2:
            raise Skip("a single ordering: no budget to vary")
        b = st.budget_curve(t.probs[hs.index, c], t.values[c], t.option_orders, hs.scores, method=ctx.method,
                            reading=ctx.reading, n_draws=ctx.n_draws,
                            random_first=ctx.random_correlation(c, ctx.method), rng=ctx.rng)
        out = b.to_dict()
        out["gain_at"] = {s: {f"K={k}": b.gain[s].fraction[k - 1] for k in (3, 5) if k <= len(b.ks)}
                          for s in b.curves}
        out["share_for"] = [s for s in b.curves if b.gain[s].defined]
        return out

    def tables(self, res: dict, analysis: dict) -> list[str]:
        lines = []
        for name, b in res.items():
            strats = list(b["curves"])
            gof = b.get("gain_over_fixed") or {}
            rows = [[str(k)] + [_r_cell(b, s, j) for s in strats]
                    + [fmt((gof.get(s) or [None] * (j + 1))[j]) for s in strats]
                    + [fmt(b["gain"][s]["fraction"][j], 2) for s in strats] for j, k in enumerate(b["ks"])]
            lines += [f"### {name} ({b['method']})", ""]
            lines += md_table(["K"] + [f"r {s}" for s in strats] + [f"gain {s} over FIXED(1)" for s in strats]
                              + [f"share {s}" for s in strats], rows) + [""]
            for s, cis in (b.get("gain_ci") or {}).items():
                level = b.get("confidence_level", 0.95)
                lines.append(f"- {s.upper()} gain over FIXED(1), {level:.0%} CI: " + ", ".join(
                    f"{k} {fmt(gof[s][int(k[2:]) - 1])} [{fmt(lo)}, {fmt(hi)}]" for k, (lo, hi) in cis.items()))
            for s in strats:
                g = b["gain"][s]
                lines.append(f"- {s.upper()} share of the full gain: " + ("reported (the gain is positive and its CI "
                             "excludes 0)" if g["defined"] else f"none ({g['reason']})"))
            lines += [f"- {note}" for note in b.get("notes") or []]
            if b.get("variance_share") is not None:
                lines += [f"- RANDOM reaches {b['variance_share']:.0%} of BALANCED's gain over FIXED at "
                          f"K={b['ks'][-1]}."]
            lines.append("")
        return lines

    def summary(self, analysis: dict) -> list[str]:
        out = []
        for c, b in self.results(analysis).items():
            shares = [f"{s.upper()} {pct(g.get('K=3'))} / {pct(g.get('K=5'))}" for s, g in b.get("gain_at", {}).items()
                      if s in b.get("share_for", [])]
            out.append(f"{c}: share of the gain over FIXED(1) at K=3 / K=5: " + (", ".join(shares) if shares else
                       "none (no strategy's gain is positive with a CI excluding 0)"))
        return out

    def plot(self, analysis: dict, path):
        """Human correlation against K per strategy (±1 sd over draws/windows), with the gain fractions at K=3
        and K=5."""
        data = self.results(analysis)
        if not data:
            return None
        fig, axes = _plot.grid(len(data))
        for ax, (name, b) in zip(axes, data.items()):
            ks = np.asarray(b["ks"], dtype=float)
            for strat, curve in b["curves"].items():
                y, sd = _plot.arr(curve), _plot.arr(b["curves_sd"].get(strat, [0] * len(curve)))
                color = _plot.COLORS.get(strat, None)
                ax.plot(ks, y, marker="o", markersize=3, color=color, label=strat.upper())
                ax.fill_between(ks, y - np.nan_to_num(sd), y + np.nan_to_num(sd), color=color, alpha=0.15)
                for k in (3, 5):
                    if k <= len(ks) and np.isfinite(y[k - 1]):
                        ax.plot([k], [y[k - 1]], marker="D", markersize=6, color=color, markeredgecolor="black")
            for k in (3, 5):
                if k <= len(ks):
                    ax.axvline(k, color="black", linestyle=":", linewidth=0.8)
            ax.text(0.98, 0.03, "gain in r over FIXED(1) at K=3 / K=5\n" + "\n".join(_box_lines(b)),
                    transform=ax.transAxes, ha="right", va="bottom", fontsize=8, family="monospace",
                    bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.85})
            ax.set_xlabel("prompts per item (K)")
            ax.set_ylabel(f"{b.get('method', '')} r with humans")
            ax.set_title(name, fontsize=10)
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=len(b["curves"]),
                      frameon=False)
        return _plot.save(fig, path)


BUDGET = Budget()
