"""The study table of ``benchmarks/reproduce.py``: the study's findings beside this toolkit's counterparts, in a
compact form - one row per quantity, one column per study, each criterion a line of its cell, and what every
quantity means in numbered notes under the table.

:func:`extract` takes the numbers a row needs from one analysis (``logitjudge.analysis.analyze``);
:func:`findings` builds the rows from every study's numbers; :func:`markdown` prints the table and its notes.
"""

from __future__ import annotations

import math

STUDIES = {"hanna": "HANNA", "hanna_all": "HANNA, all 120 orders", "summeval": "SummEval", "mt_bench": "MT-Bench",
           "hanna_multi": "HANNA, 3 criteria in one prompt"}
SINGLE = ("hanna", "hanna_all", "summeval", "mt_bench")  # option-order studies (the multi run has its own design)
HUMAN = ("hanna", "hanna_all", "summeval")  # studies with human scores

# key: (quantity, the study's finding, note: the study's definition -> this toolkit's counterpart)
ROWS = {
    "test": ("Position test: p with items as clusters (design effect)", "significant for every judge",
             "χ² goodness of fit of the positions the judge's answers take against uniform. Here on the greedy "
             "answers (ties split), with items as the unit: Rao-Scott's second-order correction of Pearson's X², "
             "the design effect (how many times the pooled shares vary more than independent prompts'; below 1 "
             "in balanced designs, whose rotations even out an item's answers) in parentheses."),
    "per_prompt": ("Per-prompt p (prompts as if independent; not a test)", "—",
                   "The plain χ² p-value that treats every prompt as an independent draw: an item's orderings are "
                   "correlated, so it is too small; shown only to compare with published per-prompt tests."),
    "effect": ("Cramér's V, bias-corrected [95% CI over items]", "per judge in the paper",
               "Cramér's V of that χ². Here bias-corrected (Bergsma 2013, for a goodness of fit with items as "
               "clusters): 0 without a preference, its percentile bootstrap interval over items can reach 0."),
    "direction": ("Direction (favoured positions)", "first-position for some judges, last-position for "
                  "Gemma-3-27B and Qwen3.5-27B",
                  "Which positions the judge favours: those whose answer share's CI lies above 1/n, read as "
                  "first / last / edges (both ends) / middle / mixed, 'none' when the test does not reject. "
                  "Positions count from 1."),
    "criterion": ("Criterion position moves scores, points [CI] (noise alone: 95%)", "up to 0.80 points",
                  "Largest change of a criterion's mean score with the position it is asked at: max - min of its "
                  "mean score over positions (bootstrap CI), beside the 95% quantile of the spread that shuffling "
                  "the orderings within items gives (noise alone)."),
    "gain": ("Gain in r over FIXED(1) at Kmax: RANDOM / BALANCED [95% CI]", "(context)",
             "r(Kmax) - r_FIXED(1) of the item-level correlation with humans, paired bootstrap CI over items; "
             "RANDOM as its expectation over draws of K orders per item."),
    "gain3": ("Share of the full gain at K=3: RANDOM / BALANCED", "about 2/3",
              "(r(3) - r_FIXED(1)) / (r(Kmax) - r_FIXED(1)), reported only where the full gain is positive and its "
              "CI excludes 0 (the study's shares are for judges that benefit); '—' otherwise."),
    "gain5": ("Share of the full gain at K=5: RANDOM / BALANCED", "85%", "As at K=3."),
    "bvr": ("BALANCED − RANDOM in r at K = 1 / 3 / Kmax", "BALANCED no better than RANDOM at K=10",
            "r_BALANCED(K) - E[r_RANDOM(K)] at the same budget K, RANDOM's K orders drawn uniformly per item (with "
            "replacement): '(exact)' where every joint outcome of the draws was enumerated (at most 1e6: the greedy "
            "reading at K=1 on small tables), else a Monte-Carlo expectation ± its SE."),
    "flip": ("Top-1 flips [CI] (certain–possible; tied at top)", "16%-39% of prompts",
             "Share of prompts (groups of candidates) whose winning set under the canonical order differs from "
             "the winning set under another order, averaged over the other orders; a tie that stays the same tie "
             "is no flip. Certain: disjoint winners; possible: not one identical untied winner; tied: share of "
             "comparisons with a tie at the top on either side (bootstrap CI over groups)."),
    "change": ("Top-1 change FIXED vs BALANCED(K) / RANDOM(K)", "—",
               "The same change of the winning set between the canonical prompt's scores and the mean over K "
               "prompts: BALANCED's 2n rotations, and RANDOM as the expectation over draws of K orders per item "
               "(± its Monte-Carlo SE), at the same K."),
    "human": ("Human r: FIXED(1) [CI] / RANDOM(1) / RANDOM(Kmax) / BALANCED(Kmax)", "(context)",
              "Pearson r of the item scores with human ratings, each strategy at its budget (RANDOM: the "
              "expectation over draws, exact or ± SE; 'n/a': constant judge scores); FIXED(1)'s percentile "
              "bootstrap CI over items where the analysis gives one."),
    "human_k": ("Human r at K = 1 / 3 / 5 / Kmax: BALANCED; RANDOM", "BALANCED no better than RANDOM at K=10",
                "Pearson r with human ratings of the item scores averaged over K orders: BALANCED(K) the mean over "
                "its windows of K consecutive rotations, RANDOM(K) the expectation over draws of K orders per item "
                "(exact or ± SE); FIXED(1), the canonical order alone, is the first number of row 12."),
}
SAME_UNDER_EVERY_READING = ("test", "per_prompt", "effect", "direction")  # they read the answered labels


