"""Peak memory of scoring 80 orderings of one ~2,000-token text: shared prefix (held once) vs a copied cache.

Modes: ``shared`` (transformers forward, prefix held once), ``copy`` (a per-row copy in a DynamicCache) and
``native`` (the native Gemma-3 step function, prefix held once; its packed weights are made before the
baseline is taken, so they are not in the peak).

Each mode runs in its own process; a sampler thread reads VmRSS from /proc every 5 ms, and the peak during
scoring minus the resident size just before it is reported (the model's weights are excluded). By default the
trie's sharing below the item's prefix is off (``--min-shared 100000``), so all orderings are sibling rows of
one prefix, as in a plain batched run: that is where a per-row copy of the prefix costs the most. With the
trie on (``--min-shared 0``) sibling groups are small and the copied path costs less.

    .venv/bin/python -m benchmarks.memory [--orderings 80] [--tokens 2000] [--out benchmarks/results/memory.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.child import run_module

HERE = Path(__file__).resolve().parent


def worker(mode: str, n_orderings: int, n_tokens: int, budget: int, min_shared: int) -> dict:
    from benchmarks import workloads
    from benchmarks.rss import measured
    from logitjudge.engine import Engine
    from logitjudge.orderings import shared_random
    from logitjudge.rubric import builtin_rubric
    from logitjudge.runs import score

    lm, _ = workloads.load("gemma-3-270m", [], threads=2)
    item = workloads.make_texts(lm.tokenizer, 1, n_tokens, "hanna")[0][0]
    engine = Engine(lm, prefix_mode=mode, token_budget=budget, min_shared=min_shared)
    orders = shared_random(5, n_orderings, rng=0)
    table, secs, mib = measured(lambda: score(lm, [item], builtin_rubric("default"), orders, engine=engine,
                                              progress=False))
    return {"mode": mode, "peak_extra_mib": mib, "seconds": secs,
            "prompt_tokens": int(table.meta["engine_stats"]["tokens"]), "probs": table.probs.tolist()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--orderings", type=int, default=80)
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--token-budget", type=int, default=4096, help="rows x tokens per batch")
    ap.add_argument("--min-shared", type=int, default=100000, help="Engine(min_shared=...); 0 = full trie")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default="benchmarks/results/memory.json")
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.orderings, args.tokens, args.token_budget, args.min_shared)))
        return 0
    rows = []
    for mode in ("shared", "copy", "native"):
        cmd = ["--worker", mode, "--orderings", str(args.orderings), "--tokens",
               str(args.tokens), "--token-budget", str(args.token_budget), "--min-shared", str(args.min_shared)]
        res = run_module("memory", cmd, timeout=3600)  # one process per mode: its peak RSS is its own
        if not res.ok:
            raise SystemExit(f"memory.py worker {mode}: {res.cell}")
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
    import numpy as np

    probs = [np.array(r.pop("probs")) for r in rows]
    diff = float(max(np.abs(p - probs[0]).max() for p in probs[1:]))
    ratio = rows[0]["peak_extra_mib"] / rows[1]["peak_extra_mib"]
    print(f"# peak memory, 1 text of ~{args.tokens} tokens x {args.orderings} orderings, gemma-3-270m fp32, CPU, "
          f"min_shared={args.min_shared}, token budget {args.token_budget}\n")
    print("| prefix mode | peak extra RSS (MiB) | seconds |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['peak_extra_mib']:.0f} | {r['seconds']:.1f} |")
    print(f"\nshared / copy peak ratio: {ratio:.2f} (target <= 0.5); native / copy: "
          f"{rows[2]['peak_extra_mib'] / rows[1]['peak_extra_mib']:.2f}; max |Δp| between modes: {diff:.1e}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"orderings": args.orderings, "tokens": args.tokens, "min_shared": args.min_shared,
                               "token_budget": args.token_budget, "rows": rows,
                               "ratio": ratio, "max_abs_prob_diff": diff}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
