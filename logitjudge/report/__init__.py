"""Reports of an analysis: PNG plots, Markdown, a self-contained HTML page and results.json."""

from .plots import PLOTS, make_plots, skip_reason
from .render import build_blocks, markdown_to_html, render_html, render_markdown, write_report

__all__ = ["PLOTS", "build_blocks", "make_plots", "markdown_to_html", "render_html", "render_markdown",
           "skip_reason", "write_report"]