def _f(x, fmt="{:.2f}") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)


def _pct(x) -> str:
    return _f(x, "{:.0%}")


def _se(se, pct: bool = False) -> str:
    """A standard error with at least one significant digit (0.0004, not 0.000)."""
    if se is None or not math.isfinite(se):
        return "n/a"
    x = 100 * se if pct else se
    if x < 1e-12:  # every replicate alike: the expectation has no Monte-Carlo error
        return "0"
    return (f"{x:.1f}" if pct else f"{x:.3f}") if x >= (0.1 if pct else 0.001) else f"{x:.1g}"


def _mc(value, se, exact, fmt="{:+.3f}") -> str:
    """A RANDOM expectation: 'value (exact)' or 'value ± se'."""
    if value is None:
        return "n/a"
    return f"{fmt.format(value)} (exact)" if exact else f"{fmt.format(value)} ± {_se(se)}"


# ---- numbers from an analysis ------------------------------------------------------------------------------
def extract(res: dict) -> dict:
    """The numbers the findings table needs, per criterion."""
    out = {"verdict": res["verdict"], "reading": res["settings"].get("reading"), "position": {}, "budget": {},
           "alignment": {}, "flips": {}, "criterion_spread": None, "skipped": res.get("skipped", {}),
           "n_items": res["table"]["n_items"], "criteria": res["table"]["criteria"]}
    keys = ("statistic", "pvalue", "pvalue_per_prompt", "design_effect", "dof", "cramers_v", "cramers_v_ci_low",
            "cramers_v_ci_high", "cramers_v_raw", "label", "alpha", "counts", "favoured", "reading", "n", "n_items")
    for c, pos in (res.get("position") or {}).items():
        chi = (pos or {}).get("chi_square")
        if chi:
            out["position"][c] = {k: chi.get(k) for k in keys}
    for c, b in (res.get("budget") or {}).items():
        if b:
            ks, gof = b["ks"], b.get("gain_over_fixed") or {}
            gains = {s: {k: {"gain": gof[s][int(k[2:]) - 1], "ci": ci} for k, ci in cis.items()}
                     for s, cis in (b.get("gain_ci") or {}).items() if s in gof}
            out["budget"][c] = {"gain_at": b["gain_at"], "share_for": b.get("share_for", []), "k_max": ks[-1],
                                "curves": b["curves"], "curves_se": b.get("curves_se") or {},
                                "curves_exact": b.get("curves_exact") or {}, "gains": gains,
                                "balanced_minus_random": b["balanced_minus_random"]}
    method = res["settings"]["method"]
    for c, al in (res.get("alignment") or {}).items():
        if al:
            out["alignment"][c] = {s: {"r": v[method]["statistic"], "se": v[method].get("se"),
                                       "exact": v[method].get("exact"),
                                       "ci": [v[method].get("ci_low"), v[method].get("ci_high")]}
                                   for s, v in al["item"].items()}
    for c, r in (res.get("rank_stability") or {}).items():
        if r:
            f = r["top1_flips"]
            out["flips"][c] = {"flip": f["flip"], "ci_low": f["flip_ci_low"], "ci_high": f["flip_ci_high"],
                               "certain": f["flip_certain"], "possible": f["flip_possible"], "tied": f["tied"],
                               "tie_broken": f.get("flip_tie_broken"), "n_groups": f["n_groups"],
                               "change": r.get("top1_change") or {}, "pairwise": r["stability"]["flip_rate"]}
    cp = res.get("criterion_position")
    if cp:
        null_h = cp.get("null_spread_high") or []
        out["criterion_spread"] = {c: {"spread": s, "ci_low": lo, "ci_high": hi,
                                       "null_high": null_h[j] if j < len(null_h) else None}
                                   for j, (c, s, lo, hi) in enumerate(zip(res["table"]["criteria"], cp["spread"],
                                                                          cp["spread_ci_low"], cp["spread_ci_high"]))}
    return out


