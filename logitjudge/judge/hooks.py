"""Named hook points, TransformerLens style: where the probe reads and patches a judge's activations.

A hook point is a name and a tensor the model computes; a hook reads it and may return a replacement:

=================================  ======================================================  ==================
name                               tensor                                                  shape
=================================  ======================================================  ==================
``blocks.{l}.hook_resid_post``     residual stream after block l (the block's output)      (B, S, d)
``blocks.{l}.hook_attn_out``       the attention module's output, before it is added       (B, S, d)
                                   (Gemma: before its post-attention norm, which is per position)
``blocks.{l}.hook_mlp_out``        the MLP module's output (idem)                          (B, S, d)
``blocks.{l}.attn.hook_z``         the heads' outputs, input of the output projection      (B, S, H * Dh)
``blocks.{l}.attn.hook_pattern``   attention probabilities of the rows' queries over the   (B, H, S, L + S)
                                   prefix's L keys and the row's own S (read only)
=================================  ======================================================  ==================

Heads are read and patched as slices of ``hook_z``: the output projection is linear, so replacing head h's
slice at a position replaces exactly that head's contribution there. Every backend provides the points
(:meth:`Backend.hooks <logitjudge.judge.backends.base.Backend.hooks>`): the transformers backends on the modules
found here by the names the transformers families use (``model.layers`` / ``transformer.h``, ``self_attn`` /
``attn``, ``o_proj`` / ``c_proj`` / ``out_proj`` / ``dense``; a model with none of them is refused with the name
that is missing), the native step function inside its own loop. Attention kernels do not materialise the
probabilities: :func:`attention_probs` computes them for a pattern hook (the copy and plain backends switch the
model to its eager attention instead).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

import torch

from ..errors import ProbeError
from .features import attention_shape

HOOK_RE = re.compile(r"^blocks\.(\d+)\.(hook_resid_post|hook_attn_out|hook_mlp_out|attn\.hook_z|attn\.hook_pattern)$")


def _first_attr(obj, names: tuple[str, ...], what: str):
    for n in names:
        if hasattr(obj, n):
            return getattr(obj, n)
    raise ProbeError(f"probing cannot find the {what} of {type(obj).__name__} (looked for {list(names)}); "
                     "this model family is not supported by logitjudge.probing")


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
    n_heads, head_dim = attention_shape(model)
    return Architecture(layers, attn, out_proj, mlp, norm, n_heads, head_dim)


def parse_hook(name: str, n_layers: int) -> tuple[int, str]:
    """(layer, point) of a hook name such as ``blocks.3.hook_resid_post``; refused when unknown."""
    m = HOOK_RE.match(name)
    if m is None:
        raise ProbeError(f"unknown hook point {name!r}; names look like blocks.3.hook_resid_post")
    layer, point = int(m.group(1)), m.group(2)
    if not 0 <= layer < n_layers:
        raise ProbeError(f"hook point {name!r}: the model has {n_layers} layers")
    return layer, point


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
def module_hooks(model, fns: dict, arch: Architecture | None = None):
    """Run the transformers model with ``{hook name: fn(tensor) -> replacement or None}`` registered on its
    modules; removed on exit. (The pattern point is the second output of an eager attention module.)"""
    arch = arch or architecture(model)
    handles = []
    try:
        for name, fn in fns.items():
            layer, point = parse_hook(name, arch.n_layers)
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


def attention_probs(q: torch.Tensor, k_prefix: torch.Tensor, k: torch.Tensor, *, scale: float,
                    window: int | None = None, softcap: float | None = None,
                    sinks: torch.Tensor | None = None) -> torch.Tensor:
    """The attention probabilities of suffix queries ``q`` (B, Hq, S, D) over the prefix keys (Hkv, L, D) and
    their row's causal suffix keys ``k`` (B, Hkv, S, D): (B, Hq, S, L + S), fp32, as the eager attention of the
    families computes them (scale, soft-cap, sliding window; with ``sinks`` (Hq,) the sink's share is left out,
    so a row sums to less than 1, as GPT-OSS's eager attention returns it)."""
    B, Hq, S, D = q.shape
    Hkv, L = k_prefix.shape[0], k_prefix.shape[1]
    keys = torch.cat([k_prefix.float().unsqueeze(0).expand(B, -1, -1, -1), k.float()], dim=2)  # (B, Hkv, L+S, D)
    keys = keys.repeat_interleave(Hq // Hkv, dim=1)  # (B, Hq, L + S, D)
    scores = torch.einsum("bhsd,bhkd->bhsk", q.float(), keys) * scale
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    qpos = L + torch.arange(S, device=q.device)[:, None]  # (S, 1) absolute positions
    kpos = torch.arange(L + S, device=q.device)[None, :]
    visible = kpos <= qpos
    if window is not None:
        visible = visible & (qpos - kpos < window)
    scores = scores.masked_fill(~visible, float("-inf"))
    if sinks is None:
        return torch.softmax(scores, dim=-1)
    sink = sinks.float().view(1, Hq, 1, 1).expand(B, Hq, S, 1)
    return torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
