"""What a model's attention does, read from its config and modules: the features a backend must compute to be
exact (:func:`model_features`). Each backend lists the features it supports (``Backend.supports``); a feature it
does not list refuses it with the reason (:mod:`logitjudge.judge.capabilities`)."""

from __future__ import annotations

import inspect
import sys

FEATURES = {
    "sinks": "attention sinks (per-head softmax logits)",
    "softcap": "attention logit soft-capping",
    "sliding_window": "sliding-window attention layers",
    "linear_attention": "linear-attention (Gated DeltaNet) layers",
    "alibi": "ALiBi position biases",
    "kv_sharing": "cross-layer KV sharing",
    "chunked_attention": "chunked (block-local) attention",
    "no_attention_interface": "attention that does not go through transformers' AttentionInterface",
    "unknown_layers": "layer types other than full/sliding/linear attention",
}
KNOWN_LAYER_TYPES = {"full_attention", "sliding_attention", "linear_attention"}


def text_config(model):
    """The config of the language model (a multimodal checkpoint's text config)."""
    cfg = model.config
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def n_layers(model) -> int:
    return int(text_config(model).num_hidden_layers)


def linear_layer_indices(model) -> list[int]:
    """The indices of the linear-attention (recurrent) layers."""
    return [i for i, t in enumerate(getattr(text_config(model), "layer_types", None) or []) if t == "linear_attention"]


def attention_modules(model) -> list:
    return [m for m in model.modules() if type(m).__name__.endswith("Attention") and hasattr(m, "layer_idx")]


def cache_keyword(decoder) -> str:
    """The keyword ``decoder``'s forward takes a KV cache by: ``cache`` from transformers 5.24 on (where
    ``past_key_values`` is a deprecated alias), ``past_key_values`` before. A name the forward does not take lands
    in its ``**kwargs`` unread, and the forward runs on an empty cache of its own: wrong numbers, no error."""
    params = inspect.signature(type(decoder).forward).parameters  # through deprecate_kwarg's functools.wraps
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    from ..errors import ModeError

    raise ModeError(f"{type(decoder).__name__}.forward takes neither cache= nor past_key_values=: this transformers "
                    f"version passes a KV cache some other way; use the plain backend (--backend plain)")


def model_features(model) -> dict[str, str]:
    """Feature name -> what in the model shows it (only the features present)."""
    cfg = text_config(model)
    found = {}
    if any(type(m).__name__.endswith("Attention") and hasattr(m, "sinks") for m in model.modules()):
        found["sinks"] = "attention modules carry `sinks`"
    if getattr(cfg, "attn_logit_softcapping", None):
        found["softcap"] = f"attn_logit_softcapping={cfg.attn_logit_softcapping}"
    types = list(getattr(cfg, "layer_types", None) or [])
    if getattr(cfg, "sliding_window", None) and (not types or "sliding_attention" in types) and \
            getattr(cfg, "use_sliding_window", True) is not False:
        found["sliding_window"] = f"sliding_window={cfg.sliding_window}"
    if linear_layer_indices(model):
        found["linear_attention"] = f"{len(linear_layer_indices(model))} of {len(types)} layers"
    if set(types) - KNOWN_LAYER_TYPES:
        found["unknown_layers"] = f"layer types {sorted(set(types) - KNOWN_LAYER_TYPES)}"
    if getattr(cfg, "alibi", False) or getattr(cfg, "model_type", "") in ("bloom", "mpt"):
        found["alibi"] = "ALiBi"
    if getattr(cfg, "num_kv_shared_layers", 0):
        found["kv_sharing"] = f"num_kv_shared_layers={cfg.num_kv_shared_layers}"
    if getattr(cfg, "attention_chunk_size", None):
        found["chunked_attention"] = f"attention_chunk_size={cfg.attention_chunk_size}"
    outside = sorted({type(m).__name__ for m in attention_modules(model)
                      if "ALL_ATTENTION_FUNCTIONS" not in vars(sys.modules[type(m).__module__])})
    if outside:
        found["no_attention_interface"] = ", ".join(outside)
    return found


def model_types(model) -> set:
    """The model type of the checkpoint and of its language model (they differ for multimodal classes)."""
    return {getattr(model.config, "model_type", None), getattr(text_config(model), "model_type", None)}


def attention_shape(model) -> tuple[int, int]:
    """(query heads, head dim) of the model's attention."""
    cfg = text_config(model)
    heads = int(cfg.num_attention_heads)
    return heads, int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