# ---- the cells ---------------------------------------------------------------------------------------------
def _short(criterion: str) -> str:
    return criterion[:3].capitalize()


def _position_cells(v: dict) -> dict:
    fav = ", ".join(str(p) for p in v.get("favoured") or [])
    return {"test": f"p = {_f(v['pvalue'], '{:.2g}')} ({_f(v.get('design_effect'))})",
            "per_prompt": _f(v.get("pvalue_per_prompt"), "{:.2g}"),
            "effect": f"{_f(v['cramers_v'])} [{_f(v['cramers_v_ci_low'])}, {_f(v['cramers_v_ci_high'])}]",
            "direction": v["label"] + (f" ({fav})" if fav else "")}


def _budget_cells(v: dict, al: dict | None = None) -> dict:
    """The budget rows of one criterion; ``al``: its alignment numbers (FIXED(1)'s bootstrap CI)."""
    k, out = v["k_max"], {}
    gains = []
    for s in ("random", "balanced"):
        g = (v["gains"].get(s) or {}).get(f"K={k}")
        gains.append("n/a" if not g or g["gain"] is None else
                     f"{_f(g['gain'], '{:+.3f}')} [{_f(g['ci'][0], '{:+.2f}')}, {_f(g['ci'][1], '{:+.2f}')}]")
    out["gain"] = " / ".join(gains)
    for key, kk in (("gain3", 3), ("gain5", 5)):
        out[key] = " / ".join(_pct(v["gain_at"].get(s, {}).get(f"K={kk}")) if s in v["share_for"] else "—"
                              for s in ("random", "balanced"))
    d = v["balanced_minus_random"]
    se, ex = v["curves_se"].get("random") or [], v["curves_exact"].get("random") or []
    out["bvr"] = " / ".join(_mc(d[j], se[j] if j < len(se) else None, ex[j] if j < len(ex) else False)
                            for j in sorted({0, 2, k - 1}) if j < len(d))
    cur = v["curves"]
    out["human_k"] = _human_by_k(v)
    ci = ((al or {}).get("fixed") or {}).get("ci") or [None, None]
    fixed_ci = f" [{_f(ci[0])}, {_f(ci[1])}]" if None not in ci else ""
    out["human"] = " / ".join([_f((cur.get("fixed") or [None])[0]) + fixed_ci,
                               _mc((cur.get("random") or [None])[0], se[0] if se else None, ex[0] if ex else False,
                                   "{:.2f}"),
                               _mc((cur.get("random") or [None])[-1], se[-1] if se else None, ex[-1] if ex else False,
                                   "{:.2f}"),
                               _f((cur.get("balanced") or [None])[-1])]) + f" (K={k})"
    return out


def _human_by_k(v: dict, ks=(1, 3, 5)) -> str:
    """r of BALANCED(K) and RANDOM(K) at K = 1, 3, 5 and Kmax (those the curves reach)."""
    cur, k_max = v["curves"], v["k_max"]
    se, ex = v["curves_se"].get("random") or [], v["curves_exact"].get("random") or []
    at = [k for k in ks if k < k_max] + [k_max]
    bal = " / ".join(_f((cur.get("balanced") or [None] * k_max)[k - 1]) for k in at)
    rnd = " / ".join(_mc((cur.get("random") or [None] * k_max)[k - 1], se[k - 1] if k - 1 < len(se) else None,
                         ex[k - 1] if k - 1 < len(ex) else False, "{:.2f}") for k in at)
    return f"K = {' / '.join(map(str, at))}: B {bal}; R {rnd}"


def _flip_cells(v: dict) -> dict:
    ch = v["change"]
    parts = []
    if "balanced" in ch:
        parts.append(f"B({ch['balanced']['k']}) {_pct(ch['balanced']['changed'])}")
    if "random" in ch:
        r = ch["random"]
        parts.append(f"R({r['k']}) {_pct(r['changed'])} ± {_se(r['changed_se'], pct=True)}%")
    return {"flip": f"{_pct(v['flip'])} [{_pct(v['ci_low'])}, {_pct(v['ci_high'])}] ({_pct(v['certain'])}–"
                    f"{_pct(v['possible'])}; {_pct(v['tied'])}) over {v['n_groups']} group"
                    f"{'' if v['n_groups'] == 1 else 's'}",
            "change": " / ".join(parts) or "n/a"}


