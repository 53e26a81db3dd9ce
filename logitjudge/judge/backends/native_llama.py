"""The Llama-style decoders' native step: what differs from the shared step (:mod:`.native_common`).

Llama 2/3, Qwen2/2.5, Qwen3, Mistral and Phi-3, all the same block: ``x + attn(norm(x))`` then
``x + mlp(norm(x))``, norms ``w * x * rsqrt(mean(x^2) + eps)`` in fp32 (two per block, nothing normed before the
residual add), a SiLU-gated MLP, RoPE in transformers' half-split convention. What differs among them:

* Qwen2/2.5: biases on q/k/v (added in the fused GEMM); Qwen3: q/k norms per head before RoPE;
* Mistral: a sliding window on every layer (``config.sliding_window``); Qwen2/3: on the layers the config marks;
* Phi-3: q/k/v and gate/up already fused in the checkpoint (``qkv_proj``, ``gate_up_proj``; gate rows first);
* rotary tables: the model's own rotary module, so its scaling is exactly the model's: default, ``linear``
  (positions divided) and ``llama3`` (per-frequency rescaling) are static tables of the position.

Refused with the reason (``auto`` then takes ``shared``): a rope type whose tables depend on the sequence length
of the call (``dynamic``, ``longrope``/``su``: a prefix computed in a shorter call would see other tables) or
that this step has not been checked against (``yarn`` and the rest), partial rotary dims, biases on the output
projection or the MLP, an activation other than SiLU, and projections that are not plain ``nn.Linear``
(quantized).
"""

from __future__ import annotations

import torch

from .native_common import Layer, NativeStep
from .native_gemms import GatedMLP, Weight, fuse

MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral", "phi3")
ROPE_TYPES = ("default", "linear", "llama3")  # static tables of the absolute position: exact with a prefix cache


def _rope_parameters(cfg) -> dict:
    params = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if params and not isinstance(params.get("rope_type", params.get("type", "")), str):  # per layer type
        return {}
    return dict(params)


def _fused(layer) -> bool:
    return hasattr(layer.self_attn, "qkv_proj")  # Phi-3


class NativeLlama(NativeStep):
    """Llama, Qwen2/2.5, Qwen3, Mistral and Phi-3 decoders."""

    MODEL_TYPES = MODEL_TYPES

    @classmethod
    def family_support(cls, dec, cfg) -> str | None:
        act = getattr(cfg, "hidden_act", None)
        if act != "silu":
            return f"activation {act!r} (the native step gates with SiLU)"
        rope = _rope_parameters(cfg)
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ROPE_TYPES:
            return (f"RoPE scaling {rope_type!r} (the native step computes {list(ROPE_TYPES)}; tables that depend on "
                    "the call's length or other scalings are not computed)")
        if float(rope.get("partial_rotary_factor", getattr(cfg, "partial_rotary_factor", 1.0)) or 1.0) != 1.0:
            return f"partial rotary dims (partial_rotary_factor={rope.get('partial_rotary_factor')})"
        for layer in dec.layers:
            a = layer.self_attn
            if any(hasattr(layer, n) for n in ("pre_feedforward_layernorm", "post_feedforward_layernorm")):
                return "norms of the block outputs (not a Llama-style block)"
            for m in cls.linears(layer):
                if type(m) is not torch.nn.Linear:
                    return f"{type(m).__name__} projections (quantized) are not supported"
            if a.o_proj.bias is not None:
                return "a bias on the attention output projection"
            if any(m.bias is not None for m in cls.linears(layer)[-3 if not _fused(layer) else -2:]):
                return "biases in the MLP"
            if hasattr(a, "q_norm") != hasattr(a, "k_norm"):
                return "a norm on q or k alone"
            norms = [layer.input_layernorm, layer.post_attention_layernorm]
            norms += [a.q_norm, a.k_norm] if hasattr(a, "q_norm") else []
            for norm in norms:
                eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
                if getattr(norm, "weight", None) is None or eps is None or float(eps) != float(cfg.rms_norm_eps):
                    return f"{type(norm).__name__} is not an RMSNorm with the config's eps"
        return None

    @classmethod
    def linears(cls, layer) -> tuple:
        a, m = layer.self_attn, layer.mlp
        if _fused(layer):
            return a.qkv_proj, a.o_proj, m.gate_up_proj, m.down_proj
        return a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj

    def norm_weight(self, norm) -> torch.Tensor:
        return norm.weight.detach().float()  # Llama scales by w, in fp32 (the models' norms compute in fp32)

    def make_layer(self, i: int, layer, cfg, pack: bool, upcast: bool) -> Layer:
        a, mlp, nw = layer.self_attn, layer.mlp, self.norm_weight
        if _fused(layer):
            qkv, gate_up, bias = a.qkv_proj.weight.detach(), mlp.gate_up_proj.weight.detach(), a.qkv_proj.bias
        else:
            projections = (a.q_proj, a.k_proj, a.v_proj)
            bias = None
            if any(m.bias is not None for m in projections):  # Qwen2: one (out,) bias for the fused GEMM
                bias = torch.cat([m.bias.detach() if m.bias is not None else
                                  m.weight.new_zeros(m.weight.shape[0]) for m in projections])
            qkv, gate_up = fuse(projections), fuse((mlp.gate_proj, mlp.up_proj))
        # Qwen2/3 mark their sliding layers on the module; Mistral and Phi-3 window every layer (config)
        window = a.sliding_window if hasattr(a, "sliding_window") else getattr(cfg, "sliding_window", None)
        q_norm = nw(a.q_norm) if hasattr(a, "q_norm") else None
        return Layer(
            w_qkv=Weight(qkv, pack, upcast, None if bias is None else bias.detach()),
            w_o=Weight(a.o_proj.weight.detach(), pack, upcast),
            mlp=GatedMLP(gate_up, pack, upcast, "silu"),
            w_down=Weight(mlp.down_proj.weight.detach(), pack, upcast),
            ln_in=nw(layer.input_layernorm), ln_pre_ff=nw(layer.post_attention_layernorm),
            q_norm=q_norm, k_norm=nw(a.k_norm) if q_norm is not None else None, rope=None, window=window)

    def ropes(self, x: torch.Tensor, pos: torch.Tensor) -> dict:
        return {None: self.rotary(x, pos)}
