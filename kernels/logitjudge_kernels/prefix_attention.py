"""Attention of many suffix rows to one shared prefix, without copying the prefix per row.

Every row b of a batch of B suffixes continues the same prefix of L tokens. Query i of a row sits at
absolute position L + i and sees (a) prefix keys j < L and (b) its own suffix keys 0..i, both subject to
an optional sliding window (key at absolute position j visible from query position a iff a - j < w, as in
transformers' ``sliding_window_overlay``: ``kv_idx > q_idx - sliding_window``). The result equals ordinary
causal attention over [prefix ; suffix] but the prefix K/V are stored once, (Hkv, L, D).

Method: the prefix part is one batched product of all rows' queries against the prefix (queries of all B
rows and all G query heads of a KV head are stacked into one (B*G*S, D) matrix per KV head); the suffix
part is per row; the two partial results are merged through their log-sum-exps.

* :func:`shared_prefix_attention_ref` - PyTorch reference of that method (fp32 inside, chunked over L).
* :func:`shared_prefix_attention_triton` - Triton: pass 1 (prefix, one program per block of stacked queries
  and KV head) writes fp32 partial outputs + LSEs; pass 2 (one program per block of suffix queries and
  query head) starts its online softmax from that state and walks the causal suffix keys.
* :func:`shared_prefix_attention_cpu` - CPU: the C kernel of :mod:`.cpu_attention` (one exact softmax over
  [prefix ; suffix], no merge) where it applies, else :func:`shared_prefix_attention_aten` (this method through
  ATen's CPU flash-attention kernel).
* :func:`shared_prefix_attention` - dispatcher (``backend="auto" | "ref" | "triton" | "cpu"``; "auto" on CPU runs
  :data:`ATTENTION`: the C kernel, ATen's flash path or the reference, whichever measured fastest on this machine
  for the shape's bucket, :mod:`.dispatch`).
* :func:`attention_ref` - plain attention over explicitly concatenated keys (ground truth for tests).
"""

from __future__ import annotations

import math

import torch

from ._triton_util import (
    HAS_TRITON,
    check_same_device_dtype,
    interpreter_active,
    next_pow2,
    resolve_backend,
    tl,
    triton,
)
from .cpu_attention import c_attention_refusal, shared_prefix_attention_c
from .dispatch import Candidate, Kernel, max_abs, pow2_bucket, record, scaled_tolerance, wide

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_TRITON_HEAD_DIM = 256
_REF_MAX_SCORE_ELEMS = 1 << 25  # fp32 score elements the reference materialises per prefix chunk (128 MiB)


def _softcap(x: torch.Tensor, softcap: float | None) -> torch.Tensor:
    return x if softcap is None else softcap * torch.tanh(x / softcap)


def _scores_(scores: torch.Tensor, scale: float, softcap: float | None) -> torch.Tensor:
    """In place on a freshly computed fp32 q @ k^T: scale, then soft-cap."""
    scores.mul_(scale)
    if softcap is not None:
        scores.div_(softcap).tanh_().mul_(softcap)
    return scores


def _visible(qpos: torch.Tensor, kpos: torch.Tensor, sliding_window: int | None) -> torch.Tensor:
    """Boolean (len(qpos), len(kpos)) mask: causal and, if set, inside the sliding window."""
    diff = qpos[:, None] - kpos[None, :]
    vis = diff >= 0
    if sliding_window is not None:
        vis = vis & (diff < sliding_window)
    return vis


