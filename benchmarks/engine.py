"""Engine vs the two transformers baselines on gemma-3-270m (or --model), 1 and 8 texts of ~350 tokens.

(a) one full forward per prompt (``engine.plain_prompt_logprobs``), (b) prompts batched with padding, no prefix
sharing, logits only at the last position (``judge.baselines.batched_prompt_logprobs``), (c) the engine. n=5, balanced
orderings (10 prompts per text). Prints a table and writes JSON.

    .venv/bin/python -m benchmarks.engine [--workloads 1x350,8x350] [--dtype fp32] [--device cpu] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import numpy as np
import torch

from benchmarks import workloads
from benchmarks.timing import best_of_interleaved
from benchmarks.workloads import engine_tokens
from logitjudge.engine import Engine, distribution, plain_prompt_logprobs
from logitjudge.judge.baselines import batched_prompt_logprobs


def max_prob_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.abs(distribution(x)[0] - distribution(y)[0]).max()) for x, y in zip(a, b))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--workloads", default="1x350,8x350")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--token-budget", type=int, default=4096)
    ap.add_argument("--prefix-mode", default="auto", choices=["auto", "native", "shared", "copy"],
                    help="the engine's forward path (A/B the native step function against transformers')")
    ap.add_argument("--out", default="benchmarks/results/engine.json")
    args = ap.parse_args(argv)
    lm, wls = workloads.load(args.model, args.workloads, dtype=args.dtype, device=args.device, threads=args.threads)
    engine = Engine(lm, token_budget=args.token_budget, prefix_mode=args.prefix_mode)
    report = {"model": args.model, "dtype": args.dtype, "device": args.device, "prefix_mode": engine.prefix_mode,
              "threads": torch.get_num_threads(),
              "cpu": platform.processor() or platform.machine(), "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None, "workloads": []}
    print(f"# engine benchmark: {args.model} {args.dtype} on {args.device}, {torch.get_num_threads()} threads, "
          f"prefix_mode={engine.prefix_mode}")
    sync = torch.cuda.synchronize if torch.cuda.is_available() else None  # a GPU's work inside the time
    for name, wl in wls.items():
        groups = wl.groups
        peers = {
            "(a) full forward per prompt": lambda g=groups: [plain_prompt_logprobs(lm.model, x) for x in g],
            "(b) batched, no prefix sharing": lambda g=groups: [batched_prompt_logprobs(lm.model, x) for x in g],
            "(c) logitjudge engine": lambda g=groups: engine.prompt_logprobs(g),
        }
        # warm each peer on one prompt of the first text, not on the whole workload
        warm = {"(a) full forward per prompt": lambda g=groups: plain_prompt_logprobs(lm.model, g[0][:1]),
                "(b) batched, no prefix sharing": lambda g=groups: batched_prompt_logprobs(lm.model, g[0][:1]),
                "(c) logitjudge engine": lambda g=groups: engine.prompt_logprobs([g[0][:1]])}
        tokens = {"(a) full forward per prompt": wl.plain_tokens,
                  "(b) batched, no prefix sharing": wl.padded_tokens(16) if wl.single_token else None}
        if not wl.single_token:
            peers.pop("(b) batched, no prefix sharing")
        # (a) is minutes long and steady: one run; (b) and (c) interleaved over --repeats rounds, each warmed up on
        # one prompt first (first-call costs: allocator, thread pools, are not the peer's)
        plain = "(a) full forward per prompt"
        timed = best_of_interleaved({plain: peers.pop(plain)}, 1, warmup=warm, sync=sync)
        timed |= best_of_interleaved(peers, args.repeats, warmup=warm, sync=sync)
        rows, ref = [], None
        for peer in warm:
            if peer not in timed:
                rows.append({"peer": peer, "seconds": None, "note": "needs single-token labels"})
                continue
            secs, out = timed[peer].best, timed[peer].value
            flat = [x for g in out for x in g]
            ref = flat if ref is None else ref
            tok = tokens.get(peer)
            if tok is None:
                tok = engine_tokens(engine, groups)
            rows.append({"peer": peer, "seconds": secs, "spread_seconds": timed[peer].spread,
                         "runs": len(timed[peer].times), "tokens": tok, "tokens_per_s": tok / secs,
                         "max_abs_prob_diff_vs_a": max_prob_diff(flat, ref)})
        eng_s = rows[-1]["seconds"]
        for r in rows:
            r["x_slower_than_engine"] = None if r["seconds"] is None else r["seconds"] / eng_s
        report["workloads"].append({"workload": wl.summary(), "rows": rows})
        print(f"\n## {name}: {len(wl.items)} text(s) of ~{int(np.mean(wl.text_tokens))} tokens, "
              f"{len(wl.orderings)} orderings, {wl.rubric.n_options} options ({wl.source})\n")
        print("| peer | seconds (best) | spread (runs) | tokens | tokens/s | × engine time | max |Δp| vs (a) |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            if r["seconds"] is None:
                print(f"| {r['peer']} | n/a | | | | | {r['note']} |")
                continue
            print(f"| {r['peer']} | {r['seconds']:.2f} | {r['spread_seconds']:.2f} ({r['runs']}) | {r['tokens']:,} | "
                  f"{r['tokens_per_s']:,.0f} | "
                  f"{r['x_slower_than_engine']:.1f}× | {r['max_abs_prob_diff_vs_a']:.1e} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
