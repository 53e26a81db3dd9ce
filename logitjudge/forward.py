"""Step functions: (model, tokens, prefix cache) -> hidden states, and hidden states -> label log-probabilities.

The shared prefix is an explicit object, :class:`PrefixKV`: per layer one key and one value tensor of shape
(Hkv, L, D), held once and never copied per row. Suffix rows attend to it through an attention function
registered with transformers' ``AttentionInterface`` (``shared`` mode). ``copy`` mode is the plain fallback that
works for any model: the prefix is expanded into a ``DynamicCache`` per row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from logitjudge_kernels import shared_prefix_attention

ATTN_NAME = "logitjudge_shared_prefix"
PREFIX_KWARG = "logitjudge_prefix"


@dataclass
class PrefixKV:
    """The KV cache of a shared token prefix: ``keys[layer]``/``values[layer]`` of shape (Hkv, L, D)."""

    keys: list[torch.Tensor | None]
    values: list[torch.Tensor | None]
    length: int = 0

    @classmethod
    def empty(cls, n_layers: int) -> PrefixKV:
        return cls([None] * n_layers, [None] * n_layers, 0)

    def layer(self, i: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.keys[i] is None:  # an empty prefix: (Hkv, 0, D)
            z = like.new_zeros((like.shape[1], 0, like.shape[3]))
            return z, z
        return self.keys[i], self.values[i]

    def extend(self, captured: list[tuple[torch.Tensor, torch.Tensor]], row: int, n: int) -> PrefixKV:
        """This prefix followed by the first n tokens of one captured suffix row (a trie child's context)."""
        ks, vs = [], []
        for i, (k, v) in enumerate(captured):
            kp, vp = self.layer(i, k)
            ks.append(torch.cat([kp, k[row, :, :n]], dim=1))
            vs.append(torch.cat([vp, v[row, :, :n]], dim=1))
        return PrefixKV(ks, vs, self.length + n)

    def truncate(self, n: int) -> PrefixKV:
        """The cache of the first n tokens (views, no copy)."""
        if not 0 <= n <= self.length:
            raise ValueError(f"cannot truncate a prefix of {self.length} tokens to {n}")
        if n == self.length:
            return self
        return PrefixKV([None if k is None else k[:, :n] for k in self.keys],
                        [None if v is None else v[:, :n] for v in self.values], n)


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


def forward_shared(model, ids: torch.Tensor, prefix: PrefixKV, *, capture: bool):
    """Rows ``ids`` (B, S), right-padded, after ``prefix``. Returns hidden (B, S, d) and captured suffix K/V."""
    B, S = ids.shape
    pos = torch.arange(prefix.length, prefix.length + S, device=ids.device).unsqueeze(0).expand(B, S)
    state = _PrefixState(prefix, capture)
    out = model.get_decoder()(input_ids=ids, position_ids=pos, use_cache=False, **{PREFIX_KWARG: state})
    captured = [state.captured[i] for i in range(n_layers(model))] if capture else None
    return out.last_hidden_state, captured


def forward_copy(model, ids: torch.Tensor, prefix: PrefixKV, *, capture: bool):
    """The same via a per-row copy of the prefix in a ``DynamicCache`` (generic fallback; more memory)."""
    from transformers import DynamicCache

    B, S = ids.shape
    L = prefix.length
    cache = DynamicCache()
    for i in range(n_layers(model)):
        if L == 0:
            break
        k, v = prefix.keys[i], prefix.values[i]
        cache.update(k.unsqueeze(0).expand(B, -1, -1, -1).contiguous(),
                     v.unsqueeze(0).expand(B, -1, -1, -1).contiguous(), i)
    pos = torch.arange(L, L + S, device=ids.device).unsqueeze(0).expand(B, S)
    out = model.get_decoder()(input_ids=ids, position_ids=pos, cache=cache if L else DynamicCache(),
                              use_cache=True, attention_mask=torch.ones(B, L + S, dtype=torch.long,
                                                                        device=ids.device))
    captured = None
    if capture:
        c = out.past_key_values
        captured = [(layer.keys[:, :, L:], layer.values[:, :, L:]) for layer in c.layers]
    return out.last_hidden_state, captured


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