SKIPS = {"test": "position.{c}.chi_square", "flip": "rank_stability.{c}", "gain": "budget.{c}"}


def skipped(studies: dict, numbers: str = "numbers") -> list[str]:
    """'study, criterion, quantity: reason' for every table cell the analysis skipped (a note under the table)."""
    out = []
    for s, name in STUDIES.items():
        nums = (studies.get(s) or {}).get(numbers) or {}
        for key, pattern in SKIPS.items():
            for c in nums.get("criteria") or []:
                why = (nums.get("skipped") or {}).get(pattern.format(c=c))
                if why:
                    out.append(f"{name}, {c}, {ROWS[key][0].split(':')[0].split(' [')[0].lower()}: {why}")
    return out


def findings(studies: dict, numbers: str = "numbers") -> list[dict]:
    """Rows ``{key, quantity, study, cells: {study: text}}`` from each study's ``numbers`` (the study's reading)
    or ``numbers_expected`` (the same tables, expected reading); a criterion per line of a cell, 'skipped' where
    the analysis skipped it (the reason is in :func:`skipped`)."""
    cells: dict = {key: {} for key in ROWS}

    def add(key, study, criterion, text):
        cells[key].setdefault(study, []).append(f"{_short(criterion)} {text}")

    for s in STUDIES:
        nums = (studies.get(s) or {}).get(numbers)
        if not nums:
            why = (studies.get(s) or {}).get("skipped_reason")
            first = "test" if s in SINGLE else "criterion"
            for key in ROWS:
                cells[key][s] = [f"skipped: {why}"] if why and key == first else []
            continue
        for key, pattern in SKIPS.items():
            for c in nums.get("criteria") or []:
                if pattern.format(c=c) in (nums.get("skipped") or {}) and (s in SINGLE or key == "gain"):
                    add(key, s, c, "skipped")
        if s in SINGLE:
            for c, v in nums["position"].items():
                for key, text in _position_cells(v).items():
                    add(key, s, c, text)
            for c, v in nums["flips"].items():
                for key, text in _flip_cells(v).items():
                    add(key, s, c, text)
        if s in HUMAN:
            for c, v in nums["budget"].items():
                for key, text in _budget_cells(v, (nums.get("alignment") or {}).get(c)).items():
                    add(key, s, c, text)
        for c, v in (nums.get("criterion_spread") or {}).items():
            add("criterion", s, c, f"{_f(v['spread'])} [{_f(v['ci_low'])}, {_f(v['ci_high'])}] "
                                   f"({_f(v['null_high'])})")
    for s, why in ((s, (studies.get(s) or {}).get(numbers, {}).get("skipped", {}).get("criterion_position"))
                   for s in ("hanna_multi",)):
        if why and not cells["criterion"].get(s):
            cells["criterion"][s] = [f"skipped: {why}"]
    return [{"key": key, "quantity": q, "study": finding, "note": note,
             "cells": {s: "<br>".join(cells[key].get(s) or []) or "—" for s in STUDIES}}
            for key, (q, finding, note) in ROWS.items()]


def _table(rows: list[dict], keys=None) -> list[str]:
    head = ["quantity", "study"] + list(STUDIES.values())
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n, r in enumerate(rows, 1):
        if keys is None or r["key"] in keys:
            lines.append(f"| {r['quantity']} [{n}] | {r['study']} | " + " | ".join(r["cells"][s] for s in STUDIES)
                         + " |")
    return lines


def markdown(rows: list[dict], expected: list[dict], model: str, sizes: list[str] = (), skips: list[str] = ()
             ) -> str:
    """The study's reading (greedy) in one table, the score-based rows again under the expected reading, then the
    notes: what each numbered quantity is, here and in the study, and the sizes of the studies."""
    lines = [f"Greedy reading (the study's: the label a temperature-0 judge writes), {model}:", ""]
    lines += _table(rows)
    score_rows = [k for k in ROWS if k not in SAME_UNDER_EVERY_READING]
    lines += ["", "The same tables under the expected reading (each prompt's probability-weighted score); the "
                  "position rows read the answered labels and are the same:", ""]
    lines += _table(expected, keys=score_rows)
    lines += ["", "Notes. Each cell gives one line per criterion (its first three letters); '—': the study has no "
                  "such measurement (no human scores, no groups, or one criterion per prompt)."]
    lines += [f"{n}. {r['note']}" for n, r in enumerate(rows, 1)]
    if skips:
        lines += ["", "Skipped: " + "; ".join(skips) + "."]
    if sizes:
        lines += ["", "Sizes: " + "; ".join(sizes) + "."]
    return "\n".join(lines)
