"""benchmarks/peers.py's report: peer labels, the issue's targets, probability differences and the table."""

from __future__ import annotations

import numpy as np

LABELS = {"plain": "(a) transformers, 1 forward/prompt", "batched": "(b) transformers, batched, no sharing",
          "hf-prefix-cache": "(e) transformers + its own prefix cache",
          "llama.cpp": "(c) llama.cpp, prefix reuse", "llama.cpp-b64": "(c) llama.cpp, n_batch=64",
          "logitjudge-fp32": "(d) logitjudge fp32", "logitjudge-bf16": "(d) logitjudge bf16",
          "vllm-b16": "(f) vLLM, prefix caching, block 16", "vllm-b32": "(f) vLLM, prefix caching, block 32",
          "floor": "floor (matmul rate)", "floor+attn": "floor incl. attention QK/PV",
          "bound": "bound: matmul + attention FLOPs at the FMA peak"}
# issue 31: >= 1.3x the prefix-cache peer, >= 1.5x llama.cpp, >= 4x batched, <= 1.15x the floor incl. attention
TARGETS = (("hf-prefix-cache", 1.3), ("llama.cpp", 1.5), ("floor", 1 / 1.15), ("floor+attn", 1 / 1.15),
           ("plain", 8.0), ("batched", 4.0))


def renorm(lps) -> np.ndarray:
    lp = np.asarray(lps, dtype=np.float64)
    w = np.exp(lp - lp.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1, keepdims=True)


def max_dp(a: list, b: list) -> tuple[float, float]:
    """(max |dp| renormalised over the options, max |dp| of raw probabilities) between two peers' log-probs."""
    ren = max(float(np.abs(renorm(x) - renorm(y)).max()) for x, y in zip(a, b))
    raw = max(float(np.abs(np.exp(np.asarray(x)) - np.exp(np.asarray(y))).max()) for x, y in zip(a, b))
    return ren, raw


def fmt(x, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def table(name: str, summary: dict, rows: dict) -> str:
    ref = rows.get("logitjudge-fp32", {}).get("seconds")
    lines = [f"### {name}: {summary['items']} text(s) x {summary['orderings']} orderings, n={summary['options']},"
             f" {summary['prompts']} prompts of ~{summary['prompt_tokens_mean']:.0f} tokens; "
             f"trie tokens {summary['trie_tokens']}", "",
             "| peer | seconds | tokens | tokens/s | x vs logitjudge fp32 | peak RSS MiB | max abs dp vs plain |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for peer, r in rows.items():
        label = LABELS.get(peer, peer)
        if "error" in r or "na" in r:
            lines.append(f"| {label} | {r.get('na') or r['error'][:100]} | | | | | |")  # a crash, a timeout
            continue
        s = r["seconds"]
        lines.append(f"| {label} | {s:.3f} | {r['tokens']} | {r['tokens'] / s:.0f} | "
                     f"{fmt(s / ref if ref else None, '.2f')} | {fmt(r.get('rss_peak_mib'), '.0f')} | "
                     f"{fmt(r.get('max_abs_dp'), '.2e')} |")
    lines.append("\nx vs logitjudge fp32 = peer seconds / logitjudge fp32 seconds (> 1: logitjudge is faster); "
                 "floor tokens = trie tokens.")
    return "\n".join(lines)


def targets(rows: dict, which: str) -> list[dict]:
    lj = rows.get(which, {}).get("seconds")
    out = []
    for peer, need in TARGETS:
        s = rows.get(peer, {}).get("seconds")
        ratio = s / lj if (s and lj) else None
        out.append({"vs": peer, "ratio": ratio, "need": need, "met": None if ratio is None else ratio >= need})
    return out


def targets_line(ts: list[dict], which: str, wl: str) -> str:
    parts = []
    for t in ts:
        if t["vs"].startswith("floor"):
            r = None if t["ratio"] is None else 1 / t["ratio"]
            parts.append(f"within 1.15x of {t['vs']}: {fmt(r, '.2f')}x "
                         f"{'n/a' if t['met'] is None else ('MET' if t['met'] else 'not met')}")
        else:
            parts.append(f">= {t['need']:g}x vs {t['vs']}: {fmt(t['ratio'], '.2f')}x "
                         f"{'n/a' if t['met'] is None else ('MET' if t['met'] else 'not met')}")
    return f"targets ({which}, {wl}): " + "; ".join(parts)
