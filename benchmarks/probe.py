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
writes JSON (``--out``). Peak memory is the peak RSS above the level before each method (a 5 ms sampler
thread). The plain forward computes the full-vocabulary logits only at the positions read (``--plain-logits read``, the
default: ``logits_to_keep``, the stronger baseline; about 2.5x fewer FLOPs per forward at ~350 tokens on a 262k
vocabulary), or at every position, as the hook libraries do (``--plain-logits all``). The CPU model and its ISA
flags are printed and written with the numbers.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/probe.py [--quick] [--threads 2]
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
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="benchmarks/results/probe.json")
    args = ap.parse_args(argv)

    import torch

    sys.path.insert(0, str(HERE))
    import workloads
    from rss import measured

    from logitjudge.autodtype import cpu_info, describe_cpu
    from logitjudge.engine import Engine
    from logitjudge.models import load_model, set_threads
    from logitjudge.probe.patching import make_pairs, make_sites, patch_item, patch_item_plain
    from logitjudge.probe.prompts import probe_prompts

    threads = set_threads(args.threads)
    lm = load_model(args.model, device=args.device)
    wl = workloads.build(args.workload, lm)
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

    def plain():
        return [patch_item_plain(lm.model, pp, pairs, sites, logits=args.plain_logits) for pp in prompts]

    load = {"before": os.getloadavg()}  # other jobs on the machine: the 1/5/15-minute load averages
    with torch.inference_mode():
        fast_out, fast_s, fast_mib = measured(fast)
        load["after_logitjudge"] = os.getloadavg()
        plain_out, plain_s, plain_mib = measured(plain)
        load["after_plain"] = os.getloadavg()
    diff = max(max(np.abs(a[0] - b[0]).max(), np.abs(a[1] - b[1]).max()) for a, b in zip(fast_out, plain_out))
    n_patches = len(items) * len(pairs) * len(sites)
    n_forwards = len(items) * len(wl.orderings) * 2 + n_patches  # sources recorded + clean targets, + patches
    tokens = [len(p.ids) for pp in prompts for p in pp]
    logits_note = "all positions' logits" if args.plain_logits == "all" else "logits only where read"
    rows = [{"method": f"plain (hooks, one full forward per prompt and per patch, {logits_note})", "seconds": plain_s,
             "peak_extra_mib": plain_mib},
            {"method": f"logitjudge (cached clean prefix, batched patches, {mode})", "seconds": fast_s,
             "peak_extra_mib": fast_mib}]
    report = {"model": args.model, "workload": args.workload, "quick": args.quick, "texts": len(items),
              "orderings": len(wl.orderings), "pairs": len(pairs), "sites": len(sites), "site_kinds": args.sites,
              "patches": n_patches, "plain_forwards": n_forwards,
              "plain_logits": args.plain_logits, "prompt_tokens_mean": float(np.mean(tokens)),
              "threads": threads, "device": args.device, "rows": rows, "speedup": plain_s / fast_s,
              "max_abs_diff": float(diff), "torch": torch.__version__, "cpu": cpu_info(), "load_average": load}
    print(f"# CPU: {describe_cpu()}\n# load average before / after: {load['before'][0]:.2f} / "
          f"{load['after_plain'][0]:.2f}")
    print(f"# order-swap patching sweep, {args.model} fp32 {args.device} ({threads} threads): {len(items)} texts "
          f"x {len(wl.orderings)} orderings (~{np.mean(tokens):.0f} prompt tokens), {len(pairs)} pairs per text "
          f"({args.pairs}), {len(sites)} sites ({args.sites}) = {n_patches} patches")
    print("| method | seconds | peak extra RSS (MiB) |")
    print("|---|---:|---:|")
    for r in rows:
        print(f"| {r['method']} | {r['seconds']:.1f} | {r['peak_extra_mib']:.0f} |")
    print(f"\nspeed-up {plain_s / fast_s:.1f}x; max |Δp| between the two (clean and patched distributions): "
          f"{diff:.1e}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
