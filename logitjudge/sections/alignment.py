"""Human alignment per criterion: item-, group- and system-level correlation of each strategy's scores with the
human scores, the paired bootstrap test of the best strategy against FIXED, and PriDe on held-out items."""

from __future__ import annotations

import numpy as np

from .. import stats as st
from ..stats._result import StatsError
from . import _plot
from ._base import Context, Section
from ._format import ci, expectation, fmt, md_table

PRIDE_MIN_ITEMS = 10  # PriDe estimates its prior on 20% of the human-scored items and debiases the rest


def correlations(x, y, ctx: Context) -> dict:
    """Pearson, Spearman and Kendall with bootstrap CIs."""
    return {m: st.correlation(x, y, method=m, n_boot=ctx.n_boot, rng=ctx.rng) for m in st.alignment.METHODS}


def random_cell(e: st.ExpectationResult, method: str) -> dict:
    """RANDOM's K=1 expected correlation as the tables read it: the value, exact or ± its SE."""
    return {"statistic": e.value, "se": e.se, "exact": e.exact, "n_draws": e.n_draws, "pool": e.pool,
            "method": method, "k": e.k, "note": e.note}


def cell(d: dict | None) -> str:
    """A correlation cell: value [CI] from a bootstrap, or a RANDOM expectation: value (exact) / value ± SE."""
    if not d:
        return "—"
    if "se" in d:
        return expectation(d["statistic"], d["se"], d.get("exact"))
    return ci(d, "statistic", "ci_low", "ci_high")


