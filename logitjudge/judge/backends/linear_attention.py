"""Gated DeltaNet layers (Qwen3.5, Qwen3-Next) on the shared-prefix trie.

A linear-attention layer has no key/value cache: its "prefix cache" is its state at the end of the prefix, the
recurrent matrix (Hv, Dk, Dv) and the convolution window (C, K - 1) (the last K - 1 inputs of the causal depthwise
convolution). A trie node holds that state once; each child continues from its parent's state (expanded per row:
it is small and not written to). The full-attention layers of the same model keep the shared KV of
:mod:`.shared`.

Right-padded rows: a batch holds segments of different lengths. The state a child needs is the one after its
parent's *real* tokens, so at padded positions the decay is set to 1 (g = 0) and the write strength to 0
(beta = 0): the recurrence then carries the state through the padding unchanged, and the convolution window is
read at each row's own end. Outputs at real positions never see later (padded) positions, as in every causal layer.

The math is transformers' own (its projections, convolution, ``torch_chunk_gated_delta_rule`` and gated norm,
called from the model's module); only the initial state and the padding differ, and the parity tests hold the
result to the plain forward.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from ..features import linear_layer_indices
from ..prefix import RecurrentState

LINEAR_CLASSES = ("Qwen3_5GatedDeltaNet", "Qwen3NextGatedDeltaNet")
_ORIGINAL = "_logitjudge_original_forward"


def linear_support(model) -> str | None:
    """None if every linear-attention layer of ``model`` is a Gated DeltaNet this module runs, else why not."""
    mods = [m for m in model.modules() if hasattr(m, "A_log") and hasattr(m, "conv1d")]
    if len(mods) != len(linear_layer_indices(model)):
        return "recurrent layers of a kind the shared path does not know"
    for m in mods:
        if type(m).__name__ not in LINEAR_CLASSES:
            return f"linear-attention layer {type(m).__name__} (shared path knows {', '.join(LINEAR_CLASSES)})"
        if getattr(m, "activation", None) != "silu":
            return f"convolution activation {getattr(m, 'activation', None)!r}"
    return None


def install_linear_attention(model, prefix_kwarg: str) -> None:
    """Route each Gated DeltaNet layer through :func:`gated_delta_shared` when called with ``prefix_kwarg``
    (the shared forward's state); any other call runs the layer's own forward unchanged."""
    for m in model.modules():
        if type(m).__name__ in LINEAR_CLASSES and not hasattr(m, _ORIGINAL):
            original = m.forward
            setattr(m, _ORIGINAL, original)

            def forward(hidden_states, *args, _m=m, _orig=original, **kwargs):
                state = kwargs.pop(prefix_kwarg, None)
                if state is None:
                    return _orig(hidden_states, *args, **kwargs)
                return gated_delta_shared(_m, hidden_states, state)

            m.forward = forward


def _projections(m, h: torch.Tensor):
    """(mixed q/k/v before the convolution (B, C, S), z (B, S, Hv, Dv), b (B, S, Hv), a (B, S, Hv))."""
    B, S, _ = h.shape
    if hasattr(m, "in_proj_qkvz"):  # Qwen3-Next: interleaved projections
        q, k, v, z, b, a = m.fix_query_key_value_ordering(m.in_proj_qkvz(h), m.in_proj_ba(h))
        mixed = torch.cat([x.reshape(B, S, -1) for x in (q, k, v)], dim=-1)
    else:  # Qwen3.5
        mixed = m.in_proj_qkv(h)
        z = m.in_proj_z(h).reshape(B, S, -1, m.head_v_dim)
        b, a = m.in_proj_b(h), m.in_proj_a(h)
    return mixed.transpose(1, 2), z, b, a


def gated_delta_shared(m, h: torch.Tensor, pstate) -> torch.Tensor:
    """The layer on right-padded rows ``h`` (B, S, d) continuing ``pstate.prefix``'s state for this layer;
    records each row's end state in ``pstate.captured`` when capturing."""
    ns = sys.modules[type(m).__module__]
    B, S, _ = h.shape
    K = m.conv_kernel_size
    lengths = pstate.lengths if pstate.lengths is not None else [S] * B
    start: RecurrentState | None = pstate.prefix.recurrent(m.layer_idx)
    mixed, z, b, a = _projections(m, h)  # mixed (B, C, S)
    C = mixed.shape[1]
    if start is None:
        window = mixed.new_zeros((B, C, K - 1))
        init = None
    else:
        window = start.conv.to(mixed.dtype).unsqueeze(0).expand(B, C, K - 1)
        init = start.state.unsqueeze(0).expand(B, *start.state.shape).contiguous()
    x = torch.cat([window, mixed], dim=-1)  # (B, C, K - 1 + S)
    conv = F.conv1d(x.to(m.conv1d.weight.dtype), m.conv1d.weight, m.conv1d.bias, groups=C)  # (B, C, S)
    conv = F.silu(conv).to(mixed.dtype).transpose(1, 2)
    q, k, v = torch.split(conv, [m.key_dim, m.key_dim, m.value_dim], dim=-1)
    q, k = q.reshape(B, S, -1, m.head_k_dim), k.reshape(B, S, -1, m.head_k_dim)
    v = v.reshape(B, S, -1, m.head_v_dim)
    rep = v.shape[2] // q.shape[2]
    if rep > 1:  # each q/k head serves rep value heads: transformers repeats them in the module up to 5.23 and in
        q, k = q.repeat_interleave(rep, dim=2), k.repeat_interleave(rep, dim=2)  # the rule from 5.24; here for both
    beta = b.sigmoid()
    g = -m.A_log.float().exp() * F.softplus(a.float() + m.dt_bias)
    real = torch.arange(S, device=h.device)[None, :] < torch.tensor(lengths, device=h.device)[:, None]  # (B, S)
    if not bool(real.all()):  # padding carries the state through unchanged: decay 1, no write
        g = g.masked_fill(~real[..., None], 0.0)
        beta = beta.masked_fill(~real[..., None], 0.0)
    core, final = ns.torch_chunk_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=init,
                                                  output_final_state=True, use_qk_l2norm_in_kernel=True)
    if pstate.capture:
        ends = torch.stack([x[r, :, n:n + K - 1] for r, n in enumerate(lengths)])  # (B, C, K - 1)
        pstate.captured[m.layer_idx] = RecurrentState(final, ends, list(lengths))
    core = m.norm(core.reshape(-1, m.head_v_dim), z.reshape(-1, m.head_v_dim)).reshape(B, S, -1)
    return m.out_proj(core)
