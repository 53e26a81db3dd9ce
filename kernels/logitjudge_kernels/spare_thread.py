"""One thread more than torch's, for the kernels whose results do not depend on their thread count, while another
process takes CPU time on the CPUs this one runs on (issue 55: fast on a busy machine too).

Why: on a 2-core machine beside one busy process, a 2-thread run goes at about its 1-thread speed (the busy
process keeps a core; the judge's two threads share the other). Three threads for the whole process got 1.60x
its 2-thread quiet time instead of 1.8-1.9x, but torch's other ops and oneDNN are not checked for the same bits
at 2 and 3 threads. This thread, in the checked kernels only, bought 3% of the busy time on Qwen2.5-Coder-0.5B and
nothing measurable on gemma-3-270m (docs/performance.md, "A spare thread while the machine is busy"); a third
thread on a quiet machine costs (+17% on gemma), so it is held only while another process runs.

Same bits: only kernels that compute every output element on one thread, in an order that does not depend on the
thread count, take it: the C norms (a row per thread), attention (a (row block, head) per thread), the read-out
(fixed lanes of vocabulary blocks, combined in order) and MKL's GEMMs (its packed route, and ``F.linear``, which
is MKL's on x86 CPUs) where this process has checked that they give the same bits at both counts for the shape
(``mkl_gemm.with_spare``). Everything else (torch's other ops, oneDNN) keeps torch's count, and the
dispatcher's decisions are keyed by torch's count and measured with no spare thread (:func:`paused`), so a
run's probabilities are the same bits busy or quiet.

When: the CPU time the machine's other processes took on this process's CPUs (``/proc/stat`` minus this
process's own time, over at least :data:`INTERVAL` seconds, sampled when a kernel asks) is at least
:data:`ON_CORES` of a core; it is given back below :data:`OFF_CORES`. Only where torch's threads already fill the
CPUs this process may run on (else a free CPU is there to take). ``LOGITJUDGE_SPARE_THREAD``: ``auto`` (default),
``0`` never, ``1`` always (tests and benchmarks).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time

log = logging.getLogger("logitjudge")

ENV = "LOGITJUDGE_SPARE_THREAD"
INTERVAL = 0.25  # seconds between two readings of the counters (their unit is 10 ms)
ON_CORES = 0.4  # others' share of a core that takes the spare thread: one busy process leaves ~0.5-0.67 of one
OFF_CORES = 0.2  # ... and below which it is given back (a quiet machine's daemons: ~0.0-0.05)

_state = threading.local()  # paused depth, per Python thread
_lock = threading.Lock()
_held = False
_last: tuple[float, float, float] | None = None  # (wall s, busy CPU s of our CPUs, this process's CPU s)


def mode() -> str:
    m = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if m not in ("auto", "0", "1"):
        raise ValueError(f"{ENV}={m!r}: use auto, 0 or 1")
    return m


def threads(base: int) -> int:
    """The thread count for a thread-invariant kernel: ``base`` (torch's), or one more while the spare is held."""
    if getattr(_state, "paused", 0):
        return base
    m = mode()
    if m == "1":
        return base + 1
    if m == "0":
        return base
    return base + 1 if _follow(base) else base


@contextlib.contextmanager
def paused():
    """No spare thread inside (the dispatcher measures its routes at torch's own thread count)."""
    _state.paused = getattr(_state, "paused", 0) + 1
    try:
        yield
    finally:
        _state.paused -= 1


def others_cores(before: tuple[float, float, float], after: tuple[float, float, float]) -> float:
    """Cores' worth of CPU time other processes took between two readings ``(wall s, busy CPU s of this process's
    CPUs, this process's CPU s)``."""
    wall = after[0] - before[0]
    if wall <= 0:
        return 0.0
    return max(0.0, ((after[1] - before[1]) - (after[2] - before[2])) / wall)


def next_held(held_now: bool, others: float) -> bool:
    """Hysteresis: take the spare at ``ON_CORES``, give it back under ``OFF_CORES``."""
    return others >= OFF_CORES if held_now else others >= ON_CORES


def _follow(base: int) -> bool:
    global _held, _last
    now = time.monotonic()
    if _last is not None and now - _last[0] < INTERVAL:
        return _held
    with _lock:
        if _last is not None and now - _last[0] < INTERVAL:
            return _held
        reading = _read(base, now)
        if reading is None:
            _held = False
        elif _last is not None:
            others = others_cores(_last, reading)
            if next_held(_held, others) != _held:
                _held = not _held
                log.info("other processes took %.2f of a core: %s", others,
                         "one thread more for the thread-invariant kernels" if _held else "spare thread given back")
        _last = reading
    return _held


def _cpus() -> set[int] | None:
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def _read(base: int, now: float) -> tuple[float, float, float] | None:
    """(now, busy CPU seconds of this process's CPUs, this process's CPU seconds), or None where the spare does not
    apply (torch's threads leave a CPU free, or no /proc/stat)."""
    cpus = _cpus()
    if not cpus or base < len(cpus):
        return None
    try:
        with open("/proc/stat") as f:
            lines = [ln.split() for ln in f if ln.startswith("cpu") and not ln.startswith("cpu ")]
    except OSError:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal ...: busy = user + nice + system + irq + softirq (another
    # VM's steal is not a process here that a thread more could share a core with)
    busy = sum(int(p[1]) + int(p[2]) + int(p[3]) + int(p[6]) + int(p[7])
               for p in lines if int(p[0][3:]) in cpus)
    t = os.times()
    return now, busy / hz, t.user + t.system
