"""One thread more than torch's for the native step, while another process takes CPU time on the CPUs this one
runs on (issue 55: fast on a busy machine too), with the same bits as without it.

Why: on a 2-core machine beside one busy process, a 2-thread run goes at about its 1-thread speed (the busy
process keeps a core; the judge's two threads share the other); with three threads the judge's share of the
CPUs is larger. A third thread on a quiet machine costs (+17-19% on gemma-3-270m), so it is held only while
another process runs.

How: the whole step runs with torch's count raised by one (:func:`raised`), so every OpenMP region in it has
the same team. libgomp ends the threads a smaller team leaves out and creates them again for a larger one: a
third thread in some regions only (the first design, the checked kernels alone) cost a thread creation per
region, ~0.4 ms each (measured: 500 alternations of a 3- and a 2-thread region made 500 threads), and bought
nothing measurable on gemma-3-270m.

Same bits: inside a raised step an op runs on the raised count only where its bits do not depend on the count:

* by construction: the C norms and the gated MLP's activation (``cpu_norm.act_mul``: a row per thread),
  attention (a (row block, head) per thread) and read-out (fixed lanes of vocabulary blocks, combined in order);
  copies, gathers and IEEE-exact elementwise ops (add, mul, the embedding);
* checked (:func:`checked`): MKL's and oneDNN's GEMMs, per route, weight shape and power-of-two bucket of rows,
  on the first such call in the process (computed at both counts, the base result returned), kept at the base
  count where the bits differ (``F.linear`` does, on 23 of 80 of the judges' shapes, mostly under 96 rows);
* everything else at torch's base count (:func:`paused`): torch's elementwise functions (cos/sin of the rotary
  tables; GELU, SiLU and rsqrt in torch's routes of the C kernels: ATen splits the flat range over the threads
  and computes each share's tail with its scalar function, so where the shares end, and with it some values'
  bits, depends on the count: measured, ATen's GELU gave other bits at 3 threads than at 2 in 283 of 444 calls
  of gemma-3-270m's MLP, its SiLU in 661 of 1,154 of Qwen2.5-Coder-0.5B's) and the last layer's attention of
  the read positions.

The dispatcher measures with the spare paused and keys its decisions by the base count, so routes and bits are
the same busy or quiet (tests/test_spare_thread.py: the real gemma-3-270m, held against not).

When: the CPU time the machine's other processes took on this process's CPUs (``/proc/stat`` minus this
process's own time, over at least :data:`INTERVAL` seconds, read when a step starts) is at least
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

import torch

log = logging.getLogger("logitjudge")

ENV = "LOGITJUDGE_SPARE_THREAD"
INTERVAL = 0.25  # seconds between two readings of the counters (their unit is 10 ms)
ON_CORES = 0.4  # others' share of a core that takes the spare thread: one busy process leaves ~0.5-0.67 of one
OFF_CORES = 0.2  # ... and below which it is given back (a quiet machine's daemons: ~0.0-0.05)

_state = threading.local()  # per Python thread: .base (torch's count before a raised step), .paused (depth)
_SAME_BITS: dict[tuple, bool] = {}  # checked(): (route, shape..., row bucket, base count) -> same bits raised
_lock = threading.Lock()
_held = False
_last: tuple[float, float, float] | None = None  # (wall s, busy CPU s of our CPUs, this process's CPU s)


def mode() -> str:
    m = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if m not in ("auto", "0", "1"):
        raise ValueError(f"{ENV}={m!r}: use auto, 0 or 1")
    return m


def take(base: int) -> bool:
    """Whether a step of ``base`` threads takes one more now (the mode, and in ``auto`` the machine's load)."""
    m = mode()
    return m == "1" or (m == "auto" and _follow(base))


def base_threads() -> int:
    """torch's thread count outside a raised step (the count routes are measured and keyed by)."""
    return getattr(_state, "base", None) or torch.get_num_threads()


def is_raised() -> bool:
    """Inside a raised step, and not paused."""
    return getattr(_state, "base", None) is not None and not getattr(_state, "paused", 0)


@contextlib.contextmanager
def raised():
    """A native step: torch's thread count one more inside while the spare is taken (:func:`take`), else as it
    is. Nested, paused or taken: unchanged."""
    base = torch.get_num_threads()
    if getattr(_state, "base", None) is not None or getattr(_state, "paused", 0) or not take(base):
        yield
        return
    _state.base = base
    torch.set_num_threads(base + 1)
    try:
        yield
    finally:
        torch.set_num_threads(base)
        _state.base = None


@contextlib.contextmanager
def paused():
    """torch's base count inside (an op whose bits depend on the count; the dispatcher's measurements)."""
    base = getattr(_state, "base", None)
    lower = base is not None and not getattr(_state, "paused", 0)
    _state.paused = getattr(_state, "paused", 0) + 1
    if lower:
        torch.set_num_threads(base)
    try:
        yield
    finally:
        _state.paused -= 1
        if lower:
            torch.set_num_threads(base + 1)


def rows_bucket(rows: int) -> int:
    """``rows`` rounded up to a power of two: the bucket a :func:`checked` key names."""
    return 1 << max(0, int(rows) - 1).bit_length()


def checked(key: tuple, run):
    """``run()`` at the raised count where this process found, on the first call of ``key`` (a route, its
    weight shape, bias or not, and a bucket of rows: :func:`rows_bucket`), the same bits at both counts (that
    call computes both and returns the base result); else at the base count. Outside a raised step: ``run()``."""
    if not is_raised():
        return run()
    key = (*key, _state.base)
    same = _SAME_BITS.get(key)
    if same is None:
        with paused():
            base = run()
        same = _SAME_BITS[key] = _equal(base, run())
        if not same:
            log.info("%s: other bits at %d threads than at %d; it keeps %d", key[:-1], _state.base + 1,
                     _state.base, _state.base)
        return base
    if same:
        return run()
    with paused():
        return run()


def _equal(a, b) -> bool:
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return torch.equal(a, b)


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
                         "one thread more for each native step" if _held else "spare thread given back")
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
