"""Fault injection for the fault-tolerance tests; inert unless ``LOGITJUDGE_FAULTS`` is set.

``LOGITJUDGE_FAULTS`` is a comma-separated list of ``what@point:n[:fraction]``, counted per process:

* ``kill@batch:3``       SIGKILL this process as the engine starts its 3rd forward batch;
* ``oom@batch:3``        the 3rd forward batch raises ``torch.OutOfMemoryError`` (``cpu-oom@batch:3``: the
  ``RuntimeError`` torch's CPU allocator raises);
* ``kill@record:2:0.5``  SIGKILL halfway through writing the 2nd checkpoint record (``:0`` before its first byte;
  ``:1``, the default, between records: after the 2nd record is synced and traced, before the next batch);
* ``pause@record:2``     after the 2nd record is synced and traced, write ``logitjudge-fault: paused after record
  2`` to stderr and wait for a signal: a test reads that line and then sends SIGTERM or SIGKILL, so where the
  signal lands does not depend on how fast the machine is.

``LOGITJUDGE_CHECKPOINT_TRACE=FILE`` appends ``pid item_id`` to FILE for every item once its checkpoint record is
durable, so a test can count how often each item was saved across kills and resumes.
"""

from __future__ import annotations

import os
import signal
import sys

_counts: dict[str, int] = {}


def reset() -> None:
    _counts.clear()


def _specs(point: str):
    env = os.environ.get("LOGITJUDGE_FAULTS", "")
    for part in filter(None, (s.strip() for s in env.split(","))):
        what, _, where = part.partition("@")
        name, n, *frac = where.split(":")
        if name == point:
            yield what, int(n), float(frac[0]) if frac else 1.0


def hit(point: str) -> list[tuple[str, float]]:
    """Count one pass through ``point``; the faults armed for this pass as (what, fraction)."""
    if "LOGITJUDGE_FAULTS" not in os.environ:
        return []
    _counts[point] = _counts.get(point, 0) + 1
    return [(what, frac) for what, n, frac in _specs(point) if n == _counts[point]]


def kill_now() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def cut(armed: list[tuple[str, float]]) -> float | None:
    """The fraction of a record to write before a kill inside it (None: write it whole)."""
    return next((frac for what, frac in armed if what == "kill" and frac < 1), None)


def after_record(armed: list[tuple[str, float]]) -> None:
    """Called once a checkpoint record is durable: a kill between records, or a pause until a signal."""
    for what, frac in armed:
        if what == "kill" and frac >= 1:
            kill_now()
        if what == "pause":
            print(f"logitjudge-fault: paused after record {_counts['record']} (pid {os.getpid()})", file=sys.stderr,
                  flush=True)
            while True:  # a handler that raises (SIGTERM, SIGINT) or a SIGKILL ends the wait
                signal.pause()


def at_batch() -> None:
    """Called by the engine before each forward batch."""
    for what, _ in hit("batch"):
        if what == "kill":
            kill_now()
        if what == "oom":
            import torch

            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (injected fault)")
        if what == "cpu-oom":
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:118] DefaultCPUAllocator: can't allocate memory: "
                               "you tried to allocate 2147483648 bytes. Error code 12 (Cannot allocate memory) "
                               "(injected fault)")


def trace(item_ids) -> None:
    path = os.environ.get("LOGITJUDGE_CHECKPOINT_TRACE")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write("".join(f"{os.getpid()} {i}\n" for i in item_ids))
