"""Order-swap patching sweep: logitjudge's batched patching on the cached clean prefix against the plain way.

Plain (what hook libraries do): one full forward per source prompt (recording its activations), per target
prompt, and per (pair, site) patch, the model's own forward with hooks; no cache. logitjudge
(``probe.patching.patch_item``): per item the shared prefix once, each ordering's option lines once, then per
target batches of its patches within the token budget, each row running only the answer token on top of the
target's cache, through the scores' backend (``--prefix-mode``: auto, native, shared (the prefix KV held once),
copy (copied per row)).

Sweep: every layer's residual output, attention output and MLP output (``--sites``), patched at the answer
position from the reversed ordering into each ordering (``--pairs reverse``: 10 pairs per text), on the
``8x350`` workload (8 texts of ~350 tokens, balanced(5) = 10 orderings) on gemma-3-270m fp32.
``--quick``: 1 text, the first pair (54 patches: 74 full forwards for the plain way). Prints a table and
writes JSON (``--out``).

The plain way's time is the sum of its forwards, which all have about the same cost (one prompt each); on a slow
CPU the 4,480 of the full sweep take hours (~1 h on an AVX-512 Intel Xeon, ~2.1 h estimated on an AVX2 AMD
EPYC Zen 3). So by default it runs every source recording and clean forward and a seeded sample of
``--plain-sample`` patches (default 432, a tenth, the same number from every text), timing each, and its time is
estimated as the measured forwards plus the number of patches times the sampled patches' mean time, with the
standard error of that mean (finite-population corrected) printed beside it; max |Δp| is taken over every clean
and every sampled patched distribution. ``--plain-sample all`` runs and times every patch (no estimate).

Peak memory is the peak RSS above the level before each method (a 5 ms sampler thread). The plain forward
computes the full-vocabulary logits only at the positions read (``--plain-logits read``, the default:
``logits_to_keep``, the stronger baseline; about 2.5x fewer FLOPs per forward at ~350 tokens on a 262k
vocabulary), or at every position, as the hook libraries do (``--plain-logits all``). The CPU model and its ISA
flags are printed and written with the numbers.

    OMP_NUM_THREADS=2 .venv/bin/python -m benchmarks.probe [--quick] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--workload", default="8x350")
    ap.add_argument("--quick", action="store_true", help="1 text, the first pair")
    ap.add_argument("--sites", default="resid,attn,mlp")
    ap.add_argument("--pairs", default="reverse", choices=["reverse", "canonical", "all"])
    ap.add_argument("--prefix-mode", default="auto", choices=["auto", "native", "shared", "copy", "plain"])
    ap.add_argument("--token-budget", type=int, default=4096, help="rows x tokens of one patch batch")
    ap.add_argument("--plain-logits", default="read", choices=["read", "all"],
                    help="the plain way's logits: only at the positions read (read: logits_to_keep, the stronger "
                         "baseline), or at every position, as hook libraries compute them (all)")
    ap.add_argument("--plain-sample", default="432",
                    help="patches the plain way runs, spread evenly over the texts, drawn with --seed ('all': every "
                         "patch; module doc)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="benchmarks/results/probe.json")
    args = ap.parse_args(argv)

    import torch

    from benchmarks import workloads
    from benchmarks.rss import measured
    from logitjudge.engine import Engine
    from logitjudge.gemm_rates import cpu_info, describe_cpu
    from logitjudge.models import set_threads
    from logitjudge.probing.patching import make_pairs, make_sites, patch_item
    from logitjudge.probing.prompts import probe_prompts

    threads = set_threads(args.threads)
    lm, wls = workloads.load(args.model, [args.workload], device=args.device)
    wl = wls[args.workload]
    items = wl.items[:1] if args.quick else wl.items
    backend = Engine(lm, prefix_mode=args.prefix_mode).backend
    mode = backend.name
    sites = make_sites(backend.n_layers, backend.n_heads, [s.strip() for s in args.sites.split(",")])
    pairs = make_pairs(wl.orderings, args.pairs)
    if args.quick:
        pairs = pairs[:1]
    prompts = [probe_prompts(lm, wl.rubric, it, wl.orderings, wl.template) for it in items]

    def fast():
        return [patch_item(backend, pp, pairs, sites, token_budget=args.token_budget) for pp in prompts]

    chosen = plain_sample(args.plain_sample, len(items), len(pairs), len(sites), seed=args.seed)

    def plain():
        return [plain_way(lm.model, pp, pairs, sites, mask, logits=args.plain_logits)
                for pp, mask in zip(prompts, chosen)]

    load = {"before": os.getloadavg()}  # other jobs on the machine: the 1/5/15-minute load averages
    with torch.inference_mode():
        fast_out, fast_s, fast_mib = measured(fast)
        load["after_logitjudge"] = os.getloadavg()
        plain_out, plain_run_s, plain_mib = measured(plain)
        load["after_plain"] = os.getloadavg()
    diff = max(max(np.abs(f[0] - p["clean"]).max(), np.abs(f[1][m] - p["patched"][m]).max())
               for f, p, m in zip(fast_out, plain_out, chosen))
    n_patches = len(items) * len(pairs) * len(sites)
    plain_s, plain_se, n_timed = plain_estimate(plain_out, n_patches)
    n_forwards = len(items) * len(wl.orderings) * 2 + n_patches  # sources recorded + clean targets, + patches
    tokens = [len(p.ids) for pp in prompts for p in pp]
    logits_note = "all positions' logits" if args.plain_logits == "all" else "logits only where read"
    sampled = "" if n_timed == n_patches else f"; {n_timed} of {n_patches} patches run, the rest estimated"
    rows = [{"method": f"plain (hooks, one full forward per prompt and per patch, {logits_note}{sampled})",
             "seconds": plain_s, "seconds_se": plain_se, "peak_extra_mib": plain_mib},
            {"method": f"logitjudge (cached clean prefix, batched patches, {mode})", "seconds": fast_s,
             "peak_extra_mib": fast_mib}]
    report = {"model": args.model, "workload": args.workload, "quick": args.quick, "texts": len(items),
              "orderings": len(wl.orderings), "pairs": len(pairs), "sites": len(sites), "site_kinds": args.sites,
              "patches": n_patches, "plain_forwards": n_forwards, "plain_patches_run": n_timed,
              "plain_run_seconds": plain_run_s, "plain_sample_seed": args.seed,
              "plain_logits": args.plain_logits, "prompt_tokens_mean": float(np.mean(tokens)),
              "threads": threads, "device": args.device, "rows": rows, "speedup": plain_s / fast_s,
              "speedup_se": plain_se / fast_s,
              "max_abs_diff": float(diff), "torch": torch.__version__, "cpu": cpu_info(), "load_average": load}
    print(f"# CPU: {describe_cpu()}\n# load average before / after: {load['before'][0]:.2f} / "
          f"{load['after_plain'][0]:.2f}")
    print(f"# order-swap patching sweep, {args.model} fp32 {args.device} ({threads} threads): {len(items)} texts "
          f"x {len(wl.orderings)} orderings (~{np.mean(tokens):.0f} prompt tokens), {len(pairs)} pairs per text "
          f"({args.pairs}), {len(sites)} sites ({args.sites}) = {n_patches} patches")
    print("| method | seconds | peak extra RSS (MiB) |")
    print("|---|---:|---:|")
    for r in rows:
        se = f" ± {r['seconds_se']:.1f}" if r.get("seconds_se") else ""
        print(f"| {r['method']} | {r['seconds']:.1f}{se} | {r['peak_extra_mib']:.0f} |")
    se = f" ± {plain_se / fast_s:.1f}" if plain_se else ""
    print(f"\nspeed-up {plain_s / fast_s:.1f}x{se}; max |Δp| between the two (clean and every patched distribution "
          f"the plain way ran): {diff:.1e}")
    if n_timed < n_patches:
        print(f"(the plain way ran {n_forwards - n_patches} source and clean forwards and {n_timed} of the {n_patches} "
              f"patches in {plain_run_s:.1f} s; its time for every patch is estimated ± its standard error)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    return 0


def plain_sample(spec: str, n_items: int, n_pairs: int, n_sites: int, *, seed: int) -> list[np.ndarray]:
    """Per text, a boolean [pair, site] mask of the patches the plain way runs: all of them, or ``spec`` patches
    spread evenly over the texts (at least one per text), drawn without replacement with ``seed``."""
    per = n_pairs * n_sites
    if spec == "all":
        return [np.ones((n_pairs, n_sites), bool) for _ in range(n_items)]
    try:
        k = int(spec)
    except ValueError:
        sys.exit(f"probe.py: --plain-sample {spec!r}: a number of patches or 'all'")
    if k < n_items:
        sys.exit(f"probe.py: --plain-sample {k}: at least one patch per text ({n_items}), or 'all'")
    rng = np.random.default_rng(seed)
    masks = []
    for i in range(n_items):
        m = np.zeros(per, bool)
        m[rng.choice(per, size=min(per, k // n_items + (i < k % n_items)), replace=False)] = True
        masks.append(m.reshape(n_pairs, n_sites))
    return masks


def plain_way(model, prompts, pairs, sites, mask, *, logits: str) -> dict:
    """One text the plain way (``PlainPatcher``): its source recordings and clean forwards (timed together), then
    the patches in ``mask``, each timed; the others stay NaN."""
    import time

    from logitjudge.probing.patching import PlainPatcher

    t0 = time.perf_counter()
    plain = PlainPatcher(model, prompts, sites, logits=logits)
    clean = np.stack([plain.clean(b) for b in range(len(prompts))])
    fixed = time.perf_counter() - t0
    patched = np.full((len(pairs), len(sites), clean.shape[1]), np.nan)
    times = []
    for p, s in zip(*np.nonzero(mask)):
        t0 = time.perf_counter()
        patched[p, s] = plain.patched(int(pairs[p][0]), int(pairs[p][1]), int(s))
        times.append(time.perf_counter() - t0)
    return {"clean": clean, "patched": patched, "fixed_s": fixed, "patch_s": times}


def plain_estimate(texts: list[dict], n_patches: int) -> tuple[float, float, int]:
    """(seconds, standard error, patches timed) of the plain way over every patch: the timed source and clean
    forwards plus ``n_patches`` x the mean time of the timed patches; the SE is that mean's, finite-population
    corrected (0 when every patch was timed)."""
    times = np.concatenate([np.asarray(t["patch_s"], float) for t in texts])
    fixed = sum(t["fixed_s"] for t in texts)
    n = times.size
    if n == n_patches:
        return fixed + float(times.sum()), 0.0, n
    se = n_patches * times.std(ddof=1) / np.sqrt(n) * np.sqrt(1 - n / n_patches) if n > 1 else float("nan")
    return fixed + n_patches * float(times.mean()), float(se), n


if __name__ == "__main__":
    sys.exit(main())
