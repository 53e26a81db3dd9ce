"""What an ordering design costs the engine: ``--orderings all`` (every n! order) against ``balanced`` (the 2n
rotations) and per-item ``random:K`` on one workload (default ``8x350``: 8 texts of ~350 tokens, 5 options, so
all = 120 orders per text against balanced's 10). Per design: prompts, trie tokens the engine runs
(``engine_tokens``), their ratio to balanced, and the best seconds of ``Engine.prompt_logprobs`` over
``--repeats`` runs with their spread (``benchmarks.timing``), the designs interleaved within each repeat so that a
shared machine's load falls on all of them alike. Prints a table and writes JSON.

    .venv/bin/python -m benchmarks.orderings_cost [--workload 8x350] [--designs balanced,all,random:10] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch

from benchmarks import workloads
from benchmarks.timing import best_of_interleaved
from benchmarks.workloads import engine_tokens
from logitjudge.engine import Engine


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--workload", default="8x350", choices=workloads.NAMES)
    ap.add_argument("--designs", default="balanced,all,random:10", help="orderings specs, comma-separated")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--token-budget", type=int, default=4096)
    ap.add_argument("--out", default="benchmarks/results/orderings_cost.json")
    args = ap.parse_args(argv)
    lm, _ = workloads.load(args.model, [], threads=args.threads)
    engine = Engine(lm, token_budget=args.token_budget)
    designs = args.designs.split(",")
    wls = {d: workloads.build(args.workload, lm, orderings=d) for d in designs}
    engine.prompt_logprobs([wls[designs[0]].groups[0][:1]])  # first-call costs are no design's
    timed = best_of_interleaved({d: (lambda d=d: engine.prompt_logprobs(wls[d].groups)) for d in designs},
                                args.repeats, on_time=lambda d, s: print(f"{d}: {s:.1f} s", file=sys.stderr,
                                                                         flush=True))  # progress on a long run
    base = engine_tokens(engine, wls[designs[0]].groups)
    rows = []
    for d in designs:
        wl = wls[d]
        tok, secs = engine_tokens(engine, wl.groups), timed[d].best
        rows.append({"design": d, "orderings_per_text": int(wl.orderings.shape[-2]), "prompts": len(wl.prompts),
                     "trie_tokens": tok, "tokens_vs_first": tok / base, "seconds": secs,
                     "spread_seconds": timed[d].spread, "all_seconds": timed[d].times, "tokens_per_s": tok / secs})
    first, wl0 = rows[0], wls[designs[0]]
    print(f"## {args.workload}: {len(wl0.items)} texts of ~{int(sum(wl0.text_tokens) / len(wl0.items))} tokens, "
          f"{wl0.rubric.n_options} options, {torch.get_num_threads()} threads, best of {args.repeats} "
          "interleaved runs (spread: slowest - fastest)\n")
    print(f"| design | orders per text | prompts | trie tokens | × {first['design']} tokens | seconds | "
          f"spread | × {first['design']} time | tokens/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['design']} | {r['orderings_per_text']} | {r['prompts']} | {r['trie_tokens']:,} | "
              f"{r['tokens_vs_first']:.2f}× | {r['seconds']:.1f} | {r['spread_seconds']:.1f} | "
              f"{r['seconds'] / first['seconds']:.2f}× | "
              f"{r['tokens_per_s']:,.0f} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": args.model, "workload": wls[designs[0]].summary(), "repeats": args.repeats,
                               "threads": torch.get_num_threads(), "machine": platform.platform(),
                               "token_budget": args.token_budget, "rows": rows}, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
