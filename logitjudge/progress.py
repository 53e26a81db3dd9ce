"""What a person reads on stderr while a run works: one line when it starts, a bar, and on interrupt what is saved.

A run (:class:`logitjudge.runs.Run`, :class:`~logitjudge.probing.run.ProbeRun`) plans its batches before the first
forward and says so in one line (items, prompts, trie tokens, batches). The bar then moves in tokens, fed by the
engine after every forward call (a callback: the engine knows nothing of this module), with the measured rate and
an ETA from it; a probe run, which reaches the backend directly, moves per item. On a terminal the bar is redrawn
in place at most every :data:`TTY_INTERVAL` seconds; in a log file (stderr not a terminal) it is a plain line at
most every :data:`LOG_INTERVAL` seconds, and a closing line gives the totals. ``Progress(None)`` (no plan) prints
nothing (``--quiet``, torchrun ranks other than 0).

An interrupted run raises :class:`Interrupted` (a ``KeyboardInterrupt``) whose message counts the items its
checkpoint holds, read back from the file, so the count is what a resume keeps.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

TTY_INTERVAL = 0.1  # seconds between redraws on a terminal
LOG_INTERVAL = 30.0  # seconds between lines when stderr is a file or pipe: a log stays readable
WIDTH = 24  # bar characters


@dataclass(frozen=True)
class Plan:
    """What a run will do, counted from its planned prompts before the model runs."""

    label: str  # "scoring", "probing"
    items: int  # the run's items (this rank's share under torchrun)
    saved: int  # of them, already in the checkpoint
    prompts: int  # prompts still to run
    batches: int  # steps still to run
    tokens: int | None  # trie tokens still to run (None: not counted, the bar moves per item)
    estimate: str = ""  # why ``tokens`` is an estimate ("": exact)
    checkpoint: str | None = None  # the checkpoint file

    def line(self) -> str:
        """The start line, e.g. "scoring 22 items: 440 prompts, 45,812 trie tokens, 7 batches planned"."""
        head = f"{self.label} {_n(self.items, 'item')}"
        if self.saved:
            where = f" in {self.checkpoint}" if self.checkpoint else ""
            head += f" ({self.saved} saved earlier{where}; {self.items - self.saved} to go)"
        if not self.batches:
            return f"{head}: every item is saved; assembling the table"
        parts = [_n(self.prompts, "prompt")]
        if self.tokens is not None:
            about = "about " if self.estimate else ""
            parts.append(f"{about}{self.tokens:,} trie tokens" + (f" ({self.estimate})" if self.estimate else ""))
        parts.append(f"{_n(self.batches, 'batch', 'batches')} planned")
        return f"{head}: {', '.join(parts)}"


class Progress:
    """The start line and the bar of one run (see the module doc). ``advance(n)``: n units (tokens, or items
    when the plan counts no tokens) done; ``saved(n)``: n more items in the checkpoint."""

    def __init__(self, plan: Plan | None, *, stream=None):
        self.plan, self.enabled = plan, plan is not None  # no plan: nothing is shown (and nothing was counted)
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.unit = "tokens" if plan is not None and plan.tokens is not None else "items"
        self.total = 0 if plan is None else plan.tokens if plan.tokens is not None else plan.items - plan.saved
        self.done = 0  # units this session
        self.items_saved = 0 if plan is None else plan.saved
        self.t0 = time.monotonic()
        self._last = None  # when the bar was last written
        self._width = 0  # of the last line drawn in place
        if self.enabled:
            self._write(f"logitjudge: {plan.line()}\n")

    # ---- fed by the run ----------------------------------------------------------------------------------------
    def advance(self, n: int) -> None:
        self.done += n
        self._maybe_draw()

    def saved(self, n: int) -> None:
        self.items_saved += n
        if self.unit == "items":
            self.done += n
        self._maybe_draw()

    def close(self) -> None:
        """The totals, over the bar on a terminal, and a newline (what follows starts a line)."""
        if not self.enabled or self._last is None:
            return
        self._write(("\r" + self._pad(self.summary()) if self.tty else self.summary()) + "\n")
        self._last = None

    # ---- what is shown -----------------------------------------------------------------------------------------
    def rate(self) -> float | None:
        """Units per second measured over this session (None before the first unit)."""
        dt = time.monotonic() - self.t0
        return self.done / dt if self.done and dt > 0 else None

    def eta(self) -> float | None:
        r = self.rate()
        return None if r is None else max(self.total - self.done, 0) / r

    def bar(self) -> str:
        """e.g. "scoring  38% [=========>..............] 17,412/45,812 tokens, 3/22 items saved, 1,234 tokens/s,
        ETA 0:00:23"."""
        frac = min(self.done / self.total, 1.0) if self.total else 1.0
        fill = int(frac * WIDTH)
        bar = "=" * fill + (">" if fill < WIDTH else "") + "." * max(WIDTH - fill - 1, 0)
        parts = [f"{self.plan.label} {frac:4.0%} [{bar}]"]
        if self.unit == "tokens":
            parts.append(f"{self.done:,}/{self.total:,} tokens,")
        parts.append(f"{self.items_saved}/{self.plan.items} items {self._kept},")
        r, eta = self.rate(), self.eta()
        parts.append("measuring the rate" if r is None else f"{_rate(r, self.unit)}, ETA {_clock(eta)}")
        return " ".join(parts)

    def summary(self) -> str:
        dt = time.monotonic() - self.t0
        what = f"{self.done:,} tokens" if self.unit == "tokens" else _n(self.done, "item")
        r = self.rate()
        speed = f" ({_rate(r, self.unit)})" if r else ""
        return (f"logitjudge: {self.plan.label}: {what} in {_clock(dt)}{speed}, {self.items_saved}/{self.plan.items}"
                f" items {self._kept}")

    @property
    def _kept(self) -> str:
        """"saved" where a checkpoint file holds the finished items, "done" where the run writes none (a Python
        call without ``out``)."""
        return "done" if self.plan.checkpoint is None else "saved"

    # ---- drawing -----------------------------------------------------------------------------------------------
    def _maybe_draw(self) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if self._last is not None and now - self._last < (TTY_INTERVAL if self.tty else LOG_INTERVAL):
            return
        self._last = now
        self._write("\r" + self._pad(self.bar()) if self.tty else self.bar() + "\n")

    def _pad(self, line: str) -> str:
        out = line + " " * max(self._width - len(line), 0)  # blank what a longer previous line left
        self._width = len(line)
        return out

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stderr never stops a run
            self.enabled = False


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a run: ``saved`` of its ``total`` items are in the checkpoint ``path``."""

    def __init__(self, saved: int, total: int, path: Path | None, label: str = "scoring"):
        self.saved, self.total, self.path, self.label = saved, total, path, label
        super().__init__(self.message())

    def message(self) -> str:
        if self.path is None:
            return f"{self.label} stopped; the run had no output file, so nothing is saved"
        if not self.saved:
            return "nothing saved yet (no batch had finished); run the same command to start again"
        return f"{self.saved} of {self.total} items saved in {self.path}; run the same command to continue"

    def __str__(self) -> str:
        return self.message()


def _n(k: int, word: str, plural: str | None = None) -> str:
    return f"{k:,} {word if k == 1 else plural or word + 's'}"


def _rate(r: float, unit: str) -> str:
    if unit == "tokens":
        return f"{r:,.0f} tokens/s"
    return f"{r:.2f} items/s" if r >= 1 else f"{1 / r:.1f} s/item"


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
