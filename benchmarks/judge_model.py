"""The judge a peers benchmark runs (``python -m benchmarks.peers --model``) and its FLOP floor's shapes.

:func:`resolve` turns ``--model`` into what each peer loads:

* ``gemma-3-270m`` (the default; any built-in alias): the converted checkpoint and the GGUF it came from;
* ``FILE.gguf``: the same file for llama.cpp, and for transformers / logitjudge the file de-quantised once by
  transformers (``from_pretrained(folder, gguf_file=name)``, fp32) into a cache folder keyed by the file's size
  and modification time (``$LOGITJUDGE_CACHE/peers/``);
* a folder: its checkpoint; the llama.cpp peer runs on the one ``*.gguf`` in it, else it is skipped (the
  reason is printed);
* anything else (a hub id): loaded as given; no GGUF, so no llama.cpp peer.

:func:`layer_shapes` reads a decoder's matmul shapes from its config (hidden, intermediate, heads, KV heads,
head dim, layers, MoE experts per token), :func:`floor_facts` the FLOP floor's inputs from them: the floor
counts the matmuls every token must go through (not the embedding lookup, not the head, which runs only at
read positions; its FLOPs are reported apart).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT = "gemma-3-270m"


def run_tag(base: str, model: str | None) -> str:
    """The name of a benchmark run's JSON and results folder: ``base`` for the default judge, with the judge's
    name after it for any other (``reproduce_qwen2.5-coder-1.5b-instruct``), so that two judges' runs sit side by
    side instead of one replacing the other."""
    if model in (None, DEFAULT):
        return base
    name = Path(model).stem if model.endswith(".gguf") else model
    return f"{base}_{re.sub(r'[^A-Za-z0-9.]+', '-', name).strip('-')}"


@dataclass(frozen=True)
class Judge:
    """``load``: what ``logitjudge.models.load_model`` is given; ``checkpoint``: a folder with config.json and the
    tokenizer (None for a hub id: read through transformers); ``gguf``: the llama.cpp file, or None and
    ``gguf_reason`` why not."""

    arg: str
    load: str
    checkpoint: str | None
    gguf: str | None
    gguf_reason: str | None = None


def resolve(arg: str | None) -> Judge:
    from logitjudge.judges import BUILTINS, assemble, builtin_checkpoint
    from logitjudge.models import cache_dir

    arg = arg or DEFAULT
    if arg in BUILTINS:  # llama.cpp runs the GGUF the built-in is converted from, assembled once beside the cache
        gguf = cache_dir() / "peers" / f"{arg}.gguf"
        if not gguf.is_file():
            assemble(BUILTINS[arg], gguf)
        return Judge(arg, arg, str(builtin_checkpoint(arg)), str(gguf))
    path = Path(arg).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return Judge(arg, str(dequantised(path)), str(dequantised(path)), str(path.resolve()))
    if path.is_dir():
        ggufs = sorted(path.glob("*.gguf"))
        gguf = str(ggufs[0].resolve()) if len(ggufs) == 1 else None
        why = None if gguf else (f"{len(ggufs)} GGUF files in {path}: pass one as --model FILE.gguf" if ggufs
                                 else f"no GGUF in {path}: pass --model FILE.gguf for the llama.cpp peer")
        if (path / "config.json").exists():
            return Judge(arg, str(path.resolve()), str(path.resolve()), gguf, why)
        if gguf:  # a folder holding only the GGUF
            return resolve(gguf)
        raise SystemExit(f"--model {arg}: neither a checkpoint (config.json) nor one GGUF file in it")
    if path.suffix == ".gguf":
        raise SystemExit(f"--model {arg}: no such file")
    return Judge(arg, arg, None, None, f"{arg} is not a GGUF file: pass --model FILE.gguf for the llama.cpp peer")


def dequantised(gguf: Path) -> Path:
    """The GGUF de-quantised by transformers to fp32 safetensors, once: logitjudge's own GGUF route
    (:func:`logitjudge.gguf.gguf_checkpoint`, cached by the file's sha256), so the peers load what
    ``logitjudge score --model FILE.gguf`` loads."""
    from logitjudge.gguf import gguf_checkpoint

    return gguf_checkpoint(gguf)


def text_config(cfg: dict) -> dict:
    """The decoder's part of a config.json dict (multimodal checkpoints nest it)."""
    return cfg.get("text_config") or cfg


def layer_shapes(cfg: dict) -> list[tuple[int, int]]:
    """(in, out) of one decoder layer's matmuls a token goes through, from a config.json dict: q, k, v, o, and the
    MLP's gate, up, down (a MoE layer: its router and ``num_experts_per_tok`` experts' gate/up/down, plus a
    shared expert where the config has one). Gated MLPs are assumed (every family the shared and native paths
    take but GPT-2, whose MLP is up/down: ``mlp`` in the config's model type)."""
    c = text_config(cfg)
    d = c.get("hidden_size") or c["n_embd"]
    hq = c.get("num_attention_heads") or c["n_head"]
    hkv = c.get("num_key_value_heads") or hq
    hd = c.get("head_dim") or d // hq
    shapes = [(d, hq * hd), (d, hkv * hd), (d, hkv * hd), (hq * hd, d)]
    experts = c.get("num_experts_per_tok")
    if experts:
        n_exp = c.get("num_experts") or c.get("num_local_experts")
        inter = c.get("moe_intermediate_size") or c["intermediate_size"]
        shapes.append((d, n_exp))  # the router
        shapes += [(d, inter), (d, inter), (inter, d)] * experts
        if c.get("shared_expert_intermediate_size"):
            s = c["shared_expert_intermediate_size"]
            shapes += [(d, s), (d, s), (s, d)]
    elif c.get("model_type") == "gpt2":
        inter = c.get("n_inner") or 4 * d
        shapes += [(d, inter), (inter, d)]
    else:
        inter = c["intermediate_size"]
        shapes += [(d, inter), (d, inter), (inter, d)]
    return shapes


def layer_windows(cfg: dict) -> list[int | None]:
    """Each layer's sliding window (None: full attention), from ``layer_types`` or the config's window rule."""
    c = text_config(cfg)
    n = c.get("num_hidden_layers") or c["n_layer"]
    window = c.get("sliding_window")
    types = c.get("layer_types")
    if types:
        return [window if t == "sliding_attention" else None for t in types]
    if window and c.get("use_sliding_window", True) and c.get("model_type") not in ("qwen2",):
        return [window] * n
    return [None] * n  # Qwen2 configs carry a window they do not use (use_sliding_window false)


def floor_facts(cfg: dict) -> dict:
    """The FLOP floor's inputs from a config.json dict: per-token matmul parameters of the decoder
    (``layers x sum(in x out)``: a token costs 2 FLOPs per parameter), attention heads / head dim / windows
    (attention FLOPs per (query, key) pair: 4 x heads x head_dim), hidden and vocabulary (the read-out)."""
    c = text_config(cfg)
    if any(t == "linear_attention" for t in c.get("layer_types") or []):
        raise ValueError("the floor does not count linear-attention layers' projections yet")
    shapes = layer_shapes(cfg)
    n = c.get("num_hidden_layers") or c["n_layer"]
    d = c.get("hidden_size") or c["n_embd"]
    hq = c.get("num_attention_heads") or c["n_head"]
    return {"layers": n, "layer_shapes": shapes, "matmul_params": n * sum(i * o for i, o in shapes),
            "hidden": d, "heads": hq, "head_dim": c.get("head_dim") or d // hq, "layer_windows": layer_windows(cfg),
            "vocab": c["vocab_size"], "max_length": c.get("max_position_embeddings") or c.get("n_positions")}


def read_config(judge: Judge) -> dict:
    if judge.checkpoint:
        return json.loads((Path(judge.checkpoint) / "config.json").read_text())
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(judge.load).to_dict()


def model_facts(arg: str | None) -> dict:
    """The judge (``--model``, :func:`resolve`) and its floor's inputs from its config: matmul
    parameters per token, layer shapes, heads, windows, hidden, vocabulary; the GGUF path or why there is none."""
    judge = resolve(arg)
    facts = floor_facts(read_config(judge))
    return {"model": judge.arg, "load": judge.load, "checkpoint": judge.checkpoint, "gguf": judge.gguf,
            "gguf_reason": judge.gguf_reason, "non_embedding_params": facts["matmul_params"], **facts}
