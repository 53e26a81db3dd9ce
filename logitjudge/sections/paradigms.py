"""Pairwise and listwise tables (:mod:`logitjudge.candidates`) as analysis sections, and the comparison of tables
of the same items under the three paradigms (:func:`compare_tables`; ``logitjudge compare``).

Views (a candidate table -> the arrays of :mod:`logitjudge.stats.paradigms`): a pairwise table's
``probs_by_position`` is ``pair_probs[pair, order, label]`` (labels by slot: "A", "B", the tie last; order 0 is
the row whose first slot shows candidate 0), its rows' candidates are ``pairs``; a listwise table's
``probs_by_position[group]`` is ``choice_probs[g][ordering, slot]`` with its option orders as ``orders[g]``.
Items are the candidates: every id once, in order of first appearance, with its row's group.

Reading. The paradigm estimators read answers: ``greedy`` (the answered label; exact ties split) or ``sampled``
(a judge sampling at T = 1, whose expectations are the exact label probabilities). The analysis's default
``expected`` (a probability-weighted score) has no meaning for a choice between candidates and is read as
``sampled`` here: a candidate's listwise score is then its mean choice probability, swap consistency the exact
probability that a sampled verdict survives the swap, and the slot test counts one seeded sampling run.

Per criterion a section reports the position bias of the answered slot (slot 1 = "A", shown first; the pair or the
group as the unit), pairwise swap consistency and first-slot preference, each group's ranking (pairwise:
Bradley-Terry log-strengths from the order-debiased preferences; listwise: the mean choice over orderings), top-1
per group and its stability under reordering, and, with human scores, Kendall tau-b per group and how often the
judge's pick is a human-best candidate (:func:`logitjudge.stats.compare_paradigms` on the one paradigm).
"""

from __future__ import annotations

import numpy as np

from .. import stats as st
from ..candidates import POINTWISE, known_ids, paradigm_of, table_candidates
from ..stats._result import StatsError
from ..table import ScoreTable
from . import _plot
from ._base import Context, Partial, Section
from ._format import ci, fmt, md_table, plural, pval


def answer_reading(reading: str) -> str:
    """The reading the paradigm estimators use for ``reading`` (module doc)."""
    return "greedy" if reading == "greedy" else "sampled"


def items_of(table: ScoreTable) -> tuple[np.ndarray, np.ndarray]:
    """(item ids, their groups) of a table: its items (pointwise) or its rows' candidates (module doc)."""
    if paradigm_of(table) == POINTWISE:
        if table.item_groups is None:
            raise StatsError("the pointwise table has no groups: the paradigms rank the candidates of a group; "
                             "score grouped items")
        return table.item_ids.astype(str), table.item_groups.astype(str)
    group = {}
    for cands, g in zip(table_candidates(table), table.item_groups):
        for x in cands:
            group.setdefault(x, str(g))
    ids = known_ids(table)
    return np.asarray(ids), np.asarray([group[x] for x in ids])


def pairwise_arrays(table: ScoreTable, c: int, index: dict) -> tuple[np.ndarray, np.ndarray]:
    """(pair_probs [P, 2, L], pairs [P, 2] item indices into ``index``) of criterion ``c`` (module doc)."""
    o = table.option_orders
    if o.ndim != 2 or o.shape[0] != 2 or sorted(o[:, 0].tolist()) != [0, 1]:
        raise StatsError(f"a pairwise table shows each pair in its two orders, got option orders {o.tolist()}")
    first = [int(np.flatnonzero(o[:, 0] == 0)[0]), int(np.flatnonzero(o[:, 0] == 1)[0])]
    pairs = np.array([[index[a], index[b]] for a, b in table_candidates(table)], dtype=np.int64)
    return table.probs_by_position()[:, c][:, first], pairs


def listwise_arrays(table: ScoreTable, c: int, index: dict) -> tuple[list, list, list]:
    """(choice_probs, orders, candidates) per group of criterion ``c`` (module doc)."""
    cands = [np.array([index[x] for x in cs], dtype=np.int64) for cs in table_candidates(table)]
    return list(table.probs_by_position()[:, c]), list(table.item_option_orders()), cands


