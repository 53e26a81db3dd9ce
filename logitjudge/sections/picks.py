"""The Markdown of ``logitjudge rank`` (:class:`logitjudge.picks.Ranking`): per group the pick and the
probability that it holds under random orders, the candidates ranked with their CIs, the hold curve over K, and
the leaderboard. Candidates, K and ranks count from 1; every probability says "(exact)" or carries its
Monte-Carlo SE."""

from __future__ import annotations

import math

from ._format import expectation, fmt, md_table, plural

DESIGNS = {
    "independent": "each candidate draws its own K orders (random:K per item)",
    "shared": "one draw of K orders for the whole group",
    "pairwise": "each pair shown in K orientations drawn from its two",
}


def _ci(value, lo, hi) -> str:
    if lo is None or hi is None or (isinstance(lo, float) and math.isnan(lo)):
        return f"{fmt(value)} [CI n/a]"
    return f"{fmt(value)} [{fmt(lo)}, {fmt(hi)}]"


def _min_k(x, budget) -> str:
    import pandas as pd

    return f"not within budget (K <= {budget})" if pd.isna(x) else str(int(x))


def _by_group(frame):
    """Rows in the groups' order of first appearance, then by rank and candidate."""
    order = {g: i for i, g in enumerate(dict.fromkeys(frame["group"]))}
    return frame.assign(_g=frame["group"].map(order)).sort_values(["_g", "rank", "candidate"], kind="stable")


def ranking_markdown(r) -> str:
    s = r.summary
    conf = f"{s['confidence']:.0%}"
    lines = [f"# Picks that survive the order: {s['criterion']} ({s['paradigm']})", "",
             f"Score: {s['score']} over {s['pool']} ({s['pool_rows']} per candidate or list), {s['reading']} "
             f"reading; the pick is each group's top set (candidates within 1e-9 of the best). Hold probability: "
             f"the probability that a run with K random orders ({DESIGNS[s['design']]}; uniform over the pool, with "
             f"replacement) picks the same top set (a tie that stays the same tie holds); '(exact)' where the "
             f"outcomes are enumerated, else '± SE' of a Monte-Carlo estimate (seed {s['seed']}).", "",
             f"**{s['fragile']} of {plural(s['groups'], 'group')}** have a fragile pick (hold at K=1 below the "
             f"stability {fmt(s['stability'], 2)}); {s['not_within_budget']} do not reach it within the budget.", ""]
    rows = []
    for g in r.groups.itertuples():
        pick = f"{g.pick_candidate.replace('|', ', ')} ({g.pick.replace('|', ', ')})"  # '|' would split a cell
        rows.append([str(g.group), str(g.candidates), pick, fmt(g.pick_score),
                     expectation(g.hold_k1, g.hold_k1_se, g.hold_k1_exact),
                     _min_k(g.min_k, g.budget), "fragile" if g.hold_k1 < s["stability"] - 1e-12 else "robust"])
    lines += ["## Groups", ""] + md_table(
        ["group", "candidates", "pick (candidate: id)", f"pick's {s['score']}", "hold probability, K=1",
         f"smallest K with hold >= {fmt(s['stability'], 2)}", "at K=1"], rows) + [""]
    rows = [[str(c.group), str(c.rank), str(c.candidate), str(c.item_id),
             _ci(c.score, c.score_ci_low, c.score_ci_high), "pick" if c.pick else ""]
            for c in _by_group(r.candidates).itertuples()]
    ci_note = ("percentile bootstrap over the group's pairs" if s["paradigm"] == "pairwise"
               else "t interval of the mean over the pool's orders")
    lines += ["## Candidates ranked", "", f"Rank 1 = highest {s['score']}; {conf} CI: {ci_note}.", ""]
    lines += md_table(["group", "rank", "candidate", "id", f"{s['score']} [{conf} CI]", ""], rows) + [""]
    ks = sorted(r.holds["k"].unique())
    rows = []
    for name, h in r.holds.groupby("group", sort=False):
        by_k = {int(x.k): expectation(x.hold, x.hold_se, x.exact) for x in h.itertuples()}
        rows.append([str(name)] + [by_k.get(k, "—") for k in ks])
    lines += ["## Hold probability by K (orders per run)", ""] + md_table(["group"] + [f"K={k}" for k in ks],
                                                                          rows) + [""]
    if r.leaderboard is not None:
        rows = [[str(b.rank), str(b.system), _ci(b.mean_score, b.mean_score_ci_low, b.mean_score_ci_high),
                 _ci(b.win_rate, b.win_rate_ci_low, b.win_rate_ci_high), str(b.prompts)]
                for b in r.leaderboard.itertuples()]
        lines += ["## Leaderboard", "",
                  f"Systems ranked by the mean, over the prompts they answer, of their {s['score']}; win rate: the "
                  f"share of those prompts whose pick is theirs (a tie of t counts 1/t each); {conf} percentile "
                  f"bootstrap CIs over prompts (seed {s['seed']}).", ""]
        lines += md_table(["rank", "system", f"mean of the {s['score']} [CI]", "win rate [CI]", "prompts"], rows)
        lines += ["", f"Top system(s): {', '.join(s['top_systems'])}. Probability that the leaderboard's top set "
                      f"changes when every candidate is scored under one random order instead: "
                      f"{expectation(s['top_change'], s['top_change_se'], False)} over {s['top_change_draws']} "
                      f"random runs.", ""]
    return "\n".join(lines)
