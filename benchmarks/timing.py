"""The benchmarks' one timing helper: best of interleaved rounds, with the spread.

    t = best_of_interleaved({"engine": run_engine, "plain": run_plain}, rounds=3)
    t["engine"].best, t["engine"].spread, t["engine"].times, t["engine"].value   # seconds; last round's return

Why this shape: other load on a shared machine only ever slows a run down, so the fastest round is the estimate
least moved by it; running the names interleaved (the order reversed every other round, so that no name always
follows the same one) spreads that load over all of them alike. The spread (slowest minus fastest round) says how
much the machine moved while they ran: a difference between two names smaller than it is noise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Timing:
    best: float  # seconds of the fastest round
    spread: float  # seconds: slowest round - fastest round (0 with one round)
    times: list[float] = field(default_factory=list)  # every round's seconds, in order
    value: Any = None  # the last round's return value

    def line(self, unit: str = "s", scale: float = 1.0, spec: str = ".2f") -> str:
        """``"12.34 s (spread 0.56 s, 3 rounds)"``; one round: ``"12.34 s (1 round)"``."""
        best = format(self.best * scale, spec)
        if len(self.times) < 2:
            return f"{best} {unit} (1 round)"
        return f"{best} {unit} (spread {format(self.spread * scale, spec)} {unit}, {len(self.times)} rounds)"


def best_of_interleaved(fns: dict[str, Callable[[], Any]], rounds: int, *, warmup: bool | dict = False,
                        clock: Callable[[], float] = time.perf_counter, sync: Callable[[], None] | None = None,
                        stop_after: float | None = None,
                        on_time: Callable[[str, float], None] | None = None) -> dict[str, Timing]:
    """Time each ``fns[name]()`` once per round over ``rounds`` rounds (at least 1), the names interleaved.

    ``warmup``: True runs every fn once untimed first (first-call costs: thread pools, kernel builds), or a dict
    name -> an untimed fn to run instead (e.g. one prompt, not the whole workload). ``clock``: e.g.
    ``time.process_time`` for CPU time. ``sync``: called before and after each timed call (e.g.
    ``torch.cuda.synchronize``: a GPU's work is then inside the time). ``stop_after``: no further rounds after one
    in which a run took longer than this many seconds (a slow peer is timed fewer times). ``on_time(name, s)``:
    called after each timed call (progress on a long run)."""
    if warmup:
        for name, fn in fns.items():
            (warmup.get(name, fn) if isinstance(warmup, dict) else fn)()
    times: dict[str, list[float]] = {name: [] for name in fns}
    values: dict[str, Any] = {}
    names = list(fns)
    for r in range(max(1, rounds)):
        for name in names if r % 2 == 0 else names[::-1]:
            if sync:
                sync()
            t0 = clock()
            values[name] = fns[name]()
            if sync:
                sync()
            times[name].append(clock() - t0)
            if on_time:
                on_time(name, times[name][-1])
        if stop_after is not None and any(ts[-1] > stop_after for ts in times.values()):
            break
    return {name: Timing(min(ts), max(ts) - min(ts), ts, values[name]) for name, ts in times.items()}