def summarise(table: ScoreTable, c: int, ids, groups, *, reading: str, n_boot: int, rng) -> st.ParadigmSummary:
    """The paradigm summary of criterion ``c`` on the items ``ids`` (with ``groups``); a pointwise table must
    hold every one of them, a candidate table's pairs and lists index into them."""
    ids = [str(x) for x in ids]
    index = {x: i for i, x in enumerate(ids)}
    kw = {"reading": answer_reading(reading), "cost": st.cost_from_meta(table.meta), "n_boot": n_boot, "rng": rng}
    p = paradigm_of(table)
    if p == POINTWISE:
        where = {x: i for i, x in enumerate(table.item_ids.astype(str))}
        missing = [x for x in ids if x not in where]
        if missing:
            raise StatsError(f"the pointwise table lacks {len(missing)} of the compared items (e.g. "
                             f"{missing[:3]}); compare tables of the same items")
        rows = np.array([where[x] for x in ids])
        orders = table.option_orders[rows] if table.orders_per_item else table.option_orders
        return st.pointwise_summary(table.probs[rows, c], table.values[c], orders, groups, **kw)
    if p == "pairwise":
        pair_probs, pairs = pairwise_arrays(table, c, index)
        return st.pairwise_summary(pair_probs, pairs, groups, **kw)
    return st.listwise_summary(*listwise_arrays(table, c, index), groups, **kw)


def human_array(human: dict | None, ids, criterion: str) -> np.ndarray:
    """``human[item]`` of one criterion (NaN where an item has none)."""
    h = human or {}
    return np.array([float((h.get(x) or {}).get(criterion, np.nan)) for x in ids])


def ranking(summary: st.ParadigmSummary, ids) -> list[dict]:
    """Per group: its candidates from best to worst by the summary's score, the scores, and the top set."""
    out = []
    for g in np.unique(summary.groups):
        idx = np.flatnonzero((summary.groups == g) & np.isfinite(summary.scores))
        if idx.size == 0:
            continue
        s = summary.scores[idx]
        order = idx[np.argsort(-s, kind="stable")]
        top = idx[st.winning_sets(s)]
        out.append({"group": str(g), "candidates": [str(ids[i]) for i in order],
                    "scores": summary.scores[order].tolist(), "top1": [str(ids[i]) for i in top]})
    return out


SCORE_NAMES = {"pointwise": "mean answered score over orderings",
               "pairwise": "Bradley-Terry log-strength from the order-debiased preferences",
               "listwise": "mean choice over orderings"}


CANDIDATE_COLUMNS = ("item_id", "group", "criterion", "paradigm", "reading", "score", "score_kind", "human")


def candidate_scores(table: ScoreTable, *, reading: str = "expected", human: dict | None = None):
    """One row per candidate and criterion of a pairwise or listwise table: ``item_id``, ``group``,
    ``criterion``, ``paradigm``, ``reading`` (the answer reading used, module doc), ``score`` (pairwise: the
    Bradley-Terry log-strength within its group; listwise: the mean choice over orderings), ``score_kind`` and
    ``human`` (NaN where none)."""
    import pandas as pd

    ids, groups = items_of(table)
    frames = []
    for c, name in enumerate(table.criteria):
        s = summarise(table, c, ids, groups, reading=reading, n_boot=0, rng=0)
        frames.append(pd.DataFrame({"item_id": ids, "group": groups, "criterion": name, "paradigm": s.paradigm,
                                    "reading": s.reading, "score": s.scores, "score_kind": SCORE_NAMES[s.paradigm],
                                    "human": human_array(human, ids, name)}, columns=CANDIDATE_COLUMNS))
    return pd.concat(frames, ignore_index=True)


