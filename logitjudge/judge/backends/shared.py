"""The prefix cache and transformers' forwards over it: (model, tokens, prefix cache) -> hidden states.

The shared prefix is an explicit object, :class:`PrefixKV`: per layer one key and one value tensor of shape
(Hkv, L, D), held once and never copied per row. Suffix rows attend to it through an attention function
registered with transformers' ``AttentionInterface`` (``shared`` mode). A linear-attention layer (Gated
DeltaNet, :mod:`logitjudge.linear_attention`) holds its recurrent state at the prefix's end instead of K/V.
``copy`` mode expands the prefix into a ``DynamicCache`` per row; ``plain`` recomputes every sequence from its
first token with the model's own forward (no prefix cache at all). Which mode runs which model:
:mod:`logitjudge.capabilities`. (The ``native`` Gemma-3 step function is :mod:`logitjudge.native`.)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import torch
from logitjudge_kernels import shared_prefix_attention

from .linear_attention import RecurrentState, install_linear_attention, linear_layer_indices

ATTN_NAME = "logitjudge_shared_prefix"
PREFIX_KWARG = "logitjudge_prefix"


class PrefixKV:
    """The KV cache of a shared token prefix: per layer one key and one value tensor of shape (Hkv, L, D).

    A prefix is a chain: its parent (None for a root) followed by its own segment, ``seg_keys[layer]`` /
    ``seg_values[layer]`` (Hkv, n, D), usually views into the batch that computed them. A trie child's context
    is its parent's plus one segment, so nothing is copied when the trie branches; :meth:`layer` joins the
    chain for one layer when it is used and the join is dropped after that layer. A linear-attention layer's
    entry is instead a :class:`~logitjudge.linear_attention.RecurrentState` (``seg_keys[layer]``; its value
    entry is None): the state at the end of this segment, which already summarises the parents.
    """

    __slots__ = ("seg_keys", "seg_values", "length", "parent")

    def __init__(self, keys: list, values: list, length: int = 0, parent: PrefixKV | None = None):
        self.seg_keys, self.seg_values = keys, values
        self.length = int(length)
        self.parent = parent if parent is not None and parent.length > 0 else None

    @classmethod
    def empty(cls, n_layers: int) -> PrefixKV:
        return cls([None] * n_layers, [None] * n_layers, 0)

    @property
    def n_layers(self) -> int:
        return len(self.seg_keys)

    def recurrent(self, i: int) -> RecurrentState | None:
        """Linear-attention layer i's state at the end of the prefix (None for an empty prefix)."""
        return None if self.length == 0 else self.seg_keys[i]

    def layer(self, i: int, like: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values (Hkv, L, D) of the whole prefix at layer i (``like``: a (B, Hkv, S, D) tensor that
        gives the shape of an empty prefix)."""
        if self.length == 0:  # an empty prefix: (Hkv, 0, D)
            z = like.new_zeros((like.shape[1], 0, like.shape[3]))
            return z, z
        k, v = self.seg_keys[i], self.seg_values[i]
        if self.parent is None:
            return k, v
        pk, pv = self.parent.layer(i)
        return torch.cat([pk, k], dim=1), torch.cat([pv, v], dim=1)

    @property
    def keys(self) -> list[torch.Tensor]:
        return [self.layer(i)[0] for i in range(self.n_layers)]

    @property
    def values(self) -> list[torch.Tensor]:
        return [self.layer(i)[1] for i in range(self.n_layers)]

    def extend(self, captured: list, row: int, n: int) -> PrefixKV:
        """This prefix followed by the first n tokens of one captured suffix row (views, no copy)."""
        keys, values = [], []
        for c in captured:
            if isinstance(c, RecurrentState):
                keys.append(c.row(row, n))
                values.append(None)
            else:
                keys.append(c[0][row, :, :n])
                values.append(c[1][row, :, :n])
        return PrefixKV(keys, values, self.length + n, self)

    def truncate(self, n: int) -> PrefixKV:
        """The cache of the first n tokens (views, no copy)."""
        if not 0 <= n <= self.length:
            raise ValueError(f"cannot truncate a prefix of {self.length} tokens to {n}")
        if n == self.length:
            return self
        if n == 0:
            return PrefixKV.empty(self.n_layers)
        start = self.parent.length if self.parent is not None else 0
        if n <= start:
            return self.parent.truncate(n)
        own = n - start
        if any(isinstance(k, RecurrentState) for k in self.seg_keys):
            raise ValueError("a prefix of a model with linear-attention layers cannot be cut inside a segment "
                             "(the recurrent state exists only at its end): multi-criteria slot caches are not "
                             "supported for this model")
        return PrefixKV([k[:, :own] for k in self.seg_keys], [v[:, :own] for v in self.seg_values], n, self.parent)


@dataclass
class _PrefixState:
    prefix: PrefixKV
    capture: bool
    lengths: list[int] | None = None  # each row's real length (rows are right-padded); None: all full
    captured: dict = field(default_factory=dict)


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
    return out.transpose(1, 2).contiguous(), None


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


def n_layers(model) -> int:
    return int(model.config.get_text_config().num_hidden_layers)


def _selected(hidden: torch.Tensor, select) -> torch.Tensor:
    return hidden if select is None else hidden[select[0], select[1]]


def forward_shared(model, ids: torch.Tensor, prefix: PrefixKV, *, capture: bool, select=None, lengths=None):
    """Rows ``ids`` (B, S), right-padded (``lengths``: each row's real length), after ``prefix``. Returns hidden
    (B, S, d), or (R, d) at ``select`` = (rows, offsets), and the captured suffix K/V per layer, (B, Hkv, S, D)
    each (a linear-attention layer: its :class:`RecurrentState` at each row's end)."""
    B, S = ids.shape
    pos = torch.arange(prefix.length, prefix.length + S, device=ids.device).unsqueeze(0).expand(B, S)
    state = _PrefixState(prefix, capture, None if lengths is None else [int(n) for n in lengths])
    out = model.get_decoder()(input_ids=ids, position_ids=pos, use_cache=False, **{PREFIX_KWARG: state})
    captured = None
    if capture:
        missing = [i for i in range(n_layers(model)) if i not in state.captured]
        if missing:  # a layer that never called the shared function would have run without the prefix
            raise ValueError(f"layers {missing} did not run through logitjudge's shared-prefix attention; use "
                             "prefix_mode='copy' or 'plain' for this model")
        captured = [state.captured[i] for i in range(n_layers(model))]
    return _selected(out.last_hidden_state, select), captured


def forward_copy(model, ids: torch.Tensor, prefix: PrefixKV, *, capture: bool, select=None, lengths=None):
    """The same via a per-row copy of the prefix in a ``DynamicCache`` (generic fallback; more memory)."""
    from transformers import DynamicCache

    B, S = ids.shape
    L = prefix.length
    cache = DynamicCache()
    for i in range(n_layers(model)):
        if L == 0:
            break
        k, v = prefix.layer(i)
        cache.update(k.unsqueeze(0).expand(B, -1, -1, -1).contiguous(),
                     v.unsqueeze(0).expand(B, -1, -1, -1).contiguous(), i)
    pos = torch.arange(L, L + S, device=ids.device).unsqueeze(0).expand(B, S)
    out = model.get_decoder()(input_ids=ids, position_ids=pos, cache=cache if L else DynamicCache(),
                              use_cache=True, attention_mask=torch.ones(B, L + S, dtype=torch.long,
                                                                        device=ids.device))
    captured = None
    if capture:
        c = out.past_key_values
        # copies of the suffix part: views would keep every row's copy of the prefix alive
        captured = [(layer.keys[:, :, L:].contiguous(), layer.values[:, :, L:].contiguous()) for layer in c.layers]
    return _selected(out.last_hidden_state, select), captured


def forward_plain(model, ids: torch.Tensor, prefix: PrefixKV, *, capture: bool, select=None, lengths=None):
    """The model's own forward on whole sequences (right-padded rows, no cache): the engine gives this mode one
    trie node per sequence, so there is never a prefix to continue or a cache to capture."""
    if prefix.length or capture:
        raise ValueError("prefix_mode='plain' runs whole sequences: it cannot continue or keep a prefix cache")
    out = model.get_decoder()(input_ids=ids, use_cache=False)
    return _selected(out.last_hidden_state, select), None


FORWARDS = {"shared": forward_shared, "copy": forward_copy, "plain": forward_plain}


# ---- read-out ---------------------------------------------------------------------------------------------
def head_params(model):
    """(weight (V, d), hidden scale, final soft-cap) of the model's unembedding; exact for the common heads."""
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear) or head.bias is not None:
        raise NotImplementedError(f"the output head {type(head).__name__} is not a bias-free Linear")
    cfg = model.config.get_text_config()
    scale = 1.0
    if getattr(cfg, "logits_scaling", None):  # Granite: logits / logits_scaling
        scale /= float(cfg.logits_scaling)
    if getattr(cfg, "logit_scale", None):  # Cohere: logits * logit_scale
        scale *= float(cfg.logit_scale)
    softcap = getattr(cfg, "final_logit_softcapping", None)
    if softcap is not None and not _forward_reads(type(model), "final_logit_softcapping"):
        softcap = None  # e.g. Gemma3ForConditionalGeneration: its text config has one, its forward never applies it
    return head.weight, scale, softcap


def _forward_reads(cls, name: str) -> bool:
    """Whether ``cls.forward``'s source mentions ``name`` (what the model's own forward applies is the truth)."""
    import inspect

    try:
        return name in inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return True
