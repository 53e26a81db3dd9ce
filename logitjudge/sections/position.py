"""Position preference per criterion: the mean probability of each position, the chi-square test on the
positions each prompt chooses (the answered label: greedy, or one seeded sampling run under the sampled reading),
the log-linear position effect and the PriDe prior."""

from __future__ import annotations

import numpy as np

from .. import stats as st
from ..stats._result import FIXED, StatsError
from . import _plot
from ._base import Context, Partial, Section
from ._format import ci, count, fmt, md_table, plural, pval, reading_note


def _part(parts: dict, skipped: dict, key: str, fn, *args, **kw) -> None:
    """``parts[key] = fn(...)``; a StatsError leaves it None with the reason in ``skipped[key]``."""
    try:
        parts[key] = fn(*args, **kw)
    except StatsError as e:
        parts[key], skipped[key] = None, str(e)


# How a direction label reads in a sentence ("first-position bias", "a U-shaped bias towards both ends", ...).
LABEL_PHRASES = {"first": "first-position bias", "last": "last-position bias", "middle": "middle-position bias",
                 "edges": "U-shaped position bias (both the first and the last positions favoured)",
                 "mixed": "position bias towards positions that are neither one end nor one block"}


def chi_reading(reading: str) -> str:
    """The reading of the chi-square test: it needs an answered label, so 'expected' tests the greedy answers."""
    return "greedy" if reading == "expected" else reading


def _counts(chi: dict) -> str:
    favoured = list(chi.get("favoured") or [])
    fav = ""
    if favoured:
        fav = f"; favoured position{'s' if len(favoured) > 1 else ''} {', '.join(str(p) for p in favoured)}"
    counts = "[" + ", ".join(count(x) for x in chi["counts"]) + "]"
    items = f" from {plural(chi['n_items'], 'item')}" if chi.get("n_items") else ""
    return f"counts by position {counts} of N = {count(chi['n'])} prompts{items}{fav}"


def _test(chi: dict) -> str:
    """The test a verdict rests on: its p-value with items as clusters and the design effect."""
    deff = chi.get("design_effect")
    alike = " (every item's answers fall alike: no between-item variation)" if deff == 0 else ""
    return (f"p = {pval(chi['pvalue'])}, χ² with items as clusters (Rao-Scott), design effect "
            f"{fmt(deff, 2)}{alike}")


def _v(chi: dict, nd: int = 2, more: str = "") -> str:
    """Cramér's V (bias-corrected) with its bootstrap CI over items and ``more`` in its parenthesis; printed
    only beside its test."""
    v = f"Cramér's V {ci(chi, 'cramers_v', 'cramers_v_ci_low', 'cramers_v_ci_high', nd)} (bias-corrected"
    lo, hi = chi.get("cramers_v_ci_low"), chi.get("cramers_v_ci_high")
    if lo is not None and lo == hi:  # every bootstrap resample alike: the items chose the same positions
        v += "; no spread: every item chose alike, so the interval has no width"
    return v + (f"; {more}" if more else "") + ")"


def _criterion_verdict(name: str, chi: dict | None, reason: str | None) -> str:
    if chi is None:
        return f"{name}: position bias not tested ({reason})"
    v = _v(chi, more=f"{chi['reading']} answers; {_counts(chi)}")
    if chi["label"] != "none":
        return f"{name}: {LABEL_PHRASES.get(chi['label'], chi['label'] + ' position bias')} ({_test(chi)}), {v}"
    if chi["pvalue"] is not None and chi["pvalue"] < chi["alpha"]:
        return f"{name}: position preference without a clear favourite ({_test(chi)}), {v}"
    return f"{name}: no significant position bias ({_test(chi)}), {v}"


def _cell(d: dict | None, key: str, lo: str, hi: str, p: int) -> str:
    return f"{fmt(d[key][p])} [{fmt(d[lo][p])}, {fmt(d[hi][p])}]" if d else "—"


