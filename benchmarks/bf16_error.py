"""bf16 against fp32 on fixed workloads: max |dp| of option probabilities, for each bf16 GEMM route the native step
can take (``bf16``: the CPU's bf16 GEMMs with bf16 activations; ``bf16_upcast``: fp32 GEMMs on the bf16 weights),
whatever this CPU measured faster (issue 55 item 4; the bound is ``logitjudge.autodtype.TOLERANCE["bf16"]``).

    python -m benchmarks.bf16_error                       # gemma-3-270m: golden plan and demo 12 x 10
    python -m benchmarks.bf16_error --workloads golden    # only tests/golden.py's plan (4 prompts)

Workloads: ``golden`` (tests/golden.py's ``plan``: 2 demo texts x 2 balanced orders), ``demo`` (the 12 demo
texts x the 10 balanced orders of the default 5-option rubric). Prints one JSON line per (workload, route): the
statistic is the largest absolute difference over every option of every prompt, and its prompt.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def engine_probs(lm, rp) -> tuple[np.ndarray, str]:
    """(prompts, options) option probabilities by the engine (its native route), fp32 read-out; the route."""
    from logitjudge.engine import Engine

    eng = Engine(lm)
    lps = eng.prompt_logprobs([rp.prompts(i) for i in range(len(rp))])
    rows = []
    for group in lps:
        for lp in group:
            lp = np.asarray(lp, dtype=np.float64)
            p = np.exp(lp - lp.max())
            rows.append(p / p.sum())
    return np.asarray(rows), eng.gemm_route


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--judge", default="gemma-3-270m")
    ap.add_argument("--workloads", default="golden,demo")
    ap.add_argument("--routes", default="bf16,bf16_upcast")
    args = ap.parse_args(argv)
    import logitjudge.autodtype as ad
    import logitjudge.gemm_rates as gr
    from logitjudge.models import load_model
    from logitjudge.requests import demo_plan

    plans = {"golden": ad.calibration_plan, "demo": demo_plan}  # golden: tests/golden.py's plan, the same
    lm32 = load_model(args.judge, dtype="fp32", device="cpu")
    lm16 = load_model(args.judge, dtype="bf16", device="cpu")
    cpu = gr.describe_cpu()
    for w in args.workloads.split(","):
        p32, _ = engine_probs(lm32, plans[w](lm32))
        for route in args.routes.split(","):
            gr.bf16_route = lambda device="cpu", r=route: r  # the native step asks this when it packs
            p16, took = engine_probs(lm16, plans[w](lm16))
            assert took == route, f"the engine took {took}, not {route}"
            d = np.abs(p16 - p32)
            k = int(d.max(axis=1).argmax())
            print(json.dumps({"judge": args.judge, "workload": w, "route": route, "prompts": len(d),
                              "max_abs_dp": round(float(d.max()), 4), "at_prompt": k,
                              "mean_of_per_prompt_max_dp": round(float(d.max(axis=1).mean()), 4),
                              "cpu": cpu}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
