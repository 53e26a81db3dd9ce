"""Native step function for Gemma-3 decoders: (model, tokens, prefix cache) -> hidden states.

The same math as transformers' ``Gemma3TextModel`` (the parity tests hold it to the plain path), in fewer and
larger kernels, because on a CPU the time goes to GEMMs and to the passes over memory between them:

* q/k/v and gate/up run as one GEMM each; the model's own ``nn.Linear`` weights become views into the fused
  matrices, so no memory is added and the model still runs unchanged through transformers;
* on CPU in fp32 and bf16 the projection weights are also kept pre-packed for oneDNN (no per-call re-layout),
  and the gate GEMM applies GELU and the up GEMM the product in oneDNN's epilogues; bf16 weights are packed for
  the CPU's bf16 GEMMs, or as fp32 copies run on the fp32 FMA units where those are faster (measured once per
  CPU, :func:`gemm_route`);
* on CPU the passes between GEMMs are fused C row kernels (``logitjudge_kernels.cpu_norm``: q/k norm + RoPE
  written in the attention layout; residual add + norm + the next norm in one pass) and attention is a C
  kernel (``logitjudge_kernels.cpu_attention``), both computing in fp32; elsewhere their PyTorch references
  run (fp32 inside, as Gemma's norms); rotary tables are computed once per call;
* one call may hold rows that continue different prefixes (groups of rows, each with its own
  :class:`~logitjudge.judge.prefix.PrefixKV`): the GEMMs run over all rows, attention per group;
* in the last layer only the positions that are read (``select``) go through the query projection, attention,
  output projection, MLP and final norm: the other positions only need their keys and values, for later tokens.
* the probe's hook points (:mod:`logitjudge.judge.hooks`) are called inside the loop when set (then nothing is
  pruned, so every point has every position).

:func:`native_support` says why a model cannot take this path (``auto`` then takes the next backend).
:class:`NativeGemma3Backend` is this family's :class:`~logitjudge.judge.backends.base.Backend`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from logitjudge_kernels import shared_prefix_attention
from logitjudge_kernels.cpu_norm import qk_norm_rope, residual_rms_norm, rms_norm, rotate_ref

from ...errors import ModeError
from ..hooks import attention_probs, parse_hook
from ..prefix import PrefixKV
from .base import Backend

MODEL_TYPES = ("gemma3_text",)


def native_support(model) -> str | None:
    """None if ``model`` can run natively, else the reason it cannot."""
    try:
        dec = model.get_decoder()
    except Exception:  # noqa: BLE001 - any model without a decoder accessor is simply unsupported
        return "the model has no get_decoder()"
    cfg = getattr(dec, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in MODEL_TYPES:
        return f"model type {getattr(cfg, 'model_type', None)!r} is not one of {MODEL_TYPES}"
    if getattr(cfg, "use_bidirectional_attention", False):
        return "bidirectional attention"
    if cfg.hidden_activation != "gelu_pytorch_tanh":
        return f"activation {cfg.hidden_activation!r}"
    if getattr(cfg, "rope_scaling", None) and cfg.rope_scaling.get("rope_type") == "dynamic":
        return "dynamic RoPE scaling"
    devices = {p.device for p in dec.parameters()}
    if len(devices) != 1:
        return f"parameters on several devices {sorted(map(str, devices))}"
    for layer in dec.layers:
        for m in (*_attn_linears(layer), *_mlp_linears(layer)):
            if type(m) is not torch.nn.Linear or m.bias is not None:
                return f"{type(m).__name__} projections (quantized or biased) are not supported"
    return None


def _attn_linears(layer):
    a = layer.self_attn
    return a.q_proj, a.k_proj, a.v_proj, a.o_proj


def _mlp_linears(layer):
    m = layer.mlp
    return m.gate_proj, m.up_proj, m.down_proj


def _fuse(linears) -> torch.Tensor:
    """One (sum of out, in) weight; each module's weight becomes a view into it (no memory added)."""
    weight = torch.cat([m.weight.detach() for m in linears])
    start = 0
    for m in linears:
        n = m.weight.shape[0]
        m.weight = torch.nn.Parameter(weight[start:start + n], requires_grad=False)
        start += n
    return weight


