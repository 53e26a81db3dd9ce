"""The shared path's last-layer pruning, before/after, interleaved in one process (a loaded machine's load
drifts between separate runs; alternating rounds see the same load).

Per round, in this order: logitjudge ``shared`` with the last layer pruned to the read positions (after),
the same backend unpruned (before: ``backend.prunes = False``), and transformers with its own prefix cache
(``logitjudge.judge.baselines.prefix_cache_prompt_logprobs``). Prints each round's seconds and the 1-minute
load average, the medians, and the largest option-probability difference (renormalised) between the three.
Writes the JSON with each method's log-probabilities of the last round (``--out``).

    python benchmarks/pruning.py --model /tmp/qwen05b/qwen2.5-coder-0.5b-instruct.gguf --workload 1x350 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="as benchmarks/peers.py --model")
    ap.add_argument("--workload", default="1x350")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(HERE / "results" / "pruning.json"))
    args = ap.parse_args(argv)

    import judge_model
    import torch
    import workloads
    from peers_table import max_dp

    from logitjudge.engine import Engine
    from logitjudge.judge.baselines import prefix_cache_prompt_logprobs
    from logitjudge.models import load_model

    torch.set_num_threads(args.threads)
    judge = judge_model.resolve(args.model)
    lm = load_model(judge.load, dtype="fp32", device="cpu")
    wl = workloads.build(args.workload, lm)
    engine = Engine(lm, prefix_mode="shared")

    def logitjudge(prune: bool):
        engine.backend.prunes = prune
        return [lp for g in engine.prompt_logprobs(wl.groups) for lp in g]

    methods = {"logitjudge shared, pruned (after)": lambda: logitjudge(True),
               "logitjudge shared, unpruned (before)": lambda: logitjudge(False),
               "transformers + its own prefix cache": lambda: [
                   lp for g in prefix_cache_prompt_logprobs(lm.model, wl.groups) for lp in g]}
    logitjudge(True)  # warm-up: first-call allocations, the kernels' dispatch decisions
    times: dict = {m: [] for m in methods}
    last: dict = {}
    for r in range(args.rounds):
        for name, fn in methods.items():
            t0 = time.perf_counter()
            last[name] = fn()
            times[name].append(time.perf_counter() - t0)
            print(f"round {r + 1} {name}: {times[name][-1]:.1f} s (load {os.getloadavg()[0]:.2f})", flush=True)
    names = list(methods)
    print(f"\n{args.workload} ({len(wl.prompts)} prompts, trie tokens {wl.trie_tokens}), {args.threads} threads, "
          f"median of {args.rounds} interleaved rounds:")
    for name in names:
        print(f"  {name}: {statistics.median(times[name]):.1f} s")
    diffs = {f"{a} vs {b}": max_dp(last[a], last[b])[0] for i, a in enumerate(names) for b in names[i + 1:]}
    for k, v in diffs.items():
        print(f"  max abs dp (renormalised), {k}: {v:.2e}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": judge.arg, "workload": args.workload, "threads": args.threads,
                               "times": times, "max_abs_dp": diffs,
                               "logprobs": {k: [np.asarray(x).tolist() for x in v] for k, v in last.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