def pair_preferences(table: ScoreTable, c: int, ids, groups, *, reading: str) -> list[dict]:
    """One dict per pair of a pairwise table's criterion ``c``: its group, ``candidates`` (1 and 2 as the pair is
    stored), the verdicts under each order (``shown_1_first``/``shown_2_first``: weights of [1 preferred, 2
    preferred, tie]), the order-debiased verdict (their mean, :func:`logitjudge.stats.debiased_preference`) and
    ``order_effect``, the total-variation distance between the two orders' verdicts (0: the order changes
    nothing; 1: the verdict follows the slot entirely). Read as :func:`answer_reading` of ``reading``."""
    index = {str(x): i for i, x in enumerate(ids)}
    pair_probs, pairs = pairwise_arrays(table, c, index)
    v = st.pair_verdicts(pair_probs, reading=answer_reading(reading))  # (P, 2 orders, 3 verdicts)
    q = v.mean(axis=1)
    effect = 0.5 * np.abs(v[:, 0] - v[:, 1]).sum(axis=1)
    return [{"group": str(groups[i]), "candidates": [str(ids[i]), str(ids[j])], "shown_1_first": v[k, 0].tolist(),
             "shown_2_first": v[k, 1].tolist(), "debiased": q[k].tolist(), "order_effect": float(effect[k])}
            for k, (i, j) in enumerate(pairs)]


# ---- the sections ---------------------------------------------------------------------------------------------
def paradigm_shape(t: dict) -> str:
    """The analysis's one-line description of a candidate table (``result["table"]``)."""
    rows = "pairs" if t["paradigm"] == "pairwise" else "lists"
    m = t["n_options"] - (1 if t["paradigm"] == "pairwise" and t["n_options"] == 3 else 0)
    tie = " and a tie label" if m != t["n_options"] else ""
    crit = "criterion" if t["n_criteria"] == 1 else "criteria"
    return (f"{t['paradigm']}: {t['n_items']} {rows} of {m} candidates{tie} ({t['n_candidates']} items in "
            f"{plural(t.get('n_groups', 0), 'group')}), {t['n_criteria']} {crit}, {t['n_orderings']} candidate "
            f"orders each ({t['design']} design); slots count from 1 (slot 1 = \"A\", shown first).")


