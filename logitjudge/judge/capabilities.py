"""What each prefix mode supports, and which mode ``auto`` picks for a model: exact or refused, never wrong.

A model's attention features are read from its config and modules (:func:`model_features`). Each mode declares
the features it computes exactly (:data:`MODE_SUPPORT`); a feature it does not list refuses the mode with the
reason. ``auto`` takes the first mode of :data:`AUTO_ORDER` (fastest first) that takes the model: ``native``
(fused Gemma-3 step), ``shared`` (prefix K/V or recurrent state held once), ``copy`` (per-row cache copies),
``plain`` (every sequence from its first token: the model's own forward, no cache; always exact).

What no config says (an attention that adds a bias of its own, a new architecture) is what the exactness
audit (:mod:`logitjudge.verify`) is for: it runs by default for model types outside :data:`TESTED_MODEL_TYPES`
(the families ``tests/test_families.py`` holds to the plain forward).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field

from .linear_attention import linear_layer_indices, linear_support
from .native import native_support

log = logging.getLogger("logitjudge")

AUTO_ORDER = ("native", "shared", "copy", "plain")
MODES = AUTO_ORDER
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
MODE_SUPPORT = {
    "native": frozenset({"softcap", "sliding_window"}),  # and only the models native_support() accepts
    "shared": frozenset({"sinks", "softcap", "sliding_window", "linear_attention"}),
    "copy": frozenset({"sinks", "softcap", "sliding_window", "alibi", "no_attention_interface"}),
    "plain": frozenset(FEATURES),
}
# model types with a parity test per mode in tests/test_families.py; others get an exactness audit by default
TESTED_MODEL_TYPES = frozenset({"llama", "qwen2", "qwen3", "qwen3_5", "qwen3_5_text", "qwen3_next", "mistral",
                                "phi3", "gpt2", "olmo2", "gemma2", "gemma3", "gemma3_text", "gpt_oss"})
DEFAULT_AUDIT_PROMPTS = 3  # --verify default for an untested model type
KNOWN_LAYER_TYPES = {"full_attention", "sliding_attention", "linear_attention"}


def model_features(model) -> dict[str, str]:
    """Feature name -> what in the model shows it (only the features present)."""
    cfg = model.config.get_text_config()
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
    outside = sorted({type(m).__name__ for m in _attention_modules(model)
                      if "ALL_ATTENTION_FUNCTIONS" not in vars(sys.modules[type(m).__module__])})
    if outside:
        found["no_attention_interface"] = ", ".join(outside)
    return found


def _attention_modules(model):
    return [m for m in model.modules() if type(m).__name__.endswith("Attention") and hasattr(m, "layer_idx")]


def mode_refusal(model, mode: str, features: dict | None = None) -> str | None:
    """None if ``mode`` computes ``model`` exactly, else why not (one line)."""
    if mode not in MODES:
        raise ValueError(f"unknown prefix mode {mode!r}; use one of {list(MODES)}")
    features = model_features(model) if features is None else features
    missing = [f for f in features if f not in MODE_SUPPORT[mode]]
    if missing:
        return "; ".join(f"{FEATURES[f]} ({features[f]})" for f in missing) + f" not supported by '{mode}'"
    if mode == "native":
        return native_support(model)
    if mode == "shared" and "linear_attention" in features:
        return linear_support(model)
    return None


@dataclass(frozen=True)
class ModeChoice:
    """The prefix mode a model runs and why: ``refused`` maps each faster mode passed over to its reason."""

    mode: str
    asked: str
    refused: dict = field(default_factory=dict)
    features: dict = field(default_factory=dict)

    def meta(self) -> dict:
        return {"prefix_mode": self.mode, "prefix_mode_asked": self.asked, "prefix_mode_refused": dict(self.refused),
                "attention_features": dict(self.features)}


def choose_mode(model, asked: str = "auto") -> ModeChoice:
    """The mode for ``model``: ``asked`` if it takes the model (else ValueError with the reason), or for "auto"
    the fastest that does. A fall-back past ``shared`` is logged once (it costs speed or memory)."""
    features = model_features(model)
    if asked != "auto":
        reason = mode_refusal(model, asked, features)
        if reason:
            ok = [m for m in AUTO_ORDER if mode_refusal(model, m, features) is None]
            raise ValueError(f"prefix_mode={asked!r} cannot compute this model exactly: {reason}; use "
                             f"'auto' or one of {ok}")
        return ModeChoice(asked, asked, {}, features)
    refused = {}
    for mode in AUTO_ORDER:
        reason = mode_refusal(model, mode, features)
        if reason is None:
            if mode in ("copy", "plain"):
                log.warning("logitjudge: prefix mode %r (slower) for this model: %s", mode,
                            " | ".join(f"{m}: {r}" for m, r in refused.items() if m != "native"))
            return ModeChoice(mode, asked, refused, features)
        refused[mode] = reason
    raise AssertionError("'plain' supports every feature")  # unreachable: plain takes every model


def default_audit_prompts(model) -> int:
    """--verify default: 0 for a tested model type, :data:`DEFAULT_AUDIT_PROMPTS` otherwise."""
    cfg = model.config
    types = {getattr(cfg, "model_type", None), getattr(cfg.get_text_config(), "model_type", None)}
    return 0 if types & TESTED_MODEL_TYPES else DEFAULT_AUDIT_PROMPTS
