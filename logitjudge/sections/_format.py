"""Number formatting shared by every section's Markdown, summary lines and plot labels."""

from __future__ import annotations

# What a number of a section reads from each prompt's exact distribution over the labels.
READINGS = {
    "greedy": "the score of each prompt's most probable label (a judge that answers one label greedily, as the "
              "study's judges do)",
    "sampled": "the exact expected score of a label sampled from each prompt's distribution (a judge sampling "
               "at temperature 1; its mean answer)",
    "expected": "each prompt's probability-weighted score Σ value·p(label), as in G-Eval",
}


def reading_note(analysis: dict) -> str:
    """The reading the analysis used for scores, as a phrase for Markdown and captions."""
    reading = (analysis.get("settings") or {}).get("reading", "expected")
    return f"{reading} reading: {READINGS[reading]}" if reading in READINGS else f"{reading} reading"


def fmt(x, nd: int = 3) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x + 0.0:.{nd}f}".replace("-0." + "0" * nd, "0." + "0" * nd)  # no "-0.000"
    return str(x)


def pct(x) -> str:
    return "—" if x is None else f"{x:.0%}"


def pval(x) -> str:
    return "—" if x is None else f"{x:.3g}"


def expectation(value, se, exact, nd: int = 3) -> str:
    """A RANDOM expectation as every table prints it: 'value (exact)' or 'value ± se (MC)'."""
    return f"{fmt(value, nd)} (exact)" if exact else f"{fmt(value, nd)} ± {fmt(se, nd)} (MC SE)"


def count(x) -> str:
    """A count as a person reads it: an integer where it is whole (ties split make halves)."""
    return "—" if x is None else (str(int(round(x))) if abs(x - round(x)) < 1e-9 else f"{x:.2f}")


def plural(n: int, word: str) -> str:
    """'1 group', '2 groups'."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def ci(d: dict, key: str, lo: str, hi: str, nd: int = 3) -> str:
    """``value [low, high]`` from a result dict, or why it is undefined."""
    if d.get("defined") is False:
        return f"undefined ({d.get('reason')})"
    return f"{fmt(d.get(key), nd)} [{fmt(d.get(lo), nd)}, {fmt(d.get(hi), nd)}]"


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    head = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return head + ["| " + " | ".join(r) + " |" for r in rows]
