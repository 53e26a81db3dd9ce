"""What a person reads while a run works: the start line, the bar with its ETA, the interrupt line; and the help
of every command."""

from __future__ import annotations

import argparse
import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from logitjudge import progress
from logitjudge.cli import build_parser, main
from logitjudge.table import ScoreTable

sys.path.insert(0, str(Path(__file__).parent))
from test_cli import saved_items, write_long_texts  # noqa: E402

START = re.compile(r"^logitjudge: scoring (\d+) items: (\d+) prompts, ([\d,]+) trie tokens, (\d+) batches planned$")
BAR = re.compile(r"^scoring +\d+% \[[=>.]+\] ([\d,]+)/([\d,]+) tokens, (\d+)/(\d+) items saved, ([\d,]+) tokens/s, "
                 r"ETA (\d+):(\d\d):(\d\d)$")


def score_args(model_dir, texts, out) -> list[str]:
    # a small token budget: several batches, each of several forward calls
    return ["score", "--model", str(model_dir), "--texts", str(texts), "--orderings", "random:2", "--token-budget",
            "1024", "--threads", "1", "--out", str(out)]


def test_start_line_and_a_bar_that_moves_per_forward_call(tmp_path, model_dir, capsys, monkeypatch):
    """The start line counts items, prompts, trie tokens (exactly the tokens the engine then runs) and batches;
    the bar is written after forward calls, before the first batch is saved, with its rate and an ETA."""
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0)  # stderr is not a terminal here: a line per update
    texts = write_long_texts(tmp_path / "texts.jsonl", 8)
    out = tmp_path / "t.npz"
    capsys.readouterr()
    assert main(score_args(model_dir, texts, out)) == 0
    err = capsys.readouterr().err.splitlines()
    starts = [m for m in map(START.match, err) if m]
    assert len(starts) == 1, err
    items, prompts, tokens, batches = (int(x.replace(",", "")) for x in starts[0].groups())
    table = ScoreTable.load(out)
    assert (items, prompts) == (8, 8 * 2) and batches >= 3
    assert tokens == table.meta["engine_stats"]["tokens"]  # the plan is the engine's own count
    bars = [m for m in map(BAR.match, err) if m]
    assert len(bars) >= table.meta["engine_stats"]["forward_calls"]  # one update per forward call at least
    done = [int(m[1].replace(",", "")) for m in bars]
    assert done == sorted(done) and done[-1] == tokens and {int(m[2].replace(",", "")) for m in bars} == {tokens}
    saved = [int(m[3]) for m in bars]
    assert saved[0] == 0 and done[0] > 0, "the bar moved before the first batch was saved"
    assert saved[-1] == 8
    # the ETA is the tokens left at the measured rate (both as printed: rounded)
    rate, eta = int(bars[0][5].replace(",", "")), int(bars[0][6]) * 3600 + int(bars[0][7]) * 60 + int(bars[0][8])
    assert rate > 0 and abs(eta - (tokens - done[0]) / rate) <= 1
    assert err[-1].startswith("logitjudge: scoring: ") and err[-1].endswith("8/8 items saved")
    # --quiet: nothing of it
    assert main(score_args(model_dir, texts, tmp_path / "q.npz") + ["--quiet"]) == 0
    err = capsys.readouterr().err
    assert "scoring" not in err and "ETA" not in err


def test_bar_on_a_terminal_is_redrawn_in_place(monkeypatch):
    """On a terminal the bar is one line redrawn with a carriage return, closed by the totals and a newline."""
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(progress, "TTY_INTERVAL", 0)
    out = Tty()
    bar = progress.Progress(progress.Plan("scoring", 4, 1, 30, 3, 1200, checkpoint="t.npz.partial.jsonl"),
                            stream=out)
    for _ in range(3):
        bar.advance(400)
        bar.saved(1)
    bar.close()
    text = out.getvalue()
    first, rest = text.split("\n", 1)
    assert first == ("logitjudge: scoring 4 items (1 saved earlier in t.npz.partial.jsonl; 3 to go): 30 prompts, "
                     "1,200 trie tokens, 3 batches planned")
    frames = rest.rstrip("\n").split("\r")[1:]
    assert len(frames) == 7 and rest.count("\n") == 1  # six redraws and the totals, on one line
    assert "400/1,200 tokens, 1/4 items saved" in frames[0] and "ETA" in frames[0]
    assert frames[-1].startswith("logitjudge: scoring: 1,200 tokens in ") and "4/4 items saved" in frames[-1]
    assert progress.Progress(None).enabled is False  # --quiet: no plan, nothing written


