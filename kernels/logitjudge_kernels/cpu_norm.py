"""Fused fp32 RMSNorm / residual / RoPE row kernels for CPU, in C (``cpu_norm.c``), with PyTorch references.

Between its GEMMs a Gemma-3 block makes ~20 passes over memory with composed torch ops (RMSNorm alone is pow,
mean, add, rsqrt, mul, mul; RoPE is cat, neg, mul, mul, add; then transposes into the attention layout). Each of
these kernels does its job in one pass over a row that stays in L1:

* :func:`rms_norm` - ``x * rsqrt(mean(x^2) + eps) * w`` over the last dimension;
* :func:`residual_rms_norm` - ``x + rms_norm(y) * w_y`` and the next block's ``rms_norm(.) * w_next``;
* :func:`qk_norm_rope` - q/k/v projection -> rms-normed, rotated q and k and v, written in the (B, H, S, D)
  layout that attention reads;
* Llama's conventions: :func:`add_rms_norm` - ``x + y`` and ``rms_norm(x + y) * w_next`` (no norm of the
  block's output); :func:`qk_rope` - :func:`qk_norm_rope` without the q/k norms;
* :func:`act_mul` - the gated MLP's ``act(gate) * up`` (GELU-tanh or SiLU) from the fused gate/up projection, in
  one pass and with bits that do not depend on the thread count (torch's activations' do:
  :mod:`.spare_thread`).

Each has a ``*_ref`` (the PyTorch ops the native step function used before, the parity ground truth), a C host
wrapper (``*_c``) and a dispatcher (:mod:`.dispatch`) that runs whichever of the two measured faster on this
machine for the rows and width (the C kernel only where it applies: CPU tensors, built). The kernels compute
in fp32; bf16/fp16 inputs are upcast (copies) and the results rounded once to their dtype, where the references
round after each op (RMSNorm, residual add, each RoPE product): within a few units in the last place of bf16.

The C source is built at first use by :mod:`._cbuild` (system compiler, cached per machine); without it the
references run (:func:`cpu_kernels_status` says why). Exactness: judged by the dispatcher's one gate
(:mod:`.exactness`) against the references run in float64 (fp32: the sum of squares is added in another order;
bf16/fp16: rounded once, where the references round after each op).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from . import _cbuild
from ._cbuild import c_int, f32, f32p, i64, ptr
from .dispatch import Candidate, Kernel, max_abs, pow2_bucket, scaled_tolerance, wide

SOURCE = Path(__file__).with_name("cpu_norm.c")
MAX_HEAD_DIM = 1024  # the C kernel's per-thread scratch for one head
PARALLEL_MIN = 1 << 15  # elements: smaller calls run on one thread (rows are independent: same results)
_SIGNATURES = (
    ("rms_norm_f32", (f32p, i64, f32p, f32p, i64, i64, f32, c_int), None),
    ("residual_rms_norm_f32", (f32p, f32p, f32p, f32p, f32p, f32p, i64, i64, f32, c_int), None),
    ("qk_norm_rope_f32", (f32p, i64, f32p, f32p, f32p, f32p, f32p, f32p, f32p, i64, i64, i64, i64, i64, f32,
                          c_int), None),
    ("add_rms_norm_f32", (f32p, f32p, f32p, f32p, f32p, i64, i64, f32, c_int), None),
    ("qk_rope_f32", (f32p, i64, f32p, f32p, f32p, f32p, f32p, i64, i64, i64, i64, i64, c_int), None),
    ("act_mul_f32", (f32p, i64, f32p, i64, i64, c_int, c_int), None),
)
ACTIVATIONS = ("gelu_tanh", "silu")  # act_mul's activations, in the C kernel's numbering


# ------------------------------------------------------------------------------------------------ references
def rms_norm_ref(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """(..., d) -> (..., d): ``x * rsqrt(mean(x^2) + eps) * w`` computed in fp32 (float64 for float64 inputs; as
    Gemma's norm, whose w holds 1 + weight, and Llama's in fp32), returned in x's dtype."""
    return F.rms_norm(wide(x), (x.shape[-1],), w.to(wide(x).dtype), eps).to(x.dtype)