def _check_inputs(q, k_prefix, v_prefix, k_suffix, v_suffix, scale, sliding_window, softcap, sinks=None) -> None:
    named = {"q": q, "k_prefix": k_prefix, "v_prefix": v_prefix, "k_suffix": k_suffix, "v_suffix": v_suffix}
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, rank, layout in (("q", 4, "(B, Hq, S, D)"), ("k_prefix", 3, "(Hkv, L, D)"),
                               ("v_prefix", 3, "(Hkv, L, D)"), ("k_suffix", 4, "(B, Hkv, S, D)"),
                               ("v_suffix", 4, "(B, Hkv, S, D)")):
        if named[name].dim() != rank:
            raise ValueError(f"{name} must have rank {rank} {layout}, got shape {tuple(named[name].shape)}")
    B, Hq, S, D = q.shape
    Hkv, L, Dk = k_prefix.shape
    if v_prefix.shape != k_prefix.shape:
        raise ValueError(f"v_prefix shape {tuple(v_prefix.shape)} != k_prefix shape {tuple(k_prefix.shape)}")
    if k_suffix.shape != v_suffix.shape:
        raise ValueError(f"v_suffix shape {tuple(v_suffix.shape)} != k_suffix shape {tuple(k_suffix.shape)}")
    if Dk != D or k_suffix.shape[3] != D:
        raise ValueError(f"head dim mismatch: q has D={D}, k_prefix D={Dk}, k_suffix D={k_suffix.shape[3]}")
    if Hkv == 0 or Hq % Hkv != 0:
        raise ValueError(f"query heads Hq={Hq} must be a multiple of KV heads Hkv={Hkv} (GQA)")
    if tuple(k_suffix.shape[:3]) != (B, Hkv, S):
        raise ValueError(
            f"k_suffix shape {tuple(k_suffix.shape)} must be (B, Hkv, S, D) = ({B}, {Hkv}, {S}, {D})"
        )
    check_same_device_dtype(named, dtypes=SUPPORTED_DTYPES)
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite positive float, got {scale!r}")
    if sliding_window is not None and (isinstance(sliding_window, bool) or not isinstance(sliding_window, int)
                                       or sliding_window < 1):
        raise ValueError(f"sliding_window must be None or an int >= 1, got {sliding_window!r}")
    if softcap is not None and not (isinstance(softcap, (int, float)) and softcap > 0):
        raise ValueError(f"softcap must be None or a positive float, got {softcap!r}")
    if sinks is not None and (not isinstance(sinks, torch.Tensor) or tuple(sinks.shape) != (Hq,)
                              or sinks.device != q.device):
        raise ValueError(f"sinks must be a ({Hq},) tensor of per-query-head sink logits on {q.device}, got "
                         f"{tuple(sinks.shape) if isinstance(sinks, torch.Tensor) else type(sinks).__name__}")


def apply_sinks(o: torch.Tensor, lse: torch.Tensor, sinks: torch.Tensor | None) -> torch.Tensor:
    """Attention sinks (GPT-OSS): one extra logit per query head in the softmax denominator whose value is zero.
    ``o`` (B, Hq, S, D) normalised over all real keys (prefix and suffix merged), ``lse`` (B, Hq, S) their
    log-sum-exp: the sink counts once, so o <- o * exp(lse - logaddexp(lse, sink)) = o * sigmoid(lse - sink)."""
    if sinks is None:
        return o
    return o.float() * torch.sigmoid(lse.float() - sinks.float()[None, :, None]).unsqueeze(-1)


# ----------------------------------------------------------------------------------------------- reference
def merge_attention_states(o1: torch.Tensor, lse1: torch.Tensor, o2: torch.Tensor, lse2: torch.Tensor):
    """Merge two softmax-normalised partial attentions over disjoint key sets.

    ``o*``: (..., D) outputs, each normalised over its own keys; ``lse*``: (...) log-sum-exp of its scores
    (``-inf`` = no visible key, with ``o`` then ignored). Returns ``(o, lse)`` in fp32.
    """
    lse1, lse2 = lse1.float(), lse2.float()
    lse = torch.logaddexp(lse1, lse2)
    safe = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    w1 = torch.exp(lse1 - safe).unsqueeze(-1)
    w2 = torch.exp(lse2 - safe).unsqueeze(-1)
    return o1.float() * w1 + o2.float() * w2, lse


def _partial_attention(scores: torch.Tensor, v: torch.Tensor):
    """Softmax-normalised ``scores @ v`` and the LSE of masked fp32 ``scores`` (rows may be all -inf).

    ``scores`` is a temporary: it is overwritten with the probabilities.
    """
    lse = torch.logsumexp(scores, dim=-1)
    safe = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    return torch.matmul(scores.sub_(safe.unsqueeze(-1)).exp_(), v), lse


