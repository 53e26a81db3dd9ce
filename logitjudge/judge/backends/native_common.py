"""What the native step functions share: (model, tokens, prefix cache) -> hidden states, for pre-norm decoders.

One loop (:class:`NativeStep`) computes every family the ``native`` backend takes; a family's file
(:mod:`.native_gemma3`, :mod:`.native_llama`) says only what differs: which norms a block has and their weight
convention, the activation of the gated MLP, q/k norms, biases, sliding windows and how its rotary tables are
made. The same math as transformers' modules (the parity tests hold each family to the plain path), in fewer
and larger kernels, because on a CPU the time goes to GEMMs and to the passes over memory between them:

* the projections (:mod:`.native_gemms`): q/k/v and gate/up as one GEMM each (Phi-3 ships them fused), on CPU
  pre-packed for oneDNN with the gated MLP's activation and product in the GEMM epilogues; bf16 weights packed
  for the CPU's bf16 GEMMs, or as fp32 copies on the fp32 FMA units where those are faster (:func:`gemm_route`);
  the MLP in row blocks where that measured faster (:func:`~.native_gemms.mlp_down`);
* on CPU the passes between GEMMs are fused C row kernels (``logitjudge_kernels.cpu_norm``: q/k norm + RoPE, or
  RoPE alone, written in the attention layout; the residual add + the next norm in one pass) and attention is
  a C kernel (``logitjudge_kernels.cpu_attention``), each chosen by measurement against its PyTorch
  reference; rotary tables are computed once per call;
* one call may hold rows that continue different prefixes (groups of rows, each with its own
  :class:`~logitjudge.judge.prefix.PrefixKV`): the GEMMs run over all rows, attention per group;
* in the last layer only the positions that are read (``select``) go through the query projection, attention,
  output projection, MLP and final norm: the other positions only need their keys and values, for later tokens;
* the probe's hook points (:mod:`logitjudge.judge.hooks`) are called inside the loop when set (then nothing is
  pruned, so every point has every position).

This module knows no family: each family's file imports it, and the registry (:mod:`.native`) imports the
families and holds the table of model types, with :class:`~.native.NativeBackend`, the ``native`` prefix mode.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from logitjudge_kernels import shared_prefix_attention, spare_thread
from logitjudge_kernels.cpu_norm import (
    add_rms_norm,
    qk_norm_rope,
    qk_rope,
    residual_rms_norm,
    rms_norm,
    rotate_ref,
)

from ...errors import ModeError
from ..hooks import attention_probs
from ..prefix import PrefixKV
from .native_gemms import GatedMLP, Weight, f_linear, gemm_route, mlp_down, packing_available

# attention implementations that compute standard softmax attention (what the native step computes); a model
# set to another (a registered function of its own) may add what no config declares, and is refused
STANDARD_ATTENTION = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
PACK_MAX_BYTES = 2 << 30  # oneDNN-packed copies of the projection weights are made up to this size (CPU)


# ------------------------------------------------------------------------------------------------ the step
@dataclass
class Layer:
    """One block's weights as the step reads them. Norm weights are fp32 in the ``w * x`` form (Gemma's (1 + w)
    already added). ``ln_post_attn`` / ``ln_post_ff``: norms of the attention / MLP output before the residual
    add (Gemma; None: added as is, Llama); ``ln_pre_ff``: the MLP's input norm; ``q_norm`` / ``k_norm``: per-head
    norms before RoPE (Gemma-3, Qwen3; None: none); ``rope``: the key of the rotary tables it uses."""

    w_qkv: Weight  # ((Hq + 2 Hkv) D, d)
    w_o: Weight  # (d, Hq D)
    mlp: GatedMLP  # (2 I, d)
    w_down: Weight  # (d, I)
    ln_in: torch.Tensor
    ln_pre_ff: torch.Tensor
    ln_post_attn: torch.Tensor | None = None
    ln_post_ff: torch.Tensor | None = None
    q_norm: torch.Tensor | None = None
    k_norm: torch.Tensor | None = None
    rope: str | None = None
    window: int | None = None


class NativeStep:
    """A family's step function, prepared once per model; called like :func:`logitjudge.forward.forward_shared`.

    Subclasses (one file per family, listed once in the registry :data:`.native.STEPS`) set ``MODEL_TYPES`` and
    implement :meth:`family_support` (why a model of those types cannot run), :meth:`linears` (the projections,
    for the packing decision), :meth:`norm_weight` (a norm module -> its fp32 ``w * x`` weight),
    :meth:`make_layer` and :meth:`ropes` (the rotary tables of one call).

    ``pack``: keep oneDNN-packed copies of the projection weights (faster GEMMs on CPU, more memory); None = on
    CPU in fp32 or bf16 (:func:`gemm_route`) when those copies take at most ``PACK_MAX_BYTES``. ``route`` says
    which GEMMs run."""

    MODEL_TYPES: tuple[str, ...] = ()

    @classmethod
    def support(cls, model) -> str | None:
        """None if ``model`` can run through this step, else the reason it cannot."""
        try:
            dec = model.get_decoder()
        except Exception:  # noqa: BLE001 - any model without a decoder accessor is simply unsupported
            return "the model has no get_decoder()"
        cfg = getattr(dec, "config", None)
        if cfg is None or getattr(cfg, "model_type", None) not in cls.MODEL_TYPES:
            return f"model type {getattr(cfg, 'model_type', None)!r} is not one of {cls.MODEL_TYPES}"
        devices = {p.device for p in dec.parameters()}
        if len(devices) != 1:
            return f"parameters on several devices {sorted(map(str, devices))}"
        # the implementation it was loaded with (the shared backend keeps it when it routes the model's attention)
        impl = getattr(cfg, "_logitjudge_base_attn", None) or getattr(cfg, "_attn_implementation", None) or "sdpa"
        if impl not in STANDARD_ATTENTION:
            return f"attention implementation {impl!r} is not one of {STANDARD_ATTENTION}"
        return cls.family_support(dec, cfg)

    @classmethod
    def family_support(cls, dec, cfg) -> str | None:
        raise NotImplementedError

    @classmethod
    def linears(cls, layer) -> tuple:
        raise NotImplementedError

    def norm_weight(self, norm) -> torch.Tensor:
        raise NotImplementedError

    def make_layer(self, i: int, layer, cfg, pack: bool, upcast: bool) -> Layer:
        raise NotImplementedError

    def ropes(self, x: torch.Tensor, pos: torch.Tensor) -> dict:
        """{rope key: (cos, sin)}, each (B, S, D), for the absolute positions ``pos`` (B, S)."""
        raise NotImplementedError

    def __init__(self, model, *, pack: bool | None = None):
        reason = self.support(model)
        if reason:
            raise ModeError(f"the native path does not support this model: {reason}; use prefix_mode='shared'")
        dec = model.get_decoder()
        cfg = dec.config
        self.embed = dec.embed_tokens
        self.rotary = dec.rotary_emb
        self.eps = float(cfg.rms_norm_eps)
        layers = dec.layers[:cfg.num_hidden_layers]
        a0 = layers[0].self_attn
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = int(getattr(a0, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        self.scale = float(a0.scaling)
        self.softcap = getattr(cfg, "attn_logit_softcapping", None)
        self.final_norm = self.norm_weight(dec.norm)
        w = self.linears(layers[0])[0].weight
        self.route = gemm_route(w.dtype, w.device)
        if pack is None:
            per = 4 if self.route in ("fp32", "bf16_upcast") else w.element_size()  # bytes of a packed element
            size = sum(m.weight.numel() * per for layer in layers for m in self.linears(layer))
            pack = self.route != "plain" and size <= PACK_MAX_BYTES
        self.packed = bool(pack) and packing_available()
        if not self.packed:
            self.route = "plain"
        self.hook_fns: dict = {}  # the probe's hook points, set by NativeBackend.hooks
        up = self.route == "bf16_upcast"
        self.layers = [self.make_layer(i, layer, cfg, self.packed, up) for i, layer in enumerate(layers)]

    # ---- the pieces of a block ------------------------------------------------------------------------
    def _residual(self, x, y, w_y, w_next):
        """The residual add of a block's output ``y`` (normed with ``w_y`` first where the family has that norm)
        and the next norm of the new stream: (new stream, its norm)."""
        if w_y is None:
            return add_rms_norm(x, y, w_next, self.eps)
        return residual_rms_norm(x, y, w_y, w_next, self.eps)

    def _qkv(self, lw: Layer, qkv: torch.Tensor, cos, sin, heads: int):
        """A q/k/v (or, with ``heads`` 0, k/v) projection -> q (B, Hq, S, D), k and v (B, Hkv, S, D), q and k
        normed (where the family has q/k norms) and rotated."""
        if lw.q_norm is None:
            return qk_rope(qkv, cos, sin, heads=heads, kv_heads=self.kv_heads)
        return qk_norm_rope(qkv, lw.q_norm, lw.k_norm, cos, sin, heads=heads, kv_heads=self.kv_heads, eps=self.eps)

    def _block_tail(self, lw: Layer, x: torch.Tensor, attn: torch.Tensor, w_next: torch.Tensor):
        """After attention: output projection, residual (after the post-attention norm where there is one), MLP,
        residual. Returns the new residual stream and its norm with ``w_next`` (the next block's input norm)."""
        x, h = self._residual(x, lw.w_o(attn), lw.ln_post_attn, lw.ln_pre_ff)
        return self._residual(x, mlp_down(lw.mlp, lw.w_down, h), lw.ln_post_ff, w_next)

    def _hooked_tail(self, i: int, lw: Layer, x: torch.Tensor, attn: torch.Tensor, w_next: torch.Tensor):
        """:meth:`_block_tail` with the hook points of block i: z (the output projection's input), the attention
        and MLP outputs (before any post-norm, as in transformers' modules) and the block's output."""
        f = self.hook_fns

        def point(name: str, t: torch.Tensor) -> torch.Tensor:
            new = f[name](t) if name in f else None
            return t if new is None else new

        attn = point(f"blocks.{i}.attn.hook_z", attn)  # (B, S, Hq D)
        x, h = self._residual(x, point(f"blocks.{i}.hook_attn_out", lw.w_o(attn)), lw.ln_post_attn, lw.ln_pre_ff)
        mlp_out = point(f"blocks.{i}.hook_mlp_out", mlp_down(lw.mlp, lw.w_down, h))
        x, h = self._residual(x, mlp_out, lw.ln_post_ff, w_next)
        new = point(f"blocks.{i}.hook_resid_post", x)
        if new is not x:  # a replaced residual stream: the next block's input norm is taken again
            x, h = new, rms_norm(new, w_next, self.eps)
        return x, h

    def _last_layer(self, i, lw, x, h, cos, sin, groups, select, w_next, capture, captured):
        """The last layer pruned to the read positions: keys/values for all positions (for later tokens),
        queries, attention, output projection and MLP only at ``select``."""
        H, D = self.heads, self.head_dim
        kv = f_linear(h.reshape(-1, h.shape[-1]), *lw.w_qkv.rows(H * D, lw.w_qkv.weight.shape[0], h.dtype))
        _, k, v = self._qkv(lw, kv.view(*h.shape[:-1], -1), cos, sin, 0)
        if capture:
            captured.append((k, v))
        rows, offs = select
        qs = f_linear(h[rows, offs], *lw.w_qkv.rows(0, H * D, h.dtype)).view(-1, H, D)
        if lw.q_norm is not None:
            qs = rms_norm(qs, lw.q_norm, self.eps)
        qs = rotate_ref(qs, cos[rows, offs, None], sin[rows, offs, None])
        o = torch.empty_like(qs)
        a = 0
        for pre, n in groups:
            mine = (rows >= a) & (rows < a + n)
            kp, vp = pre.layer(i, k)
            with spare_thread.paused():  # torch's softmax and tanh: at the base count (spare_thread)
                o[mine] = attend_selected(qs[mine], rows[mine] - a, offs[mine], kp, vp, k[a:a + n], v[a:a + n],
                                          scale=self.scale, window=lw.window, softcap=self.softcap)
            a += n
        _, h = self._block_tail(lw, x[rows, offs], o.reshape(len(rows), H * D), w_next)
        return h, captured

    def __call__(self, ids: torch.Tensor, prefix, *, capture: bool, select=None):
        """Rows ``ids`` (B, S), right-padded. ``prefix``: the PrefixKV all rows continue, or [(PrefixKV, n rows)]
        groups in row order (rows of a batch may continue different prefixes). ``select`` = (rows, offsets) of
        the positions whose final hidden state is wanted. Returns hidden (R, d) at ``select`` (all (B, S, d)
        without it) and, with ``capture``, each layer's suffix keys/values (B, Hkv, S, D)."""
        B, S = ids.shape
        groups = [(prefix, B)] if isinstance(prefix, PrefixKV) else list(prefix)
        if sum(n for _, n in groups) != B:
            raise ModeError(f"prefix groups cover {sum(n for _, n in groups)} rows, the batch has {B}")
        starts = torch.tensor([p.length for p, n in groups for _ in range(n)], device=ids.device)
        pos = starts[:, None] + torch.arange(S, device=ids.device)  # (B, S) absolute positions
        x = self.embed(ids)  # (B, S, d)
        if self.route == "bf16_upcast":  # bf16 weights on fp32 FMAs: activations stay fp32, no casts per op
            x = x.float()
        with spare_thread.paused():  # cos/sin: at the base count in a raised step (spare_thread)
            ropes = self.ropes(x, pos)  # once per call: {key: (cos, sin)}, each (B, S, D)
        captured = [] if capture else None
        H = self.heads
        h = rms_norm(x, self.layers[0].ln_in, self.eps)
        last = len(self.layers) - 1
        for i, lw in enumerate(self.layers):
            w_next = self.final_norm if i == last else self.layers[i + 1].ln_in
            cos, sin = ropes[lw.rope]
            if i == last and select is not None and not self.hook_fns:
                return self._last_layer(i, lw, x, h, cos, sin, groups, select, w_next, capture, captured)
            # k, v (B, Hkv, S, D) in their own memory: children's prefixes are views of them
            q, k, v = self._qkv(lw, lw.w_qkv(h), cos, sin, H)  # q (B, Hq, S, D)
            if capture:
                captured.append((k, v))
            outs, a = [], 0
            pattern = self.hook_fns.get(f"blocks.{i}.attn.hook_pattern")
            if pattern is not None and len(groups) > 1:
                raise ModeError("an attention-pattern hook needs the rows of one prefix per call")
            for pre, n in groups:
                kp, vp = pre.layer(i, k)
                outs.append(shared_prefix_attention(q[a:a + n], kp, vp, k[a:a + n], v[a:a + n], scale=self.scale,
                                                    sliding_window=lw.window, softcap=self.softcap))
                if pattern is not None:  # (B, Hq, S, L + S), computed only for the hook
                    pattern(attention_probs(q, kp, k, scale=self.scale, window=lw.window, softcap=self.softcap))
                a += n
            # (B, S, Hq, D): free where attention wrote that layout (the C kernel), else one copy
            o = torch.cat([o.transpose(1, 2) for o in outs]) if len(outs) > 1 else outs[0].transpose(1, 2)
            tail = self._hooked_tail if self.hook_fns else (lambda i, *a: self._block_tail(*a))
            x, h = tail(i, lw, x, o.reshape(B, S, -1), w_next)
        return (h if select is None else h[select[0], select[1]]), captured


def attend_selected(q, rows, offs, k_prefix, v_prefix, k, v, *, scale: float, window: int | None,
                    softcap: float | None) -> torch.Tensor:
    """Attention of R single queries: query r is row ``rows[r]`` at suffix offset ``offs[r]`` and sees the shared
    prefix (Hkv, L, D) and its row's suffix keys (B, Hkv, S, D) up to that offset. q: (R, Hq, D) -> (R, Hq, D)."""
    R, Hq, D = q.shape
    Hkv, L, _ = k_prefix.shape
    S = k.shape[2]
    G = Hq // Hkv
    qf = q.float().view(R, Hkv, G, D)
    keys = torch.cat([k_prefix.float().unsqueeze(0).expand(R, -1, -1, -1), k[rows].float()], dim=2)  # (R,Hkv,L+S,D)
    vals = torch.cat([v_prefix.float().unsqueeze(0).expand(R, -1, -1, -1), v[rows].float()], dim=2)
    scores = torch.einsum("rhgd,rhkd->rhgk", qf, keys) * scale  # (R, Hkv, G, L + S)
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    qpos = (L + offs).unsqueeze(1)  # (R, 1) absolute positions
    kpos = torch.arange(L + S, device=q.device).unsqueeze(0)  # (1, L + S)
    visible = kpos <= qpos
    if window is not None:
        visible = visible & (qpos - kpos < window)
    scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
    out = torch.einsum("rhgk,rhkd->rhgd", torch.softmax(scores, dim=-1), vals)
    return out.reshape(R, Hq, D).to(q.dtype)