def test_a_run_without_a_checkpoint_says_done_not_saved():
    """lj.score without ``out`` writes no file: the bar and the totals count items done, never "saved"."""
    out = io.StringIO()
    bar = progress.Progress(progress.Plan("scoring", 2, 0, 4, 1, 100), stream=out)
    bar.advance(100)
    bar.saved(2)
    bar.close()
    assert out.getvalue().rstrip("\n").endswith("2/2 items done") and "saved" not in out.getvalue()


def test_plan_lines_say_what_is_an_estimate():
    greedy = progress.Plan("scoring", 3, 0, 18, 3, 900, estimate="an estimate: the slots after the first follow "
                                                                 "the judge's answers")
    assert "about 900 trie tokens (an estimate" in greedy.line()
    assert progress.Plan("probing", 2, 0, 20, 2, None).line() == "probing 2 items: 20 prompts, 2 batches planned"
    assert "every item is saved" in progress.Plan("scoring", 2, 2, 0, 0, 0).line()


# the child scores its first `LJ_THROUGH` batches and then waits inside the next one until it is interrupted, so
# what is saved when the signal comes does not depend on timing
CHILD = r"""
import os, signal, sys, time
# Ctrl-C as in a terminal: a suite started in the background (nohup, `&`) passes SIGINT down ignored
signal.signal(signal.SIGINT, signal.default_int_handler)
from logitjudge import engine
real = engine.Engine.prompt_logprobs
calls = [0]
def gated(self, groups):
    calls[0] += 1
    if calls[0] > int(os.environ["LJ_THROUGH"]):
        while True:
            time.sleep(0.05)
    return real(self, groups)
engine.Engine.prompt_logprobs = gated
from logitjudge.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _records(partial: Path) -> int:
    from logitjudge.checkpoint import scan

    try:
        return len(scan(partial)[1]) if partial.exists() else 0
    except ValueError:  # the header is being written
        return 0


@pytest.mark.parametrize("through", [0, 2], ids=["nothing-saved", "two-batches"])
def test_sigint_reports_the_items_the_checkpoint_holds(tmp_path, model_dir, through):
    """SIGINT to a real `logitjudge score`: exit 130 and one line with the items saved, as the checkpoint file
    holds them; a rerun of the same command starts from that many."""
    texts = write_long_texts(tmp_path / "texts.jsonl", 8)
    out = tmp_path / "cut.npz"
    partial = Path(f"{out}.partial.jsonl")
    args = score_args(model_dir, texts, out)
    child = subprocess.Popen([sys.executable, "-c", CHILD, *args], stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONUNBUFFERED": "1", "LJ_THROUGH": str(through)})
    seen = []
    for line in child.stderr:  # the start line comes before any batch runs
        seen.append(line)
        if "batches planned" in line:
            break
    while _records(partial) < through and child.poll() is None:
        time.sleep(0.05)  # then the child waits inside its next batch
    child.send_signal(signal.SIGINT)
    rest = child.stderr.read()
    assert child.wait() == 130, seen + [rest]
    last = rest.strip().splitlines()[-1]
    n = saved_items(partial)
    if through == 0:
        assert n == 0 and last == ("interrupted: nothing saved yet (no batch had finished); run the same command "
                                   "to start again")
    else:
        assert n > 0 and last == (f"interrupted: {n} of 8 items saved in {partial}; run the same command to "
                                  "continue")
        res = subprocess.run([sys.executable, "-m", "logitjudge", *args], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr[-2000:]
        assert f"scoring 8 items ({n} saved earlier in {partial}; {8 - n} to go)" in res.stderr


def _subcommands(parser: argparse.ArgumentParser) -> dict:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_help_is_plain_shared_and_shows_only_real_defaults():
    """Every command's help: no reST, '(default: X)' exactly where a flag has a default X (never None, a switch's
    False, a required flag's, or two of them); score, run and probe share the run flags."""
    top = build_parser()
    commands = _subcommands(top)
    assert "``" not in top.format_help()
    for name, parser in commands.items():
        text = parser.format_help()
        assert "``" not in text and ":class:" not in text and ":func:" not in text, name
        assert "(default: None)" not in text and "(default: False)" not in text, name
        fmt = parser._get_formatter()
        for action in parser._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS:
                continue
            help = fmt._expand_help(action)
            flag = f"{name} {action.option_strings[-1]}"
            assert help.count("(default:") <= 1, (flag, help)
            if action.required or any(action.default is x for x in (None, False, argparse.SUPPRESS)):
                assert "(default:" not in help or "(default: the spec's" in help, (flag, help)
            else:
                assert f"(default: {action.default})" in help, (flag, help)
    flags = {name: {s for a in p._actions for s in a.option_strings} for name, p in commands.items()}
    shared = {"--limit", "--threads", "--quiet", "--dump-prompts", "--token-budget", "--data-dir"}
    for name in ("score", "run", "probe"):
        assert shared <= flags[name], (name, shared - flags[name])
    assert {"--dataset", "--orderings"} <= flags["score"] & flags["probe"]
