"""vLLM against the native engine on one small workload: ``logitjudge score --engine vllm`` and ``--engine native``
on the same texts, per dtype, then the largest difference of an option's probability between the two tables and
the timings (``benchmarks/gpu_check.sh`` runs it where a GPU and vLLM are present).

Each run is its own ``python -m logitjudge score`` process. Times: the scoring alone (the table's
``meta.timings.score_seconds``: after the model load and vLLM's start-up) and the process's wall time (imports,
load, start-up included). vLLM runs eager (``--vllm-compile off``: compiling and capturing CUDA graphs would take
most of the check's time; pass ``--vllm-compile auto`` for vLLM's own default) with a KV cache of
``--kv-cache-gib``. vLLM picks its device itself (a GPU where torch sees one); ``--device`` is the native engine's.
A difference above logitjudge's exactness tolerance (``--verify``'s: 1e-5 fp32, 0.05 bf16 / fp16) or a failed run
makes the exit status 1.

The judge (``--model``): a model id or folder, ``tiny`` (a random-weight Gemma-3, hidden 64, from
``tests/conftest.py``, saved under ``--out``: no download) or ``auto`` (default: the built-in gemma-3-270m where
it can be resolved on this machine, else ``tiny``). The texts: ``--texts`` (default the demo's 12 texts).

    python -m benchmarks.vllm_check --device cpu --dtypes fp32 --limit 4     # ~2.5 min on 2 cores, gemma-3-270m
    python -m benchmarks.vllm_check --device cuda                            # bf16 and fp32
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEMO_TEXTS = ROOT / "logitjudge" / "demo" / "texts.jsonl"
TOLERANCE = {"fp32": 1e-5, "bf16": 0.05, "fp16": 0.05}  # the exactness audit's (logitjudge score --verify)


def judge(model: str, out: Path) -> str:
    """The ``--model`` value both engines load: ``tiny`` saved to a folder under ``out``; ``auto`` resolved."""
    if model == "auto":
        from logitjudge.models import resolve_source

        try:
            resolve_source("gemma-3-270m")
            return "gemma-3-270m"
        except Exception as e:  # noqa: BLE001 - no network, no cache: any reason falls back to the tiny judge
            print(f"gemma-3-270m unavailable ({type(e).__name__}: {str(e)[:120]}); using the tiny random judge")
            model = "tiny"
    if model != "tiny":
        return model
    from tests.conftest import tiny_gemma, tiny_tokenizer

    folder = out / "tiny-judge"
    tok = tiny_tokenizer()
    tiny_gemma(tok).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def score(engine: str, dtype: str, model: str, args, out: Path) -> dict:
    """One ``logitjudge score`` run: its table's path, the scoring and wall seconds and the engine's counters, or
    ``error`` (the last line of its stderr)."""
    path = out / f"{engine}-{dtype}.npz"
    path.unlink(missing_ok=True)  # a table of the same settings would be reused, not scored again
    cmd = [sys.executable, "-m", "logitjudge", "score", "--model", model, "--texts", str(args.texts),
           "--dtype", dtype, "--engine", engine, "--out", str(path), "--force", "--quiet"]
    cmd += ["--limit", str(args.limit)] if args.limit else []
    cmd += (["--kv-cache-gib", str(args.kv_cache_gib), "--vllm-compile", args.vllm_compile] if engine == "vllm"
            else ["--device", args.device])
    path_env = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path_env})
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        last = next((x for x in reversed(p.stderr.strip().splitlines()) if x.strip()), f"exit {p.returncode}")
        return {"engine": engine, "dtype": dtype, "wall_seconds": wall, "error": last.strip()[:300]}
    from logitjudge.table import ScoreTable

    meta = ScoreTable.load(path).meta
    return {"engine": engine, "dtype": dtype, "wall_seconds": wall, "table": str(path),
            "score_seconds": meta.get("timings", {}).get("score_seconds"), "stats": meta.get("engine_stats")}


def compare(native: dict, vllm: dict) -> dict:
    """max |dp| between the two tables (renormalised option probabilities, as the tables hold them) and of the
    label mass (the labels' total probability before renormalising)."""
    from logitjudge.table import ScoreTable

    a, b = ScoreTable.load(native["table"]), ScoreTable.load(vllm["table"])
    if a.probs.shape != b.probs.shape:
        return {"error": f"tables differ in shape: {a.probs.shape} vs {b.probs.shape}"}
    return {"max_abs_dp": float(np.abs(a.probs - b.probs).max()),
            "max_abs_d_label_mass": float(np.abs(a.label_mass - b.label_mass).max()), "shape": list(a.probs.shape)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="auto", help="a model id or folder, tiny, or auto (default)")
    ap.add_argument("--texts", type=Path, default=DEMO_TEXTS, help="JSONL texts (default: the demo's)")
    ap.add_argument("--limit", type=int, default=None, help="the first N texts only")
    ap.add_argument("--dtypes", default="bf16,fp32", help="comma-separated: fp32, bf16, fp16")
    ap.add_argument("--device", default="cuda", help="the native engine's device (vLLM picks its own)")
    ap.add_argument("--kv-cache-gib", type=int, default=1)
    ap.add_argument("--vllm-compile", default="off", choices=("auto", "on", "off"))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "vllm_check")
    args = ap.parse_args(argv)
    if importlib.util.find_spec("vllm") is None:
        print("vllm_check: vLLM is not installed (docs/scale.md); nothing to compare")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    model = judge(args.model, args.out)
    print(f"judge {model}, texts {args.texts}" + (f" (first {args.limit})" if args.limit else "")
          + f", native on {args.device}, vLLM eager={args.vllm_compile != 'on'}", flush=True)
    report, bad = {"model": model, "runs": [], "compared": {}}, False
    for dtype in args.dtypes.split(","):
        runs = {e: score(e, dtype, model, args, args.out) for e in ("native", "vllm")}
        report["runs"] += list(runs.values())
        for r in runs.values():
            print(f"  {dtype} {r['engine']}: " + (f"FAILED: {r['error']}" if "error" in r else
                  f"scoring {r['score_seconds']:.2f} s, process {r['wall_seconds']:.1f} s, "
                  f"stats {json.dumps(r['stats'])}"), flush=True)
        if any("error" in r for r in runs.values()):
            bad = True
            continue
        c = report["compared"][dtype] = compare(runs["native"], runs["vllm"])
        if "error" in c:
            print(f"  {dtype}: {c['error']}")
            bad = True
            continue
        within = c["max_abs_dp"] <= TOLERANCE[dtype]
        bad |= not within
        print(f"  {dtype}: max |dp| native vs vLLM {c['max_abs_dp']:.2e} ({'within' if within else 'ABOVE'} "
              f"{TOLERANCE[dtype]:g}), label mass {c['max_abs_d_label_mass']:.2e}; scoring native "
              f"{runs['native']['score_seconds']:.2f} s, vLLM {runs['vllm']['score_seconds']:.2f} s", flush=True)
    (args.out / "vllm_check.json").write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out / 'vllm_check.json'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