class Alignment(Section):
    name = "alignment"
    title = "Human alignment"
    CAPTION = ("Item-level correlation with human scores per aggregation strategy (95% bootstrap CIs). Judge "
               "scores use the {reading}.")
    NOTE = "Judge scores use the {reading}."
    needs = ("human",)

    def compute(self, ctx: Context, c: int | None = None) -> dict:
        hs = ctx.human_scores(c)
        idx, y, scores, kw = hs.index, hs.scores, ctx.strategy_scores(c), {"method": ctx.method, "rng": ctx.rng}
        out = {"n_items": len(idx), "n_missing": hs.n_missing, "item": {}, "grouped": {}, "system": {},
               "compare": {}}
        out["notes"] = list(ctx.strategy_notes())
        out["k"] = {"fixed": 1, "random": 1, "balanced": ctx.budget_k()}
        for name, x in scores.items():
            if name == "random":
                out["item"][name] = {m: random_cell(ctx.random_correlation(c, m), m) for m in st.alignment.METHODS}
            else:
                out["item"][name] = correlations(x[idx], y, ctx)
            if ctx.groups is not None:
                g = ctx.groups[idx]
                keep = g != ""
                if name == "random":
                    out["grouped"][name] = random_cell(ctx.random_correlation(c, ctx.method, grouped=True),
                                                       ctx.method)
                else:
                    out["grouped"][name] = st.grouped_correlation(x[idx][keep], y[keep], g[keep],
                                                                  n_boot=ctx.n_boot, **kw)
            if ctx.systems is not None and name != "random":
                s = ctx.systems[idx]
                keep = s != ""
                try:
                    out["system"][name] = st.system_correlation(x[idx][keep], y[keep], s[keep], n_boot=ctx.n_boot,
                                                                **kw)
                except StatsError as e:
                    out["system"][name] = None
                    out.setdefault("system_skipped", {})[name] = str(e)
        if "fixed" in scores and "balanced" in scores:
            out["compare"]["balanced_vs_fixed"] = st.compare_correlations(
                scores["balanced"][idx], scores["fixed"][idx], y, n_boot=max(ctx.n_boot, 1), **kw)
        bal = ctx.balanced_part()  # PriDe's prior from the balanced rows (inside all / balanced+random too)
        if bal is not None and len(idx) >= PRIDE_MIN_ITEMS:
            d = st.pride_debias(ctx.table.probs[idx, c][:, bal[0]], ctx.table.values[c], bal[1],
                                reading=ctx.reading, rng=ctx.rng)
            out["pride"] = {"n_estimation_items": len(d.estimation_items), "prior": d.prior,
                            "correlation": correlations(d.scores, y[d.items], ctx),
                            "compare_vs_fixed": st.compare_correlations(d.scores, d.raw_scores, y[d.items],
                                                                        n_boot=max(ctx.n_boot, 1), **kw)}
        return out

    def tables(self, res: dict, analysis: dict) -> list[str]:
        lines = []
        for name, al in res.items():
            ks = al.get("k") or {}
            rows = [[strat.upper() + (f" (K={ks[strat]}" + (", expectation)" if strat == "random" else ")")
                                      if strat in ks else "")]
                    + [cell(cors[m]) for m in cors] + [cell(al["grouped"].get(strat))]
                    for strat, cors in al["item"].items()]
            if al.get("pride"):
                pc = al["pride"]["correlation"]
                rows.append(["PriDe (K=1, held-out items)"] + [ci(pc[m], "statistic", "ci_low", "ci_high") for m in pc]
                            + ["—"])
            lines += [f"### {name} ({al['n_items']} items)", ""]
            lines += md_table(["strategy", "pearson", "spearman", "kendall", "per-group mean"], rows)
            for key, cmp in al["compare"].items():
                lines += ["", f"{key}: Δr = {ci(cmp, 'statistic', 'ci_low', 'ci_high')}, "
                              f"paired bootstrap p = {fmt(cmp['pvalue'], 4)}."]
            lines += [f"- {n}" for n in al.get("notes") or []]
            lines += ["- Each strategy at its own budget K (prompts per item); RANDOM and BALANCED at the same K are "
                      "in the budget curves."]
            lines.append("")
        return lines

    def summary(self, analysis: dict) -> list[str]:
        method = analysis.get("settings", {}).get("method", "pearson")
        out = []
        for c, al in self.results(analysis).items():
            ks = al.get("k") or {}
            parts = [f"{s.upper()}{f' (K={ks[s]})' if s in ks else ''} " + (
                expectation(v[method]["statistic"], v[method]["se"], v[method].get("exact"), 2) if s == "random"
                else fmt(v[method]["statistic"], 2)) for s, v in al["item"].items()]
            if al.get("pride"):
                parts.append(f"PriDe (held-out items) {fmt(al['pride']['correlation'][method]['statistic'], 2)}")
            out.append(f"{c} ({al['n_items']} items, {method}): " + ", ".join(parts))
        return out

    def plot(self, analysis: dict, path):
        """Item-level correlation with humans per aggregation strategy, per criterion, with bootstrap CIs."""
        data = self.results(analysis)
        if not data:
            return None
        method = analysis.get("settings", {}).get("method", "pearson")
        strategies = list(dict.fromkeys(s for al in data.values()
                                        for s in list(al["item"]) + (["pride"] if al.get("pride") else [])))
        fig = _plot.figure(max(8.0, 0.9 * len(data) * len(strategies) + 2), 4.2)
        ax = fig.add_subplot()
        width = 0.8 / len(strategies)
        names = list(data)
        for j, strat in enumerate(strategies):
            cors = [(data[n]["pride"]["correlation"] if strat == "pride" and data[n].get("pride")
                     else data[n]["item"].get(strat, {})).get(method) or {} for n in names]
            mids, los, his = ([c.get(k) for c in cors] for k in ("statistic", "ci_low", "ci_high"))
            x = np.arange(len(names)) + (j - (len(strategies) - 1) / 2) * width
            ax.bar(x, _plot.arr(mids), width, yerr=_plot.yerr(mids, los, his), capsize=3,
                   color=_plot.COLORS.get(strat), label=_plot.STRATEGY_LABELS.get(strat, strat))
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xticks(np.arange(len(names)), names)
        ax.set_ylabel(f"{method} r with human scores")
        ax.set_title("Human correlation per aggregation strategy", fontsize=10)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
        return _plot.save(fig, path)


ALIGNMENT = Alignment()
