"""Docs that cannot drift: every shell and Python block of README.md and docs/*.md runs here (or says why not),
every relative link resolves, and the manual builds with ``mkdocs build --strict``.

The conventions (docs/contributing.md, "Documentation"): a ``bash``/``sh``/``console``/``python`` block runs unless
the line before its fence is ``<!-- not-run: REASON -->``; ``<!-- requires: MODULE -->`` runs it only where MODULE
imports (skipped with that reason elsewhere); a ``text`` block after ``<!-- output -->`` is the output of the block
before it; a ``console`` block's ``$ `` lines are commands and the lines under them their output; a ``toml`` block
whose first line names a file (``# my.toml: ...``) is written to that file. The blocks of a page run in order in
one temporary folder that links to the repository's files.

``LOGITJUDGE_DOCS_REQUIRES=MOD[,MOD]`` runs only the blocks marked ``<!-- requires: MOD -->`` with one of those
modules: `make test-integrations` runs the inspect_ai and DeepEval blocks in .venv-integrations that way (in .venv
they skip).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN_LANGS = ("bash", "sh", "console", "python")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
MARKER = re.compile(r"^\s*<!--\s*(not-run|requires|output)\s*(?::\s*(.*?))?\s*-->\s*$")
TOML_FILE = re.compile(r"^#\s*([\w.-]+\.toml)\b")
# Top-level entries a page's folder does not link to: what a run writes must land in the folder, not the repository.
NOT_LINKED = {".git", "out", "reports", "site", "build", "dist", "__pycache__", ".pytest_cache", ".ruff_cache"}
TIMEOUT_S = 300


def pages() -> list[Path]:
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md") if "_incoming" not in p.relative_to(ROOT).parts)
    return [ROOT / "README.md", *docs]


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    body: str
    marker: tuple[str, str] | None  # ("not-run", reason) | ("requires", module) | ("output", "")
    output: str | None = None  # the <!-- output --> block that follows, if any

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.lang in RUN_LANGS and (self.marker is None or self.marker[0] == "requires")


def parse(page: Path) -> list[Block]:
    """Every fenced block of ``page`` with the marker on the line before its fence; output blocks attached."""
    lines = page.read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m.group(1)), m.group(2), m.group(3)
        j = i + 1
        while j < len(lines) and not (lines[j].strip().startswith(fence) and lines[j].strip().strip(fence[0]) == ""):
            j += 1
        body = "\n".join(x[indent:] if x[:indent].strip() == "" else x for x in lines[i + 1:j])
        mk = MARKER.match(lines[i - 1]) if i else None
        marker = (mk.group(1), (mk.group(2) or "").strip()) if mk else None
        if marker and marker[0] == "output" and blocks:
            prev = blocks.pop()
            blocks.append(Block(prev.page, prev.line, prev.lang, prev.body, prev.marker, body + "\n"))
            blocks.append(Block(page, i + 1, lang, body, marker))
        else:
            blocks.append(Block(page, i + 1, lang, body, marker))
        i = j + 1
    return blocks


ALL_BLOCKS = [b for p in pages() for b in parse(p)]
RUNNABLE = [b for b in ALL_BLOCKS if b.runs or (b.lang == "toml" and TOML_FILE.match(b.body))]
if os.environ.get("LOGITJUDGE_DOCS_REQUIRES"):  # only the blocks that need these modules (module doc)
    _ONLY = set(os.environ["LOGITJUDGE_DOCS_REQUIRES"].split(","))
    RUNNABLE = [b for b in RUNNABLE if b.marker and b.marker[0] == "requires" and b.marker[1] in _ONLY]


# ---- the rules every block follows -------------------------------------------------------------------------------
def test_every_block_runs_or_says_why():
    problems = []
    for i, b in enumerate(ALL_BLOCKS):
        kind, arg = b.marker or ("", "")
        if kind == "not-run" and not arg:
            problems.append(f"{b.where}: <!-- not-run --> needs a reason: <!-- not-run: needs a GPU -->")
        if kind == "requires" and not re.fullmatch(r"[\w.]+", arg):
            problems.append(f"{b.where}: <!-- requires: MODULE --> needs a module name, got {arg!r}")
        if kind == "output":
            prev = ALL_BLOCKS[i - 1] if i else None
            if b.lang != "text" or prev is None or prev.page != b.page or prev.lang not in ("bash", "sh", "python"):
                problems.append(f"{b.where}: <!-- output --> belongs before a text block after a bash/sh/python one")
        if kind in ("not-run", "requires") and b.lang not in RUN_LANGS:
            problems.append(f"{b.where}: a {kind} marker on a {b.lang or 'plain'} block, which never runs")
    assert not problems, "\n".join(problems)
    assert sum(b.runs for b in ALL_BLOCKS) >= 10, "the doc runner found almost no runnable blocks: a parsing bug?"


def test_readme_is_a_front_page():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200, "README.md is the front page: keep it to 200 lines, the rest in docs/"
    for cmd in ("make demo", "make test"):
        assert cmd in text


def test_api_reference_names_the_top_level_api():
    """The API reference shows the short form once it exists (it lands in another branch than this page)."""
    if importlib.util.find_spec("logitjudge.api") is None:
        pytest.skip("logitjudge.api is not in this tree yet (issue 33 item 4)")
    assert "::: logitjudge.api" in (ROOT / "docs" / "api.md").read_text(encoding="utf-8")


# ---- links --------------------------------------------------------------------------------------------------------
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def slug(heading: str) -> str:
    """Python-Markdown's toc slug (what mkdocs anchors): ascii, no punctuation, lower case, dashes."""
    value = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", re.sub(r"`", "", value)).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


def anchors(page: Path) -> set[str]:
    out, fenced = set(), False
    for line in page.read_text(encoding="utf-8").split("\n"):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)):
            out.add(slug(m.group(1)))
    return out


def outside_code(text: str) -> str:
    """The text without fenced blocks and inline code spans (links there are examples, not links)."""
    text = re.sub(r"^(\s*)(`{3,}|~{3,}).*?^\1\2\s*$", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for target in LINK.findall(outside_code(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with the anchor #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}:\n" + "\n".join(broken)


