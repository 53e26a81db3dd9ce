"""Criterion-position effect: with several criteria in one prompt and their order permuted, how much each
criterion's score moves with the position it is asked at."""

from __future__ import annotations

import numpy as np

from .. import stats as st
from . import _plot
from ._base import Context, Section
from ._format import fmt, md_table


def _get(cp: dict, key: str, j: int):
    v = cp.get(key)
    return None if v is None else v[j]


def _null(cp: dict, j: int) -> str:
    """The permutation-null spread of criterion ``j``: its mean [high quantile]."""
    return f"{fmt(_get(cp, 'null_spread_mean', j), 2)} [{fmt(_get(cp, 'null_spread_high', j), 2)}]"


class CriterionPosition(Section):
    name = "criterion_position"
    title = "Criterion-position effect"
    CAPTION = ("Mean score of each criterion at each position in the multi-criteria prompt, minus the "
               "criterion's mean over positions (points). Scores use the {reading}.")
    NOTE = ("Scores use the {reading}. Max - min over noisy position means is positive even without an effect: "
            "the permutation null (orderings shuffled within every item) gives the spread noise alone produces; "
            "read the excess over its mean, and a spread below its 95% quantile as noise.")
    per_criterion = False

    def requires(self, ctx: Context) -> str | None:
        if len(ctx.criteria) < 2:
            return "a single criterion: no criterion order to vary"
        if not np.any(ctx.table.criterion_orders != ctx.table.criterion_orders[0]):
            return "the criterion order never varies across orderings"
        return None

    def compute(self, ctx: Context, c: int | None = None):
        scores = np.stack([ctx.prompt_scores(j) for j in range(len(ctx.criteria))], axis=1)  # [I, C, K]
        return st.criterion_position_effect(scores, ctx.table.criterion_orders, n_boot=ctx.n_boot,
                                            n_perm=max(100, min(ctx.n_boot, 1000)), reading=ctx.reading,
                                            rng=ctx.rng)

    def tables(self, cp: dict, analysis: dict) -> list[str]:
        k = len(cp["matrix"][0])
        rows = [[name] + [fmt(x, 2) for x in cp["matrix"][j]]
                + [f"{fmt(cp['spread'][j], 2)} [{fmt(cp['spread_ci_low'][j], 2)}, "
                   f"{fmt(cp['spread_ci_high'][j], 2)}]", _null(cp, j), fmt(_get(cp, "excess_spread", j), 2),
                   fmt(cp["pvalue"][j], 4)]
                for j, name in enumerate(analysis["table"]["criteria"])]
        header = (["criterion"] + [f"position {p + 1}" for p in range(k)]
                  + ["spread (points)", "null spread mean [95% q]", "excess", f"p ({cp['test']})"])
        return md_table(header, rows) + ["", f"- Permutation null: {cp.get('n_perm')} within-item shuffles."]

    def summary(self, analysis: dict) -> list[str]:
        cp = self.results(analysis)
        if not cp:
            return []
        return [f"{c}: spread {fmt(s, 2)} [{fmt(lo, 2)}, {fmt(hi, 2)}] points (noise alone: {_null(cp, j)})"
                for j, (c, s, lo, hi) in enumerate(zip(analysis["table"]["criteria"], cp["spread"],
                                                       cp["spread_ci_low"], cp["spread_ci_high"]))]

    def plot(self, analysis: dict, path):
        """Heatmap: each criterion's mean score at each criterion position minus its mean over positions."""
        cp = self.results(analysis)
        if not cp:
            return None
        m = np.asarray([[_plot.num(x) for x in row] for row in cp["matrix"]])
        with np.errstate(invalid="ignore"):
            rows_ok = np.isfinite(m).any(axis=1)
            shift = m - np.where(rows_ok, np.nanmean(np.where(np.isfinite(m), m, np.nan), axis=1), 0)[:, None]
        fig = _plot.figure(max(6.0, 1.2 * m.shape[1] + 3.5), max(4.0, 0.5 * m.shape[0] + 2.0))
        ax = fig.add_subplot()
        vmax = float(np.nanmax(np.abs(shift))) if np.isfinite(shift).any() else 1.0
        vmax = vmax if vmax > 0 else 1.0
        im = ax.imshow(np.ma.masked_invalid(shift), cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto")
        for (i, j), v in np.ndenumerate(shift):
            dark = np.isfinite(v) and abs(v) > 0.6 * vmax
            ax.text(j, i, "—" if not np.isfinite(v) else f"{v:+.2f}", ha="center", va="center", fontsize=9,
                    color="white" if dark else "black")
        ax.set_xticks(range(m.shape[1]), [str(p + 1) for p in range(m.shape[1])])
        ax.set_yticks(range(m.shape[0]), analysis["table"]["criteria"])
        ax.set_xlabel("position of the criterion in the prompt")
        spread = _plot.arr(cp["spread"])
        top = np.nanmax(spread) if np.isfinite(spread).any() else float("nan")
        ax.set_title(f"Score shift by criterion position (largest spread {top:.2f} points)", fontsize=10)
        fig.colorbar(im, ax=ax, label="points vs the criterion's mean")
        return _plot.save(fig, path)


CRITERION_POSITION = CriterionPosition()
