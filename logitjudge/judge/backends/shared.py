"""The ``shared`` backend: transformers' own forward, with the prefix held once on the trie.

Suffix rows attend to the shared prefix (:class:`~logitjudge.judge.prefix.PrefixKV`, per layer one key and one
value tensor (Hkv, L, D), never copied per row) through an attention function registered with transformers'
``AttentionInterface``; a linear-attention layer (Gated DeltaNet, :mod:`.linear_attention`) continues its
recurrent state at the prefix's end instead. Exact for every family whose attention goes through the interface:
sinks, soft-capping, sliding windows and linear-attention layers included.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field

import torch
from logitjudge_kernels import shared_prefix_attention

from ...errors import ModeError
from ..features import linear_layer_indices
from ..prefix import PrefixKV
from .base import Backend
from .linear_attention import install_linear_attention, linear_support

ATTN_NAME = "logitjudge_shared_prefix"
PREFIX_KWARG = "logitjudge_prefix"


@dataclass
class _PrefixState:
    prefix: PrefixKV
    capture: bool
    lengths: list[int] | None = None  # each row's real length (rows are right-padded); None: all full
    captured: dict = field(default_factory=dict)
    patterns: bool = False  # return the attention probabilities (a pattern hook is set)


def _shared_prefix_attention_hf(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                                sliding_window=None, softcap=None, **kwargs):
    """transformers attention function: suffix rows attend to the shared prefix plus their own causal suffix."""
    state: _PrefixState | None = kwargs.pop(PREFIX_KWARG, None)
    if state is None:  # not a logitjudge call: the implementation the model was loaded with, unchanged
        extra = {} if softcap is None else {"softcap": softcap}
        return _base_attention(module)(module, query, key, value, attention_mask, dropout=dropout,
                                       scaling=scaling, sliding_window=sliding_window, **extra, **kwargs)
    sinks = kwargs.pop("s_aux", None)  # GPT-OSS attention sinks, (Hq,)
    layer = module.layer_idx
    if state.capture:
        state.captured[layer] = (key, value)
    kp, vp = state.prefix.layer(layer, key)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    out = shared_prefix_attention(query, kp, vp, key, value, scale=scale, sliding_window=sliding_window,
                                  softcap=softcap, sinks=sinks)  # (B, Hq, S, D)
    probs = None
    if state.patterns:  # for a pattern hook only: the kernel never materialises them
        from ..hooks import attention_probs

        probs = attention_probs(query, kp, key, scale=scale, window=sliding_window, softcap=softcap, sinks=sinks)
    return out.transpose(1, 2).contiguous(), probs


_BASE_ATTR = "_logitjudge_base_attn"


def _base_attention(module):
    """The attention function ``module`` had before :func:`install_shared_attention` (eager: its own module's)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    base = getattr(module.config, _BASE_ATTR, None) or "sdpa"
    if base == "eager":
        return sys.modules[type(module).__module__].eager_attention_forward
    return ALL_ATTENTION_FUNCTIONS[base]


def install_shared_attention(model) -> None:
    """Route the model's attention through the shared-prefix function; calls without a prefix state (the
    model used as usual) run the implementation it was loaded with, with that implementation's masks (the
    shared function builds its own). Gated DeltaNet layers are routed too."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    base = model.config.get_text_config()._attn_implementation or "sdpa"
    if base.startswith(ATTN_NAME):  # installed before
        return
    name = f"{ATTN_NAME}_{base}"  # one name per base: its mask function serves the plain calls
    AttentionInterface.register(name, _shared_prefix_attention_hf)
    if name not in ALL_MASK_ATTENTION_FUNCTIONS:
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[base])
    for m in model.modules():  # every (sub-)config the attention modules read (a saved config may carry an old one)
        cfg = getattr(m, "config", None)
        impl = getattr(cfg, "_attn_implementation", None) or base
        if cfg is not None and not impl.startswith(ATTN_NAME):
            setattr(cfg, _BASE_ATTR, impl)
    model.set_attn_implementation(name)
    if linear_layer_indices(model):
        install_linear_attention(model, PREFIX_KWARG)


class SharedBackend(Backend):
    """transformers' forward with the prefix K/V (or recurrent state) held once, read through the shared-prefix
    attention function (installed on the model when the backend is made)."""

    name = "shared"
    supports = frozenset({"sinks", "softcap", "sliding_window", "linear_attention"})

    @classmethod
    def refuses(cls, model, features: dict) -> str | None:
        return linear_support(model) if "linear_attention" in features else None

    def __init__(self, model):
        super().__init__(model)
        install_shared_attention(model)
        self._patterns = False

    def _forward(self, ids, groups, lengths, read, capture):
        prefix = groups[0][0]
        B, S = ids.shape
        pos = torch.arange(prefix.length, prefix.length + S, device=ids.device).unsqueeze(0).expand(B, S)
        state = _PrefixState(prefix, capture, None if lengths is None else [int(n) for n in lengths],
                             patterns=self._patterns)
        out = self.model.get_decoder()(input_ids=ids, position_ids=pos, use_cache=False, **{PREFIX_KWARG: state})
        captured = None
        if capture:
            missing = [i for i in range(self.n_layers) if i not in state.captured]
            if missing:  # a layer that never called the shared function would have run without the prefix
                raise ModeError(f"layers {missing} did not run through logitjudge's shared-prefix attention; use "
                                 "prefix_mode='copy' or 'plain' for this model")
            captured = [state.captured[i] for i in range(self.n_layers)]
        return self.select(out.last_hidden_state, read), captured

    @contextlib.contextmanager
    def hooks(self, fns: dict):
        """The module hooks; a pattern hook makes the shared attention function return the probabilities."""
        from ..hooks import module_hooks

        self._patterns = any(name.endswith("hook_pattern") for name in fns)
        try:
            with module_hooks(self.model, fns):
                yield
        finally:
            self._patterns = False