class ParadigmSection(Section):
    """A pairwise or listwise table's numbers per criterion (module doc)."""

    per_criterion = True
    needs = ("groups",)
    NOTE = ("Answers are read {answers}. Slots count from 1 (slot 1 = \"A\", shown first). The slot test is "
            "Rao-Scott's cluster-robust χ² of the answered slots with the {unit} as the unit; Cramér's V is "
            "bias-corrected, its CI a bootstrap over {unit}s. A top-1 flip is a change of a group's winning set "
            "between two reorderings. Kendall τ-b compares each group's ranking with the human scores (ties "
            "corrected), mean over groups [bootstrap CI over groups].")
    UNIT = ""

    def markdown(self, analysis: dict) -> str:
        res = self.results(analysis)
        if not res:
            return ""
        r = (analysis.get("settings") or {}).get("reading", "expected")
        head = [f"## {self.title}", "", self.NOTE.format(answers=answers_note(r), unit=self.UNIT), ""]
        return "\n".join(head + self.tables(res, analysis)).rstrip()

    def caption(self, analysis: dict) -> str:
        r = (analysis.get("settings") or {}).get("reading", "expected")
        return (f"Share of answers naming each slot (slot 1 = \"A\", shown first; bars: bootstrap CI over "
                f"{self.UNIT}s) against the chance level (dashed), per criterion; answers read "
                f"{answers_note(r)}.")

    def compute(self, ctx: Context, c: int | None = None) -> Partial:
        t, name = ctx.table, ctx.criteria[c]
        ids, groups = items_of(t)
        s = summarise(t, c, ids, groups, reading=ctx.reading, n_boot=ctx.n_boot, rng=ctx.rng)
        out = {"reading": s.reading, "n_rows": t.n_items, "n_candidates": len(ids),
               "n_groups": int(np.unique(groups).size), "slot_test": s.slot_test, "top1": s.top1,
               "ranking": ranking(s, ids), "scores_mean": SCORE_NAMES[s.paradigm]}
        if s.swap is not None:
            out["swap"] = s.swap
        out.update(self.extra(ctx, c, ids, groups))
        skipped = {}
        h = human_array(ctx.human, ids, name)
        if np.isfinite(h).sum() >= 3:
            try:
                cmp = st.compare_paradigms([s], h, n_boot=ctx.n_boot, rng=ctx.rng)
                out["human"] = {k: getattr(cmp, k)[0] for k in ("tau", "tau_ci_low", "tau_ci_high",
                                                                 "tau_groups_used", "top1_human",
                                                                 "top1_human_ci_low", "top1_human_ci_high")}
            except StatsError as e:
                skipped["human"] = str(e)
        else:
            skipped["human"] = f"no human scores of {name} for at least 3 candidates"
        return Partial(out, skipped)

    def extra(self, ctx: Context, c: int, ids, groups) -> dict:
        """More results of one criterion, on the candidates ``ids`` with their ``groups`` (a paradigm's own)."""
        return {}

    # ---- rendering ----------------------------------------------------------------------------------------
    def _slot(self, r: dict) -> str:
        t = r["slot_test"]
        shares = ", ".join(f"{j + 1}: {fmt(x, 2)}" for j, x in enumerate(t["shares"]))
        v = ci(t, "cramers_v", "cramers_v_ci_low", "cramers_v_ci_high", 2)
        return (f"p = {pval(t['pvalue'])} ({plural(t['n_clusters'], self.UNIT)}, design effect "
                f"{fmt(t['design_effect'], 2)}), Cramér's V {v}; answer shares by slot {shares} (chance "
                f"{fmt(1 / t['n_slots'], 2)})")

    def _top1(self, r: dict) -> str:
        t = r["top1"]
        se = t.get("flip_se")
        return (f"{ci(t, 'flip', 'flip_ci_low', 'flip_ci_high', 2)}" + ("" if se is None else f" ± {fmt(se, 3)} MC")
                + f" (certain {fmt(t['flip_certain'], 2)}, possible {fmt(t['flip_possible'], 2)}; tied at top "
                f"{fmt(t['tied'], 2)}) over {plural(t['n_groups'], 'group')}")

    def _human(self, r: dict) -> str:
        h = r.get("human")
        if not h:
            return "—"
        return (f"τ-b {ci(h, 'tau', 'tau_ci_low', 'tau_ci_high', 2)} over {plural(h['tau_groups_used'], 'group')}; "
                f"pick is a human-best {ci(h, 'top1_human', 'top1_human_ci_low', 'top1_human_ci_high', 2)}")

    def rows(self, r: dict) -> list[list[str]]:
        return [["position bias of the answered slot", self._slot(r)],
                ["top-1 flips under reordering", self._top1(r)],
                ["agreement with humans", self._human(r)],
                ["top-1 per group (score: " + r["scores_mean"] + ")",
                 "; ".join(f"{g['group']}: {', '.join(g['top1'])}" for g in r["ranking"][:8])
                 + ("; ..." if len(r["ranking"]) > 8 else "")]]

    def tables(self, res: dict, analysis: dict) -> list[str]:
        lines = []
        for name, r in res.items():
            lines += [f"### {name}", ""] + md_table(["quantity", "value"], self.rows(r)) + [""]
        return lines

    def plot(self, analysis: dict, path):
        """Answer share of each slot with its CI against chance, one panel per criterion."""
        data = self.results(analysis)
        if not data:
            return None
        fig, axes = _plot.grid(len(data), ncols=3, panel=(4.2, 3.4))
        for ax, (name, r) in zip(axes, data.items()):
            t = r["slot_test"]
            x = np.arange(1, t["n_slots"] + 1)
            ax.bar(x, _plot.arr(t["shares"]), color="#1f77b4", alpha=0.85)
            ax.errorbar(x, _plot.arr(t["shares"]), yerr=_plot.yerr(t["shares"], t["share_ci_low"],
                                                                    t["share_ci_high"]),
                        fmt="none", ecolor="black", capsize=3)
            ax.axhline(1 / t["n_slots"], color="grey", linestyle="--", linewidth=1)
            ax.set_xticks(x, [f"{j} ({chr(64 + j)})" for j in x])
            ax.set_xlabel("slot (letter)")
            ax.set_ylabel("answer share")
            ax.set_title(f"{name}: p = {pval(t['pvalue'])}, V = {fmt(t['cramers_v'], 2)}", fontsize=10)
        return _plot.save(fig, path)


