"""The prefix cache and transformers' forwards over it: (model, tokens, prefix cache) -> hidden states.

The shared prefix is an explicit object, :class:`PrefixKV`: per layer one key and one value tensor of shape
(Hkv, L, D), held once and never copied per row. In ``shared`` mode suffix rows attend to it through an
attention function registered with transformers' ``AttentionInterface``; ``copy`` mode is the plain fallback
that works for any model: the prefix is expanded into a ``DynamicCache`` per row. (The ``native`` Gemma-3 step
function is :mod:`logitjudge.native`.) :func:`head_params` gives the unembedding the engine's read-out uses
(hidden states -> label log-probabilities are computed in :meth:`logitjudge.engine.Engine.read`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from logitjudge_kernels import shared_prefix_attention

ATTN_NAME = "logitjudge_shared_prefix"
PREFIX_KWARG = "logitjudge_prefix"


class PrefixKV:
    """The KV cache of a shared token prefix: per layer one key and one value tensor of shape (Hkv, L, D).

    A prefix is a chain: its parent (None for a root) followed by its own segment, ``seg_keys[layer]`` /
    ``seg_values[layer]`` (Hkv, n, D), usually views into the batch that computed them. A trie child's context
    is its parent's plus one segment, so nothing is copied when the trie branches; :meth:`layer` joins the
    chain for one layer when it is used and the join is dropped after that layer.
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

    def extend(self, captured: list[tuple[torch.Tensor, torch.Tensor]], row: int, n: int) -> PrefixKV:
        """This prefix followed by the first n tokens of one captured suffix row (views, no copy)."""
        return PrefixKV([k[row, :, :n] for k, _ in captured], [v[row, :, :n] for _, v in captured],
                        self.length + n, self)

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
        return PrefixKV([k[:, :own] for k in self.seg_keys], [v[:, :own] for v in self.seg_values], n, self.parent)


@dataclass
class _PrefixState:
    prefix: PrefixKV
    capture: bool
    captured: dict = field(default_factory=dict)


def _shared_prefix_attention_hf(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                                sliding_window=None, softcap=None, **kwargs):
    """transformers attention function: suffix rows attend to the shared prefix plus their own causal suffix."""
    state: _PrefixState | None = kwargs.pop(PREFIX_KWARG, None)
    if state is None:  # not a logitjudge call: behave exactly as the standard SDPA path
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        extra = {} if softcap is None else {"softcap": softcap}
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, sliding_window=sliding_window, **extra, **kwargs)
    layer = module.layer_idx
    if state.capture:
        state.captured[layer] = (key, value)
    kp, vp = state.prefix.layer(layer, key)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    out = shared_prefix_attention(query, kp, vp, key, value, scale=scale, sliding_window=sliding_window,
                                  softcap=softcap)  # (B, Hq, S, D)
    return out.transpose(1, 2).contiguous(), None


def install_shared_attention(model) -> None:
    """Route the model's attention through the shared-prefix function (falls back to SDPA for normal calls)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTN_NAME, _shared_prefix_attention_hf)
    if ATTN_NAME not in ALL_MASK_ATTENTION_FUNCTIONS:
        AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)
    model.set_attn_implementation(ATTN_NAME)


def n_layers(model) -> int:
    return int(model.config.get_text_config().num_hidden_layers)


def _selected(hidden: torch.Tensor, select) -> torch.Tensor:
    return hidden if select is None else hidden[select[0], select[1]]


def forward_shared(model, ids: torch.Tensor, prefix: PrefixKV, *, capture: bool, select=None):
    """Rows ``ids`` (B, S), right-padded, after ``prefix``. Returns hidden (B, S, d), or (R, d) at ``select`` =
    (rows, offsets), and the captured suffix K/V per layer, (B, Hkv, S, D) each."""
    B, S = ids.shape
    pos = torch.arange(prefix.length, prefix.length + S, device=ids.device).unsqueeze(0).expand(B, S)
    state = _PrefixState(prefix, capture)
    out = model.get_decoder()(input_ids=ids, position_ids=pos, use_cache=False, **{PREFIX_KWARG: state})
    captured = [state.captured[i] for i in range(n_layers(model))] if capture else None
    return _selected(out.last_hidden_state, select), captured


def forward_copy(model, ids: torch.Tensor, prefix: PrefixKV, *, capture: bool, select=None):
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


FORWARDS = {"shared": forward_shared, "copy": forward_copy}


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
    return head.weight, scale, getattr(cfg, "final_logit_softcapping", None)