class Position(Section):
    name = "position"
    title = "Position preference"
    CAPTION = ("Mean probability of the option shown at each position (bars, 95% bootstrap CIs over items), read "
               "from the exact label distributions; the dashed line is the uniform share 1/n. Every option "
               "visits every position in a balanced design, so a tilt here is position bias, not content. The "
               "panel title's direction, p-value (χ² with items as clusters, Rao-Scott) and bias-corrected "
               "Cramér's V come from the test on the answered positions ({chi}). Positions are numbered 1..n.")
    NOTE = ("Positions are numbered 1..n. Mean probability: the exact label distributions. Answer share, the "
            "test and Cramér's V: {chi}. The test takes items as the unit (Rao-Scott's correction of Pearson's "
            "χ², items as clusters); the design effect is how many times the pooled shares vary more than "
            "independent prompts' (below 1 in balanced designs, whose rotations even out an item's answers). "
            "Log-odds: "
            "the exact log-probabilities (log-linear position-effect model). Scores elsewhere use the {reading}.")

    def _fill(self, text: str, analysis: dict) -> str:
        r = chi_reading((analysis.get("settings") or {}).get("reading", "expected"))
        chi = ("the greedy reading, each prompt's most probable position (exact ties split)" if r == "greedy" else
               "the sampled reading, one seeded run of a judge sampling at T=1 (each prompt's answer drawn)")
        return text.format(chi=chi, reading=reading_note(analysis))

    def caption(self, analysis: dict) -> str:
        return self._fill(self.CAPTION, analysis)

    def markdown(self, analysis: dict) -> str:
        res = self.results(analysis)
        if not res:
            return ""
        head = [f"## {self.title}", "", self._fill(self.NOTE, analysis), ""]
        return "\n".join(head + self.tables(res, analysis)).rstrip()

    def compute(self, ctx: Context, c: int | None = None) -> Partial:
        t, n_boot, rng = ctx.table, ctx.n_boot, ctx.rng
        probs = t.probs[:, c]
        pbp = st.probs_by_position(probs, t.option_orders)
        parts, skipped = {}, {}
        _part(parts, skipped, "distribution", st.position_distribution, pbp, n_boot=n_boot, rng=rng)
        if ctx.design == FIXED:
            parts["chi_square"] = None
            skipped["chi_square"] = ("FIXED design: position is confounded with content; score under balanced "
                                     "orderings to test position bias")
        else:
            _part(parts, skipped, "chi_square", st.position_chisquare, pbp, t.option_orders, n_boot=n_boot,
                  reading=chi_reading(ctx.reading), rng=rng)
        _part(parts, skipped, "effect", st.fit_position_effect, probs, t.option_orders, n_boot=n_boot, rng=rng)
        bal = ctx.balanced_part()
        if bal is not None:  # a balanced table, or the balanced rotations inside all / balanced+random
            _part(parts, skipped, "pride_prior", st.pride_prior, np.log(np.maximum(pbp[:, bal[0]], 1e-12)),
                  option_orders=bal[1])
        else:
            parts["pride_prior"] = None
            skipped["pride_prior"] = ("the PriDe closed form needs balanced orderings (score with balanced, all "
                                      "or balanced+random:R)")
        return Partial(parts, skipped)

    def verdict(self, analysis: dict) -> list[str]:
        skipped, pos = analysis.get("skipped") or {}, analysis.get("position") or {}
        out = []
        for name in analysis["table"]["criteria"]:
            chi = (pos.get(name) or {}).get("chi_square")
            why = skipped.get(f"position.{name}.chi_square") or skipped.get(f"position.{name}")
            out.append(_criterion_verdict(name, chi, why))
        return [v.split(": ", 1)[1] for v in out] if len(out) == 1 else out

    def tables(self, res: dict, analysis: dict) -> list[str]:
        lines = []
        for name, pos in res.items():
            dist, chi, eff = pos.get("distribution"), pos.get("chi_square"), pos.get("effect")
            rows = [[str(p + 1), _cell(dist, "distribution", "ci_low", "ci_high", p),
                     _cell(chi, "shares", "share_ci_low", "share_ci_high", p),
                     _cell(eff, "log_odds", "log_odds_ci_low", "log_odds_ci_high", p)]
                    for p in range(analysis["table"]["n_options"])]
            lines += [f"### {name}", ""]
            lines += md_table(["position", "mean probability", "answer share", "log-odds vs other positions"],
                              rows)
            if chi:
                lines += ["", f"Position test ({chi['reading']} answers, {chi['design']} design): "
                              f"{_test(chi)}; Pearson χ² = {fmt(chi['statistic'], 2)} on {chi['dof']} dof, "
                              f"Rao-Scott second-order χ² = {fmt(chi.get('statistic_corrected'), 2)} on "
                              f"d = {fmt(chi.get('dof_corrected'), 2)} dof, p from F(d, d (C - 1)) with C = "
                              f"{chi.get('n_items')} items; the per-prompt p = "
                              f"{pval(chi.get('pvalue_per_prompt'))} treats an item's prompts as independent and "
                              f"is shown for comparison only; {_counts(chi)}; "
                              f"{_v(chi, 3, more='uncorrected ' + fmt(chi.get('cramers_v_raw')))}; "
                              f"label: {chi['label']} ({chi['label_reason']})."]
            lines.append("")
        return lines

    def summary(self, analysis: dict) -> list[str]:
        out = []
        for c, pos in self.results(analysis).items():
            chi = pos.get("chi_square")
            if chi:
                out.append(f"{c}: {_test(chi)}; {_v(chi, more=chi['reading'] + ' answers')}, direction: "
                           f"{chi['label']}")
        return out

    def plot(self, analysis: dict, path):
        """Mean probability of each position per criterion with CIs and the uniform line; the panel title
        gives the chi-square label and Cramér's V."""
        data = {k: v for k, v in self.results(analysis).items() if v.get("distribution")}
        if not data:
            return None
        fig, axes = _plot.grid(len(data))
        for ax, (name, pos) in zip(axes, data.items()):
            d = pos["distribution"]
            mid = _plot.arr(d["distribution"])
            x = np.arange(1, len(mid) + 1)
            ax.bar(x, mid, color="#4c72b0", yerr=_plot.yerr(d["distribution"], d["ci_low"], d["ci_high"]),
                   capsize=3)
            ax.axhline(_plot.num(d["uniform"]), color="black", linestyle="--", linewidth=1, label="uniform")
            ax.set_xticks(x)
            ax.set_xlabel("position of the option in the prompt")
            ax.set_ylabel("mean probability")
            chi, sub = pos.get("chi_square"), ""
            if chi:
                v, p = chi.get("cramers_v"), chi.get("pvalue")
                label = chi["label"] if chi["label"] != "none" else "no clear favourite"
                sub = f"\n{label}; p = {pval(p)}" + (f", V = {v:.2f}" if v is not None else "")
            ax.set_title(f"{name}{sub}", fontsize=10)
            ax.legend(fontsize=8, loc="upper right")
        return _plot.save(fig, path)


POSITION = Position()
