"""Memory the study's judges need with logitjudge: weights + fp32 read-out copy + the trie's prefix caches.

No weights are loaded: the architecture numbers below are from the models' published configs (config.json /
model cards; Qwen3.5-27B's Gated DeltaNet head counts are not in our sources and are marked assumed). The
trie is measured: for the longest text of HANNA (n=5) and MT-Bench turn 1 (n=10), its balanced prompts (2n
orders, the data set's rubric, the template of experiments/*_small.toml) are built with the Gemma-3 tokenizer
(the other judges' tokenizers were not measured; their counts differ somewhat) and put into the engine's trie
(``logitjudge.trie``); the KV the
engine holds for one item is every trie token once (shared prefix once, each ordering's branch once), per
attention layer 2 x Hkv x D x 2 bytes (bf16). A linear-attention layer holds instead, per trie node that has
children, its recurrent state (Hv x Dk x Dv fp32) and convolution window. Transient: one batch's activations
(token budget 4096) and the read-out chunk (<= 512 MiB); we add 2 GiB for both.

    .venv/bin/python -m benchmarks.judge_memory [--data-dir /work/shared/data] [--out results/judge_memory.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

GiB = 1024**3
TRANSIENT_GIB = 2.0
# name: weights on the device (bytes, as shipped / as loaded), vocab x hidden (read-out), attention layers
# (count, Hkv, head dim), linear layers (count, Hv, Dk, Dv, conv channels, kernel)
JUDGES = {
    "GPT-OSS-20B": dict(weights={"mxfp4 (as shipped, Hopper+ GPU)": 13.8e9, "bf16 (de-quantised)": 41.8e9},
                        vocab=201088, hidden=2880, attn=(24, 8, 64), linear=None),
    "GPT-OSS-120B": dict(weights={"mxfp4 (as shipped, Hopper+ GPU)": 65.3e9, "bf16 (de-quantised)": 234e9},
                         vocab=201088, hidden=2880, attn=(36, 8, 64), linear=None),
    "Qwen3.5-9B": dict(weights={"bf16": 19.3e9, "4bit (bitsandbytes)": 6.5e9}, vocab=248320, hidden=4096,
                       attn=(8, 4, 256), linear=(24, 32, 128, 128, 8192, 4)),
    "Qwen3.5-27B": dict(weights={"bf16": 55.6e9, "4bit (bitsandbytes)": 17.5e9}, vocab=248320, hidden=5120,
                        attn=(16, 4, 256), linear=(48, 48, 128, 128, 10240, 4), assumed="linear heads"),
    "Gemma-3-12B": dict(weights={"bf16": 24.4e9, "4bit (bitsandbytes)": 8.0e9}, vocab=262208, hidden=3840,
                        attn=(48, 8, 256), linear=None),
    "Gemma-3-27B": dict(weights={"bf16": 54.8e9, "4bit (bitsandbytes)": 17.0e9}, vocab=262208, hidden=5376,
                        attn=(62, 16, 128), linear=None),
}


def trie_shape(data_dir: str, name: str, template: str) -> dict:
    """Trie tokens and nodes of the longest item of a data set, balanced orders of its rubric."""
    from transformers import AutoTokenizer

    from logitjudge import orderings
    from logitjudge import trie as trie_mod
    from logitjudge.data import load_dataset
    from logitjudge.engine import prompt_job
    from logitjudge.models import builtin_checkpoint
    from logitjudge.prompts import load_template
    from logitjudge.requests import item_prompts

    tok = AutoTokenizer.from_pretrained(str(builtin_checkpoint()))
    ds = load_dataset(name, data_dir)
    from types import SimpleNamespace

    lm = SimpleNamespace(tokenizer=tok, max_length=131072)  # prompts only: no model
    longest = max(ds.items, key=lambda it: len((it.context or "") + it.text))
    rubric = ds.rubric.subset([ds.rubric.criteria[0].name])
    n = rubric.n_options
    groups = item_prompts(lm, rubric, longest, orderings.balanced(n), load_template(template))
    job = prompt_job(groups)
    roots = trie_mod.build(job.sequences, job.reads)

    def nodes(ns):
        return sum(1 + nodes(x.children) for x in ns if x.children)

    return {"dataset": name, "n": n, "orders": 2 * n, "prompt_tokens": max(len(p.prompt_ids) for p in groups),
            "trie_tokens": trie_mod.count_tokens(roots), "inner_nodes": nodes(roots)}


def judge_memory(j: dict, shape: dict) -> dict:
    n_attn, hkv, d = j["attn"]
    kv = shape["trie_tokens"] * n_attn * 2 * hkv * d * 2
    lin = 0
    if j["linear"]:
        n_lin, hv, dk, dv, conv, k = j["linear"]
        lin = shape["inner_nodes"] * n_lin * (hv * dk * dv * 4 + conv * (k - 1) * 2) * 2  # node + batch capture
    readout = j["vocab"] * j["hidden"] * 4
    return {"kv_gib": kv / GiB, "linear_state_gib": lin / GiB, "readout_fp32_gib": readout / GiB,
            "total_gib": {w: (b + kv + lin + readout) / GiB + TRANSIENT_GIB for w, b in j["weights"].items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="/work/shared/data")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "judge_memory.json"))
    args = ap.parse_args(argv)
    # the experiments/*_small.toml templates
    shapes = {5: trie_shape(args.data_dir, "hanna", "text-first"),
              10: trie_shape(args.data_dir, "mt_bench", "bracketed")}
    for s in shapes.values():
        print(f"{s['dataset']}: longest prompt {s['prompt_tokens']} tokens, n={s['n']}, {s['orders']} orders -> "
              f"{s['trie_tokens']} trie tokens, {s['inner_nodes']} inner nodes")
    rows = []
    print("| judge | weights as loaded | n=5 (HANNA) GiB | n=10 (MT-Bench) GiB | trie KV n=5 / n=10 GiB | "
          "linear state n=10 GiB | fp32 read-out GiB |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, j in JUDGES.items():
        m5, m10 = judge_memory(j, shapes[5]), judge_memory(j, shapes[10])
        for w in j["weights"]:
            print(f"| {name} | {w} | {m5['total_gib'][w]:.1f} | {m10['total_gib'][w]:.1f} | "
                  f"{m5['kv_gib']:.2f} / {m10['kv_gib']:.2f} | {m10['linear_state_gib']:.2f} | "
                  f"{m10['readout_fp32_gib']:.2f} |")
        rows.append({"judge": name, **j, "n5": m5, "n10": m10})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"shapes": shapes, "judges": rows}, indent=2, default=str))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