# ---- the manual ---------------------------------------------------------------------------------------------------
def test_manual_builds_strict(tmp_path):
    """``make docs`` does this: any warning (a broken link or anchor, a docstring the API reference cannot read, a
    page outside the navigation) fails the build."""
    pytest.importorskip("mkdocs", reason="mkdocs is not installed: pip install -e '.[docs]' (the dev extra has it)")
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert res.returncode == 0, f"mkdocs build --strict failed:\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}"
    assert (tmp_path / "site" / "index.html").exists() and (tmp_path / "site" / "api" / "index.html").exists()


# ---- running the blocks ------------------------------------------------------------------------------------------
def expect_lines(want: str, got: str, where: str) -> None:
    """Each line shown must appear in the output, in order (``...`` inside a line matches anything, whitespace is
    normalised); the output may hold more lines (warnings, progress) than the page shows."""
    norm = [" ".join(x.split()) for x in got.splitlines()]
    pos = 0
    for line in (" ".join(x.split()) for x in want.splitlines()):
        if not line or line == "...":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in line.split("...")) + r"\Z")
        while pos < len(norm) and not pattern.match(norm[pos]):
            pos += 1
        assert pos < len(norm), f"{where}: the output has no line {line!r} (in order). The output:\n{got[-4000:]}"
        pos += 1


