"""One ``/v1/judge`` answer from a request's own score table: per item the order-averaged distribution, the
expected and the PriDe-debiased scores, the hold probability of its top label, its label mass (and each order's
distribution on request), and the run's bias summary, each number naming its reading.

Everything is read from what the project already computes: :func:`logitjudge.api.analyze` (the position test,
the PriDe scores of ``Report.scores``) and :func:`logitjudge.stats.hold.hold_probability`; nothing here is a second
estimator. The table is the request's alone (split from a merged run), so its statistics are those of ``lj.score``
on the request's items and orders.
"""

from __future__ import annotations

import numpy as np

from ..stats import hold as hd
from ..stats._result import StatsError

READINGS = {
    "distribution": "the label probabilities averaged over the request's orders (canonical option order; each "
                    "order's probabilities renormalised over the labels, as the score table stores them)",
    "expected": "expected score: sum over options of value x order-averaged probability (the mean over the "
                "orders of each order's expected score)",
    "debiased": "PriDe: the canonical order's distribution with the position prior of the request's balanced "
                "rotations divided out, read as an expected score (null where the orders hold no balanced "
                "rotations or no canonical order)",
    "hold": "the probability that one order drawn uniformly from the request's orders answers the top label "
            "(greedy reading: that order's most probable label equals the order-averaged top label; exact)",
    "label_mass": "the judge's total next-token probability on the rubric's labels, mean over the orders",
    "bias": "position test with items as the unit (Rao-Scott χ², items as clusters) on each prompt's greedy "
            "answer, bias-corrected Cramér's V, favoured positions numbered from 1",
}


def _hold(rows: np.ndarray) -> float | None:
    """P(one random order's greedy label == the averaged top label) on ``rows[order, option]``."""
    if rows.shape[1] < 2:
        return None
    try:
        return float(hd.hold_probability(rows, ks=[1], design="shared", method="exact").hold[0])
    except StatsError:
        return None


def _labels_by_position(order, labels: list[str]) -> list[str]:
    return [labels[int(o)] for o in order]


def _criterion_answer(table, i: int, c: int, pride, per_order: bool) -> dict:
    probs = table.probs[i, c]  # [orders, options], canonical option order
    labels, values = [o for o in table.option_labels()[c]], table.values[c]
    mean = probs.mean(axis=0)
    top = int(np.argmax(mean))
    out = {"criterion": table.criteria[c], "labels": labels, "values": values.tolist(),
           "distribution": mean.tolist(), "expected": float(mean @ values),
           "debiased": None if pride is None or np.isnan(pride) else float(pride),
           "top_label": labels[top], "hold": _hold(probs),
           "label_mass": float(table.label_mass[i, c].mean())}
    if per_order:
        orders = table.item_option_orders()[i]
        out["orders"] = [{"labels_by_position": _labels_by_position(orders[k], labels),
                          "distribution": probs[k].tolist(), "expected": float(probs[k] @ values),
                          "label_mass": float(table.label_mass[i, c, k])} for k in range(len(orders))]
    return out


def bias_summary(report) -> dict:
    """Per criterion: the position test of ``lj.analyze`` (or why it was not run)."""
    res, skipped = report.results, report.results.get("skipped") or {}
    out = {}
    for name in res["table"]["criteria"]:
        chi = ((res.get("position") or {}).get(name) or {}).get("chi_square")
        if chi is None:
            why = skipped.get(f"position.{name}.chi_square") or skipped.get(f"position.{name}") or "not run"
            out[name] = {"tested": False, "reason": why}
            continue
        out[name] = {"tested": True, "reading": f"{chi['reading']} answers (each prompt's most probable position)",
                     "test": chi["test"], "p_value": chi["pvalue"], "statistic": chi["statistic_corrected"],
                     "dof": chi["dof_corrected"], "design_effect": chi["design_effect"],
                     "cramers_v": chi["cramers_v"], "cramers_v_ci": [chi.get("cramers_v_ci_low"),
                                                                     chi.get("cramers_v_ci_high")],
                     "cramers_v_reading": "bias-corrected Cramér's V of the answered positions",
                     "answer_share_by_position": chi["shares"], "favoured_positions": list(chi["favoured"]),
                     "direction": chi["label"], "direction_reason": chi["label_reason"],
                     "n_items": chi["n_items"], "n_prompts": chi["n"]}
    return out


def judge_answer(table, report, *, per_order: bool, model: str, orderings: str, table_path=None) -> dict:
    """The JSON answer of one request (module doc)."""
    scores = report.scores
    pride = {} if "pride" not in scores else {(r.item_id, r.criterion): r.pride for r in scores.itertuples()}
    groups = table.item_groups
    items = []
    for i, item_id in enumerate(table.item_ids):
        crits = [_criterion_answer(table, i, c, pride.get((item_id, name)), per_order)
                 for c, name in enumerate(table.criteria)]
        items.append({"id": str(item_id), "group": None if groups is None or not groups[i] else str(groups[i]),
                      "criteria": crits})
    i, c, k, n = table.shape
    return {"model": model, "orderings": orderings, "n_items": i, "n_orders": k, "n_options": n,
            "items": items, "bias": bias_summary(report), "readings": READINGS,
            "table": None if table_path is None else str(table_path)}