def answers_note(reading: str) -> str:
    if answer_reading(reading) == "greedy":
        return "greedily (each prompt's most probable label; exact ties split)"
    return ("as a judge sampling at T = 1 (the exact label probabilities; the slot test counts one seeded sampling "
            f"run){' - the expected reading of a choice' if reading == 'expected' else ''}")


class Pairwise(ParadigmSection):
    name = "pairwise"
    title = "Pairwise judging"
    paradigms = ("pairwise",)
    UNIT = "pair"
    SHOWN = 10  # pairs listed in the Markdown table (all of them are in results.json)

    def extra(self, ctx: Context, c: int, ids, groups) -> dict:
        return {"pairs": pair_preferences(ctx.table, c, ids, groups, reading=ctx.reading)}

    def pairs_table(self, r: dict) -> list[str]:
        """The pairs whose verdict the order moves most: the verdict in each order and the order-debiased one."""
        pairs = sorted(r["pairs"], key=lambda x: -x["order_effect"])
        tie = any(x["debiased"][2] > 0 for x in pairs)  # a tie answered in either order

        def verdict(w: list) -> str:
            return f"{fmt(w[0], 2)} / {fmt(w[1], 2)}" + (f" / {fmt(w[2], 2)}" if tie else "")

        rows = [[x["group"], x["candidates"][0], x["candidates"][1], verdict(x["shown_1_first"]),
                 verdict(x["shown_2_first"]), verdict(x["debiased"]), fmt(x["order_effect"], 2)]
                for x in pairs[:self.SHOWN]]
        what = "1 / 2 / tie" if tie else "1 / 2"
        head = (f"Pairs whose verdict the order moves most ({min(self.SHOWN, len(pairs))} of "
                f"{plural(len(pairs), 'pair')}; every pair in results.json). Verdicts as weights of {what} "
                "preferred; order-debiased: the mean of the two orders; order effect: the total-variation distance "
                "between the two orders' verdicts (0 = none, 1 = the verdict follows the slot).")
        return [head, ""] + md_table(["group", "candidate 1", "candidate 2", "1 shown first", "2 shown first",
                                      "order-debiased", "order effect"], rows)

    def tables(self, res: dict, analysis: dict) -> list[str]:
        lines = []
        for name, r in res.items():
            lines += [f"### {name}", ""] + md_table(["quantity", "value"], self.rows(r)) + [""]
            if r.get("pairs"):
                lines += self.pairs_table(r) + [""]
        return lines

    def rows(self, r: dict) -> list[list[str]]:
        w = r["swap"]
        blind = "" if r["reading"] == "greedy" else \
            f" (an order-blind judge with the same preferences: {fmt(w['consistency_order_blind'], 2)})"
        tie = f"; tie answered {fmt(w['tie_share'], 2)}" if w["tie_share"] else ""
        return [["swap consistency: the verdict survives the swap",
                 f"{ci(w, 'consistency', 'consistency_ci_low', 'consistency_ci_high', 2)}{blind} over "
                 f"{plural(w['n_pairs'], 'pair')}"],
                ["first-slot preference (answers naming A or B that name the first shown; 0.5 = none)",
                 f"{ci(w, 'first_slot_preference', 'first_slot_ci_low', 'first_slot_ci_high', 2)}{tie}"]] \
            + super().rows(r)

    def summary(self, analysis: dict) -> list[str]:
        out = []
        for c, r in self.results(analysis).items():
            w = r["swap"]
            swap = ci(w, "consistency", "consistency_ci_low", "consistency_ci_high", 2)
            first = ci(w, "first_slot_preference", "first_slot_ci_low", "first_slot_ci_high", 2)
            out.append(f"{c}: swap consistency {swap}, first-slot preference {first} (0.5 = none); slot test "
                       f"{self._slot(r)}; Kendall {self._human(r)}")
        return out

    def verdict(self, analysis: dict) -> list[str]:
        return [f"{c}: pairwise swap consistency {fmt(r['swap']['consistency'], 2)}, first-slot preference "
                f"{fmt(r['swap']['first_slot_preference'], 2)} (p = {pval(r['slot_test']['pvalue'])}, pairs as "
                f"clusters)" for c, r in self.results(analysis).items()]


