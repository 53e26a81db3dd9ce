"""Do fresh processes on one machine take the same kernel routes? (issue 55 item 3)

Each of ``--processes`` fresh processes loads the judge and scores a few prompts in each ``--dtypes`` and
reports, per route (dtype, kernel, shape bucket), the candidates the exactness gate rejected
(``logitjudge_kernels.exactness``) and the one the speed choice took. The table gives, per route, the choices and
their counts and how many processes agreed with the most common one, for the exactness verdicts and the speed
choice apart; the JSON also the CPU and the load.

``--cache fresh`` (default): every process measures every kernel decision anew (its own empty decision cache,
``LOGITJUDGE_KERNEL_CACHE``; the compiled kernels are copied in from the first process's build, so the build is not
repeated): how stable the gate and the speed choice are themselves. ``--cache machine``: the processes share one
decision cache, as a user's runs on one machine do (the first measures and keeps its decisions; a later one
measures again only a decision kept as provisional, one measured on a machine busier than its CPU count):
which routes a user's runs take.

    python -m benchmarks.route_stability [--judge gemma-3-270m] [--processes 20] [--dtypes fp32,bf16]
        [--threads 2] [--cache fresh|machine] [--out benchmarks/results/route_stability.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.child import run_module

TEXTS = ("Once upon a time a cat sat on the mat and the dog barked at the moon all night long.",
         "The committee met on Tuesday; after a long debate it approved the budget by a narrow margin.")


def worker(judge: str, dtypes: list[str], threads: int) -> dict:
    """{route: {"choice", "not_exact"}} for every kernel decision this process takes; a route is "dtype kernel
    [bucket]"."""
    from logitjudge.engine import Engine
    from logitjudge.items import Item
    from logitjudge.models import load_model, set_threads
    from logitjudge.rubric import builtin_rubric
    from logitjudge.runs import score

    set_threads(threads)
    routes = {}
    for dtype in dtypes:
        lm = load_model(judge, dtype=dtype, device="cpu")
        eng = Engine(lm)
        items = [Item(f"t{i}", t) for i, t in enumerate(TEXTS)]
        table = score(lm, items, builtin_rubric("default"), engine=eng, progress=False)
        routes[f"{dtype} gemm_route"] = {"choice": str(eng.gemm_route), "not_exact": []}
        for kernel, k in table.meta.get("kernels", {}).items():
            for bucket, d in k["choices"].items():
                routes[f"{dtype} {kernel} [{bucket}]"] = {"choice": d["choice"],
                                                          "not_exact": sorted(d.get("not_exact", {}))}
    return routes


def tally(runs: list[dict]) -> list[dict]:
    """Per route: the speed choices and the exactness verdicts (rejected sets) with their counts, and how many of
    the processes that took the route agree with the most common one."""
    rows = []
    for route in sorted({r for run in runs for r in run}):
        seen = [run[route] for run in runs if route in run]
        choice = collections.Counter(s["choice"] for s in seen)
        exact = collections.Counter(",".join(s["not_exact"]) or "-" for s in seen)
        rows.append({"route": route, "processes": len(seen), "choices": dict(choice.most_common()),
                     "rejected": dict(exact.most_common()), "choice_stable": choice.most_common(1)[0][1],
                     "exactness_stable": exact.most_common(1)[0][1]})
    return rows


def _fresh_cache(build: Path, to: Path) -> None:
    """A kernel cache holding ``build``'s compiled kernels and no decision."""
    to.mkdir(parents=True)
    for p in build.iterdir():
        if not p.name.startswith("dispatch-"):
            (shutil.copytree if p.is_dir() else shutil.copy2)(p, to / p.name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--judge", default="gemma-3-270m")
    ap.add_argument("--processes", type=int, default=20)
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--cache", choices=("fresh", "machine"), default="fresh",
                    help="fresh: each process measures anew; machine: one decision cache for all, as on a user's "
                         "machine")
    ap.add_argument("--out", default="benchmarks/results/route_stability.json")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    dtypes = [d for d in a.dtypes.split(",") if d]
    if a.worker:
        print(json.dumps(worker(a.judge, dtypes, a.threads)))
        return 0

    from logitjudge.gemm_rates import cpu_info, describe_cpu

    runs, failures = [], []
    load_before = os.getloadavg()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="route-stability-") as tmp:
        first = Path(tmp) / "p0"
        for i in range(a.processes):
            cache = first if i == 0 or a.cache == "machine" else Path(tmp) / f"p{i}"
            if cache != first:
                _fresh_cache(first, cache)
            res = run_module("route_stability", ["--worker", "--judge", a.judge, "--dtypes", a.dtypes,
                                                 "--threads", str(a.threads)], timeout=a.timeout,
                             env={"LOGITJUDGE_KERNEL_CACHE": str(cache), "OMP_NUM_THREADS": str(a.threads)})
            if res.ok:
                runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
            else:
                failures.append(res.cell)
            print(f"process {i + 1}/{a.processes}: {'ok' if res.ok else res.cell}", file=sys.stderr)
    rows = tally(runs)
    n = len(runs)
    print(f"{'route':<70} {'speed choice (count)':<40} {'rejected (count)':<28} stable")
    for r in rows:
        choices = ", ".join(f"{k} {v}" for k, v in r["choices"].items())
        rejected = ", ".join(f"{k} {v}" for k, v in r["rejected"].items())
        print(f"{r['route'][:70]:<70} {choices[:40]:<40} {rejected[:28]:<28} "
              f"{r['exactness_stable']}/{r['processes']} exact, {r['choice_stable']}/{r['processes']} speed")
    # stable: every process that took the route agrees (a route some processes did not take follows from another
    # route's speed choice: the MLP's row blocks set the GEMMs' row buckets)
    exact_ok = sum(r["exactness_stable"] == r["processes"] for r in rows)
    speed_ok = sum(r["choice_stable"] == r["processes"] for r in rows)
    partial = sum(r["processes"] < n for r in rows)
    print(f"\n{len(rows)} routes over {n} processes ({partial} taken by only some): exactness stable in {exact_ok}, "
          f"speed choice stable in {speed_ok}; {len(failures)} failed" + (f" ({failures[0]})" if failures else ""))
    out = {"judge": a.judge, "dtypes": dtypes, "threads": a.threads, "processes": a.processes, "cache": a.cache,
           "ok": n,
           "failures": failures, "cpu": describe_cpu(cpu_info()), "load_before": load_before,
           "load_after": os.getloadavg(), "seconds": round(time.time() - t0, 1), "routes": rows,
           "exactness_stable": exact_ok, "choice_stable": speed_ok, "partial": partial,
           "date": time.strftime("%Y-%m-%d", time.gmtime())}
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=1))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
