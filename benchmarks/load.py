"""Other work on the machine, for a benchmark that measures under load (issue 55): ``busy(n, kind)`` runs ``n``
processes beside the timed code, the same for every peer, started before and stopped after.

Kinds:

* ``matmul``: a fixed-work fp32 matmul loop in torch, on ``threads`` threads (default 1: one busy core, the
  case of a training job or another tenant holding a core);
* ``logitjudge``: a second logitjudge scoring the demo workload on the built-in judge again and again (two users
  of the toolkit on one host), on ``threads`` threads.

A busy process reports how many units of work it finished (``done``) and the share of a core it got (``cpu_share``:
its CPU seconds over its wall seconds since it was ready) when stopped, so a table can say how much the load itself
got done beside each peer, and whether it kept its core: on Linux a single-threaded busy process that is alone on
a core keeps it (0.96-1.00 beside every unpinned split of one GEMM, ``benchmarks/busy_core.py``), so the peer gets
the other core only. A library module of the benchmarks (no ``__main__``): each busy
process runs :func:`serve` through ``python -c``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

KINDS = ("matmul", "logitjudge")
ROOT = Path(__file__).resolve().parents[1]


def _matmul_loop(threads: int):
    import torch

    torch.set_num_threads(threads)
    a = torch.randn(512, 512)
    b = torch.randn(512, 512)

    def unit():  # ~1 GFLOP of fp32 matmuls
        for _ in range(4):
            torch.mm(a, b)

    return unit


def _logitjudge_loop(threads: int):
    import logitjudge as lj
    from logitjudge.items import read_items

    judge = lj.load_judge("gemma-3-270m", threads=threads)
    texts = read_items(Path(lj.__file__).parent / "demo" / "texts.jsonl")  # the demo's twelve texts
    items = [{"id": it.id, "text": it.text} for it in texts]

    def unit():
        lj.score(judge, items, orderings="balanced", progress=False)

    return unit


def serve(kind: str, threads: int) -> None:
    """Run units of ``kind`` until SIGTERM, then print how many finished."""
    unit = (_matmul_loop if kind == "matmul" else _logitjudge_loop)(threads)
    done, stop = 0, []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    print("ready", flush=True)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while not stop:
        unit()
        done += 1
    share = (time.process_time() - cpu0) / max(time.perf_counter() - wall0, 1e-9)
    print(f"done {done} cpu_share {share:.3f}", flush=True)


def parse_report(out: str | None) -> tuple[int | None, float | None]:
    """(units done, CPU share) from a busy process's last line, ``done N cpu_share S``; None where missing."""
    lines = (out or "").strip().splitlines()
    words = lines[-1].split() if lines else []
    if words[:1] != ["done"] or len(words) < 2:
        return None, None
    return int(words[1]), (float(words[3]) if words[2:3] == ["cpu_share"] and len(words) > 3 else None)


@contextmanager
def busy(n: int, kind: str = "matmul", threads: int = 1):
    """``n`` busy processes of ``kind`` while the block runs (none: ``n`` = 0); yields a dict that gets each
    process's finished units (``done``) and share of a core (``cpu_share``) once they are stopped."""
    if kind not in KINDS:
        raise ValueError(f"unknown load kind {kind!r}; use one of {KINDS}")
    report: dict = {"processes": n, "kind": kind, "threads": threads, "done": [], "cpu_share": []}
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=os.pathsep.join(
        [str(ROOT), str(ROOT / "kernels"), os.environ.get("PYTHONPATH", "")]))
    code = f"from benchmarks.load import serve; serve({kind!r}, {int(threads)})"
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(n)]
    try:
        for p in procs:  # each is at work (its model loaded) before the timed code starts
            line = p.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"a {kind} load process did not start (exit {p.poll()})")
        time.sleep(0.5)
        yield report
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                out, _ = p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
            done, share = parse_report(out)
            report["done"].append(done)
            report["cpu_share"].append(share)

