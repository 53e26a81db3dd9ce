"""Aggregation strategies per criterion: the mean item score under FIXED (one canonical prompt), RANDOM (the
exact expectation over uniformly drawn orders) and BALANCED (the mean over the 2n balanced rotations), and how
far FIXED moves the items."""

from __future__ import annotations

import numpy as np

from ._base import Context, Section
from ._format import fmt, md_table


class Aggregation(Section):
    name = "aggregation"
    title = "Aggregation strategies"
    CAPTION = ("Mean item score per ordering strategy (RANDOM: the exact expectation over uniformly drawn "
               "orders) and the mean absolute change of an item's score between FIXED and the debiased reference "
               "(BALANCED, or RANDOM's expectation without balanced rows). Scores use the {reading}.")
    NOTE = ("Scores use the {reading}. RANDOM is the exact expectation of an item's score over orders drawn "
            "uniformly from its RANDOM pool (closed form, the same for every K: no Monte-Carlo error).")

    def compute(self, ctx: Context, c: int | None = None) -> dict:
        scores = ctx.strategy_scores(c)
        ref = "balanced" if "balanced" in scores else "random"
        shift = float(np.abs(scores["fixed"] - scores[ref]).mean()) if "fixed" in scores else None
        return {"mean_score": {k: float(v.mean()) for k, v in scores.items()},
                "mean_abs_shift_fixed_vs_debiased": shift, "reference": ref, "notes": list(ctx.strategy_notes())}

    def tables(self, res: dict, analysis: dict) -> list[str]:
        strategies = list(dict.fromkeys(s for a in res.values() for s in a["mean_score"]))
        rows = [[name] + [fmt(a["mean_score"].get(s)) for s in strategies]
                + [f"{fmt(a['mean_abs_shift_fixed_vs_debiased'])} (vs {a['reference']})"]
                for name, a in res.items()]
        notes = list(dict.fromkeys(n for a in res.values() for n in a.get("notes") or []))
        names = {"random": "mean random (exact)"}  # an item's RANDOM score is a closed form, for every K
        return md_table(["criterion"] + [names.get(s, f"mean {s}") for s in strategies]
                        + ["mean shift FIXED vs debiased"], rows) \
            + [""] + [f"- {n}" for n in notes]

    def summary(self, analysis: dict) -> list[str]:
        return [f"{c}: FIXED moves an item's score by {fmt(a['mean_abs_shift_fixed_vs_debiased'])} points on "
                f"average against {a['reference']}" for c, a in self.results(analysis).items()
                if a["mean_abs_shift_fixed_vs_debiased"] is not None]


AGGREGATION = Aggregation()
