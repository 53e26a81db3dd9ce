"""The report of an analysis: ``report.md``, a self-contained ``report.html`` (plots as base64 data URIs,
inline CSS, no external resources, all text escaped) and ``results.json`` (every number shown).

Both documents are rendered from one list of blocks, so they show the same things in the same order: the
verdict first, the setup, then for each section of :data:`logitjudge.sections.SECTIONS` its plot, caption and
headline numbers (or the reason the analysis skipped it), then the full tables of
:func:`logitjudge.sections.format_markdown`.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from ..sections import SECTIONS, format_markdown
from ..sections.paradigms import paradigm_shape
from ..stats._result import jsonable
from .plots import make_plots, skip_reason


def _setup(result: dict, spec: dict | None, meta: dict | None, data: dict | None) -> list[str]:
    t, spec, meta, data = result["table"], spec or {}, meta or {}, data or {}
    lines = []
    if meta.get("model_id"):
        lines.append(f"Judge: {meta['model_id']} ({meta.get('dtype', '?')}, {meta.get('device', '?')})")
    if data:
        g = data.get("n_groups", 0)
        lines.append(f"Data: {data.get('name')}: {data.get('n_items', t['n_items'])} items in {g} "
                     f"group{'' if g == 1 else 's'}; criteria {', '.join(t['criteria'])}")
    tmpl = (meta.get("template") or {}).get("name")
    orders = (spec.get("orderings") or {}).get("options")
    if t.get("paradigm", "pointwise") != "pointwise":  # pairs or lists of candidates
        lines.append(f"Prompts: {paradigm_shape(t)}" + (f" Template {tmpl}." if tmpl else ""))
    else:
        lines.append(f"Prompts: {t['n_orderings']} orderings of {t['n_options']} options per criterion "
                     f"({t['design']} design{', ' + orders if orders and orders != t['design'] else ''})"
                     + (f", template {tmpl}" if tmpl else "")
                     + (", criterion order varied" if t.get("criterion_order_varies") else ""))
    secs = (meta.get("timings") or {}).get("score_seconds")
    toks = (meta.get("engine_stats") or {}).get("tokens")
    if secs is not None:
        lines.append(f"Scoring: {secs:.1f} s" + (f", {toks} tokens through the model" if toks else ""))
    s = result.get("settings", {})
    lines.append(f"Analysis: {s.get('n_boot')} bootstrap resamples, {s.get('method')} correlation, "
                 f"{s.get('reading', 'expected')} reading of scores, seed {s.get('rng')}")
    return lines


def _section_blocks(sec, result: dict, plot) -> list:
    """A section's heading, then its plot, caption and headline numbers, or the reason it was skipped."""
    lines = sec.summary(result)
    if isinstance(plot, str) or not (lines or plot):
        why = plot if isinstance(plot, str) else skip_reason(result, sec.name)
        return [("h2", sec.title), ("skip", f"Skipped: {why}")]
    blocks = [("h2", sec.title)] + ([("img", plot, sec.title)] if isinstance(plot, Path) else [])
    blocks += [("p", sec.caption(result))] + ([("ul", lines)] if lines else [])
    partial = [f"{k}: {v}" for k, v in (result.get("skipped") or {}).items() if k.startswith(sec.name + ".")]
    if partial:
        blocks.append(("skip", "Skipped for some criteria: " + "; ".join(partial)))
    return blocks


def build_blocks(result: dict, plots: dict, *, spec=None, table_meta=None, data_info=None, title=None) -> list:
    """The report as blocks: ("h1"|"h2"|"p"|"verdict"|"skip", text), ("ul", [lines]), ("img", path, alt),
    ("md", markdown)."""
    blocks: list = [("h1", f"{title or 'logitjudge'}: position-bias report"), ("verdict", result["verdict"]),
                    ("ul", _setup(result, spec, table_meta, data_info))]
    paradigm = result["table"].get("paradigm", "pointwise")
    for sec in SECTIONS:
        if paradigm in sec.paradigms:  # the sections of the table's paradigm
            blocks += _section_blocks(sec, result, plots.get(sec.name))
    body = format_markdown(result).split("\n", 1)[1].lstrip("\n")  # without the verdict line
    blocks += [("h2", "Tables"), ("md", "\n".join("#" + ln if ln.startswith("#") else ln
                                                  for ln in body.splitlines()))]
    return blocks