def _norm_weight(norm) -> torch.Tensor:
    return 1.0 + norm.weight.detach().float()  # Gemma scales by (1 + w), in fp32


PACK_MAX_BYTES = 2 << 30  # oneDNN-packed copies of the projection weights are made up to this size (CPU)


class _Weight:
    """A projection weight (out, in) and, optionally, a oneDNN-packed copy of it. Packing once saves the
    per-call re-layout: 15-25% faster fp32 GEMMs on the shapes of Gemma-3-270M (``benchmarks/peers.py`` prints
    both rates: ``layer_flops_per_s_by_path`` in its JSON). ``upcast``: a bf16/fp16 weight whose packed copy is
    fp32 (exactly its values); the GEMM then runs on fp32 FMAs with the input upcast and the output rounded back
    to the input's dtype: on CPUs whose bf16 dot products are slower than fp32 FMAs
    (:func:`logitjudge.autodtype.bf16_route`)."""

    __slots__ = ("weight", "packed", "upcast")

    def __init__(self, weight: torch.Tensor, pack: bool, upcast: bool = False):
        self.weight = weight
        self.upcast = bool(pack and upcast and weight.dtype != torch.float32)
        src = weight.float() if self.upcast else weight
        self.packed = torch.ops.mkldnn._reorder_linear_weight(src, 256) if pack else None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is None:
            return F.linear(x, self.weight)
        x2 = x.reshape(-1, x.shape[-1])
        out = torch.ops.mkldnn._linear_pointwise(x2.float() if self.upcast else x2, self.packed, None, "none", [],
                                                 "")
        return (out.to(x.dtype) if self.upcast else out).view(*x.shape[:-1], self.weight.shape[0])


class _GeluGate:
    """The gated MLP input ``gelu_tanh(x W_gate^T) * (x W_up^T)`` from one fused (2 I, d) weight. With packed
    weights the GELU and the product run inside oneDNN's GEMM epilogues (post-ops), while the output tile is in
    cache, instead of as two more passes over a (rows, 2 I) matrix: 17% faster on 2048 x 640 -> 2 x 2048, and
    8x350 in ``benchmarks/engine.py`` went from 14.0 to 13.3 s; the same values (max |diff| 2e-6 at outputs of
    magnitude 20)."""

    __slots__ = ("weight", "gate", "up")

    def __init__(self, weight: torch.Tensor, pack: bool, upcast: bool = False):
        self.weight = weight
        half = weight.shape[0] // 2
        self.gate, self.up = _Weight(weight[:half], pack, upcast), _Weight(weight[half:], pack, upcast)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate.packed is None:
            gate, up = F.linear(x, self.weight).chunk(2, dim=-1)
            return F.gelu(gate, approximate="tanh").mul_(up)
        x2 = x.reshape(-1, x.shape[-1])
        if self.up.upcast:
            x2 = x2.float()
        gate = torch.ops.mkldnn._linear_pointwise(x2, self.gate.packed, None, "gelu", [], "tanh")
        out = torch.ops.mkldnn._linear_pointwise.binary(x2, gate, self.up.packed, None, "mul")
        if self.up.upcast:
            out = out.to(x.dtype)
        return out.view(*x.shape[:-1], self.up.weight.shape[0])


