"""The spare thread's settings set against each other in one process, under one load (issue 55): a judge's
workload quiet and beside ``--load`` busy single-threaded matmul processes (``benchmarks/load.py``), the settings
alternating round by round (the order reversed every other round), so the host's drift over minutes, which between
separate processes was as large as the effect (docs/performance.md), falls on every setting alike.

Settings (``logitjudge_kernels/spare_thread.py``):

* ``never``: ``LOGITJUDGE_SPARE_THREAD=0``, torch's threads only;
* ``auto``: the default, each native step raised by one thread while other processes take a core, the ops whose
  bits would move at the raised count kept at the base count (the same bits as ``never``);
* ``unguarded``: ``auto`` with every op of the step raised (nothing paused or checked): not the same bits, the
  bound of what the raised count can buy;
* ``pinned``: ``auto`` with the raised step's threads pinned one CPU each, round robin (``pin_threads.c``): with
  three threads on two CPUs, two share one CPU and one shares the other with the busy process (the same bits).

Printed: per setting the best and median seconds quiet (``never`` and ``auto``; the others do not raise a quiet
step either) and busy, busy over ``never``'s best quiet time, the cores the judge got busy (its CPU seconds over
its wall seconds, median over the rounds: what a thread more is meant to raise), and the load's share of a core;
JSON to ``--out``.

    .venv/bin/python -m benchmarks.spare_thread [--model gemma-3-270m] [--workload 1x350] [--rounds 4]
        [--settings never,auto,unguarded,pinned] [--load 1] [--out benchmarks/results/spare_thread.json]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import statistics
import time
from pathlib import Path

import torch
from logitjudge_kernels import _cbuild, spare_thread

from benchmarks import load, workloads
from logitjudge.engine import Engine
from logitjudge.gemm_rates import cpu_info, describe_cpu

SETTINGS = ("never", "auto", "unguarded", "pinned")
HERE = Path(__file__).resolve().parent
_REAL = {"paused": spare_thread.paused, "checked": spare_thread.checked, "raised": spare_thread.raised}


@contextlib.contextmanager
def _nothing():
    yield


def _pinned_raised():
    """spare_thread.raised with the raised team pinned one CPU each while the step runs."""
    vi = ctypes.c_int
    sig = (vi, ctypes.POINTER(vi), vi)
    lib, why = _cbuild.load(HERE / "pin_threads.c", (("pin_team", sig, None), ("unpin_team", sig, None)))
    if lib is None:
        raise SystemExit(f"pin_threads.c did not build: {why}")
    cpus = sorted(os.sched_getaffinity(0))
    arr = (vi * len(cpus))(*cpus)

    @contextlib.contextmanager
    def raised():
        with _REAL["raised"]():
            n, on = torch.get_num_threads(), spare_thread.is_raised()
            if on:
                lib.pin_team(n, arr, len(cpus))
            try:
                yield
            finally:
                if on:
                    lib.unpin_team(n, arr, len(cpus))
    return raised


def use(setting: str, pinned) -> None:
    """Put ``setting`` in place (module attributes the native step reads at each call)."""
    for name, fn in _REAL.items():
        setattr(spare_thread, name, fn)
    os.environ[spare_thread.ENV] = "0" if setting == "never" else "auto"
    if setting == "unguarded":
        spare_thread.paused = lambda: _nothing() if spare_thread.is_raised() else _REAL["paused"]()
        spare_thread.checked = lambda key, run: run()
    elif setting == "pinned":
        spare_thread.raised = pinned


def rounds(run, settings: list[str], n: int, pinned) -> tuple[dict, dict]:
    """({setting: [wall s per round]}, {setting: [cores per round]}); ``run()`` gives (wall s, CPU s)."""
    times: dict = {s: [] for s in settings}
    cores: dict = {s: [] for s in settings}
    for r in range(n):
        for s in settings if r % 2 == 0 else settings[::-1]:
            use(s, pinned)
            wall, cpu = run()
            times[s].append(wall)
            cores[s].append(cpu / wall)
    return times, cores


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--workload", default="1x350", choices=list(workloads.NAMES))
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--load", type=int, default=1, help="busy single-threaded matmul processes")
    ap.add_argument("--out", default="benchmarks/results/spare_thread.json")
    args = ap.parse_args(argv)
    settings = [s for s in args.settings.split(",") if s]
    if bad := [s for s in settings if s not in SETTINGS]:
        ap.error(f"unknown setting(s) {bad}; choose from {SETTINGS}")
    lm, wls = workloads.load(args.model, [args.workload], threads=args.threads)
    groups = wls[args.workload].groups
    engine = Engine(lm, prefix_mode="native")
    pinned = _pinned_raised() if "pinned" in settings else None

    def run() -> tuple[float, float]:
        t, c = time.perf_counter(), time.process_time()
        engine.prompt_logprobs(groups)
        return time.perf_counter() - t, time.process_time() - c

    quiet_settings = [s for s in settings if s in ("never", "auto")]
    rounds(run, quiet_settings, 1, pinned)  # routes decided, kernels built
    quiet, _ = rounds(run, quiet_settings, args.rounds, pinned)
    with load.busy(args.load, "matmul", 1) as work:
        rounds(run, settings, 1, pinned)  # auto has read the load; every GEMM bucket checked
        busy, cores = rounds(run, settings, args.rounds, pinned)
    use("auto", pinned)
    floor = min(quiet.get("never") or quiet.get("auto") or [float("nan")])
    shares = [s for s in work["cpu_share"] if s is not None]
    print(f"{args.model} {args.workload}, {torch.get_num_threads()} threads, {describe_cpu(cpu_info())}, "
          f"{args.load} busy process(es), load's share of a core {' '.join(f'{s:.2f}' for s in shares)}")
    print(f"{'setting':<10} {'quiet best':>10} {'quiet median':>12} {'busy best':>9} {'busy median':>11} "
          f"{'busy / quiet':>12} {'busy cores':>10}")
    rows = {}
    for s in settings:
        q, b = quiet.get(s, []), busy[s]
        rows[s] = {"quiet_s": q, "busy_s": b, "busy_over_quiet": min(b) / floor, "busy_cores": cores[s]}
        qb, qm = (f"{min(q):.3f}", f"{statistics.median(q):.3f}") if q else ("-", "-")
        print(f"{s:<10} {qb:>10} {qm:>12} {min(b):9.3f} {statistics.median(b):11.3f} {min(b) / floor:11.2f}x "
              f"{statistics.median(cores[s]):10.2f}")
    print("busy / quiet: the setting's best busy time over never's best quiet time; busy cores: the judge's CPU "
          "seconds over its wall seconds, median round")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": args.model, "workload": args.workload, "threads": args.threads,
                               "cpu": describe_cpu(cpu_info()), "load": args.load, "load_cpu_share": shares,
                               "rounds": args.rounds, "settings": rows}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
