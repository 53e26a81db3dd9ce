"""PNG plots of an analysis dict (:func:`logitjudge.analysis.analyze`): one per section of
:data:`logitjudge.sections.SECTIONS` that draws one (``section.plot``), each on matplotlib's Agg canvas."""

from __future__ import annotations

from pathlib import Path

from ..sections import SECTIONS

# the plots of a report on each kind of table (a section draws for the paradigms it reads)
PARADIGM_PLOTS = {p: tuple(s.name for s in SECTIONS if s.plot is not None and p in s.paradigms)
                  for p in ("pointwise", "pairwise", "listwise")}
PLOTS = PARADIGM_PLOTS["pointwise"]  # a rubric report's


def skip_reason(result: dict, section: str) -> str:
    """The reason the analysis recorded for a skipped section (or for each of its criteria)."""
    skipped = result.get("skipped") or {}
    if section in skipped:
        return skipped[section]
    parts = [f"{k[len(section) + 1:]}: {v}" for k, v in skipped.items() if k.startswith(section + ".")]
    return "; ".join(parts) or "the analysis has no results for this section"


def make_plots(result: dict, folder) -> dict:
    """Every plot the analysis supports as ``folder/<name>.png``: ``{name: Path | reason it was skipped}``."""
    folder = Path(folder)
    out: dict = {}
    paradigm = result["table"].get("paradigm", "pointwise")
    for s in SECTIONS:
        if s.plot is None or paradigm not in s.paradigms:  # the sections of the table's paradigm draw
            continue
        path = folder / f"{s.name}.png"
        drawn = s.plot(result, path)
        if drawn is None:
            if path.exists():
                path.unlink()  # a stale plot from an earlier run would contradict the report
            drawn = skip_reason(result, s.name)
        out[s.name] = drawn
    return out
