"""The native step's MLP whole or in row blocks: the measurement behind ``native_gemms.MLP_DOWN``.

A judge's gated MLP (gate/up with the activation and product in oneDNN's epilogues, then down; random weights of
the judge's shapes from its config, packed as the native step packs them) on calls of several row counts, whole
and in near-equal blocks of at most 512, 384 and 256 rows. Per row count the variants run interleaved over
``--rounds`` rounds (the order reversed every other round, ``benchmarks.timing``); the table gives each variant's
rate in its fastest round and its speed-up over the whole call (fastest against fastest: other load on a shared
machine only slows a round down), the JSON also each variant's spread (slowest - fastest round), and what the
dispatcher chose for that bucket of rows on this machine (measured once per machine and cached,
``logitjudge_kernels.dispatch``).

    .venv/bin/python -m benchmarks.mlp_rows [--model qwen2.5-coder-0.5b-instruct|gemma-3-270m|FOLDER]
        [--rows 256,512,768,1024,1536,2048] [--rounds 20] [--threads 2] [--out benchmarks/results/mlp_rows.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from benchmarks import judge_model
from benchmarks.timing import best_of_interleaved
from logitjudge.gemm_rates import cpu_info, describe_cpu
from logitjudge.judge.backends import native_gemms as ng


def mlp_of(cfg: dict) -> tuple[ng.GatedMLP, ng.Weight, int, int, str]:
    """Random packed fp32 weights of the judge's MLP shapes: (mlp, down, d, I, activation)."""
    c = judge_model.text_config(cfg)
    d, inter = c["hidden_size"], c["intermediate_size"]
    act = c.get("hidden_act") or c.get("hidden_activation") or "silu"
    act = "silu" if act == "silu" else "gelu_tanh"
    g = torch.Generator().manual_seed(0)
    mlp = ng.GatedMLP(torch.randn(2 * inter, d, generator=g) / d ** 0.5, ng.packing_available(), act=act)
    down = ng.Weight(torch.randn(d, inter, generator=g) / inter ** 0.5, ng.packing_available())
    return mlp, down, d, inter, act


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--rows", default="256,512,768,1024,1536,2048")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/results/mlp_rows.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    mlp, down, d, inter, act = mlp_of(judge_model.read_config(judge_model.resolve(args.model)))
    cpu = describe_cpu(cpu_info())
    print(f"# {args.model}: MLP d {d}, I {inter}, {act}, fp32, packed {mlp.packs}, "
          f"{args.threads} threads; best of {args.rounds} interleaved rounds\n# CPU: {cpu}\n")
    names = ["whole"] + [f"blocks of {r}" for r in ng.MLP_ROW_BLOCKS]
    print("| rows | " + " | ".join(f"{n} GFLOP/s (x whole)" for n in names) + " | dispatcher's choice |")
    print("|---:|" + "---:|" * len(names) + "---|")
    rows_out = []
    with torch.inference_mode():
        for m in (int(r) for r in args.rows.split(",")):
            h = torch.randn(m, d, generator=torch.Generator().manual_seed(m))
            usable = [n for n in names if ng.MLP_DOWN.candidate(n).refusal(mlp, down, h) is None]
            impls = {n: ng.MLP_DOWN.candidate(n).fn for n in usable}
            fns = {n: (lambda fn=fn, h=h: fn(mlp, down, h)) for n, fn in impls.items()}
            # warm-up: oneDNN builds its kernels for each new shape
            timed = best_of_interleaved(fns, args.rounds, warmup=True)
            flops = 2 * m * (mlp.weight.numel() + down.weight.numel())
            rate = {n: flops / t.best / 1e9 for n, t in timed.items()}
            speedup = {n: timed["whole"].best / t.best for n, t in timed.items()}
            choice = ng.MLP_DOWN.choose(mlp, down, h)[2]["choice"]
            cells = [f"{rate[n]:.0f} ({speedup[n]:.2f}x)" if n in rate else "n/a" for n in names]
            print(f"| {m} | " + " | ".join(cells) + f" | {choice} |", flush=True)
            rows_out.append({"rows": m, "gflops_best": rate, "speedup_vs_whole_best": speedup,
                             "seconds_spread": {n: t.spread for n, t in timed.items()}, "dispatcher_choice": choice})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cpu": cpu, "model": args.model, "d": d, "intermediate": inter, "activation": act,
                               "threads": args.threads, "rounds": args.rounds, "rows": rows_out}, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