# ---- Markdown ----------------------------------------------------------------------------------------------
def render_markdown(blocks: list, folder: Path) -> str:
    out = []
    for b in blocks:
        kind = b[0]
        if kind == "h1":
            out.append(f"# {b[1]}")
        elif kind == "h2":
            out.append(f"## {b[1]}")
        elif kind == "verdict":
            out.append(f"**Verdict:** {b[1]}")
        elif kind == "ul":
            out.append("\n".join(f"- {x}" for x in b[1]))
        elif kind == "img":
            out.append(f"![{b[2]}]({Path(b[1]).relative_to(folder).as_posix()})")
        elif kind == "skip":
            out.append(f"_{b[1]}_")
        else:
            out.append(b[1])
        out.append("")
    return "\n".join(out).rstrip() + "\n"


# ---- HTML --------------------------------------------------------------------------------------------------
CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 1100px;
       margin: 2em auto; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: 0.3em; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.8em; }
.verdict { font-size: 1.15em; background: #fff6e0; border-left: 5px solid #e0a000; padding: 0.7em 1em; }
.skip { color: #666; font-style: italic; background: #f4f4f4; padding: 0.5em 0.8em; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f0f0f0; }
"""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def markdown_to_html(md: str) -> str:
    """The Markdown subset of ``format_markdown`` (headings, pipe tables, bullets, paragraphs), escaped."""
    out, lines, i = [], md.splitlines(), 0
    while i < len(lines):
        ln = lines[i]
        if not ln.strip():
            i += 1
        elif ln.startswith("#"):
            level = min(len(ln) - len(ln.lstrip("#")), 6)
            out.append(f"<h{level}>{_e(ln[level:].strip())}</h{level}>")
            i += 1
        elif ln.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            body = [r for r in rows[1:] if not all(set(c) <= {"-", ":"} for c in r)]
            out.append("<table><thead><tr>" + "".join(f"<th>{_e(c)}</th>" for c in rows[0]) + "</tr></thead>"
                       "<tbody>" + "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>"
                                           for r in body) + "</tbody></table>")
        elif ln.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{_e(lines[i][2:])}</li>")
                i += 1
            out.append("<ul>" + "".join(items) + "</ul>")
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not lines[i].startswith(("#", "|", "- ")):
                para.append(lines[i])
                i += 1
            out.append(f"<p>{_e(' '.join(para))}</p>")
    return "\n".join(out)


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def render_html(blocks: list) -> str:
    title = next((b[1] for b in blocks if b[0] == "h1"), "logitjudge report")
    parts = []
    for b in blocks:
        kind = b[0]
        if kind in ("h1", "h2"):
            parts.append(f"<{kind}>{_e(b[1])}</{kind}>")
        elif kind == "verdict":
            parts.append(f'<p class="verdict" id="verdict"><strong>Verdict:</strong> {_e(b[1])}</p>')
        elif kind == "ul":
            parts.append("<ul>" + "".join(f"<li>{_e(x)}</li>" for x in b[1]) + "</ul>")
        elif kind == "img":
            parts.append(f'<img src="{_data_uri(b[1])}" alt="{_e(b[2])}">')
        elif kind == "skip":
            parts.append(f'<p class="skip">{_e(b[1])}</p>')
        elif kind == "p":
            parts.append(f"<p>{_e(b[1])}</p>")
        else:
            parts.append(markdown_to_html(b[1]))
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{_e(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
            + "\n".join(parts) + "\n</body>\n</html>\n")


# ---- the folder --------------------------------------------------------------------------------------------
def write_report(out, result: dict, *, spec: dict | None = None, table_meta: dict | None = None,
                 data_info: dict | None = None, title: str | None = None) -> dict:
    """Write ``results.json``, ``plots/*.png``, ``report.md`` and ``report.html`` into ``out``.

    Returns ``{"folder", "results", "markdown", "html", "plots": {name: Path | reason}}``.
    """
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    plots = make_plots(result, folder / "plots")
    record = {"name": title, "verdict": result["verdict"], "analysis": result, "spec": spec,
              "table_meta": table_meta, "data": data_info,
              "plots": {k: (Path(v).relative_to(folder).as_posix() if isinstance(v, Path) else None)
                        for k, v in plots.items()},
              "plots_skipped": {k: v for k, v in plots.items() if not isinstance(v, Path)}}
    paths = {"folder": folder, "results": folder / "results.json", "markdown": folder / "report.md",
             "html": folder / "report.html", "plots": plots}
    paths["results"].write_text(json.dumps(jsonable(record), indent=2, ensure_ascii=False, allow_nan=False)
                                + "\n", encoding="utf-8")
    blocks = build_blocks(result, plots, spec=spec, table_meta=table_meta, data_info=data_info, title=title)
    paths["markdown"].write_text(render_markdown(blocks, folder), encoding="utf-8")
    paths["html"].write_text(render_html(blocks), encoding="utf-8")
    return paths
