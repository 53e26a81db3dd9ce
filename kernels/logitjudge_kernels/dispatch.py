"""Dispatch by measurement: each kernel runs the implementation that measured fastest on this machine.

A kernel (:class:`Kernel`: the label read-out's log-sum-exp, shared-prefix attention, the norms, the native
step's GEMMs) has candidate implementations, e.g. the C kernel, ATen's fused path and the PyTorch reference, or
oneDNN's packed GEMM and plain ``F.linear``. Which is fastest depends on the CPU (an AVX-512 tile built for AVX2
ran 5-18x slower than MKL, issue 21), the thread count and the shape, so the choice is measured where it runs,
never read off the ISA:

* the first call of a shape **bucket** (rows and width rounded up to powers of two, dtype; per kernel) times
  every candidate that applies (interleaved repeats, the minimum of each) on the call's own inputs (or a cut of
  them, ``sample``), checks each for exactness and keeps the fastest exact one; a candidate that is slower, or
  not exact, is never chosen. Exact is judged by one gate for every route (:mod:`.exactness`, stated in
  docs/how-it-works.md): over the call and two perturbed copies, against the float64 ground truth where the
  kernel has one (``exact``), a candidate's error may be at most a multiple of the reference's own error (fp32),
  or the reference's own error plus one ulp (bf16/fp16); so a model with large activations, where fp32 itself
  is off by more than any fixed tolerance, keeps the kernels that are as exact as fp32 can be there; without
  a ground truth, the kernel's stated tolerance against the reference's output;
* the decision is cached on disk next to the compiled kernels (``_cbuild.cache_dir()``, one JSON file per
  machine key: CPU model, its feature flags, torch's thread count, torch's version, the kernels' sources and the
  build target), so the few seconds of measuring are spent once per machine, never per run. A decision measured
  while other processes oversubscribed the CPU (1-minute load average above the CPU count + 0.5; it is kept with
  the decision) is provisional: the first process that finds the machine quieter measures that bucket again.

``LOGITJUDGE_CPU_KERNELS``: ``auto`` (default: measured), ``1`` (nothing measured: the C kernel wherever it applies,
elsewhere the kernel's first candidate) or ``0`` (no C kernel: each kernel's first non-C candidate).

What ran is recorded by the dispatcher itself: ``with recording() as rec: ...`` then ``rec.as_meta()`` gives per
kernel the implementations that ran, for which buckets and how often, and the measured rates behind each choice
(a run's ``meta["kernels"]``), so a kernel that did not run is never reported as run.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import statistics
import threading
import time
import weakref
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from . import _cbuild, exactness, spare_thread

log = logging.getLogger(__name__)
MODE_ENV = _cbuild.DISABLE_ENV  # LOGITJUDGE_CPU_KERNELS = auto | 1 | 0
MEASURE_SECONDS = 1.5  # a bucket's measurement stops repeating after about this long (it runs once per machine)
REPEATS = 5
MIN_SECONDS = 0.1  # each candidate is timed for at least this long in all (more rounds), within MEASURE_SECONDS
ROUND_CAP = 8  # ... in at most this many times ``repeats`` rounds
# The speed choice, stable too: the reference (the plain route) is kept unless another route is at least 5%
# faster; where the two fastest are within 10% of each other the rounds are run again and decide together.
SPEEDUP = 1.05
CLOSE = 1.10


def busy() -> bool:
    """The CPU is oversubscribed now (load average above the CPU count + 0.5): measurements are provisional."""
    try:
        return os.getloadavg()[0] > (os.cpu_count() or 1) + 0.5
    except (AttributeError, OSError):
        return False


def mode() -> str:
    m = os.environ.get(MODE_ENV, "auto").strip().lower()
    return {"": "auto", "1": "1", "0": "0", "on": "1", "off": "0"}.get(m, "auto")


# ------------------------------------------------------------------------------------------- machine key
@functools.cache
def sources_hash() -> str:
    """The kernels' sources (C, headers and these wrappers): a new source measures again."""
    h = hashlib.sha256()
    here = os.path.dirname(__file__)
    for name in sorted(os.listdir(here)):
        if name.endswith((".c", ".h", ".py")):
            with open(os.path.join(here, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


def machine_key(*, threads: int | None = None, flags: str | None = None) -> dict:
    """What a measured decision holds for: CPU model, feature flags, thread count, torch, sources, build target."""
    return dict(_machine_key(int(threads or spare_thread.base_threads()), flags))


@functools.cache
def _machine_key(threads: int, flags: str | None) -> tuple:
    flags = _cbuild.cpu_flags() if flags is None else flags
    return (("cpu", _cbuild.cpu_model()), ("flags", hashlib.sha256(flags.encode()).hexdigest()[:12]),
            ("threads", threads), ("torch", torch.__version__), ("sources", sources_hash()),
            ("target", _cbuild.TARGET))


@functools.cache
def _key_id(items: tuple) -> str:
    return hashlib.sha256(json.dumps(dict(items), sort_keys=True).encode()).hexdigest()[:16]


def key_id(key: dict) -> str:
    return _key_id(tuple(sorted(key.items())))


_LOCK = threading.Lock()
_TABLES: dict[tuple, dict] = {}  # (cache folder, key id) -> {kernel: {bucket: decision}}
_KERNELS: weakref.WeakSet = weakref.WeakSet()  # every Kernel, whose in-process memo forget() clears


def _table_path(kid: str):
    return _cbuild.cache_dir() / f"dispatch-{kid}.json"


def _table(key: dict) -> tuple[str, dict]:
    kid = key_id(key)
    where = (str(_cbuild.cache_dir()), kid)
    if where not in _TABLES:
        try:
            _TABLES[where] = json.loads(_table_path(kid).read_text()).get("decisions", {})
        except (OSError, ValueError):
            _TABLES[where] = {}
    return kid, _TABLES[where]


def _save(key: dict, kernel: str, bucket: str, decision: dict) -> None:
    """Merge one decision into the machine's file (atomic replace; a concurrent writer may drop another's entry,
    which is then measured again, never corrupt the file)."""
    kid = key_id(key)
    path = _table_path(kid)
    try:
        saved = json.loads(path.read_text()).get("decisions", {})
    except (OSError, ValueError):
        saved = {}
    saved.setdefault(kernel, {})[bucket] = decision
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps({"key": key, "decisions": saved}, indent=1))
        os.replace(tmp, path)
    except OSError as e:  # read-only cache: measured again in the next process
        log.debug("could not save the kernel dispatch decision to %s: %s", path, e)


def forget(kernel: str | None = None) -> None:
    """Drop this machine's decisions (all, or one kernel's) from memory and disk: measured again at next use."""
    key = machine_key()
    kid, table = _table(key)
    with _LOCK:
        if kernel is None:
            table.clear()
        else:
            table.pop(kernel, None)
        for k in list(_KERNELS):
            if kernel is None or k.name == kernel:
                k._memo.clear()
        try:
            _table_path(kid).write_text(json.dumps({"key": key, "decisions": table}, indent=1))
        except OSError:
            pass


# ------------------------------------------------------------------------------------------- recording
class Recorder:
    """What the dispatcher ran while it was active: kernel -> implementation -> bucket -> calls, and the decision
    (choice, why, measured rates) behind each (kernel, bucket)."""

    def __init__(self):
        self.calls: dict = {}
        self.decisions: dict = {}

    def add(self, kernel: str, impl: str, bucket: str, decision: dict) -> None:
        per = self.calls.setdefault(kernel, {}).setdefault(impl, {})
        per[bucket] = per.get(bucket, 0) + 1
        self.decisions.setdefault(kernel, {})[bucket] = decision

    def ran(self, kernel: str) -> set:
        """The implementations of ``kernel`` that ran."""
        return set(self.calls.get(kernel, {}))

    def as_meta(self) -> dict:
        """{kernel: {"ran": {impl: {"calls", "buckets": {bucket: calls}}}, "choices": {bucket: decision}}} for the
        kernels that ran; JSON-ready."""
        out = {}
        for kernel, impls in sorted(self.calls.items()):
            out[kernel] = {
                "ran": {impl: {"calls": sum(b.values()), "buckets": dict(sorted(b.items()))}
                        for impl, b in sorted(impls.items())},
                "choices": {b: dict(d) for b, d in sorted(self.decisions.get(kernel, {}).items())},
            }
        return out


_ACTIVE: list[Recorder] = []


@contextmanager
def recording(rec: Recorder | None = None):
    """``with recording() as rec:``: every dispatched call inside is recorded in ``rec`` (nested recorders each
    see the calls). ``recording(rec)`` records into an existing recorder (a backend keeps one over its life);
    entered again while already active it adds nothing, so a nested call is counted once."""
    rec = Recorder() if rec is None else rec
    with _LOCK:
        added = not any(r is rec for r in _ACTIVE)
        if added:
            _ACTIVE.append(rec)
    try:
        yield rec
    finally:
        if added:
            with _LOCK:
                _ACTIVE.remove(rec)


_MEASURING = threading.local()  # .depth: how many Kernel.measure calls this thread is inside


@contextmanager
def _unrecorded():
    """Calls inside are not recorded: a kernel whose candidates call other kernels (the native step's MLP: its
    GEMMs) runs them while it measures, and those runs are measurement, not what the caller ran."""
    _MEASURING.depth = getattr(_MEASURING, "depth", 0) + 1
    try:
        yield
    finally:
        _MEASURING.depth -= 1


def record(kernel: str, impl: str, bucket: str, decision: dict) -> None:
    """Record a call that did not go through a :class:`Kernel` (a Triton path, a forced backend)."""
    if getattr(_MEASURING, "depth", 0):
        return
    for rec in list(_ACTIVE):
        rec.add(kernel, impl, bucket, decision)


# ------------------------------------------------------------------------------------------- kernels
@dataclass(frozen=True)
class Candidate:
    """One implementation: ``fn(*args, **kw)``; ``refusal(*args, **kw)`` -> None where it applies, else why not;
    ``native``: a C kernel (forced by LOGITJUDGE_CPU_KERNELS=1, never run with 0); ``spare``: its bits do not
    depend on torch's thread count (a C kernel: by construction), or it checks that itself
    (``spare_thread.checked``), so inside a raised step it runs on the raised count; any other runs paused at the
    base count (:mod:`.spare_thread`)."""

    name: str
    fn: Callable
    refusal: Callable = lambda *a, **k: None
    native: bool = False
    spare: bool = False


def pow2_bucket(n: int) -> str:
    """"1", "2", "3-4", "5-8", ...: n rounded up to a power of two, with the range it stands for."""
    hi = 1 << max(0, int(n) - 1).bit_length()
    lo = hi // 2 + 1
    return str(hi) if lo >= hi else f"{lo}-{hi}"


@dataclass
class Kernel:
    """A kernel with candidates measured against each other per shape bucket.

    ``reference``: the candidate whose output is the truth for the exactness check (it applies everywhere);
    ``bucket(*args, **kw)`` -> str; ``error(out, ref)`` -> the largest error, checked against ``tolerance(ref)``;
    ``work(*args, **kw)`` -> nominal work (FLOPs or bytes, ``unit``) for the rates; ``sample(*args, **kw)`` ->
    (args, kw) of a cheaper call of the same bucket to measure on (default: the call itself); ``exact(*args,
    **kw)`` -> the float64 ground truth of the same call (its floating tensors are given as float64), by which a
    candidate is judged like for like (:mod:`.exactness`); None: ``tolerance`` against the reference.
    ``repeats`` / ``measure_seconds``: the timed rounds per candidate (at least 2) and about how long they may
    take, for kernels whose candidates differ by less than a noisy machine's spread between runs; ``typical``:
    the median of the rounds decides instead of the minimum, for candidates that differ in how much other load
    on the machine slows them (a GEMM whose working set outgrows its share of a shared cache), where the fastest
    run alone would pick the one that is fastest only when the machine is quiet."""

    name: str
    candidates: list[Candidate]
    reference: str
    bucket: Callable
    error: Callable
    tolerance: Callable
    work: Callable
    unit: str = "GFLOP/s"
    sample: Callable | None = None
    exact: Callable | None = None
    repeats: int = REPEATS  # timed rounds per candidate (at least 2), within about measure_seconds
    measure_seconds: float = MEASURE_SECONDS
    min_seconds: float | None = None  # each candidate timed at least this long in all (None: MIN_SECONDS)
    typical: bool = False  # the median of the timed rounds decides instead of the minimum
    _memo: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        _KERNELS.add(self)

    def __hash__(self):  # identity: a WeakSet member
        return id(self)

    def candidate(self, name: str) -> Candidate:
        return next(c for c in self.candidates if c.name == name)

    def choose(self, *args, **kw) -> tuple[Candidate, str, dict]:
        """(the candidate to run, its bucket, the decision: choice, why, and measured rates if any)."""
        bucket = self.bucket(*args, **kw)
        m = mode()
        refused = {c.name: r for c in self.candidates if (r := c.refusal(*args, **kw))}
        usable = [c for c in self.candidates if c.name not in refused]
        if not usable:
            raise RuntimeError(f"no implementation of {self.name} applies: {refused}")
        if m == "1":  # nothing measured, so every process takes the same routes: a kernel without a C one runs
            # its first candidate (the GEMMs' packed route, the MLP whole), as with 0
            pick = next((c for c in usable if c.native), usable[0])
            return pick, bucket, {"choice": pick.name, "why": f"{MODE_ENV}=1", "refused": refused}
        if m == "0":
            usable = [c for c in usable if not c.native] or usable
            return usable[0], bucket, {"choice": usable[0].name, "why": f"{MODE_ENV}=0", "refused": refused}
        if len(usable) == 1:
            return usable[0], bucket, {"choice": usable[0].name, "why": "the only one that applies",
                                       "refused": refused}
        threads = spare_thread.base_threads()  # a raised step takes the routes measured at the base count
        names = tuple(c.name for c in usable)
        memo = self._memo.get((threads, bucket, names))
        if memo is None:
            key = machine_key(threads=threads)
            kid, table = _table(key)
            memo = table.get(self.name, {}).get(bucket)
            stale = memo is not None and (set(memo.get("rates", {})) | set(memo.get("not_exact", {})) != set(names)
                                          or (memo.get("provisional") and not busy()))
            if memo is None or stale:
                memo = self.measure(usable, args, kw)
                with _LOCK:
                    table.setdefault(self.name, {})[bucket] = memo
                _save(key, self.name, bucket, memo)
            self._memo[(threads, bucket, names)] = memo
        pick = next((c for c in usable if c.name == memo["choice"]), usable[0])
        return pick, bucket, {**memo, "refused": refused} if refused else memo

    def measure(self, usable: list[Candidate], args: tuple, kw: dict) -> dict:
        """Time each usable candidate (interleaved rounds, the order reversed every other round; the minimum of
        its runs, or the median of its timed rounds where ``typical``) on the call or its ``sample``; the fastest
        one within tolerance of the reference wins. The decision keeps every timed candidate's rate and seconds
        and the shapes of the call it was measured on.

        Candidates that call other kernels (nested): the reference and then each candidate run once, untimed
        where ``typical`` (else the minimum discards that slower first run), before any timed round, so the inner
        kernels have decided every bucket these calls touch before the timed rounds run them; nothing run while
        measuring is recorded as run. No spare thread while measuring (:mod:`.spare_thread`): decisions are keyed
        by torch's base thread count and measured at it."""
        with _unrecorded(), spare_thread.paused():
            return self._measure(usable, args, kw)

    def _measure(self, usable: list[Candidate], args: tuple, kw: dict) -> dict:
        s_args, s_kw = self.sample(*args, **kw) if self.sample else (args, kw)
        ref = self.candidate(self.reference)
        gate = exactness.gate(ref.fn, s_args, s_kw, exact=self.exact, tolerance=self.tolerance,
                                 to_float64=to_float64)
        runs, not_exact, errors = {}, {}, {}
        t_start = time.perf_counter()
        for c in usable:  # warm-up and the exactness check (every draw; exactness.py)
            verdict = None if c is ref else gate.judge(c.fn)
            runs[c.name] = []  # these first runs warm up: never timed
            if verdict is not None:
                errors[c.name] = float(f"{verdict.errors.max:.3g}")
                if verdict.why:
                    not_exact[c.name] = verdict.why
        timed = [c for c in usable if c.name not in not_exact]
        self._rounds(timed, runs, s_args, s_kw, t_start)
        choice, reason, close = self._decide(runs)
        if close:  # a close call: as many rounds again, decided on all of them
            self._rounds(timed, runs, s_args, s_kw, time.perf_counter())
            choice, reason, _ = self._decide(runs)
        best = self._best(runs)
        work = float(self.work(*s_args, **s_kw))
        rates = {n: work / t / 1e9 if t > 0 else float("inf") for n, t in best.items() if n not in not_exact}
        for name, why in not_exact.items():
            # the kernels' own choice among routes, not something the user asked for: the log, not the screen
            log.info("%s: %s is not exact here (%s); it is not used", self.name, name, why)
        decision = {"choice": choice, "why": reason, "unit": self.unit, "retimed": close,
                    "rates": {n: float(f"{r:.4g}") for n, r in rates.items()},
                    "seconds": {n: best[n] for n in rates}, "statistic": "median" if self.typical else "min",
                    "shapes": [list(a.shape) for a in (*s_args, *s_kw.values()) if isinstance(a, torch.Tensor)],
                    "not_exact": not_exact, "errors": errors,
                    "load": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
                    "provisional": busy(),
                    "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        log.debug("%s: %s for %s (%s)", self.name, choice, ", ".join(f"{n} {r:.3g}" for n, r in rates.items()),
                 self.unit)
        return decision

    def _rounds(self, timed: list[Candidate], runs: dict, args: tuple, kw: dict, t_start: float) -> None:
        """Timed rounds (interleaved, the order reversed every other one): ``repeats`` of them, then more for
        each candidate timed for less than ``min_seconds`` in all (at most ``ROUND_CAP`` x ``repeats`` rounds),
        stopping after about ``measure_seconds`` (at least 2 rounds)."""
        least = MIN_SECONDS if self.min_seconds is None else self.min_seconds
        for i in range(ROUND_CAP * self.repeats):
            # past ``repeats``, only the candidates timed for less than ``least`` in all run again
            now = timed if i < self.repeats else [c for c in timed if sum(runs[c.name]) < least]
            if not now or (i >= 2 and time.perf_counter() - t_start > self.measure_seconds):
                break
            for c in (now if i % 2 == 0 else now[::-1]):
                t0 = time.perf_counter()
                c.fn(*args, **kw)
                runs[c.name].append(time.perf_counter() - t0)

    def _best(self, runs: dict) -> dict:
        pick = statistics.median if self.typical else min
        return {n: pick(ts) for n, ts in runs.items() if ts}

    def _decide(self, runs: dict) -> tuple[str, str, bool]:
        """(choice, why, close): the fastest, except that the reference (the plain route, which applies
        everywhere) is kept unless the fastest beats it by :data:`SPEEDUP`; ``close``: the two fastest are
        within :data:`CLOSE` of each other, so the call is worth timing again."""
        best = self._best(runs)
        order = sorted(best, key=best.get)
        fastest = order[0]
        close = len(order) > 1 and best[order[1]] < CLOSE * best[fastest]
        ref = self.reference
        if fastest != ref and ref in best and best[ref] < SPEEDUP * best[fastest]:
            return ref, f"measured: the reference, {fastest} is less than {SPEEDUP:g}x faster", close
        return fastest, "measured fastest", close

    def __call__(self, *args, **kw):
        pick, bucket, decision = self.choose(*args, **kw)
        record(self.name, pick.name, bucket, decision)
        if pick.native or pick.spare or not spare_thread.is_raised():
            return pick.fn(*args, **kw)
        with spare_thread.paused():
            return pick.fn(*args, **kw)


def to_float64(obj):
    """``obj`` (a tensor, or a tuple/list/dict of them) with its floating tensors as float64 copies."""
    if isinstance(obj, torch.Tensor):
        return obj.double() if obj.is_floating_point() else obj
    if isinstance(obj, dict):
        return {k: to_float64(v) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(to_float64(v) for v in obj)
    return obj


def wide(t: torch.Tensor) -> torch.Tensor:
    """``t`` in fp32, or float64 if it is float64: the references compute in fp32 and, given float64 inputs
    (a kernel's ``exact`` ground truth), in float64."""
    return t if t.dtype == torch.float64 else t.float()


def max_abs(out, ref) -> float:
    """Largest absolute difference over a tensor or a tuple of tensors (NaN where they disagree on NaNs), in
    float64 (a float64 truth is not rounded first)."""
    if isinstance(ref, (tuple, list)):
        return max(max_abs(o, r) for o, r in zip(out, ref))
    diff = (out.double() - ref.double()).abs()
    return float(diff.max()) if diff.numel() else 0.0


def scaled_tolerance(atol: float, low_precision: float = 1e-2):
    """``atol`` times the largest magnitude of the reference's output (at least 1); for bf16/fp16 outputs
    ``low_precision`` instead (the kernels compute in fp32 and round once, the references after each op)."""

    def tol(ref) -> float:
        t = ref[0] if isinstance(ref, (tuple, list)) else ref
        scale = max(1.0, float(t.float().abs().max())) if t.numel() else 1.0
        return (low_precision if t.dtype in (torch.bfloat16, torch.float16) else atol) * scale

    return tol
