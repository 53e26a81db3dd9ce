"""Rank stability per criterion: whether the ranking of one group's candidates (answers to one question)
survives a change of option order.

* Top-1 flips, the study's definition (``top1_flips``): the fraction of groups whose top-1 candidate under the
  canonical ordering differs from the top-1 under another ordering, averaged over the other orderings; ties at
  the top broken uniformly, with the certain (disjoint tops) and possible bounds.
* Top-1 change FIXED vs an aggregated strategy (``top1_change``): the top-1 under the canonical prompt against the
  top-1 under BALANCED / RANDOM-expected scores.
* The pairwise flip rate (``rank_stability.flip_rate``, the old quantity): top-1 disagreement averaged over all
  pairs of orderings, and Kendall tau between orderings; best-of-N instability.
"""

from __future__ import annotations

import numpy as np

from .. import stats as st
from . import _plot
from ._base import Context, Section
from ._format import ci, fmt, md_table


class RankStability(Section):
    name = "rank_stability"
    title = "Rank stability"
    CAPTION = ("Left: top-1 flips, the study's definition: how often the top-ranked candidate of a group under "
               "the canonical ordering differs from the top under another ordering (ties broken uniformly; 95% "
               "bootstrap CI over groups). Right: the same for best-of-N selection among N candidates drawn per "
               "group. Candidates are ranked by each prompt's score, the {reading}.")
    NOTE = "Candidates are ranked by each prompt's score, the {reading}."
    needs = ("groups",)

    def compute(self, ctx: Context, c: int | None = None) -> dict:
        keep = ctx.groups != ""
        t = ctx.table
        o = t.option_orders[keep] if t.orders_per_item else t.option_orders
        s, g = ctx.prompt_scores(c)[keep], ctx.groups[keep]  # s: [items, orderings]
        out = {"top1_flips": st.top1_flips(t.probs[keep, c], t.values[c], g, reading=ctx.reading, option_orders=o,
                                           n_boot=ctx.n_boot, rng=ctx.rng),
               "top1_change": self._changes(ctx, c, keep, g),
               "stability": st.rank_stability(s, g, option_orders=o, reading=ctx.reading, n_boot=ctx.n_boot,
                                              rng=ctx.rng),
               "best_of_n": st.best_of_n_instability(s, g, option_orders=o, n_draws=ctx.n_draws, rng=ctx.rng)}
        return out

    @staticmethod
    def _changes(ctx: Context, c: int, keep, g) -> dict:
        """Top-1 change between FIXED and each aggregated strategy (BALANCED, RANDOM's expected scores); under
        the sampled reading the exact probability for two sampling runs (BALANCED only)."""
        scores = ctx.strategy_scores(c)
        if ctx.reading == "sampled":
            t = ctx.table
            rows = st.balanced_rows(t.option_orders)
            if rows is None:
                return {}
            canon = st.canonical_index(t.option_orders)
            return {"balanced": st.top1_change_sampled(t.probs[keep, c], t.values[c], g, [canon], rows,
                                                       n_boot=ctx.n_boot, rng=ctx.rng)}
        return {s: st.top1_change(scores["fixed"][keep], x[keep], g, reading=ctx.reading, n_boot=ctx.n_boot,
                                  rng=ctx.rng) for s, x in scores.items() if s != "fixed" and "fixed" in scores}

    def tables(self, res: dict, analysis: dict) -> list[str]:
        rows = []
        for name, r in res.items():
            f, s = r["top1_flips"], r["stability"]
            bounds = "—" if f["flip_certain"] is None else f"[{fmt(f['flip_certain'])}, {fmt(f['flip_possible'])}]"
            changes = "; ".join(f"{k.upper()} {ci(v, 'changed', 'changed_ci_low', 'changed_ci_high')}"
                                for k, v in (r.get("top1_change") or {}).items()) or "—"
            rows.append([name, ci(f, "flip", "flip_ci_low", "flip_ci_high"), bounds, fmt(f["tied"]), changes,
                         ci(s, "flip_rate", "flip_rate_ci_low", "flip_rate_ci_high"),
                         ci(s, "kendall_tau", "kendall_tau_ci_low", "kendall_tau_ci_high"), str(f["n_groups"])])
        header = ["criterion", "top-1 flips (canonical vs each other ordering)", "certain / possible",
                  "tied at top", "top-1 change FIXED vs aggregated", "pairwise top-1 disagreement", "Kendall tau",
                  "groups"]
        return md_table(header, rows) + ["", "- Top-1 flips follow the study's definition; ties at the top are "
                                         "broken uniformly (certain: the top sets are disjoint; possible: not one "
                                         "identical untied top). The pairwise disagreement averages over all "
                                         "pairs of orderings (the earlier 'flip rate'), a different quantity."]

    def summary(self, analysis: dict) -> list[str]:
        return [f"{c}: top-1 flips {ci(r['top1_flips'], 'flip', 'flip_ci_low', 'flip_ci_high', 2)} (canonical vs "
                f"each other ordering) over {r['top1_flips']['n_groups']} groups"
                for c, r in self.results(analysis).items()]

    def plot(self, analysis: dict, path):
        """Top-1 flip rate between orderings per criterion (bars with CIs) and best-of-N instability vs N."""
        data = self.results(analysis)
        if not data:
            return None
        from matplotlib.ticker import MaxNLocator

        fig = _plot.figure(10, 3.6)
        left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
        names = list(data)
        s = [data[n]["top1_flips"] for n in names]
        x = np.arange(len(names))
        rates = [r["flip"] for r in s]
        left.bar(x, _plot.arr(rates), color="#dd8452", capsize=4,
                 yerr=_plot.yerr(rates, [r["flip_ci_low"] for r in s], [r["flip_ci_high"] for r in s]))
        left.set_xticks(x, names, rotation=20 if len(names) > 3 else 0)
        left.set_ylabel("top-1 flips (canonical vs other orderings)")
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