def residual_rms_norm_ref(x, y, w_y, w_next, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x + rms_norm(y) * w_y, rms_norm(that) * w_next)``, both (..., d) in x's dtype."""
    x_out = x + rms_norm_ref(y, w_y, eps)
    return x_out, rms_norm_ref(x_out, w_next, eps)


def add_rms_norm_ref(x, y, w_next, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Llama's residual step: ``(x + y, rms_norm(x + y) * w_next)``, both (..., d) in x's dtype."""
    x_out = x + y
    return x_out, rms_norm_ref(x_out, w_next, eps)


def rotate_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE with the half-split convention of transformers' ``rotate_half``: x * cos + rotate_half(x) * sin."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def qk_norm_rope_ref(qkv, q_w, k_w, cos, sin, *, heads: int, kv_heads: int, eps: float):
    """qkv (B, S, (heads + 2 kv_heads) D) -> q (B, heads, S, D), k and v (B, kv_heads, S, D), contiguous;
    q and k rms-normed (weights q_w, k_w) then rotated with cos, sin (B, S, D)."""
    B, S, _ = qkv.shape
    D = cos.shape[-1]
    parts = qkv.view(B, S, heads + 2 * kv_heads, D)
    c, s = cos.unsqueeze(2), sin.unsqueeze(2)
    q = rotate_ref(rms_norm_ref(parts[:, :, :heads], q_w, eps), c, s)
    k = rotate_ref(rms_norm_ref(parts[:, :, heads:heads + kv_heads], k_w, eps), c, s)
    v = parts[:, :, heads + kv_heads:]
    return tuple(t.transpose(1, 2).contiguous() for t in (q, k, v))


def qk_rope_ref(qkv, cos, sin, *, heads: int, kv_heads: int):
    """:func:`qk_norm_rope_ref` without the q/k norms (Llama, Qwen2, Mistral, Phi-3)."""
    B, S, _ = qkv.shape
    D = cos.shape[-1]
    parts = qkv.view(B, S, heads + 2 * kv_heads, D)
    c, s = cos.unsqueeze(2), sin.unsqueeze(2)
    q = rotate_ref(parts[:, :, :heads], c, s)
    k = rotate_ref(parts[:, :, heads:heads + kv_heads], c, s)
    v = parts[:, :, heads + kv_heads:]
    return tuple(t.transpose(1, 2).contiguous() for t in (q, k, v))


# ------------------------------------------------------------------------------------------------ build
def _library(target: str = _cbuild.TARGET):
    return _cbuild.load(SOURCE, _SIGNATURES, target)


def cpu_kernels_status() -> str | None:
    """None when the C kernels are in use, else why the references run instead."""
    return _library()[1] or None


KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # bf16/fp16: the fp32 kernel on upcast copies


def _refusal(*tensors: torch.Tensor) -> str | None:
    """None where the C kernels take these tensors, else why not."""
    if not all(t.device.type == "cpu" and t.dtype in KERNEL_DTYPES for t in tensors):
        return "the C norm kernels take CPU fp32/bf16/fp16 tensors only"
    return cpu_kernels_status()


def _usable(*tensors: torch.Tensor) -> bool:
    return _refusal(*tensors) is None


def _rows(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """x as (rows, d) with unit stride along d, and its row stride (no copy when it already is)."""
    d = x.shape[-1]
    x2 = x.reshape(-1, d)
    if x2.stride(-1) != 1 or (x2.shape[0] > 1 and x2.stride(0) < d):
        x2 = x2.contiguous()
    return x2, (x2.stride(0) if x2.shape[0] > 1 else d)


def _check_weight(w: torch.Tensor, d: int, what: str) -> None:
    if w.shape != (d,):
        raise ValueError(f"{what} has shape {tuple(w.shape)}, expected ({d},)")


# ------------------------------------------------------------------------------------------------ C wrappers
def rms_norm_c(x: torch.Tensor, w: torch.Tensor, eps: float, *, target: str = _cbuild.TARGET) -> torch.Tensor:
    """:func:`rms_norm_ref` by the C kernel (fp32 inside; inputs checked by the dispatcher)."""
    x2, stride = _rows(x.float())
    w = w.float().contiguous()
    out = torch.empty(x2.shape, dtype=torch.float32)
    _library(target)[0].rms_norm_f32(ptr(x2), stride, ptr(w), ptr(out), x2.shape[0], x2.shape[1], eps,
                                     _cbuild.threads_for(x2.numel(), PARALLEL_MIN))
    return out.view(x.shape).to(x.dtype)


def residual_rms_norm_c(x, y, w_y, w_next, eps: float, *, target: str = _cbuild.TARGET):
    """:func:`residual_rms_norm_ref` by the C kernel."""
    dtype, d = x.dtype, x.shape[-1]
    x, y, w_y, w_next = (t.float().contiguous() for t in (x, y, w_y, w_next))
    x_out, h_out = torch.empty_like(x), torch.empty_like(x)
    _library(target)[0].residual_rms_norm_f32(ptr(x), ptr(y), ptr(w_y), ptr(w_next), ptr(x_out), ptr(h_out),
                                              x.numel() // d, d, eps, _cbuild.threads_for(x.numel(), PARALLEL_MIN))
    return x_out.to(dtype), h_out.to(dtype)


def qk_norm_rope_c(qkv, q_w, k_w, cos, sin, *, heads: int, kv_heads: int, eps: float,
                   target: str = _cbuild.TARGET):
    """:func:`qk_norm_rope_ref` by the C kernel."""
    B, S, _ = qkv.shape
    D = cos.shape[-1]
    x2, stride = _rows(qkv.float())
    q_w, k_w, cos, sin = (t.float().contiguous() for t in (q_w, k_w, cos, sin))
    q = torch.empty(B, heads, S, D)
    k, v = torch.empty(B, kv_heads, S, D), torch.empty(B, kv_heads, S, D)
    _library(target)[0].qk_norm_rope_f32(ptr(x2), stride, ptr(q_w), ptr(k_w), ptr(cos), ptr(sin), ptr(q), ptr(k),
                                         ptr(v), B, S, heads, kv_heads, D, eps,
                                         _cbuild.threads_for(x2.numel(), PARALLEL_MIN))
    return q.to(qkv.dtype), k.to(qkv.dtype), v.to(qkv.dtype)


def add_rms_norm_c(x, y, w_next, eps: float, *, target: str = _cbuild.TARGET):
    """:func:`add_rms_norm_ref` by the C kernel."""
    dtype, d = x.dtype, x.shape[-1]
    x, y, w_next = (t.float().contiguous() for t in (x, y, w_next))
    x_out, h_out = torch.empty_like(x), torch.empty_like(x)
    _library(target)[0].add_rms_norm_f32(ptr(x), ptr(y), ptr(w_next), ptr(x_out), ptr(h_out), x.numel() // d, d,
                                         eps, _cbuild.threads_for(x.numel(), PARALLEL_MIN))
    return x_out.to(dtype), h_out.to(dtype)


def qk_rope_c(qkv, cos, sin, *, heads: int, kv_heads: int, target: str = _cbuild.TARGET):
    """:func:`qk_rope_ref` by the C kernel."""
    B, S, _ = qkv.shape
    D = cos.shape[-1]
    x2, stride = _rows(qkv.float())
    cos, sin = (t.float().contiguous() for t in (cos, sin))
    q = torch.empty(B, heads, S, D)
    k, v = torch.empty(B, kv_heads, S, D), torch.empty(B, kv_heads, S, D)
    _library(target)[0].qk_rope_f32(ptr(x2), stride, ptr(cos), ptr(sin), ptr(q), ptr(k), ptr(v), B, S, heads,
                                    kv_heads, D, _cbuild.threads_for(x2.numel(), PARALLEL_MIN))
    return q.to(qkv.dtype), k.to(qkv.dtype), v.to(qkv.dtype)


def _qk_refusal(qkv, q_w, k_w, cos, sin, **kw):
    D = cos.shape[-1]
    if D > MAX_HEAD_DIM or D % 2:
        return f"head_dim {D} is odd or above {MAX_HEAD_DIM}"
    return _refusal(qkv, q_w, k_w, cos, sin)


def _bucket(x, *rest, **kw) -> str:
    d = x.shape[-1]
    return f"rows {pow2_bucket(x.numel() // max(d, 1))}, d {d}, {str(x.dtype)[6:]}"


def _qk_bucket(qkv, q_w, k_w, cos, sin, *, heads, kv_heads, eps) -> str:
    return (f"rows {pow2_bucket(qkv.shape[0] * qkv.shape[1])}, heads {heads}+{kv_heads}, D {cos.shape[-1]}, "
            f"{str(qkv.dtype)[6:]}")


def _rope_refusal(qkv, cos, sin, **kw):
    return "odd head_dim" if cos.shape[-1] % 2 else _refusal(qkv, cos, sin)


def _rope_bucket(qkv, cos, sin, *, heads, kv_heads) -> str:
    return (f"rows {pow2_bucket(qkv.shape[0] * qkv.shape[1])}, heads {heads}+{kv_heads}, D {cos.shape[-1]}, "
            f"{str(qkv.dtype)[6:]}")


def _bytes(*tensors, **kw) -> int:
    return 2 * sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))  # read + write


_TOL = scaled_tolerance(1e-5)
RMS_NORM = Kernel("rms_norm", [Candidate("C", rms_norm_c, lambda x, w, eps: _refusal(x, w), native=True),
                               Candidate("torch", rms_norm_ref)],
                  reference="torch", bucket=_bucket, error=max_abs, tolerance=_TOL, work=_bytes, unit="GB/s",
                  exact=rms_norm_ref)
RESIDUAL_RMS_NORM = Kernel(
    "residual_rms_norm",
    [Candidate("C", residual_rms_norm_c, lambda x, y, w_y, w_next, eps: _refusal(x, y, w_y, w_next), native=True),
     Candidate("torch", residual_rms_norm_ref)],
    reference="torch", bucket=_bucket, error=max_abs, tolerance=_TOL, work=_bytes, unit="GB/s",
    exact=residual_rms_norm_ref)
ADD_RMS_NORM = Kernel(
    "add_rms_norm",
    [Candidate("C", add_rms_norm_c, lambda x, y, w_next, eps: _refusal(x, y, w_next), native=True),
     Candidate("torch", add_rms_norm_ref)],
    reference="torch", bucket=_bucket, error=max_abs, tolerance=_TOL, work=_bytes, unit="GB/s",
    exact=add_rms_norm_ref)
QK_NORM_ROPE = Kernel("qk_norm_rope", [Candidate("C", qk_norm_rope_c, _qk_refusal, native=True),
                                       Candidate("torch", qk_norm_rope_ref)],
                      reference="torch", bucket=_qk_bucket, error=max_abs, tolerance=_TOL, work=_bytes, unit="GB/s",
                      exact=qk_norm_rope_ref)
QK_ROPE = Kernel("qk_rope", [Candidate("C", qk_rope_c, _rope_refusal, native=True), Candidate("torch", qk_rope_ref)],
                 reference="torch", bucket=_rope_bucket, error=max_abs, tolerance=_TOL, work=_bytes, unit="GB/s",
                 exact=qk_rope_ref)


def act_mul_ref(gate_up: torch.Tensor, act: str) -> torch.Tensor:
    """(..., 2 I) -> (..., I): ``act(gate) * up`` with gate the first half, up the second; torch's GELU-tanh or
    SiLU in fp32 (float64 for float64 inputs), returned in the input's dtype."""
    gate, up = wide(gate_up).chunk(2, dim=-1)
    a = F.gelu(gate, approximate="tanh") if act == "gelu_tanh" else F.silu(gate)
    return (a * up).to(gate_up.dtype)


def act_mul_c(gate_up: torch.Tensor, act: str, *, target: str = _cbuild.TARGET) -> torch.Tensor:
    """:func:`act_mul_ref` by the C kernel."""
    x2, stride = _rows(gate_up.float())
    inter = x2.shape[-1] // 2
    out = torch.empty(x2.shape[0], inter)
    _library(target)[0].act_mul_f32(ptr(x2), stride, ptr(out), x2.shape[0], inter, ACTIVATIONS.index(act),
                                    _cbuild.threads_for(x2.numel(), PARALLEL_MIN))
    return out.view(*gate_up.shape[:-1], inter).to(gate_up.dtype)


def _act_bucket(gate_up, act) -> str:
    return f"{_bucket(gate_up)}, {act}"


ACT_MUL = Kernel("act_mul", [Candidate("C", act_mul_c, lambda gu, act: _refusal(gu), native=True),
                             Candidate("torch", act_mul_ref)],
                 reference="torch", bucket=_act_bucket, error=max_abs, tolerance=_TOL,
                 work=lambda gu, act: 3 * gu.numel() // 2 * gu.element_size(), unit="GB/s", exact=act_mul_ref)


# ------------------------------------------------------------------------------------------------ dispatchers
def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """:func:`rms_norm_ref`, by the C kernel or the reference: whichever measured faster here (:data:`RMS_NORM`)."""
    _check_weight(w, x.shape[-1], "the norm weight")
    return RMS_NORM(x, w, eps)


def residual_rms_norm(x, y, w_y, w_next, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`residual_rms_norm_ref`, by the C kernel or the reference (:data:`RESIDUAL_RMS_NORM`)."""
    if x.shape != y.shape:
        raise ValueError(f"residual {tuple(x.shape)} and update {tuple(y.shape)} differ in shape")
    d = x.shape[-1]
    _check_weight(w_y, d, "the update's norm weight")
    _check_weight(w_next, d, "the next norm weight")
    return RESIDUAL_RMS_NORM(x, y, w_y, w_next, eps)


def qk_norm_rope(qkv, q_w, k_w, cos, sin, *, heads: int, kv_heads: int, eps: float):
    """:func:`qk_norm_rope_ref`, by the C kernel or the reference (:data:`QK_NORM_ROPE`)."""
    if qkv.dim() != 3 or cos.dim() != 3 or cos.shape != sin.shape or cos.shape[:2] != qkv.shape[:2]:
        raise ValueError(f"qkv must be (B, S, (H + 2 Hkv) D) and cos, sin (B, S, D); got {tuple(qkv.shape)}, "
                         f"{tuple(cos.shape)}, {tuple(sin.shape)}")
    B, S, width = qkv.shape
    D = cos.shape[-1]
    if width != (heads + 2 * kv_heads) * D:
        raise ValueError(f"qkv width {width} is not (heads {heads} + 2 x kv_heads {kv_heads}) x head_dim {D}")
    _check_weight(q_w, D, "the q norm weight")
    _check_weight(k_w, D, "the k norm weight")
    return QK_NORM_ROPE(qkv, q_w, k_w, cos, sin, heads=heads, kv_heads=kv_heads, eps=eps)


def add_rms_norm(x, y, w_next, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`add_rms_norm_ref`, by the C kernel or the reference (:data:`ADD_RMS_NORM`)."""
    if x.shape != y.shape:
        raise ValueError(f"residual {tuple(x.shape)} and update {tuple(y.shape)} differ in shape")
    _check_weight(w_next, x.shape[-1], "the next norm weight")
    return ADD_RMS_NORM(x, y, w_next, eps)


def qk_rope(qkv, cos, sin, *, heads: int, kv_heads: int):
    """:func:`qk_rope_ref`, by the C kernel or the reference (:data:`QK_ROPE`)."""
    if qkv.dim() != 3 or cos.dim() != 3 or cos.shape != sin.shape or cos.shape[:2] != qkv.shape[:2]:
        raise ValueError(f"qkv must be (B, S, (H + 2 Hkv) D) and cos, sin (B, S, D); got {tuple(qkv.shape)}, "
                         f"{tuple(cos.shape)}, {tuple(sin.shape)}")
    D = cos.shape[-1]
    if qkv.shape[-1] != (heads + 2 * kv_heads) * D:
        raise ValueError(f"qkv width {qkv.shape[-1]} is not (heads {heads} + 2 x kv_heads {kv_heads}) x head_dim {D}")
    return QK_ROPE(qkv, cos, sin, heads=heads, kv_heads=kv_heads)


def act_mul(gate_up: torch.Tensor, act: str) -> torch.Tensor:
    """:func:`act_mul_ref`, by the C kernel or the reference (:data:`ACT_MUL`)."""
    if act not in ACTIVATIONS:
        raise ValueError(f"activation {act!r} is not one of {ACTIVATIONS}")
    if gate_up.shape[-1] % 2:
        raise ValueError(f"a fused gate/up output has an even width, not {gate_up.shape[-1]}")
    return ACT_MUL(gate_up, act)
