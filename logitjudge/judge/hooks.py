"""Named hook points on any transformers causal LM, TransformerLens style.

A hook point is a name and a tensor the model computes; a hook reads it and may return a replacement:

=============================  =====================================================  ==================
name                           tensor                                                 shape
=============================  =====================================================  ==================
``blocks.{l}.hook_resid_post``  residual stream after block l (the block's output)    (B, S, d)
``blocks.{l}.hook_attn_out``    the attention module's output, before it is added     (B, S, d)
                                (Gemma: before its post-attention norm, which is per position)
``blocks.{l}.hook_mlp_out``     the MLP module's output (idem)                         (B, S, d)
``blocks.{l}.attn.hook_z``      the heads' outputs, input of the output projection     (B, S, H * Dh)
``blocks.{l}.attn.hook_pattern`` attention probabilities (eager attention only)         (B, H, S, K)
=============================  =====================================================  ==================

Heads are read and patched as slices of ``hook_z``: the output projection is linear, so replacing head h's
slice at a position replaces exactly that head's contribution there. The modules are found by the names the
transformers families use (``model.layers`` / ``transformer.h``, ``self_attn`` / ``attn``, ``o_proj`` /
``c_proj`` / ``out_proj`` / ``dense``); a model that has none of them is refused with a clear message.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

import torch

HOOK_RE = re.compile(r"^blocks\.(\d+)\.(hook_resid_post|hook_attn_out|hook_mlp_out|attn\.hook_z|attn\.hook_pattern)$")


class ProbeError(ValueError):
    """Bad input or an unsupported model for probing."""


def _first_attr(obj, names: tuple[str, ...], what: str):
    for n in names:
        if hasattr(obj, n):
            return getattr(obj, n)
    raise ProbeError(f"probing cannot find the {what} of {type(obj).__name__} (looked for {list(names)}); "
                     "this model family is not supported by logitjudge.probe")


@dataclass(frozen=True)
class Architecture:
    """The modules that carry the hook points of one model."""

    layers: list
    attn: list
    out_proj: list
    mlp: list
    final_norm: torch.nn.Module
    n_heads: int
    head_dim: int

    @property
    def n_layers(self) -> int:
        return len(self.layers)


def architecture(model) -> Architecture:
    """Find layers, attention, output projections, MLPs and the final norm of a causal LM."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    layers = list(_first_attr(decoder, ("layers", "h", "blocks"), "decoder layers"))
    attn = [_first_attr(layer, ("self_attn", "attn", "attention"), "attention module") for layer in layers]
    out_proj = [_first_attr(a, ("o_proj", "c_proj", "out_proj", "dense"), "attention output projection")
                for a in attn]
    mlp = [_first_attr(layer, ("mlp", "feed_forward"), "MLP") for layer in layers]
    norm = _first_attr(decoder, ("norm", "ln_f", "final_layernorm", "final_layer_norm"), "final norm")
    cfg = model.config.get_text_config()
    n_heads = int(cfg.num_attention_heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads)
    return Architecture(layers, attn, out_proj, mlp, norm, n_heads, head_dim)


def _output_hook(fn, index: int = 0):
    def hook(module, args, out):
        t = out[index] if isinstance(out, tuple) else out
        new = fn(t)
        if new is None:
            return None
        if isinstance(out, tuple):
            return (*out[:index], new, *out[index + 1:])
        return new
    return hook


def _input_hook(fn):
    def hook(module, args):
        new = fn(args[0])
        return None if new is None else (new, *args[1:])
    return hook


@contextlib.contextmanager
def hooks(model, fns: dict, arch: Architecture | None = None):
    """Run the model with ``{hook name: fn(tensor) -> replacement or None}`` registered; removed on exit."""
    arch = arch or architecture(model)
    handles = []
    try:
        for name, fn in fns.items():
            m = HOOK_RE.match(name)
            if m is None:
                raise ProbeError(f"unknown hook point {name!r}; names look like blocks.3.hook_resid_post")
            layer, point = int(m.group(1)), m.group(2)
            if not 0 <= layer < arch.n_layers:
                raise ProbeError(f"hook point {name!r}: the model has {arch.n_layers} layers")
            if point == "hook_resid_post":
                handles.append(arch.layers[layer].register_forward_hook(_output_hook(fn)))
            elif point == "hook_attn_out":
                handles.append(arch.attn[layer].register_forward_hook(_output_hook(fn)))
            elif point == "hook_mlp_out":
                handles.append(arch.mlp[layer].register_forward_hook(_output_hook(fn)))
            elif point == "attn.hook_z":
                handles.append(arch.out_proj[layer].register_forward_pre_hook(_input_hook(fn)))
            else:  # attn.hook_pattern: the second output of an eager attention module
                handles.append(arch.attn[layer].register_forward_hook(_output_hook(fn, index=1)))
        yield arch
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def attn_implementation(model, name: str):
    """Temporarily switch the model's attention implementation (e.g. to "eager" to read the patterns)."""
    before = model.config._attn_implementation
    if before == name:
        yield
        return
    model.set_attn_implementation(name)
    try:
        yield
    finally:
        model.set_attn_implementation(before)
