"""Gemma-3's native step: what differs from the shared step (:mod:`.native_common`).

* norms: ``x * rsqrt(mean(x^2) + eps) * (1 + w)`` in fp32, four per block (input, post-attention, pre- and
  post-feed-forward: the attention and MLP outputs are normed before the residual add);
* q/k norms per head before RoPE; GELU-tanh gating; the embedding scaled by sqrt(d) (inside its module);
* local (sliding-window) and global layers, each with its own rotary tables; the attention scale
  ``query_pre_attn_scalar ** -0.5`` and the attention soft-cap where the config sets one.
"""

from __future__ import annotations

import torch

from .native_common import Layer, NativeStep
from .native_gemms import GatedMLP, Weight, fuse

MODEL_TYPES = ("gemma3_text",)


def _attn_linears(layer):
    a = layer.self_attn
    return a.q_proj, a.k_proj, a.v_proj, a.o_proj


def _mlp_linears(layer):
    m = layer.mlp
    return m.gate_proj, m.up_proj, m.down_proj


class NativeGemma3(NativeStep):
    """Gemma-3 decoders (``gemma3_text``, also inside the multimodal checkpoint class)."""

    MODEL_TYPES = MODEL_TYPES

    @classmethod
    def family_support(cls, dec, cfg) -> str | None:
        if getattr(cfg, "use_bidirectional_attention", False):
            return "bidirectional attention"
        if cfg.hidden_activation != "gelu_pytorch_tanh":
            return f"activation {cfg.hidden_activation!r}"
        if getattr(cfg, "rope_scaling", None) and cfg.rope_scaling.get("rope_type") == "dynamic":
            return "dynamic RoPE scaling"
        for layer in dec.layers:
            for m in cls.linears(layer):
                if type(m) is not torch.nn.Linear or m.bias is not None:
                    return f"{type(m).__name__} projections (quantized or biased) are not supported"
        return None

    @classmethod
    def linears(cls, layer) -> tuple:
        return (*_attn_linears(layer), *_mlp_linears(layer))

    def norm_weight(self, norm) -> torch.Tensor:
        return 1.0 + norm.weight.detach().float()  # Gemma scales by (1 + w), in fp32

    def make_layer(self, i: int, layer, cfg, pack: bool, upcast: bool) -> Layer:
        a, mlp, nw = layer.self_attn, layer.mlp, self.norm_weight
        return Layer(
            w_qkv=Weight(fuse((a.q_proj, a.k_proj, a.v_proj)), pack, upcast),
            w_o=Weight(a.o_proj.weight.detach(), pack, upcast),
            mlp=GatedMLP(fuse((mlp.gate_proj, mlp.up_proj)), pack, upcast, "gelu_tanh"),
            w_down=Weight(mlp.down_proj.weight.detach(), pack, upcast),
            ln_in=nw(layer.input_layernorm), ln_pre_ff=nw(layer.pre_feedforward_layernorm),
            ln_post_attn=nw(layer.post_attention_layernorm), ln_post_ff=nw(layer.post_feedforward_layernorm),
            q_norm=nw(a.q_norm), k_norm=nw(a.k_norm), rope=cfg.layer_types[i], window=a.sliding_window)

    def ropes(self, x: torch.Tensor, pos: torch.Tensor) -> dict:
        return {t: self.rotary(x, pos, t) for t in {lw.rope for lw in self.layers}}