class Listwise(ParadigmSection):
    name = "listwise"
    title = "Listwise judging"
    paradigms = ("listwise",)
    UNIT = "group"

    def summary(self, analysis: dict) -> list[str]:
        return [f"{c}: slot test {self._slot(r)}; top-1 flips {self._top1(r)}; Kendall {self._human(r)}"
                for c, r in self.results(analysis).items()]

    def verdict(self, analysis: dict) -> list[str]:
        out = []
        for c, r in self.results(analysis).items():
            t = r["slot_test"]
            out.append(f"{c}: listwise first-slot share {fmt(t['shares'][0], 2)} (chance {fmt(1 / t['n_slots'], 2)}"
                       f", p = {pval(t['pvalue'])}, groups as clusters), top-1 flips {fmt(r['top1']['flip'], 2)}")
        return out


PAIRWISE, LISTWISE = Pairwise(), Listwise()


# ---- the comparison of paradigms ------------------------------------------------------------------------------
def compare_tables(tables, human: dict, *, criteria=None, reading: str = "expected", n_boot: int = 1000,
                   rng=0) -> dict:
    """``{criterion: ParadigmComparison}`` of score tables of the same items under different paradigms (one
    table per paradigm; :func:`logitjudge.stats.compare_paradigms`), on the criteria every table has (or
    ``criteria``). Items: the union of the tables' items (a pointwise table must hold all of them; pairwise
    with K random pairs may leave some unranked); each item's group must agree across tables. Cost: each
    table's forward calls, trie tokens and scoring seconds (the whole table, all its criteria)."""
    tables = list(tables)
    if len(tables) < 1:
        raise StatsError("compare needs at least one table")
    names = [paradigm_of(t) for t in tables]
    if len(set(names)) != len(names):
        raise StatsError(f"one table per paradigm, got {names}")
    ids: dict[str, str] = {}
    for t, p in zip(tables, names):
        for x, g in zip(*items_of(t)):
            if ids.setdefault(x, g) != g:
                raise StatsError(f"item {x!r} is in group {ids[x]!r} in one table and {g!r} in the {p} table: "
                                 "compare tables of the same items and groups")
    common = [c for c in tables[0].criteria if all(c in t.criteria for t in tables)]
    wanted = list(criteria) if criteria else common
    bad = [c for c in wanted if c not in common]
    if bad or not wanted:
        raise StatsError(f"criteria {bad or wanted} are not in every table; the tables share {common}")
    order = list(ids)
    groups = np.asarray([ids[x] for x in order])
    gen = np.random.default_rng(rng)
    out = {}
    for name in wanted:
        summ = [summarise(t, list(t.criteria).index(name), order, groups, reading=reading, n_boot=n_boot, rng=gen)
                for t in tables]
        out[name] = st.compare_paradigms(summ, human_array(human, order, name), n_boot=n_boot, rng=gen)
    return out


__all__ = ["LISTWISE", "PAIRWISE", "answer_reading", "candidate_scores", "compare_tables", "items_of",
           "listwise_arrays", "pair_preferences", "pairwise_arrays", "paradigm_shape", "summarise"]
