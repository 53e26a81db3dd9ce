"""Rank stability per criterion: whether the ranking of one group's candidates (answers to one question)
survives a change of option order: Kendall tau and top-1 flip rates, and best-of-N instability."""

from __future__ import annotations

import numpy as np

from .. import stats as st
from . import _plot
from ._base import Context, Section
from ._format import ci, fmt, md_table


class RankStability(Section):
    name = "rank_stability"
    title = "Rank stability"
    CAPTION = ("Left: how often the top-ranked candidate of a group changes between two option orderings (95% "
               "bootstrap CI over groups). Right: the same for best-of-N selection among N candidates drawn per "
               "group. Candidates are ranked by each prompt's score, the {reading}.")
    NOTE = "Candidates are ranked by each prompt's score, the {reading}."
    needs = ("groups",)

    def compute(self, ctx: Context, c: int | None = None) -> dict:
        keep = ctx.groups != ""
        s, g, o = ctx.prompt_scores(c)[keep], ctx.groups[keep], ctx.table.option_orders  # s: [items, orderings]
        return {"stability": st.rank_stability(s, g, option_orders=o, n_boot=ctx.n_boot, rng=ctx.rng),
                "best_of_n": st.best_of_n_instability(s, g, option_orders=o, n_draws=ctx.n_draws, rng=ctx.rng)}

    def tables(self, res: dict, analysis: dict) -> list[str]:
        rows = [[name, ci(s, "kendall_tau", "kendall_tau_ci_low", "kendall_tau_ci_high"),
                 ci(s, "flip_rate", "flip_rate_ci_low", "flip_rate_ci_high"), fmt(s["flip_rate_vs_canonical"]),
                 str(s["n_groups_used"])] for name, s in ((n, r["stability"]) for n, r in res.items())]
        header = ["criterion", "Kendall tau", "top-1 flip rate", "flip vs canonical", "groups"]
        return md_table(header, rows)

    def summary(self, analysis: dict) -> list[str]:
        return [f"{c}: top-1 flip rate {ci(r['stability'], 'flip_rate', 'flip_rate_ci_low', 'flip_rate_ci_high', 2)}"
                f" over {r['stability']['n_groups_used']} groups" for c, r in self.results(analysis).items()]

    def plot(self, analysis: dict, path):
        """Top-1 flip rate between orderings per criterion (bars with CIs) and best-of-N instability vs N."""
        data = self.results(analysis)
        if not data:
            return None
        from matplotlib.ticker import MaxNLocator

        fig = _plot.figure(10, 3.6)
        left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
        names = list(data)
        s = [data[n]["stability"] for n in names]
        x = np.arange(len(names))
        rates = [r["flip_rate"] for r in s]
        left.bar(x, _plot.arr(rates), color="#dd8452", capsize=4,
                 yerr=_plot.yerr(rates, [r["flip_rate_ci_low"] for r in s], [r["flip_rate_ci_high"] for r in s]))
        left.set_xticks(x, names, rotation=20 if len(names) > 3 else 0)
        left.set_ylabel("top-1 flip rate between orderings")
        left.set_ylim(0, 1)
        left.set_title("How often the best candidate changes with the option order", fontsize=10)
        for name in names:
            bon = data[name].get("best_of_n")
            if bon:
                right.plot(np.asarray(bon["ns"]), _plot.arr(bon["flip_rate"]), marker="o", label=name)
        right.xaxis.set_major_locator(MaxNLocator(integer=True))
        right.set_xlabel("candidates per group (N)")
        right.set_ylabel("top-1 flip rate")
        right.set_ylim(0, 1)
        right.set_title("Best-of-N instability", fontsize=10)
        if right.lines:
            right.legend(fontsize=8)
        return _plot.save(fig, path)


RANK_STABILITY = RankStability()