def _bf16_gemms_available() -> bool:
    """oneDNN has native bf16 GEMMs on this CPU (AVX-512 BF16 / AMX); without them oneDNN would emulate."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _packing_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def gemm_route(dtype: torch.dtype, device: torch.device) -> str:
    """How the native path runs the projections of a model in ``dtype`` on ``device``: "fp32" (oneDNN-packed),
    "bf16" (packed for the CPU's bf16 GEMMs), "bf16_upcast" (bf16 weights, fp32 packed copies and FMAs: where
    the CPU's bf16 dot products measured slower, e.g. AVX-512 BF16 without AMX on Intel, or none at all) or
    "plain" (``F.linear`` on the weights as they are: GPUs, fp16, no oneDNN)."""
    if device.type != "cpu" or not _packing_available():
        return "plain"
    if dtype == torch.float32:  # packed unless plain MKL GEMMs measured faster on this CPU
        from ...autodtype import fp32_route

        return fp32_route("cpu")
    if dtype != torch.bfloat16:
        return "plain"
    if not _bf16_gemms_available():
        return "bf16_upcast"
    from ...autodtype import bf16_route

    return bf16_route("cpu")


@dataclass
class _Layer:
    w_qkv: _Weight  # ((Hq + 2 Hkv) D, d)
    w_o: _Weight  # (d, Hq D)
    gelu_gate: _GeluGate  # (2 I, d)
    w_down: _Weight  # (d, I)
    ln_in: torch.Tensor
    ln_post_attn: torch.Tensor
    ln_pre_ff: torch.Tensor
    ln_post_ff: torch.Tensor
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    layer_type: str
    window: int | None


class NativeGemma3:
    """Prepared once per model; called like :func:`logitjudge.forward.forward_shared`.

    ``pack``: keep oneDNN-packed copies of the projection weights (faster GEMMs on CPU, more memory); None = on
    CPU in fp32 or bf16 (:func:`gemm_route`) when those copies take at most ``PACK_MAX_BYTES``. ``route`` says
    which GEMMs run."""

    def __init__(self, model, *, pack: bool | None = None):
        reason = native_support(model)
        if reason:
            raise ModeError(f"the native path does not support this model: {reason}; use prefix_mode='shared'")
        dec = model.get_decoder()
        cfg = dec.config
        self.embed = dec.embed_tokens
        self.rotary = dec.rotary_emb
        self.eps = float(cfg.rms_norm_eps)
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.scale = float(cfg.query_pre_attn_scalar) ** -0.5
        self.softcap = getattr(cfg, "attn_logit_softcapping", None)
        self.final_norm = _norm_weight(dec.norm)
        layers = dec.layers[:cfg.num_hidden_layers]
        w = layers[0].self_attn.q_proj.weight
        self.route = gemm_route(w.dtype, w.device)
        if pack is None:
            per = 4 if self.route in ("fp32", "bf16_upcast") else w.element_size()  # bytes of a packed element
            size = sum(m.weight.numel() * per
                       for layer in layers for m in (*_attn_linears(layer), *_mlp_linears(layer)))
            pack = self.route != "plain" and size <= PACK_MAX_BYTES
        self.packed = bool(pack) and _packing_available()
        if not self.packed:
            self.route = "plain"
        self.hook_fns: dict = {}  # the probe's hook points, set by NativeGemma3Backend.hooks
        self.layers = []
        pk, up = self.packed, self.route == "bf16_upcast"
        for i, layer in enumerate(layers):
            a, mlp = layer.self_attn, layer.mlp
            self.layers.append(_Layer(
                _Weight(_fuse((a.q_proj, a.k_proj, a.v_proj)), pk, up), _Weight(a.o_proj.weight.detach(), pk, up),
                _GeluGate(_fuse((mlp.gate_proj, mlp.up_proj)), pk, up),
                _Weight(mlp.down_proj.weight.detach(), pk, up),
                _norm_weight(layer.input_layernorm), _norm_weight(layer.post_attention_layernorm),
                _norm_weight(layer.pre_feedforward_layernorm), _norm_weight(layer.post_feedforward_layernorm),
                _norm_weight(a.q_norm), _norm_weight(a.k_norm), cfg.layer_types[i], a.sliding_window))

    def _block_tail(self, lw: _Layer, x: torch.Tensor, attn: torch.Tensor, w_next: torch.Tensor):
        """After attention: output projection, post-attention norm + residual, MLP, post-MLP norm + residual.
        Returns the new residual stream and its norm with ``w_next`` (the next block's input norm)."""
        x, h = residual_rms_norm(x, lw.w_o(attn), lw.ln_post_attn, lw.ln_pre_ff, self.eps)
        return residual_rms_norm(x, lw.w_down(lw.gelu_gate(h)), lw.ln_post_ff, w_next, self.eps)

    def _hooked_tail(self, i: int, lw: _Layer, x: torch.Tensor, attn: torch.Tensor, w_next: torch.Tensor):
        """:meth:`_block_tail` with the hook points of block i: z (the output projection's input), the attention
        and MLP outputs (before their post-norms, as in transformers' Gemma-3 modules) and the block's output."""
        f = self.hook_fns

        def point(name: str, t: torch.Tensor) -> torch.Tensor:
            new = f[name](t) if name in f else None
            return t if new is None else new

        attn = point(f"blocks.{i}.attn.hook_z", attn)  # (B, S, Hq D)
        x, h = residual_rms_norm(x, point(f"blocks.{i}.hook_attn_out", lw.w_o(attn)), lw.ln_post_attn,
                                 lw.ln_pre_ff, self.eps)
        x, h = residual_rms_norm(x, point(f"blocks.{i}.hook_mlp_out", lw.w_down(lw.gelu_gate(h))), lw.ln_post_ff,
                                 w_next, self.eps)
        new = point(f"blocks.{i}.hook_resid_post", x)
        if new is not x:  # a replaced residual stream: the next block's input norm is taken again
            x, h = new, rms_norm(new, w_next, self.eps)
        return x, h

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
        ropes = {t: self.rotary(x, pos, t) for t in {lw.layer_type for lw in self.layers}}  # (B, S, D) each
        captured = [] if capture else None
        H, Hkv, D = self.heads, self.kv_heads, self.head_dim
        h = rms_norm(x, self.layers[0].ln_in, self.eps)
        last = len(self.layers) - 1
        for i, lw in enumerate(self.layers):
            w_next = self.final_norm if i == last else self.layers[i + 1].ln_in
            cos, sin = ropes[lw.layer_type]
            pruned = i == last and select is not None and not self.hook_fns
            # k, v (B, Hkv, S, D) in their own memory: children's prefixes are views of them
            if pruned:  # only k/v for all positions; queries only at the read positions, below
                kv = F.linear(h, lw.w_qkv.weight[H * D:].to(h.dtype))
                _, k, v = qk_norm_rope(kv, lw.q_norm, lw.k_norm, cos, sin, heads=0, kv_heads=Hkv, eps=self.eps)
            else:
                q, k, v = qk_norm_rope(lw.w_qkv(h), lw.q_norm, lw.k_norm, cos, sin, heads=H, kv_heads=Hkv,
                                       eps=self.eps)  # q (B, Hq, S, D)
            if capture:
                captured.append((k, v))
            if pruned:  # the read positions' queries, from their own hidden states
                rows, offs = select
                qs = F.linear(h[rows, offs], lw.w_qkv.weight[:H * D].to(h.dtype)).view(-1, H, D)
                qs = rotate_ref(rms_norm(qs, lw.q_norm, self.eps), cos[rows, offs, None], sin[rows, offs, None])
                o = torch.empty_like(qs)
                a = 0
                for pre, n in groups:
                    mine = (rows >= a) & (rows < a + n)
                    kp, vp = pre.layer(i, k)
                    o[mine] = attend_selected(qs[mine], rows[mine] - a, offs[mine], kp, vp, k[a:a + n],
                                              v[a:a + n], scale=self.scale, window=lw.window, softcap=self.softcap)
                    a += n
                _, h = self._block_tail(lw, x[rows, offs], o.reshape(len(rows), H * D), w_next)
                return h, captured
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
            if self.hook_fns:
                x, h = self._hooked_tail(i, lw, x, o.reshape(B, S, -1), w_next)
            else:
                x, h = self._block_tail(lw, x, o.reshape(B, S, -1), w_next)
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


class NativeGemma3Backend(Backend):
    """Gemma-3 decoders through :class:`NativeGemma3` (``native`` mode): rows of several prefixes per call."""

    name = "native"
    supports = frozenset({"softcap", "sliding_window"})
    mixes_prefixes = True

    @classmethod
    def refuses(cls, model, features: dict) -> str | None:
        return native_support(model)

    def __init__(self, model, *, pack: bool | None = None):
        super().__init__(model)
        self.step = NativeGemma3(model, pack=pack)
        self.route = self.step.route  # fp32, bf16, bf16_upcast or plain

    def _forward(self, ids, groups, lengths, read, capture):
        return self.step(ids, groups, capture=capture, select=read)

    @contextlib.contextmanager
    def hooks(self, fns: dict):
        for name in fns:
            parse_hook(name, self.n_layers)
        self.step.hook_fns = dict(fns)
        try:
            yield
        finally:
            self.step.hook_fns = {}
