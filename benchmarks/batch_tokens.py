"""Tokens per forward call of the native step on CPU: the engine's time on one workload at several call sizes.

The native backend cuts the engine's token budget into calls of at most ``CPU_BATCH_TOKENS`` rows x padded tokens
(:mod:`logitjudge.judge.backends.native`); this benchmark is the measurement behind that constant. Per
size, the whole workload through ``Engine(lm)`` with ``engine.backend.batch_tokens`` set to it, the sizes
interleaved over ``--repeats`` rounds (other load on the machine only slows a run down, and interleaving spreads
it over the sizes), best of the rounds; the largest difference of any option probability from the first size's.

    .venv/bin/python -m benchmarks.batch_tokens [--model gemma-3-270m|NAME|FOLDER] [--workload 8x350]
        [--sizes 4096,2048,1024,512] [--repeats 2] [--threads 2] [--out benchmarks/results/batch_tokens.json]

Prints a table (size, forward calls, seconds, x the fastest) and writes the JSON with the CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from benchmarks import workloads
from benchmarks.timing import best_of_interleaved
from logitjudge.engine import Engine
from logitjudge.gemm_rates import cpu_info, describe_cpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--workload", default="8x350", choices=list(workloads.NAMES))
    ap.add_argument("--sizes", default="4096,2048,1024,512")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default="benchmarks/results/batch_tokens.json")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    lm, wls = workloads.load(args.model, [args.workload], threads=args.threads, data_dir=args.data_dir)
    wl = wls[args.workload]
    engine = Engine(lm, token_budget=max(sizes))
    engine.prompt_logprobs([wl.groups[0][:2]])  # warm-up: oneDNN builds its kernels at the first call

    def at(n):
        engine.backend.batch_tokens = n
        before = engine.stats["forward_calls"]
        out = engine.prompt_logprobs(wl.groups)
        return engine.stats["forward_calls"] - before, np.concatenate([np.exp(lp) for g in out for lp in g])

    timed = best_of_interleaved({n: (lambda n=n: at(n)) for n in sizes}, args.repeats)
    best, spread = {n: t.best for n, t in timed.items()}, {n: t.spread for n, t in timed.items()}
    calls, probs = {n: timed[n].value[0] for n in sizes}, {n: timed[n].value[1] for n in sizes}
    fastest = min(best.values())
    cpu = describe_cpu(cpu_info())
    print(f"# {args.workload}, {args.model}, fp32, prefix mode {engine.prefix_mode}, {args.threads} threads; "
          f"best of {args.repeats} interleaved rounds\n# CPU: {cpu}\n")
    print("| tokens per call | forward calls | seconds | spread | x fastest | max abs dp vs first |\n"
          "|---:|---:|---:|---:|---:|---:|")
    rows = []
    for n in sizes:
        dp = float(np.abs(probs[n] - probs[sizes[0]]).max())
        rows.append({"batch_tokens": n, "forward_calls": calls[n], "seconds": best[n], "spread_seconds": spread[n],
                     "max_abs_dp": dp})
        print(f"| {n} | {calls[n]} | {best[n]:.2f} | {spread[n]:.2f} | {best[n] / fastest:.2f} | {dp:.1e} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cpu": cpu, "model": args.model, "workload": args.workload, "threads": args.threads,
                               "repeats": args.repeats, "prefix_mode": engine.prefix_mode, "rows": rows}, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
