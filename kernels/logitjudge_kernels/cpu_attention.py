"""Shared-prefix attention in C for CPU, in fp32 (``cpu_attention.c``): the fast path under
:func:`logitjudge_kernels.shared_prefix_attention` on CPU.

Same contract as :func:`~logitjudge_kernels.prefix_attention.shared_prefix_attention_ref` (its reference; bf16
and fp16 inputs are computed in fp32, as the reference does): B
suffix rows of S queries continue one prefix of L keys stored once, causal within the suffix, an optional
sliding window, no soft-cap. Why a kernel of our own: ATen's CPU flash attention runs these shapes at 80-170
GFLOP/s on a 2-core Zen 4 (causal per-head calls of ~80 queries, an LSE merge of the two parts), this one at
~200 (``benchmarks/kernel_speed.py``), near the machine's fp32 GEMM rate: the G query heads of a KV head are stacked
so each packed key panel feeds 12 rows (6 on AVX2), prefix and suffix keys go through one exact softmax (no
merge), and a block of queries never computes keys past its last position.

The output is (B, Hq, S, D) as a view of a (B, S, Hq, D) buffer: the layout the output projection reads, so the
caller's ``transpose(1, 2).reshape(B, S, Hq * D)`` costs nothing. Built by :mod:`._cbuild` (system compiler,
cached per machine); :func:`cpu_attention_status` says why it is not in use. Tolerance against the reference:
5e-6 absolute on outputs (fp32; exp by a Cephes polynomial, other summation orders).
"""

from __future__ import annotations

from pathlib import Path

import torch

from . import _cbuild
from ._cbuild import c_int, f32, f32p, i64, ptr

SOURCE = Path(__file__).with_name("cpu_attention.c")
_SIGNATURES = (("prefix_attention_f32", (f32p, f32p, f32p, f32p, f32p, f32p, f32p, i64, i64, i64, i64, i64, i64,
                                          i64, f32, i64, i64, c_int), c_int),)
HEAD_DIM_MULTIPLE = 32  # the value tile is 32 floats wide
LOW_PRECISION = (torch.bfloat16, torch.float16)  # computed in fp32 from upcast copies, returned in their dtype
# FLOPs of one C call at most: a ctypes call cannot be interrupted, so a long attention is cut into calls over
# query positions (and batch rows) of about this much work (~0.1 s on one Zen 3 core, ~0.4 s on one oversubscribed
# 3x: 2^34 took 1.8 s there); Python runs a Ctrl-C / SIGTERM handler between them. Each call packs its keys again
# (memory-bound, ~1% of a call's time at this size). The cut does not change any query's result.
CALL_FLOPS = 1 << 32
PARALLEL_MIN = 1 << 22  # FLOPs: smaller calls run on one thread (each query row is computed alone: same results)


def _library(target: str = _cbuild.TARGET):
    return _cbuild.load(SOURCE, _SIGNATURES, target)


def cpu_attention_status() -> str | None:
    """None when the C attention kernel is built and loaded, else why not."""
    return _library()[1] or None


def c_attention_refusal(q: torch.Tensor, softcap: float | None = None) -> str | None:
    """None if :func:`shared_prefix_attention_c` takes these inputs, else why not."""
    if q.device.type != "cpu" or q.dtype not in (torch.float32, *LOW_PRECISION):
        return f"the C kernel takes CPU fp32/bf16/fp16 only (got {q.dtype} on {q.device.type})"
    if q.shape[-1] % HEAD_DIM_MULTIPLE:
        return f"head_dim {q.shape[-1]} is not a multiple of {HEAD_DIM_MULTIPLE}"
    if softcap is not None:
        return "no soft-capping in the C kernel"
    return cpu_attention_status()


def _calls(B: int, Hq: int, S: int, L: int, D: int):
    """(b0, b1, s0, s1) pieces of a call, each about :data:`CALL_FLOPS` or less (whole rows first)."""
    per_position = 4 * Hq * (L + S) * D  # FLOPs of one query position of one row, at most
    rows = max(1, min(B, CALL_FLOPS // max(1, per_position * S)))
    positions = S if rows > 1 or per_position * S <= CALL_FLOPS else max(16, CALL_FLOPS // per_position)
    for b0 in range(0, B, rows):
        for s0 in range(0, S, positions):
            yield b0, min(B, b0 + rows), s0, min(S, s0 + positions)


def shared_prefix_attention_c(q, k_prefix, v_prefix, k_suffix, v_suffix, *, scale: float,
                              sliding_window: int | None = None, sinks: torch.Tensor | None = None,
                              target: str = _cbuild.TARGET) -> torch.Tensor:
    """The C kernel (inputs already checked by the dispatcher; see :func:`c_attention_refusal`). bf16/fp16 inputs
    are upcast to fp32 (copies) and the output cast back. ``sinks`` (Hq,): per-head sink logits (GPT-OSS) in
    each row's softmax denominator. Returns (B, Hq, S, D) in q's dtype, a view of a contiguous (B, S, Hq, D)
    tensor. ``target``: the build's ``-march`` (default native; ``x86-64-v3`` for the AVX2 build, in tests)."""
    reason = c_attention_refusal(q) if target == _cbuild.TARGET else (_library(target)[1] or None)
    if reason:
        raise ValueError(f"shared_prefix_attention_c cannot run: {reason}; use backend='ref'")
    B, Hq, S, D = q.shape
    Hkv, L, _ = k_prefix.shape
    dtype = q.dtype
    q, k_prefix, v_prefix, k_suffix, v_suffix = (t.float().contiguous() for t in (q, k_prefix, v_prefix,
                                                                                  k_suffix, v_suffix))
    out = torch.empty(B, S, Hq, D)
    sink_ptr = None if sinks is None else ptr(sinks := sinks.float().contiguous())  # NULL: no sinks
    fn = _library(target)[0].prefix_attention_f32
    for b0, b1, s0, s1 in (_calls(B, Hq, S, L, D) if out.numel() else ()):
        if fn(ptr(q[b0:b1]), ptr(k_prefix), ptr(v_prefix), ptr(k_suffix[b0:b1]), ptr(v_suffix[b0:b1]),
              ptr(out[b0:b1]), sink_ptr, b1 - b0, Hkv, Hq // Hkv, S, L, D, sliding_window or 0, scale, s0, s1,
              _cbuild.threads_for(4 * (b1 - b0) * Hq * (s1 - s0) * (L + s1) * D, PARALLEL_MIN)):
            raise MemoryError(f"the C attention kernel could not allocate its scratch for B={B}, S={S}, L={L}, "
                              f"D={D}; use smaller batches (token_budget)")
    return out.to(dtype).transpose(1, 2)
