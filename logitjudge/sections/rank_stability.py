"""Rank stability per criterion: whether the ranking of one group's candidates (answers to one question)
survives a change of option order.

A flip is a change of the winning *set* (the top set: the candidates within tolerance of the best score); a tie
that stays the same tie is no flip (:mod:`logitjudge.stats.top1`).

* Top-1 flips, the study's definition (``top1_flips``): the share of groups whose top set under the canonical
  ordering differs from the top set under another ordering, averaged over the other orderings, with the certain
  (disjoint) and possible bounds, the share of comparisons tied at the top, and the uniform tie-break value
  (``flip_tie_broken``, not a flip measure).
* Top-1 change FIXED vs an aggregated strategy at the same budget K (the table's balanced budget 2n, else the
  rows of RANDOM's pool): BALANCED(K) (``top1_change``; under the sampled reading exact for two sampling runs,
  ``top1_change_sampled``) and RANDOM(K) as the expectation over draws of K orders per item
  (``top1_change_random``, Monte-Carlo ± SE).
* The pairwise top-set disagreement (``rank_stability.flip_rate``): averaged over all pairs of orderings, a
  different quantity; Kendall tau between orderings; best-of-N instability.
"""

from __future__ import annotations

import numpy as np

from .. import stats as st
from . import _plot
from ._base import Context, Section
from ._format import ci, expectation, fmt, md_table, plural


def _change_cell(changes: dict) -> str:
    """FIXED vs BALANCED(K) [CI] and RANDOM(K) ± SE, at the K each was computed at."""
    parts = []
    if "balanced" in changes:
        b = changes["balanced"]
        parts.append(f"BALANCED(K={b['k']}) {ci(b, 'changed', 'changed_ci_low', 'changed_ci_high')}")
    if "random" in changes:
        r = changes["random"]
        parts.append(f"RANDOM(K={r['k']}) {expectation(r['changed'], r['changed_se'], False)}")
    return "; ".join(parts) or "—"


class RankStability(Section):
    name = "rank_stability"
    title = "Rank stability"
    CAPTION = ("Left: top-1 flips, the study's definition: how often a group's winning set (its top-scored "
               "candidates; a tie that stays the same tie is no flip) under the canonical ordering differs from "
               "the winning set under another ordering (bars: 95% bootstrap CI over groups; whiskers from the "
               "certain to the possible bound). Right: the pairwise disagreement for best-of-N selection among N "
               "candidates drawn per group. Candidates are ranked by each prompt's score, the {reading}.")
    NOTE = ("Candidates are ranked by each prompt's score, the {reading}. A flip is a change of the winning set "
            "(ties within 1e-9 form one set; the same tie under both is no flip).")
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
        """Top-set change between FIXED and BALANCED / RANDOM at the same budget K (:meth:`Context.budget_k`):
        BALANCED(K) exact (under the sampled reading for two sampling runs), RANDOM(K) the expectation over draws
        of K orders per item (Monte-Carlo ± SE). Empty without a canonical (FIXED) row."""
        t, scores = ctx.table, ctx.strategy_scores(c)
        if "fixed" not in scores:
            return {}
        k, canon = ctx.budget_k(), st.canonical_index(t.option_orders)
        p = t.probs[keep, c]
        out = {}
        if "balanced" in scores:
            if ctx.reading == "sampled":
                res = st.top1_change_sampled(p, t.values[c], g, [canon], st.balanced_rows(t.option_orders),
                                             n_boot=ctx.n_boot, rng=ctx.rng)
            else:
                res = st.top1_change(scores["fixed"][keep], scores["balanced"][keep], g, reading=ctx.reading,
                                     n_boot=ctx.n_boot, rng=ctx.rng)
            out["balanced"] = {**res.to_dict(), "k": k}
        rows, pool = ctx.random_pool()
        r = st.top1_change_random(p, t.values[c], g, k=k, canonical=canon, pool_rows=rows, pool=pool,
                                  reading=ctx.reading, rng=ctx.rng)
        out["random"] = r.to_dict()
        return out

    def tables(self, res: dict, analysis: dict) -> list[str]:
        rows = []
        for name, r in res.items():
            f, s = r["top1_flips"], r["stability"]
            rows.append([name, ci(f, "flip", "flip_ci_low", "flip_ci_high"),
                         f"[{fmt(f['flip_certain'])}, {fmt(f['flip_possible'])}]", fmt(f["tied"]),
                         fmt(f.get("flip_tie_broken")), _change_cell(r.get("top1_change") or {}),
                         ci(s, "flip_rate", "flip_rate_ci_low", "flip_rate_ci_high"),
                         ci(s, "kendall_tau", "kendall_tau_ci_low", "kendall_tau_ci_high"), str(f["n_groups"])])
        header = ["criterion", "top-1 flips (canonical vs each other ordering)", "certain / possible",
                  "tied at top", "ties broken uniformly", "top-1 change FIXED vs BALANCED(K) / RANDOM(K)",
                  "pairwise top-set disagreement", "Kendall tau", "groups"]
        return md_table(header, rows) + ["", "- Top-1 flips follow the study's definition, counted as a change of "
                                         "the winning set: certain = the top sets are disjoint, possible = not "
                                         "one identical untied winner; 'tied at top' is the share of comparisons "
                                         "with a tie on either side. 'Ties broken uniformly' counts a tie broken "
                                         "differently on each side as a flip (an all-tied group of m gives "
                                         "1 - 1/m): tie-break noise, not a change of winner, shown for "
                                         "comparison. RANDOM(K) is the expectation over draws of K orders per "
                                         "item (± its Monte-Carlo SE); BALANCED(K) the mean over the balanced "
                                         "rotations. The pairwise disagreement averages over all pairs of "
                                         "orderings, a different quantity."]

    def summary(self, analysis: dict) -> list[str]:
        return [f"{c}: top-1 flips {ci(r['top1_flips'], 'flip', 'flip_ci_low', 'flip_ci_high', 2)} (certain "
                f"{fmt(r['top1_flips']['flip_certain'], 2)}, possible {fmt(r['top1_flips']['flip_possible'], 2)}, "
                f"tied at top {fmt(r['top1_flips']['tied'], 2)}; canonical vs each other ordering) over "
                f"{plural(r['top1_flips']['n_groups'], 'group')}; FIXED vs {_change_cell(r.get('top1_change') or {})}"
                for c, r in self.results(analysis).items()]

    def plot(self, analysis: dict, path):
        """Top-1 flip rate between orderings per criterion (bars with CIs) and best-of-N instability vs N."""
        data = self.results(analysis)
        if not data:
            return None
        from matplotlib.ticker import MaxNLocator

        fig = _plot.figure(11, 4.4)
        left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
        names = list(data)
        s = [data[n]["top1_flips"] for n in names]
        x = np.arange(len(names))
        rates = [r["flip"] for r in s]
        left.bar(x, _plot.arr(rates), 0.5, color="#dd8452", capsize=4,
                 yerr=_plot.yerr(rates, [r["flip_ci_low"] for r in s], [r["flip_ci_high"] for r in s]))
        left.vlines(x + 0.3, _plot.arr([r["flip_certain"] for r in s]), _plot.arr([r["flip_possible"] for r in s]),
                    color="black", linewidth=2, label="certain .. possible")
        left.legend(fontsize=8, loc="upper right")
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
        right.set_ylabel("pairwise top-set disagreement")
        right.set_ylim(0, 1)
        right.set_title("Best-of-N instability", fontsize=10)
        if right.lines:
            right.legend(fontsize=8)
        return _plot.save(fig, path)


RANK_STABILITY = RankStability()