def console_steps(body: str) -> list[tuple[str, str]]:
    """``$ command`` lines (``\\`` continues them) with the output lines under each."""
    steps: list[tuple[str, list[str]]] = []
    cont = False
    for line in body.split("\n"):
        if cont:
            steps[-1] = (steps[-1][0] + "\n" + line, steps[-1][1])
        elif line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        else:
            raise AssertionError(f"a console block starts with output, not a '$ ' command: {line!r}")
        cont = line.endswith("\\")
    return [(cmd, "\n".join(out)) for cmd, out in steps]


def environment() -> dict:
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""), "MPLBACKEND": "Agg",
           "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", "NO_MKDOCS_2_WARNING": "1"}
    env.pop("LOGITJUDGE_FAULTS", None)
    return env


def shell(cmd: str, cwd: Path, where: str, *, python: bool = False, strict: bool = True) -> str:
    """Run a script (bash under ``set -euo pipefail`` where ``strict``, else one console command as typed)."""
    args = ([sys.executable, "-c", cmd] if python else
            ["bash", *(["-e", "-u"] if strict else []), "-o", "pipefail", "-c", cmd])
    # its own process group, so a block that times out is stopped with everything it started (torchrun's ranks)
    proc = subprocess.Popen(args, cwd=cwd, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # one stream, in the order a terminal shows it
    try:
        out = proc.communicate(timeout=TIMEOUT_S)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{where}: still running after {TIMEOUT_S} s: make the example smaller or mark it "
                    "<!-- not-run: takes N minutes -->")
    assert proc.returncode == 0, f"{where}: exited {proc.returncode}\n--- block ---\n{cmd}\n--- out ---\n{out[-6000:]}"
    return out


def run_block(b: Block, folder: Path) -> None:
    if b.lang == "toml":
        name = TOML_FILE.match(b.body).group(1)
        (folder / name).write_text(b.body + "\n", encoding="utf-8")
        return
    if b.marker and b.marker[0] == "requires" and importlib.util.find_spec(b.marker[1]) is None:
        pytest.skip(f"{b.where}: <!-- requires: {b.marker[1]} -->, which this venv cannot import (the integration "
                    "blocks run in .venv-integrations: make test-integrations)")
    if b.lang == "console":
        for cmd, want in console_steps(b.body):
            expect_lines(want, shell(cmd, folder, b.where, strict=False), f"{b.where} ($ {cmd.splitlines()[0]})")
        return
    got = shell(b.body, folder, b.where, python=b.lang == "python")
    if b.output is not None:
        expect_lines(b.output, got, b.where)


class PageRun:
    """One page's folder and how far its blocks have run (a block runs after every runnable block before it)."""

    def __init__(self, folder: Path):
        self.folder, self.done, self.failed = folder, 0, None
        for entry in ROOT.iterdir():
            if entry.name not in NOT_LINKED and not entry.name.endswith(".egg-info"):
                (folder / entry.name).symlink_to(entry)


@pytest.fixture(scope="module")
def page_runs(tmp_path_factory):
    runs: dict[Path, PageRun] = {}

    def get(page: Path) -> PageRun:
        if page not in runs:
            runs[page] = PageRun(tmp_path_factory.mktemp(page.stem))
        return runs[page]

    yield get
    for r in runs.values():
        shutil.rmtree(r.folder, ignore_errors=True)


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: f"{b.where}:{b.lang}")
def test_block_runs(block, page_runs):
    run = page_runs(block.page)
    same_page = [b for b in RUNNABLE if b.page == block.page]
    for earlier in same_page[run.done:same_page.index(block)]:  # a block selected alone needs its page's setup
        if run.failed is None:
            try:
                run_block(earlier, run.folder)
            except pytest.skip.Exception:
                pass
            except BaseException:
                run.failed = earlier.where
        run.done += 1
    if run.failed is not None:
        pytest.fail(f"an earlier block of this page failed ({run.failed}); it is reported on its own")
    run.done = same_page.index(block) + 1
    try:
        run_block(block, run.folder)
    except pytest.skip.Exception:
        raise
    except BaseException:
        run.failed = block.where
        raise