def _prefix_part_ref(q, k_prefix, v_prefix, scale, sliding_window, softcap):
    """Attention of every row's queries to the shared prefix: fp32 (B, Hq, S, D) output and (B, Hq, S) LSE."""
    B, Hq, S, D = q.shape
    Hkv, L, _ = k_prefix.shape
    G = Hq // Hkv
    # (B, Hkv, G, S, D) -> (Hkv, B*G*S, D): all queries sharing a KV head form one matrix; the prefix
    # (Hkv, L, D) is used as is, never repeated per row.
    qf = q.float().reshape(B, Hkv, G, S, D).transpose(0, 1).reshape(Hkv, B * G * S, D)
    o, lse = None, torch.full((Hkv, B * G * S), float("-inf"), dtype=torch.float32, device=q.device)
    qpos = torch.arange(L, L + S, device=q.device)
    # keys before L - window + 1 are outside every query's window
    lo = 0 if sliding_window is None else max(0, L - sliding_window + 1)
    chunk = max(1, _REF_MAX_SCORE_ELEMS // max(1, Hkv * B * G * S))
    for start in range(lo, L, chunk):
        end = min(L, start + chunk)
        kc = k_prefix[:, start:end].float()
        scores = _scores_(torch.bmm(qf, kc.transpose(1, 2)), scale, softcap)  # (Hkv, B*G*S, c)
        if sliding_window is not None:
            vis = _visible(qpos, torch.arange(start, end, device=q.device), sliding_window)  # (S, c)
            scores.view(Hkv, B * G, S, end - start).masked_fill_(~vis, float("-inf"))
        oc, lsec = _partial_attention(scores, v_prefix[:, start:end].float())
        o, lse = (oc, lsec) if o is None else merge_attention_states(o, lse, oc, lsec)
    if o is None:  # empty prefix, or every prefix key outside the window
        o = torch.zeros(Hkv, B * G * S, D, dtype=torch.float32, device=q.device)
    o = o.view(Hkv, B, G, S, D).transpose(0, 1).reshape(B, Hq, S, D)
    return o, lse.view(Hkv, B, G, S).transpose(0, 1).reshape(B, Hq, S)


def _suffix_part_ref(q, k_suffix, v_suffix, scale, sliding_window, softcap):
    """Causal attention of each row's queries to its own suffix keys: fp32 output and LSE."""
    B, Hq, S, D = q.shape
    Hkv = k_suffix.shape[1]
    G = Hq // Hkv
    qf = q.float().reshape(B, Hkv, G * S, D)
    scores = _scores_(torch.matmul(qf, k_suffix.float().transpose(-1, -2)), scale, softcap)
    pos = torch.arange(S, device=q.device)
    scores.view(B, Hkv, G, S, S).masked_fill_(~_visible(pos, pos, sliding_window), float("-inf"))
    o, lse = _partial_attention(scores, v_suffix.float())
    return o.reshape(B, Hq, S, D), lse.reshape(B, Hq, S)


def shared_prefix_attention_ref(q, k_prefix, v_prefix, k_suffix, v_suffix, *, scale: float,
                                sliding_window: int | None = None, softcap: float | None = None,
                                sinks: torch.Tensor | None = None) -> torch.Tensor:
    """PyTorch reference: batched prefix attention + per-row suffix attention, merged by LSE (fp32 inside); the
    sinks, if any, enter the merged denominator once (:func:`apply_sinks`)."""
    _check_inputs(q, k_prefix, v_prefix, k_suffix, v_suffix, scale, sliding_window, softcap, sinks)
    o_p, lse_p = _prefix_part_ref(q, k_prefix, v_prefix, scale, sliding_window, softcap)
    o_s, lse_s = _suffix_part_ref(q, k_suffix, v_suffix, scale, sliding_window, softcap)
    o, lse = merge_attention_states(o_p, lse_p, o_s, lse_s)
    return apply_sinks(o, lse, sinks).to(q.dtype)


# ------------------------------------------------------------------------------------------------ CPU fused
def _flash_cpu(q, k, v, scale: float, mask: torch.Tensor | None):
    """ATen's fused CPU flash attention: (N, H, M, D) queries -> fp32-accumulated output and natural-log LSE."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, attn_mask=mask,
                                                                      scale=scale)


def _expand_heads(x: torch.Tensor, G: int) -> torch.Tensor:
    """(B, Hkv, S, D) -> (B, Hkv*G, S, D) for GQA: a stride-0 view when Hkv == 1 (Gemma-3-270M), else a copy."""
    B, Hkv, S, D = x.shape
    return x.unsqueeze(2).expand(B, Hkv, G, S, D).reshape(B, Hkv * G, S, D)


def _additive_mask(vis: torch.Tensor, dtype) -> torch.Tensor | None:
    """0 / -inf mask from a boolean visibility matrix, or None where every key is visible to every query."""
    if bool(vis.all()):
        return None
    return torch.zeros(vis.shape, dtype=dtype, device=vis.device).masked_fill_(~vis, float("-inf"))


SUFFIX_BAND_ROWS = 256  # query rows per block when a sliding window cuts the suffix


def _suffix_cpu(q, k, v, scale: float, window: int | None):
    """Causal (and windowed) attention of each row's queries (B, H, S, D) to its own keys (B, H, S, D): one
    causal kernel call (the kernel skips masked blocks) while the window does not cut; else query blocks, each
    against the keys its window can reach, so the work grows with S x window, not S^2."""
    S = q.shape[2]
    if window is None or S <= window:
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True, scale=scale)
    outs, lses = [], []
    for a in range(0, S, SUFFIX_BAND_ROWS):
        b = min(S, a + SUFFIX_BAND_ROWS)
        lo = max(0, a - window + 1)
        vis = _visible(torch.arange(a, b, device=q.device), torch.arange(lo, b, device=q.device), window)
        o, lse = _flash_cpu(q[:, :, a:b], k[:, :, lo:b], v[:, :, lo:b], scale, _additive_mask(vis, q.dtype))
        outs.append(o)
        lses.append(lse)
    return torch.cat(outs, dim=2), torch.cat(lses, dim=2)


def shared_prefix_attention_cpu(q, k_prefix, v_prefix, k_suffix, v_suffix, *, scale: float,
                                sliding_window: int | None = None, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """CPU fast path: the C kernel (:mod:`.cpu_attention`) where it applies (head_dim a multiple of 32, built;
    bf16/fp16 computed in fp32), else :func:`shared_prefix_attention_aten`: the same method as the reference
    through ATen's fused flash-attention kernel for CPU (blocked, no score matrix in memory, returns the LSE),
    the parts merged by LSE; the prefix part stacks queries as in the reference; masks exist only where a
    window cuts. No soft-cap (the dispatcher sends those to the reference). Sinks as in the reference."""
    _check_inputs(q, k_prefix, v_prefix, k_suffix, v_suffix, scale, sliding_window, None, sinks)
    fn = shared_prefix_attention_c if c_attention_refusal(q) is None else shared_prefix_attention_aten
    return fn(q, k_prefix, v_prefix, k_suffix, v_suffix, scale=scale, sliding_window=sliding_window, sinks=sinks)


def shared_prefix_attention_aten(q, k_prefix, v_prefix, k_suffix, v_suffix, *, scale: float,
                                 sliding_window: int | None = None, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """The CPU path without the C kernel: prefix and suffix parts through ATen's flash kernel, LSE-merged."""
    _check_inputs(q, k_prefix, v_prefix, k_suffix, v_suffix, scale, sliding_window, None, sinks)
    B, Hq, S, D = q.shape
    Hkv, L, _ = k_prefix.shape
    G = Hq // Hkv
    pos = torch.arange(S, device=q.device)
    o_s, lse_s = _suffix_cpu(q, _expand_heads(k_suffix, G), _expand_heads(v_suffix, G), scale, sliding_window)
    o_s, lse_s = o_s.reshape(B, Hkv, G * S, D), lse_s.reshape(B, Hkv, G * S)
    lo = 0 if sliding_window is None else max(0, L - sliding_window + 1)  # keys before lo are out of every window
    if lo >= L:  # no prefix key visible (or none at all)
        return apply_sinks(o_s.reshape(B, Hq, S, D), lse_s.reshape(B, Hq, S), sinks).to(q.dtype)
    # the window cuts only if the farthest (query, prefix key) pair is at least a window apart
    cut = sliding_window is not None and L + S - 1 - lo >= sliding_window
    vis = _visible(L + pos, torch.arange(lo, L, device=q.device), sliding_window) if cut else None  # (S, L - lo)
    mask = None if vis is None else _additive_mask(vis, q.dtype)
    qp = q.reshape(B, Hkv, G * S, D).transpose(0, 1).reshape(1, Hkv, B * G * S, D)
    o_p, lse_p = _flash_cpu(qp, k_prefix[:, lo:].unsqueeze(0), v_prefix[:, lo:].unsqueeze(0), scale,
                            None if mask is None else mask.repeat(B * G, 1))
    o_p = o_p.reshape(Hkv, B, G * S, D).transpose(0, 1)
    lse_p = lse_p.reshape(Hkv, B, G, S).transpose(0, 1)
    if vis is not None:  # a query that sees no prefix key gets output 0 and LSE 0 from the kernel: LSE -inf
        lse_p = lse_p.masked_fill(~vis.any(dim=1), float("-inf"))
    lse_p = lse_p.reshape(B, Hkv, G * S)
    o, lse = merge_attention_states(o_p, lse_p, o_s, lse_s)
    return apply_sinks(o.reshape(B, Hq, S, D), lse.reshape(B, Hq, S), sinks).to(q.dtype)


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float, causal_offset: int = 0,
                  sliding_window: int | None = None, softcap: float | None = None,
                  sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Plain attention in fp32 (float64 for float64 inputs) over explicit keys: the ground truth.

    ``q``: (B, Hq, S, D), query i at absolute position ``causal_offset + i``; ``k``, ``v``: (B, Hkv, T, D),
    key j at absolute position j. Key visible iff ``j <= pos`` and, with a window,
    ``pos - j < sliding_window``. ``sinks`` (Hq,): a logit per query head appended to every row's scores and
    dropped after the softmax, as transformers' GPT-OSS eager attention does.
    Returns (B, Hq, S, D) in q's dtype (rows without any visible key are 0).
    """
    B, Hq, S, D = q.shape
    G = Hq // k.shape[1]
    kf = wide(k).repeat_interleave(G, dim=1)
    vf = wide(v).repeat_interleave(G, dim=1)
    scores = _softcap(torch.matmul(wide(q), kf.transpose(-1, -2)) * scale, softcap)
    qpos = torch.arange(causal_offset, causal_offset + S, device=q.device)
    vis = _visible(qpos, torch.arange(k.shape[2], device=q.device), sliding_window)
    scores = scores.masked_fill(~vis, float("-inf"))
    if sinks is not None:
        sink_col = sinks.to(scores.dtype)[None, :, None, None].expand(B, Hq, S, 1)
        probs = torch.softmax(torch.cat([scores, sink_col], dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.matmul(probs, vf).to(q.dtype)


# ------------------------------------------------------------------------------------------------- triton
if HAS_TRITON:

    @triton.jit
    def _tanh(x):
        t = tl.exp(-2.0 * tl.abs(x))
        y = (1.0 - t) / (1.0 + t)
        return tl.where(x >= 0, y, -y)

    @triton.jit
    def _attend_tile(q, k, v, vis, m_i, l_i, acc, scale, softcap,
                     USE_SOFTCAP: tl.constexpr, IEEE: tl.constexpr):
        """One online-softmax step of a (BLOCK_M, D) query tile over a (BLOCK_N, D) key/value tile."""
        if IEEE:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = s * scale
        if USE_SOFTCAP:
            s = softcap * _tanh(s / softcap)
        s = tl.where(vis, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_use[:, None])
        alpha = tl.exp(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        if IEEE:
            pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        return m_new, l_i, acc

    @triton.jit
    def _prefix_fwd_kernel(
        Q, K, V, OP, LSEP,
        s_qb, s_qh, s_qs, s_qd, s_kh, s_kl, s_kd, s_vh, s_vl, s_vd,
        B, S, L, D, scale, softcap, window,
        G: tl.constexpr, HQ: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
        USE_SOFTCAP: tl.constexpr, USE_WINDOW: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr,
    ):
        """Pass 1: stacked queries (b, g, s) of KV head ``kvh`` against the shared prefix."""
        pid_m = tl.program_id(0)
        kvh = tl.program_id(1)
        n = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = n < B * G * S
        b = (n // (G * S)).to(tl.int64)
        g = (n // S) % G
        s = n % S
        h = kvh * G + g
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < D
        q = tl.load(Q + b[:, None] * s_qb + h[:, None] * s_qh + s[:, None] * s_qs + offs_d[None, :] * s_qd,
                    mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        if UPCAST:
            q = q.to(tl.float32)
        qpos = L + s
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        lo = 0
        if USE_WINDOW:  # keys before L - window + 1 are outside every query's window
            lo = (tl.maximum(L - window + 1, 0) // BLOCK_N) * BLOCK_N
        for start in range(lo, L, BLOCK_N):
            offs_l = start + tl.arange(0, BLOCK_N)
            k_ok = offs_l < L
            kv_mask = k_ok[:, None] & d_ok[None, :]
            k = tl.load(K + kvh * s_kh + offs_l[:, None] * s_kl + offs_d[None, :] * s_kd,
                        mask=kv_mask, other=0.0)
            v = tl.load(V + kvh * s_vh + offs_l[:, None] * s_vl + offs_d[None, :] * s_vd,
                        mask=kv_mask, other=0.0)
            if UPCAST:
                k = k.to(tl.float32)
                v = v.to(tl.float32)
            vis = k_ok[None, :]
            if USE_WINDOW:
                vis = vis & ((qpos[:, None] - offs_l[None, :]) < window)
            m_i, l_i, acc = _attend_tile(q, k, v, vis, m_i, l_i, acc, scale, softcap, USE_SOFTCAP, IEEE)
        has = l_i > 0.0
        l_safe = tl.where(has, l_i, 1.0)
        o = acc / l_safe[:, None]
        lse = tl.where(has, m_i + tl.log(l_safe), float("-inf"))
        row = (b * HQ + h) * S + s  # OP: contiguous (B, Hq, S, D) fp32; LSEP: (B, Hq, S) fp32
        tl.store(OP + row[:, None] * D + offs_d[None, :], o, mask=row_ok[:, None] & d_ok[None, :])
        tl.store(LSEP + row, lse, mask=row_ok)

    @triton.jit
    def _suffix_fwd_kernel(
        Q, K, V, OP, LSEP, Out, SINK,
        s_qb, s_qh, s_qs, s_qd, s_kb, s_kh, s_ks, s_kd, s_vb, s_vh, s_vs, s_vd, s_ob, s_oh, s_os, s_od,
        S, D, scale, softcap, window,
        G: tl.constexpr, HQ: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, HAS_PREFIX: tl.constexpr,
        USE_SOFTCAP: tl.constexpr, USE_WINDOW: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr,
        USE_SINK: tl.constexpr,
    ):
        """Pass 2: a row's suffix queries of head ``h``, from the prefix state on, over causal suffix keys. A sink
        logit (USE_SINK) joins the running softmax once, as a key whose value is zero."""
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1)
        b = (pid_bh // HQ).to(tl.int64)
        h = pid_bh % HQ
        kvh = h // G
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = offs_m < S
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < D
        q_mask = row_ok[:, None] & d_ok[None, :]
        q = tl.load(Q + b * s_qb + h * s_qh + offs_m[:, None] * s_qs + offs_d[None, :] * s_qd,
                    mask=q_mask, other=0.0)
        if UPCAST:
            q = q.to(tl.float32)
        if HAS_PREFIX:
            row = pid_bh.to(tl.int64) * S + offs_m
            m_i = tl.load(LSEP + row, mask=row_ok, other=float("-inf"))
            l_i = tl.where(m_i == float("-inf"), 0.0, 1.0)
            acc = tl.load(OP + row[:, None] * D + offs_d[None, :], mask=q_mask, other=0.0)
        else:
            m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
            l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
            acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        if USE_SINK:
            sink = tl.load(SINK + h).to(tl.float32)
            m_new = tl.maximum(m_i, sink)
            alpha = tl.exp(m_i - m_new)  # m_i = -inf (no prefix key): 0
            l_i = l_i * alpha + tl.exp(sink - m_new)
            acc = acc * alpha[:, None]
            m_i = m_new
        hi = tl.minimum(S, (pid_m + 1) * BLOCK_M)
        lo = 0
        if USE_WINDOW:
            lo = (tl.maximum(pid_m * BLOCK_M - window + 1, 0) // BLOCK_N) * BLOCK_N
        for start in range(lo, hi, BLOCK_N):
            offs_j = start + tl.arange(0, BLOCK_N)
            kv_mask = (offs_j < S)[:, None] & d_ok[None, :]
            k = tl.load(K + b * s_kb + kvh * s_kh + offs_j[:, None] * s_ks + offs_d[None, :] * s_kd,
                        mask=kv_mask, other=0.0)
            v = tl.load(V + b * s_vb + kvh * s_vh + offs_j[:, None] * s_vs + offs_d[None, :] * s_vd,
                        mask=kv_mask, other=0.0)
            if UPCAST:
                k = k.to(tl.float32)
                v = v.to(tl.float32)
            diff = offs_m[:, None] - offs_j[None, :]
            vis = (diff >= 0) & (offs_j[None, :] < S)
            if USE_WINDOW:
                vis = vis & (diff < window)
            m_i, l_i, acc = _attend_tile(q, k, v, vis, m_i, l_i, acc, scale, softcap, USE_SOFTCAP, IEEE)
        o = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
        tl.store(Out + b * s_ob + h * s_oh + offs_m[:, None] * s_os + offs_d[None, :] * s_od,
                 o.to(Out.dtype.element_ty), mask=q_mask)


def _attention_blocks(head_dim_block: int, elem_bytes: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages); shared memory (q tile + staged k/v tiles) <= 128 KiB."""
    if interpreter_active():
        return 16, 16, 1, 1  # small tiles: exercise multi-tile loops and masking on tiny test shapes
    if head_dim_block <= 64:
        return 128, 64, 4, 3
    if head_dim_block <= 128:
        return (128, 64, 8, 2) if elem_bytes == 2 else (64, 32, 4, 2)
    return (64, 32, 8, 2) if elem_bytes == 2 else (32, 32, 4, 1)


def shared_prefix_attention_triton(q, k_prefix, v_prefix, k_suffix, v_suffix, *, scale: float,
                                   sliding_window: int | None = None, softcap: float | None = None,
                                   sinks: torch.Tensor | None = None,
                                   block_m: int | None = None, block_n: int | None = None) -> torch.Tensor:
    """Host wrapper of the two Triton passes (needs CUDA tensors, or CPU tensors under TRITON_INTERPRET=1)."""
    if not HAS_TRITON:
        raise RuntimeError("triton is not installed")
    _check_inputs(q, k_prefix, v_prefix, k_suffix, v_suffix, scale, sliding_window, softcap, sinks)
    B, Hq, S, D = q.shape
    Hkv, L, _ = k_prefix.shape
    if D > MAX_TRITON_HEAD_DIM or D < 1:
        raise ValueError(f"the Triton kernel supports head dims up to {MAX_TRITON_HEAD_DIM}, got D={D}")
    G = Hq // Hkv
    # The interpreter truncates fp32 -> bf16 casts (GPUs round to nearest): let it store fp32, round in torch.
    upcast = interpreter_active() and q.dtype == torch.bfloat16
    out = torch.empty((B, Hq, S, D), dtype=torch.float32 if upcast else q.dtype, device=q.device)
    if B * Hq * S == 0:
        return out
    BLOCK_D = max(16, next_pow2(D))
    bm, bn, warps, stages = _attention_blocks(BLOCK_D, q.element_size())
    bm, bn = block_m or bm, block_n or bn
    flags = dict(USE_SOFTCAP=softcap is not None, USE_WINDOW=sliding_window is not None,
                 UPCAST=upcast, IEEE=q.dtype == torch.float32)
    sink_buf = out if sinks is None else sinks.float().contiguous()  # never read without USE_SINK
    common = dict(scale=float(scale), softcap=float(softcap or 1.0), window=int(sliding_window or 0))
    has_prefix = L > 0
    if has_prefix:
        o_p = torch.empty((B, Hq, S, D), dtype=torch.float32, device=q.device)
        lse_p = torch.empty((B, Hq, S), dtype=torch.float32, device=q.device)
        grid = (triton.cdiv(B * G * S, bm), Hkv)
        _prefix_fwd_kernel[grid](
            q, k_prefix, v_prefix, o_p, lse_p, *q.stride(), *k_prefix.stride(), *v_prefix.stride(),
            B, S, L, D, **common, G=G, HQ=Hq, BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=BLOCK_D, **flags,
            num_warps=warps, num_stages=stages,
        )
    else:  # never read: HAS_PREFIX=False
        o_p = lse_p = out
    grid = (triton.cdiv(S, bm), B * Hq)
    _suffix_fwd_kernel[grid](
        q, k_suffix, v_suffix, o_p, lse_p, out, sink_buf,
        *q.stride(), *k_suffix.stride(), *v_suffix.stride(), *out.stride(),
        S, D, **common, G=G, HQ=Hq, BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=BLOCK_D, HAS_PREFIX=has_prefix, **flags,
        USE_SINK=sinks is not None, num_warps=warps, num_stages=stages,
    )
    return out.to(q.dtype)


# --------------------------------------------------------------------------------------------- dispatcher
def _attention_bucket(q, k_prefix, v_prefix, k_suffix, v_suffix, *, scale, sliding_window=None, softcap=None,
                      sinks=None) -> str:
    B, Hq, S, D = q.shape
    L = k_prefix.shape[1]
    cut = sliding_window is not None and sliding_window < L + S
    return (f"rows {pow2_bucket(B * S)}, keys {pow2_bucket(L + S)}, D {D}, G {Hq // max(1, k_prefix.shape[0])}, "
            f"{'window' if cut else 'causal'}, {str(q.dtype)[6:]}" + (", softcap" if softcap is not None else "")
            + (", sinks" if sinks is not None else ""))


def _attention_flops(q, k_prefix, v_prefix, k_suffix, v_suffix, *, scale, sliding_window=None, softcap=None,
                     sinks=None) -> int:
    """4 x D x (query, key) pairs any exact method computes, per query head."""
    B, Hq, S, D = q.shape
    L = k_prefix.shape[1]
    w = sliding_window or (L + S)
    pairs = sum(min(L + i + 1, w) for i in range(S))
    return 4 * B * Hq * D * pairs


def _no_softcap(what):
    def refusal(q, *a, softcap=None, **k):
        if q.device.type != "cpu":
            return f"{what} is CPU only"
        return f"no soft-capping in {what}" if softcap is not None else None
    return refusal


def _c_refusal(q, *a, softcap=None, **k):
    return c_attention_refusal(q, softcap)


def _drop_softcap(fn):
    def run(*args, softcap=None, **kw):
        return fn(*args, **kw)
    return run


def _attention_sample(q, k_prefix, v_prefix, k_suffix, v_suffix, **kw):
    """At most 4 batch rows: every row sees the same keys, so time per row holds."""
    n = min(4, q.shape[0])
    return (q[:n], k_prefix, v_prefix, k_suffix[:n], v_suffix[:n]), kw


def _attention_exact(q, k_prefix, v_prefix, k_suffix, v_suffix, *, scale, sliding_window=None, softcap=None,
                     sinks=None):
    """The float64 ground truth of a (sampled) attention call: plain attention over [prefix ; suffix]."""
    B, L = q.shape[0], k_prefix.shape[1]
    keys = torch.cat([k_prefix.unsqueeze(0).expand(B, -1, -1, -1), k_suffix], dim=2)
    vals = torch.cat([v_prefix.unsqueeze(0).expand(B, -1, -1, -1), v_suffix], dim=2)
    return attention_ref(q, keys, vals, scale=scale, causal_offset=L, sliding_window=sliding_window,
                         softcap=softcap, sinks=sinks)


ATTENTION = Kernel(
    "attention",
    [Candidate("C", _drop_softcap(shared_prefix_attention_c), _c_refusal, native=True),
     Candidate("aten", _drop_softcap(shared_prefix_attention_aten), _no_softcap("ATen's flash path")),
     Candidate("torch", shared_prefix_attention_ref)],
    reference="torch", bucket=_attention_bucket, error=max_abs, tolerance=scaled_tolerance(1e-5),
    work=_attention_flops, sample=_attention_sample, exact=_attention_exact)


def shared_prefix_attention(q, k_prefix, v_prefix, k_suffix, v_suffix, *, scale: float,
                            sliding_window: int | None = None, softcap: float | None = None,
                            sinks: torch.Tensor | None = None, backend: str = "auto") -> torch.Tensor:
    """Attention of B suffix rows to a shared prefix stored once; see the module docstring.

    Args:
        q: (B, Hq, S, D) queries; query i of a row sits at absolute position L + i.
        k_prefix, v_prefix: (Hkv, L, D) prefix keys/values shared by all rows (L may be 0).
        k_suffix, v_suffix: (B, Hkv, S, D) each row's own keys/values, causal within the suffix.
        scale: score multiplier (usually D ** -0.5 or the model's query_pre_attn_scalar ** -0.5).
        sliding_window: key at position j visible from query position a iff a - j < sliding_window.
        softcap: scores <- softcap * tanh(scores / softcap), applied after scaling, before masking.
        sinks: (Hq,) attention-sink logits (GPT-OSS): each enters its head's softmax denominator once, across
            the prefix and suffix parts, as a key whose value is zero.
        backend: "auto" (Triton on CUDA; on CPU :data:`ATTENTION`: the C kernel of ``cpu_attention``, ATen's fused
            flash path or the reference, whichever measured fastest here for the shape; with soft-cap only the
            reference applies), "ref", "triton" or "cpu" (:func:`shared_prefix_attention_cpu`).

    Returns: (B, Hq, S, D) in q's dtype.
    """
    _check_inputs(q, k_prefix, v_prefix, k_suffix, v_suffix, scale, sliding_window, softcap, sinks)
    kw = dict(scale=scale, sliding_window=sliding_window, softcap=softcap, sinks=sinks)
    if backend == "auto" and q.device.type == "cpu":
        return ATTENTION(q, k_prefix, v_prefix, k_suffix, v_suffix, **kw)
    bucket = _attention_bucket(q, k_prefix, v_prefix, k_suffix, v_suffix, **kw)
    if backend == "cpu":
        if softcap is not None or q.device.type != "cpu":
            raise ValueError("backend='cpu' needs CPU tensors and no soft-cap; use backend='ref'")
        impl = "C" if c_attention_refusal(q) is None else "aten"
        record("attention", impl, bucket, {"choice": impl, "why": "backend='cpu'"})
        return shared_prefix_attention_cpu(q, k_prefix, v_prefix, k_suffix, v_suffix, scale=scale,
                                           sliding_window=sliding_window, sinks=sinks)
    path = resolve_backend(backend, q.device, supported=q.shape[-1] <= MAX_TRITON_HEAD_DIM)
    fn = shared_prefix_attention_triton if path == "triton" else shared_prefix_attention_ref
    record("attention", "triton" if path == "triton" else "torch", bucket,
           {"choice": path, "why": f"backend={backend!r} on {q.device.type}"})
    return fn(q, k_prefix, v_prefix, k_suffix, v_suffix, **kw)
