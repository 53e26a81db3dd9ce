"""The ``shared`` path against the transformers-prefix-cache peer, in one process, rounds interleaved.

For judges with no native step (GPT-OSS, Qwen3.5, Gemma-2, ...) logitjudge runs transformers' own forward with the
prefix held once (``prefix_mode="shared"``); the peer is the method a careful user writes with transformers' own
cache (:func:`logitjudge.judge.baselines.prefix_cache_prompt_logprobs`: an item's common prefix once, its suffix
rows in right-padded batches of 16). Both on the same prompts (``benchmarks/workloads.py``), fp32, best of
``--repeats`` interleaved rounds (other load only slows a run down; interleaving spreads it over the methods),
forward calls and tokens counted, and the largest difference of any option probability between them.

``--min-shared`` lists the engine's ``min_shared`` values to time (``auto``: the engine's default): trie segments
shorter than it below an item's prefix are run once per branch, so that a level's rows batch into one call (the
shared backend runs the rows of one prefix per call) or, on the native step, a trie level's call goes.

    .venv/bin/python -m benchmarks.shared_path --model FOLDER|NAME [--workload 8x350] [--min-shared auto,0]
        [--prefix-mode shared|native] [--repeats 2] [--threads 2] [--out benchmarks/results/shared_path.json]

Any judge works; one the native step takes is forced to ``shared`` here (the Qwen2.5 0.5B judge: its de-quantised
folder from ``benchmarks/judge_model.py``, e.g. ``~/.cache/logitjudge/peers/qwen2.5-coder-0.5b-instruct-*``),
unless ``--prefix-mode native`` asks for the native step: the same ``min_shared`` question for it.
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
from logitjudge.judge.baselines import prefix_cache_prompt_logprobs


def runners(lm, groups, settings: list[str], mode: str = "shared") -> dict:
    """name -> fn() returning (per-prompt option log-probs, forward calls, tokens); the engine in prefix mode
    ``mode`` at each ``min_shared`` of ``settings``."""
    out = {}

    def peer():
        st: dict = {}
        got = prefix_cache_prompt_logprobs(lm.model, groups, batch_size=16, stats=st)
        return got, None, st["tokens"]

    out["hf-prefix-cache"] = peer
    for s in settings:
        kw = {} if s == "auto" else {"min_shared": int(s)}
        engine = Engine(lm, prefix_mode=mode, **kw)

        def run(engine=engine):
            calls, toks = engine.stats["forward_calls"], engine.stats["tokens"]
            got = engine.prompt_logprobs(groups)
            return got, engine.stats["forward_calls"] - calls, engine.stats["tokens"] - toks

        out[f"{mode}, min_shared {engine.min_shared}" + (" (auto)" if s == "auto" else "")] = run
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--workload", default="8x350", choices=list(workloads.NAMES))
    ap.add_argument("--min-shared", default="auto,0")
    ap.add_argument("--prefix-mode", default="shared", choices=["shared", "native"],
                    help="the backend timed (native: the same min_shared question for the fused step)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default="benchmarks/results/shared_path.json")
    args = ap.parse_args(argv)
    lm, wls = workloads.load(args.model, [args.workload], threads=args.threads, data_dir=args.data_dir)
    wl = wls[args.workload]
    fns = runners(lm, wl.groups, args.min_shared.split(","), args.prefix_mode)
    # warm-up: the first text's first two prompts are not enough for oneDNN/MKL, so one whole run each
    timed = best_of_interleaved(fns, args.repeats, warmup=True)
    best, spread = {name: t.best for name, t in timed.items()}, {name: t.spread for name, t in timed.items()}
    info = {name: (calls, toks, np.concatenate([np.exp(lp) for g in got for lp in g]))
            for name, (got, calls, toks) in ((n, t.value) for n, t in timed.items())}
    ref = info["hf-prefix-cache"][2]
    cpu = describe_cpu(cpu_info())
    print(f"# {args.workload}, {args.model}, prefix mode {args.prefix_mode}, fp32, {args.threads} threads, best of "
          f"{args.repeats} interleaved rounds\n# CPU: {cpu}\n")
    print("| method | seconds | spread | x hf-prefix-cache | forward calls | tokens | max abs dp vs hf-prefix-cache |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for name in fns:
        calls, toks, p = info[name]
        dp = float(np.abs(p - ref).max())
        rows.append({"method": name, "seconds": best[name], "spread_seconds": spread[name], "forward_calls": calls,
                     "tokens": toks, "max_abs_dp": dp})
        print(f"| {name} | {best[name]:.2f} | {spread[name]:.2f} | {best[name] / best['hf-prefix-cache']:.2f} | "
              f"{'' if calls is None else calls} | {toks:,} | {dp:.1e} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cpu": cpu, "model": args.model, "prefix_mode": args.prefix_mode,
                               "workload": args.workload, "threads": args.threads, "repeats": args.repeats,
                               "rows": rows}, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
