"""Everything a ScoreTable supports, as one JSON-ready dict, plus a Markdown rendering and a human-score
reader.

``analyze`` runs the pure estimators of :mod:`logitjudge.stats` per criterion and records, under ``skipped``,
each section it could not compute and why (no human scores, a single criterion, no groups, a FIXED design...).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from . import stats as st
from .jsonl import iter_jsonl
from .stats._result import BALANCED, FIXED, AlignmentError, StatsError, jsonable
from .table import ScoreTable

SECTIONS = ("position", "criterion_position", "aggregation", "alignment", "budget", "rank_stability")
RESERVED = {"id", "group", "text", "context", "meta", "system", "human"}


class HumanScoresError(ValueError):
    """A human-score file that cannot be read; the message names the line and the fix."""


# ---- reading human scores ----------------------------------------------------------------------------------
def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def read_human_scores(path, *, group_by: str | None = None) -> tuple[dict, dict | None]:
    """Read JSONL human scores -> (item_id -> criterion -> score, item_id -> group or None).

    Lines are ``{"id": ..., "human": {"Coherence": 3.3, ...}, "group": ...}`` or flat ``{"id": ...,
    "Coherence": 3.3, "doc": ...}`` (every numeric field except id/group is a criterion). ``group_by`` names
    the field holding the group (default: ``group`` when present); with ``group_by`` every line must have it.
    """
    p = Path(path)
    if not p.exists():
        raise HumanScoresError(f"human-score file {p} does not exist")
    human, groups = {}, {}
    for where, d in iter_jsonl(p, error=HumanScoresError, expect="use one JSON object per line with an 'id'"):
        if "id" not in d:
            raise HumanScoresError(f"{where}: each line must be a JSON object with an 'id' field")
        iid = str(d["id"])
        if iid in human:
            raise HumanScoresError(f"{where}: duplicate id {iid!r}; give each item one line")
        gkey = group_by or "group"
        if group_by is not None and gkey not in d:
            raise HumanScoresError(f"{where} (id {iid!r}): no field {group_by!r} to group by; fields are "
                                   f"{sorted(d)}")
        if gkey in d and d[gkey] is not None:
            groups[iid] = str(d[gkey])
        if "human" in d:
            scores = d["human"]
            if not isinstance(scores, dict):
                raise HumanScoresError(f"{where} (id {iid!r}): 'human' must be an object "
                                       "criterion -> score")
            bad = [k for k, v in scores.items() if v is not None and not _is_number(v)]
            if bad:
                raise HumanScoresError(f"{where} (id {iid!r}): human scores {bad} are not numbers")
            scores = {str(k): float(v) for k, v in scores.items() if v is not None}
        else:
            skip = RESERVED | {gkey}
            scores = {str(k): float(v) for k, v in d.items() if k not in skip and _is_number(v)}
        human[iid] = scores
    if not any(human.values()):
        raise HumanScoresError(f"{p} has no human scores: give each line a 'human' object or numeric "
                               "criterion fields")
    return human, (groups or None)


# ---- helpers -----------------------------------------------------------------------------------------------
def _check_ids(table: ScoreTable, mapping: dict, what: str) -> None:
    ids = set(table.item_ids.tolist())
    unknown = [k for k in mapping if str(k) not in ids]
    if unknown:
        raise AlignmentError(f"{len(unknown)} {what} ids are not in the table (e.g. {unknown[:3]}); they "
                             "must match the item ids of the scored texts")


def _labels_for(table: ScoreTable, mapping: dict | None, what: str) -> np.ndarray | None:
    """One label per table item ('' where missing); unknown ids are an error."""
    if not mapping:
        return None
    _check_ids(table, mapping, what)
    return np.asarray([str(mapping.get(i, "")) for i in table.item_ids])


def _call(fn, *args, **kw):
    """Run a section; a StatsError becomes (None, reason) so the rest of the analysis goes on."""
    try:
        return fn(*args, **kw), None
    except StatsError as e:
        return None, str(e)


def _fmt(x, nd=3) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x + 0.0:.{nd}f}".replace("-0." + "0" * nd, "0." + "0" * nd)  # no "-0.000"
    return str(x)


def _ci(d: dict, key: str, lo: str, hi: str, nd=3) -> str:
    if d.get("defined") is False:
        return f"undefined ({d.get('reason')})"
    return f"{_fmt(d.get(key), nd)} [{_fmt(d.get(lo), nd)}, {_fmt(d.get(hi), nd)}]"


def _criterion_verdict(name: str, chi: dict | None, reason: str | None) -> str:
    if chi is None:
        return f"{name}: position bias not tested ({reason})"
    v = f"Cramér's V {_ci(chi, 'cramers_v', 'cramers_v_ci_low', 'cramers_v_ci_high', 2)}"
    lo, hi = chi.get("cramers_v_ci_low"), chi.get("cramers_v_ci_high")
    if lo is not None and lo == hi:  # every bootstrap resample alike: the items chose the same positions
        v += " (no spread: every item chose alike, so the interval has no width)"
    if chi["label"] != "none":
        return f"{name}: {chi['label']}-position bias, {v}"
    if chi["pvalue"] is not None and chi["pvalue"] < chi["alpha"]:
        return f"{name}: position preference without a clear favourite (p = {chi['pvalue']:.2g}), {v}"
    return f"{name}: no significant position bias, {v}"


# ---- per-criterion sections --------------------------------------------------------------------------------
def _position(table, c, design, rng, n_boot) -> tuple[dict, dict]:
    probs = table.probs[:, c]
    pbp = st.probs_by_position(probs, table.option_orders)
    out, skipped = {}, {}
    res, why = _call(st.position_distribution, pbp, n_boot=n_boot, rng=rng)
    out["distribution"] = res
    if design == FIXED:
        skipped["chi_square"] = ("FIXED design: position is confounded with content; score under balanced "
                                 "orderings to test position bias")
        out["chi_square"] = None
    else:
        out["chi_square"], why = _call(st.position_chisquare, pbp, table.option_orders, n_boot=n_boot,
                                       rng=rng)
        if why:
            skipped["chi_square"] = why
    out["effect"], why = _call(st.fit_position_effect, probs, table.option_orders, n_boot=n_boot, rng=rng)
    if why:
        skipped["effect"] = why
    if design == BALANCED:
        out["pride_prior"] = st.pride_prior(np.log(np.maximum(pbp, 1e-12)), option_orders=table.option_orders)
    else:
        out["pride_prior"] = None
        skipped["pride_prior"] = "the PriDe closed form needs balanced orderings"
    return out, skipped


def _strategy_scores(table, c, design, rng) -> dict[str, np.ndarray]:
    p, v = table.probs[:, c], table.values[c]
    out = {"fixed": st.aggregate_scores(p, v, table.option_orders, strategy="fixed").scores,
           "random": st.aggregate_scores(p, v, table.option_orders, strategy="random", k=1, rng=rng).scores}
    if design == BALANCED:
        out["balanced"] = st.aggregate_scores(p, v, table.option_orders, strategy="balanced").scores
    else:
        out["all_orderings"] = p.mean(axis=1) @ v  # mean over the table's orderings (not balanced)
    return out


def _correlations(x, y, rng, n_boot) -> dict:
    return {m: st.correlation(x, y, method=m, n_boot=n_boot, rng=rng) for m in st.alignment.METHODS}


def _alignment(table, c, hs, scores, design, groups, systems, method, rng, n_boot) -> dict:
    idx, y = hs.index, hs.scores
    out = {"n_items": len(idx), "n_missing": hs.n_missing, "item": {}, "grouped": {}, "system": {},
           "compare": {}}
    best = "balanced" if "balanced" in scores else "all_orderings"
    for name, x in scores.items():
        out["item"][name] = _correlations(x[idx], y, rng, n_boot)
        if groups is not None:
            g = groups[idx]
            keep = g != ""
            out["grouped"][name] = st.grouped_correlation(x[idx][keep], y[keep], g[keep], method=method,
                                                          n_boot=n_boot, rng=rng)
        if systems is not None:
            s = systems[idx]
            keep = s != ""
            out["system"][name], why = _call(st.system_correlation, x[idx][keep], y[keep], s[keep],
                                             method=method, n_boot=n_boot, rng=rng)
            if why:
                out.setdefault("system_skipped", {})[name] = why
    out["compare"][f"{best}_vs_fixed"] = st.compare_correlations(
        scores[best][idx], scores["fixed"][idx], y, method=method, n_boot=max(n_boot, 1), rng=rng)
    if design == BALANCED and len(idx) >= 10:
        # PriDe on the human-scored items: prior from 20% of them, debiased canonical scores for the rest
        p = table.probs[idx, c]
        d = st.pride_debias(p, table.values[c], table.option_orders, rng=rng)
        out["pride"] = {"n_estimation_items": len(d.estimation_items), "prior": d.prior,
                        "correlation": _correlations(d.scores, y[d.items], rng, n_boot),
                        "compare_vs_fixed": st.compare_correlations(d.scores, d.raw_scores, y[d.items],
                                                                    method=method, n_boot=max(n_boot, 1),
                                                                    rng=rng)}
    return out


def _budget(table, c, hs, method, rng, n_draws) -> dict:
    b = st.budget_curve(table.probs[hs.index, c], table.values[c], table.option_orders, hs.scores,
                        method=method, n_draws=n_draws, rng=rng)
    out = b.to_dict()
    out["gain_at"] = {s: {f"K={k}": b.gain[s].fraction[k - 1] for k in (3, 5) if k <= len(b.ks)}
                      for s in b.curves}
    return out


def _rank(table, c, groups, rng, n_boot, n_draws) -> dict:
    keep = groups != ""
    s = (table.probs[keep, c] @ table.values[c])  # [items, orderings] expected score of each prompt
    return {"stability": st.rank_stability(s, groups[keep], option_orders=table.option_orders, n_boot=n_boot,
                                           rng=rng),
            "best_of_n": st.best_of_n_instability(s, groups[keep], option_orders=table.option_orders,
                                                  n_draws=n_draws, rng=rng)}


# ---- analyze -----------------------------------------------------------------------------------------------
def analyze(table: ScoreTable, *, human: dict | None = None, groups: dict | None = None,
            systems: dict | None = None, rng=0, n_boot: int = 1000, method: str = "pearson",
            n_draws: int = 100) -> dict:
    """Every statistic the table supports, as a JSON-serialisable dict (NaN -> None) with a ``verdict``
    string.

    human: item_id -> criterion -> score (alignment, budget curves). groups: item_id -> group (defaults to
    ``table.item_groups``; grouped correlation and rank stability). systems: item_id -> system (system-level
    correlation). ``method`` is the correlation for grouped/system/paired/budget results (item level reports
    all three). Sections that cannot be computed are None, with the reason under ``skipped``.
    """
    gen = np.random.default_rng(rng)
    design = st.detect_design(table.option_orders)
    if table.n_items < 2:
        n_boot = 0  # no bootstrap over a single item: report the point estimates without CIs
    c_names = list(table.criteria)
    if groups is None and table.item_groups is not None:
        group_arr = np.asarray(table.item_groups).astype(str)
    else:
        group_arr = _labels_for(table, groups, "group")
    system_arr = _labels_for(table, systems, "system")
    if human:
        _check_ids(table, human, "human-score")
        matched = {k for d in human.values() if isinstance(d, dict) for k in d} & set(c_names)
        if not matched:
            names = sorted({k for d in human.values() if isinstance(d, dict) for k in d})
            raise AlignmentError(f"the human scores name criteria {names}, none of the table's {c_names}")
    result: dict = {"verdict": "", "table": {
        "n_items": table.n_items, "n_criteria": len(c_names), "n_orderings": table.probs.shape[2],
        "n_options": table.n_options, "criteria": c_names, "design": design,
        "criterion_order_varies": bool(np.any(table.criterion_orders != table.criterion_orders[0]))},
        "settings": {"n_boot": n_boot, "rng": jsonable(rng) if isinstance(rng, int) else str(rng),
                     "method": method, "n_draws": n_draws, "reading": "expected"}}
    for s in SECTIONS:
        result[s] = {}
    skipped: dict = {}
    verdicts = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for c, name in enumerate(c_names):
            pos, why = _position(table, c, design, gen, n_boot)
            result["position"][name] = pos
            for k, reason in why.items():
                skipped[f"position.{name}.{k}"] = reason
            chi = pos["chi_square"].to_dict() if pos["chi_square"] is not None else None
            verdicts.append(_criterion_verdict(name, chi, why.get("chi_square")))
            scores = _strategy_scores(table, c, design, gen)
            fixed, ref = scores["fixed"], scores.get("balanced", scores.get("all_orderings"))
            result["aggregation"][name] = {
                "mean_score": {k: float(v.mean()) for k, v in scores.items()},
                "mean_abs_shift_fixed_vs_debiased": float(np.abs(fixed - ref).mean()),
                "reference": "balanced" if "balanced" in scores else "all_orderings"}
            hs = None
            if human:
                try:
                    hs = st.align_human(table.item_ids, human, name)
                except AlignmentError as e:  # ids were checked above: this criterion has no human scores
                    skipped[f"alignment.{name}"] = skipped[f"budget.{name}"] = str(e)
            if hs is not None:
                result["alignment"][name], why = _call(_alignment, table, c, hs, scores, design, group_arr,
                                                       system_arr, method, gen, n_boot)
                if why:
                    skipped[f"alignment.{name}"] = why
                if table.probs.shape[2] >= 2:
                    result["budget"][name], why = _call(_budget, table, c, hs, method, gen, n_draws)
                    if why:
                        skipped[f"budget.{name}"] = why
                else:
                    skipped[f"budget.{name}"] = "a single ordering: no budget to vary"
            if group_arr is not None:
                result["rank_stability"][name], why = _call(_rank, table, c, group_arr, gen, n_boot, n_draws)
                if why:
                    skipped[f"rank_stability.{name}"] = why
        if len(c_names) < 2:
            skipped["criterion_position"] = "a single criterion: no criterion order to vary"
        elif not result["table"]["criterion_order_varies"]:
            skipped["criterion_position"] = "the criterion order never varies across orderings"
        else:
            cp, why = _call(st.criterion_position_effect, table.expected_score(), table.criterion_orders,
                            n_boot=n_boot, n_perm=max(100, min(n_boot, 1000)), rng=gen)
            result["criterion_position"] = cp
            if why:
                skipped["criterion_position"] = why
    if not human:
        skipped["alignment"] = skipped["budget"] = "no human scores given"
    if group_arr is None:
        skipped["rank_stability"] = "no groups (pass groups or score grouped items)"
    for s in SECTIONS:
        if not result[s]:
            result[s] = None
    result["skipped"] = skipped
    result["warnings"] = sorted({str(w.message) for w in caught})
    if len(verdicts) == 1:
        verdicts = [v.split(": ", 1)[1] for v in verdicts]
    result["verdict"] = "; ".join(verdicts)
    return jsonable(result)


# ---- Markdown ----------------------------------------------------------------------------------------------
def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    head = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return head + ["| " + " | ".join(r) + " |" for r in rows]


def format_markdown(result: dict) -> str:
    """The verdict first, then tables with confidence intervals."""
    lines = [result["verdict"], ""]
    t = result["table"]
    crit = "criterion" if t["n_criteria"] == 1 else "criteria"
    lines += [f"{t['n_items']} items, {t['n_criteria']} {crit}, {t['n_orderings']} orderings of "
              f"{t['n_options']} options ({t['design']} design).", ""]
    if result.get("position"):
        lines += ["## Position preference", ""]
        for name, pos in result["position"].items():
            lines += [f"### {name}", ""]
            dist, chi, eff = pos.get("distribution") or {}, pos.get("chi_square"), pos.get("effect")
            rows = []
            for p in range(t["n_options"]):
                row = [str(p), f"{_fmt(dist['distribution'][p])} [{_fmt(dist['ci_low'][p])}, "
                               f"{_fmt(dist['ci_high'][p])}]" if dist else "—"]
                row.append(f"{_fmt(chi['shares'][p])} [{_fmt(chi['share_ci_low'][p])}, "
                           f"{_fmt(chi['share_ci_high'][p])}]" if chi else "—")
                row.append(f"{_fmt(eff['log_odds'][p])} [{_fmt(eff['log_odds_ci_low'][p])}, "
                           f"{_fmt(eff['log_odds_ci_high'][p])}]" if eff else "—")
                rows.append(row)
            lines += _table(["position", "mean probability", "argmax share", "log-odds vs other positions"],
                            rows)
            if chi:
                lines += ["", f"Chi-square (argmax, {chi['design']} design): "
                              f"χ² = {_fmt(chi['statistic'], 2)}, "
                              f"dof = {chi['dof']}, p = {chi['pvalue']:.3g}, N = {_fmt(chi['n'], 0)}; "
                              f"Cramér's V {_ci(chi, 'cramers_v', 'cramers_v_ci_low', 'cramers_v_ci_high')}; "
                              f"label: {chi['label']}."]
            lines.append("")
    cp = result.get("criterion_position")
    if cp:
        lines += ["## Criterion-position effect", ""]
        k = len(cp["matrix"][0])
        rows = [[name] + [_fmt(x, 2) for x in cp["matrix"][j]]
                + [f"{_fmt(cp['spread'][j], 2)} [{_fmt(cp['spread_ci_low'][j], 2)}, "
                   f"{_fmt(cp['spread_ci_high'][j], 2)}]",
                   _fmt(cp["pvalue"][j], 4)] for j, name in enumerate(t["criteria"])]
        header = ["criterion"] + [f"pos {p}" for p in range(k)] + ["spread (points)", f"p ({cp['test']})"]
        lines += _table(header, rows) + [""]
    if result.get("alignment"):
        lines += ["## Human alignment", ""]
        for name, al in result["alignment"].items():
            if al is None:
                continue
            lines += [f"### {name} ({al['n_items']} items)", ""]
            rows = []
            for strat, cors in al["item"].items():
                rows.append([strat] + [_ci(cors[m], "statistic", "ci_low", "ci_high") for m in cors]
                            + [_ci(al["grouped"][strat], "statistic", "ci_low", "ci_high")
                               if strat in al["grouped"] else "—"])
            if al.get("pride"):
                pc = al["pride"]["correlation"]
                rows.append(["pride (held-out items)"]
                            + [_ci(pc[m], "statistic", "ci_low", "ci_high") for m in pc] + ["—"])
            lines += _table(["strategy", "pearson", "spearman", "kendall", "per-group mean"], rows)
            for key, cmp in al["compare"].items():
                lines += ["", f"{key}: Δr = {_ci(cmp, 'statistic', 'ci_low', 'ci_high')}, "
                              f"paired bootstrap p = {_fmt(cmp['pvalue'], 4)}."]
            lines.append("")
    if result.get("budget"):
        lines += ["## Budget curves", ""]
        for name, b in result["budget"].items():
            if b is None:
                continue
            strats = list(b["curves"])
            rows = [[str(k)] + [_fmt(b["curves"][s][j]) for s in strats]
                    + [_fmt(b["gain"][s]["fraction"][j], 2) for s in strats] for j, k in enumerate(b["ks"])]
            lines += [f"### {name} ({b['method']})", ""]
            lines += _table(["K"] + [f"r {s}" for s in strats] + [f"gain {s}" for s in strats], rows) + [""]
            lines += [f"- {note}" for note in b.get("notes") or []]
            if b.get("variance_share") is not None:
                lines += [f"- RANDOM reaches {b['variance_share']:.0%} of BALANCED's gain over FIXED at "
                          f"K={b['ks'][-1]}."]
            lines.append("")
    if result.get("rank_stability"):
        lines += ["## Rank stability", ""]
        rows = []
        for name, r in result["rank_stability"].items():
            if r is None:
                continue
            s = r["stability"]
            rows.append([name, _ci(s, "kendall_tau", "kendall_tau_ci_low", "kendall_tau_ci_high"),
                         _ci(s, "flip_rate", "flip_rate_ci_low", "flip_rate_ci_high"),
                         _fmt(s["flip_rate_vs_canonical"]), str(s["n_groups_used"])])
        header = ["criterion", "Kendall tau", "top-1 flip rate", "flip vs canonical", "groups"]
        lines += _table(header, rows) + [""]
    if result.get("skipped"):
        lines += ["## Skipped", ""] + [f"- {k}: {v}" for k, v in result["skipped"].items()] + [""]
    if result.get("warnings"):
        lines += ["## Warnings", ""] + [f"- {w}" for w in result["warnings"]] + [""]
    return "\n".join(lines)
