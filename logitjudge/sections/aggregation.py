"""Aggregation strategies per criterion: the mean item score under FIXED (one canonical prompt), RANDOM (one
random ordering) and BALANCED (the mean over the balanced orderings), and how far FIXED moves the items."""

from __future__ import annotations

import numpy as np

from ._base import Context, Section
from ._format import fmt, md_table


class Aggregation(Section):
    name = "aggregation"
    title = "Aggregation strategies"
    CAPTION = ("Mean item score per ordering strategy and the mean absolute change of an item's score between "
               "FIXED and the debiased reference (BALANCED, or the mean over all orderings). Scores use the {reading}.")

    def compute(self, ctx: Context, c: int | None = None) -> dict:
        scores = ctx.strategy_scores(c)
        fixed, ref = scores["fixed"], scores.get("balanced", scores.get("all_orderings"))
        return {"mean_score": {k: float(v.mean()) for k, v in scores.items()},
                "mean_abs_shift_fixed_vs_debiased": float(np.abs(fixed - ref).mean()),
                "reference": "balanced" if "balanced" in scores else "all_orderings"}

    def tables(self, res: dict, analysis: dict) -> list[str]:
        strategies = list(dict.fromkeys(s for a in res.values() for s in a["mean_score"]))
        rows = [[name] + [fmt(a["mean_score"].get(s)) for s in strategies]
                + [f"{fmt(a['mean_abs_shift_fixed_vs_debiased'])} (vs {a['reference']})"]
                for name, a in res.items()]
        return md_table(["criterion"] + [f"mean {s}" for s in strategies] + ["mean shift FIXED vs debiased"], rows)

    def summary(self, analysis: dict) -> list[str]:
        return [f"{c}: FIXED moves an item's score by {fmt(a['mean_abs_shift_fixed_vs_debiased'])} points on "
                f"average against {a['reference']}" for c, a in self.results(analysis).items()]


AGGREGATION = Aggregation()
