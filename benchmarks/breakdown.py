"""Where the engine's time goes: one workload, the native step function's parts timed in place.

Any judge the ``native`` step takes (Gemma-3, Llama, Qwen2/2.5, Qwen3, Mistral, Phi-3). Wraps (for the timed run
only) the projections (packed GEMMs; the gated-MLP GEMMs with their GELU or SiLU / product epilogues), the q/k
(norm +) RoPE and residual + norm row kernels, attention (shared-prefix and the last layer's
read positions) and the step function as a whole; the rest of the run (trie, scheduling, the read-out of the
vocabulary head, Python) is the run minus the step function. Python's cyclic garbage collector is timed too
(``gc.callbacks``): a full collection traverses every object of the model, tokenizer and transformers (0.36 s
in a timed run of gemma-3-270m's 8x350 on an AMD EPYC Zen 5) and lands in whichever part allocates when it comes
due, most often the trie build outside the step, in some runs and not others; its time is printed under the
table (it is inside the parts, not one of them). Each part's FLOPs rate is printed where it has one
(GEMMs: 2 x rows x weight size of every call; attention: the trie's (query, key) pairs as in
benchmarks/peers.py, which the last layer's pruning makes a slight overestimate).

    .venv/bin/python -m benchmarks.breakdown [--model gemma-3-270m|FOLDER] [--workload 8x350]
        [--dtype fp32|bf16|auto] [--threads 2] [--repeats 3] [--clock wall|cpu] [--compare shared,plain]

In fp32 with the wall clock the parts are also set against ``benchmarks/peers.py``'s floor incl. attention (the
judge layer's matmul rate, best repetition, measured before the runs and after the timed one, the faster of the
two; every layer's matmuls at every trie token plus the trie's attention FLOPs at that rate): per part its
seconds at the rate and what it took above them, and the floor's GEMM work the step skipped (the last layer
pruned to the read positions), which add up to the timed run minus the floor: where a judge's gap to the floor
lies, printed rather than worked out by hand.

``--compare``: the same workload through other prefix modes (best of ``--repeats``; ``plain`` once), each with
the largest difference of any option probability from the native step's.

``--clock cpu`` times with the process's CPU time instead of the wall clock: with ``--threads 1`` it measures the
work alone on a machine that others share (the wall clock also counts the time the process waited for a core).
The bf16 GEMM route the native path took (``fp32`` / ``bf16`` / ``bf16_upcast``) and the CPU are printed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from logitjudge_kernels import dispatch

import logitjudge.judge.backends.native_common as native
from benchmarks import floor, judge_model, workloads  # floor: peers.py's, the layer matmul rate
from benchmarks.timing import best_of_interleaved
from logitjudge.autodtype import resolve_dtype
from logitjudge.engine import Engine, distribution
from logitjudge.gemm_rates import cpu_info, describe_cpu

PARTS = {  # (owner, attribute) -> label
    (native.Weight, "__call__"): "GEMMs: q/k/v, output, down projections",
    (native.GatedMLP, "__call__"): "GEMMs: gate/up with activation x up epilogues",
    (native, "qk_norm_rope"): "q/k norm + RoPE (row kernel)",
    (native, "qk_rope"): "q/k RoPE (row kernel)",
    (native, "residual_rms_norm"): "residual + norms (row kernel)",
    (native, "add_rms_norm"): "residual add + norm (row kernel)",
    (native, "rms_norm"): "first / read-position norms",
    (native, "shared_prefix_attention"): "attention (shared prefix + suffix)",
    (native, "attend_selected"): "attention (last layer, read positions)",
    (native.NativeStep, "__call__"): "step function, total",
}


CLOCK = time.perf_counter


def timed_run(engine: Engine, groups) -> tuple[float, dict, dict]:
    """(run seconds, seconds per part, GEMM FLOPs per part) of one run with the parts wrapped."""
    seconds: dict = defaultdict(float)
    gemm_flops: dict = defaultdict(int)
    saved = {}
    for (owner, name), label in PARTS.items():
        fn = getattr(owner, name)
        saved[(owner, name)] = fn

        def wrapper(*args, _fn=fn, _label=label, **kwargs):
            t0 = CLOCK()
            out = _fn(*args, **kwargs)
            seconds[_label] += CLOCK() - t0
            if _label.startswith("GEMMs"):  # args: (projection, x); weight (out, in)
                w, x = args[0].weight, args[1]
                gemm_flops[_label] += 2 * (x.numel() // x.shape[-1]) * w.shape[0] * w.shape[1]
            return out

        setattr(owner, name, wrapper)
    collections: dict = defaultdict(lambda: [0, 0.0])  # generation -> [collections, seconds]
    started = []

    def on_gc(phase, info):
        if phase == "start":
            started.append(CLOCK())
        elif started:
            collections[info["generation"]][0] += 1
            collections[info["generation"]][1] += CLOCK() - started.pop()

    gc.callbacks.append(on_gc)
    try:
        with dispatch.recording() as rec:
            t0 = CLOCK()
            engine.prompt_logprobs(groups)
            total = CLOCK() - t0
    finally:
        gc.callbacks.remove(on_gc)
        for (owner, name), fn in saved.items():
            setattr(owner, name, fn)
    timed_run.kernels = rec.as_meta()  # what the kernels' dispatcher ran in the timed run
    timed_run.gc = {str(g): {"collections": n, "seconds": t} for g, (n, t) in sorted(collections.items())}
    return total, dict(seconds), dict(gemm_flops)


def floor_gap(table: list[tuple[str, float]], flops: dict, *, rate: float, floor_gemm_flops: float,
              attention_flops: float) -> dict:
    """The parts against ``benchmarks/peers.py``'s floor incl. attention (every layer's matmuls at every trie
    token plus the trie's attention FLOPs, at the layer matmul ``rate`` in FLOP/s): per part its seconds at the
    rate (parts with FLOPs) and what it took above that (the whole part where the floor counts none of its work),
    and the floor's GEMM work the step skipped (the last layer's pruning), so that
    run - floor = sum(above) - pruned."""
    rows = []
    for label, s in table:
        at = flops[label] / rate if flops.get(label) else None
        rows.append({"part": label, "seconds": s, "at_rate": at, "above": s - (at or 0.0)})
    gemms = sum(v for k, v in flops.items() if k.startswith("GEMMs"))
    floor = (floor_gemm_flops + attention_flops) / rate
    return {"rate": rate, "floor_s": floor, "parts": rows, "pruned_s": (floor_gemm_flops - gemms) / rate,
            "run_s": sum(s for _, s in table)}


def print_gap(gap: dict, rates: list[float], runs: list[float]) -> None:
    """``runs``: the untimed runs' seconds, set against the floor beside the timed run (the two differ by the
    host's noise as well as by the wrappers' cost: the parts are known only for the timed run)."""
    print(f"\n## against the floor incl. attention (benchmarks/peers.py's): the layer's matmuls at "
          f"{gap['rate'] / 1e9:.1f} GFLOP/s (best repetition, the fastest of {len(rates)} measurements: "
          f"{', '.join(f'{r / 1e9:.1f}' for r in rates)}), floor {gap['floor_s']:.2f} s; timed run "
          f"{gap['run_s']:.2f} s = {gap['run_s'] / gap['floor_s']:.3f}x of it, the untimed runs "
          f"{min(runs):.2f}-{max(runs):.2f} s = {min(runs) / gap['floor_s']:.3f}-{max(runs) / gap['floor_s']:.3f}x\n")
    print("| part | seconds | at the rate | above it |")
    print("|---|---:|---:|---:|")
    for r in gap["parts"]:
        at = "" if r["at_rate"] is None else f"{r['at_rate']:.2f}"
        print(f"| {r['part']} | {r['seconds']:.2f} | {at} | {r['above']:+.2f} |")
    print(f"| the last layer's pruning (floor GEMM work the wrapped GEMMs did not run; its k/v and read-position q "
          f"projections run unwrapped, in 'other') | | | {-gap['pruned_s']:+.2f} |")


def layer_rate(facts: dict, threads: int) -> float:
    """The judge layer's fp32 matmul rate (FLOP/s, best repetition) as ``benchmarks/peers.py`` measures it for
    its floors, on the layer shapes of ``facts`` (``judge_model.floor_facts`` of the judge's config)."""
    return floor.matmul_rate(threads, shapes=facts["layer_shapes"], sustain_s=0)["layer_flops_per_s"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--workload", default="8x350", choices=list(workloads.NAMES))
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "auto"])
    ap.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                    help="cpu: the process's CPU time (use with --threads 1 on a shared machine)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="untimed-part runs; the fastest is reported")
    ap.add_argument("--compare", default="", help="other prefix modes to time on the same prompts, e.g. "
                    "shared,plain")
    ap.add_argument("--out", default="benchmarks/results/breakdown.json")
    args = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    dtype, why = resolve_dtype(args.dtype, "cpu")
    lm, wls = workloads.load(args.model, [args.workload], dtype=dtype, threads=args.threads)
    engine = Engine(lm)
    if engine.prefix_mode != "native":
        ap.error(f"the breakdown times the native step function; this model runs {engine.prefix_mode!r}")
    wl = wls[args.workload]
    engine.prompt_logprobs([wl.groups[0][:1]])  # warm-up (and the C kernels' build, if not cached)
    # the floor is an fp32 one, in wall-clock seconds; its rate is measured before the runs and after them
    against_floor = dtype == "fp32" and args.clock == "wall"
    facts = judge_model.floor_facts(lm.model.config.to_dict()) if against_floor else {}
    rates = [layer_rate(facts, args.threads)] if against_floor else []
    # the untimed-part runs: best of --repeats (benchmarks.timing), on this script's clock
    plain = best_of_interleaved({"run": lambda: engine.prompt_logprobs(wl.groups)}, args.repeats,
                                clock=CLOCK)["run"].times
    total, seconds, gemm_flops = timed_run(engine, wl.groups)
    step_fn = engine.backend.step
    attn_flops = wl.attention_flops(step_fn.heads, step_fn.head_dim, [lw.window for lw in step_fn.layers])
    flops = {**gemm_flops, "attention (shared prefix + suffix)": attn_flops}
    step = seconds.get("step function, total", 0.0)
    table = [(label, seconds.get(label, 0.0)) for label in PARTS.values() if label != "step function, total"]
    table.append(("step function, other (embedding, rotary tables, copies)", step - sum(s for _, s in table)))
    table.append(("outside the step function (trie, read-out, Python)", total - step))
    route = engine.gemm_route
    print(f"# {args.workload}, {dtype} ({why}; GEMM route {route}), {args.threads} threads, {args.clock} clock: "
          f"run {min(plain):.2f} s (best of {args.repeats}), timed run {total:.2f} s, load average "
          f"{os.getloadavg()[0]:.2f}\n# CPU: {describe_cpu()}\n")
    gap = None
    if against_floor:
        rates.append(layer_rate(facts, args.threads))
        floor_gemm, floor_attention = floor.floor_flops(facts, wl)
        gap = floor_gap(table, flops, rate=max(rates), attention_flops=floor_attention, floor_gemm_flops=floor_gemm)
    print("| part | seconds | share | GFLOP/s |")
    print("|---|---:|---:|---:|")
    for label, s in table:
        rate = flops.get(label)
        print(f"| {label} | {s:.2f} | {s / total:.0%} | {'' if not rate or not s else f'{rate / s / 1e9:.0f}'} |")
    gc_runs = getattr(timed_run, "gc", {})
    print(f"\nPython's garbage collector in the timed run (inside the parts above): "
          f"{sum(g['seconds'] for g in gc_runs.values()):.2f} s; " + (", ".join(
              f"generation {g}: {v['collections']} x, {v['seconds']:.3f} s" for g, v in gc_runs.items()) or "none"))
    kernels = getattr(timed_run, "kernels", {})
    print("\nkernels (the dispatcher's record of the timed run): " + "; ".join(
        f"{k}: " + ", ".join(f"{impl} x{r['calls']}" for impl, r in v["ran"].items()) for k, v in kernels.items()))
    if gap:
        print_gap(gap, rates, plain)
    compared = compare(lm, wl.groups, [m for m in args.compare.split(",") if m], args.repeats, min(plain),
                       engine.prompt_logprobs(wl.groups))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"workload": wl.summary(), "dtype": dtype, "dtype_reason": why, "gemm_route": route,
                               "clock": args.clock, "cpu": cpu_info(), "threads": args.threads,
                               "runs_s": plain, "timed_run_s": total, "parts_s": dict(table),
                               "flops": flops, "floor_gap": gap, "kernels": kernels, "gc": gc_runs,
                               "compared": compared,
                               "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None},
                              indent=1))
    print(f"\nwrote {out}")
    return 0


def _probs(logprobs) -> list:
    return [distribution(lp)[0] for group in logprobs for lp in group]


def compare(lm, groups, modes: list[str], repeats: int, native_s: float, native_lp) -> dict:
    """Each mode's run time on the same prompts (best of ``repeats``; plain once) and its largest option-
    probability difference from the native step's."""
    out = {}
    ref = _probs(native_lp)
    for mode in modes:
        eng = Engine(lm, prefix_mode=mode)
        t = best_of_interleaved({mode: lambda eng=eng: eng.prompt_logprobs(groups)}, 1 if mode == "plain" else repeats,
                                warmup={mode: lambda eng=eng: eng.prompt_logprobs([groups[0][:1]])}, clock=CLOCK)[mode]
        times, lp = t.times, t.value
        diff = max(float(np.abs(a - b).max()) for a, b in zip(_probs(lp), ref))
        out[mode] = {"run_s": min(times), "runs_s": times, "max_abs_prob_diff_vs_native": diff}
        print(f"{mode}: {min(times):.2f} s ({min(times) / native_s:.2f}x the native step's {native_s:.2f} s), "
              f"max |p - p_native| {diff:.2e}")
    return out


if __name__ == "__main__":
    sys.exit(main())
