"""Fused read-out: full-vocabulary log-sum-exp and a few label logits, without an (R, V) logits tensor.

A judge needs log p(label | context) for a handful of label tokens, but the normaliser runs over the
whole vocabulary (V = 262,144 for Gemma-3). Plain PyTorch materialises (R, V) logits (and a second
(R, V) log-softmax); here V is walked in chunks with an online max / sum-of-exp in fp32:

* :func:`label_logprobs_ref` - PyTorch loop over V chunks of ``chunk`` entries.
* :func:`label_logprobs_triton` - Triton: each program takes a tile of rows x a span of V (at most
  ``chunk`` entries), computes its logits tile by tile and writes a partial (max, sum-exp) to a small
  (n_spans, R) fp32 buffer; the spans are then reduced in PyTorch. Label logits come from a tiny
  separate (R, M, d) dot against the gathered label rows of the weight.
* :func:`.cpu_readout.logsumexp_c` - CPU: the C kernel (fp32, no soft-cap; built at first use) for the
  log-sum-exp, the label logits from the same small dot.
* :func:`label_logprobs` - dispatcher (``backend="auto" | "ref" | "triton" | "cpu"``; "auto" on CPU runs
  :data:`READOUT_LSE`: the C kernel or the reference, whichever measured faster on this machine for the rows and
  width, :mod:`.dispatch`).
* :func:`label_logprobs_plain` - full logits + torch log-softmax in fp32: the ground truth.
"""

from __future__ import annotations

from dataclasses import dataclass

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
from .cpu_readout import CALL_MACS, c_readout_refusal, logsumexp_c
from .dispatch import Candidate, Kernel, max_abs, pow2_bucket, record

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class LabelReadout:
    """``logsumexp``: (R,) fp32 over the full vocabulary; ``label_logits``: (R, M) fp32 (soft-capped)."""

    logsumexp: torch.Tensor
    label_logits: torch.Tensor

    @property
    def label_logprobs(self) -> torch.Tensor:
        """(R, M) fp32 log-probabilities of the label tokens."""
        return self.label_logits - self.logsumexp[:, None]


def _softcap(x: torch.Tensor, softcap: float | None) -> torch.Tensor:
    return x if softcap is None else softcap * torch.tanh(x / softcap)


def _check_inputs(hidden, weight, label_ids, softcap, chunk=1) -> torch.Tensor:
    """Validate and return ``label_ids`` as int64 (R, M)."""
    for name, t in (("hidden", hidden), ("weight", weight), ("label_ids", label_ids)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if hidden.dim() != 2:
        raise ValueError(f"hidden must have rank 2 (R, d), got shape {tuple(hidden.shape)}")
    if weight.dim() != 2:
        raise ValueError(f"weight must have rank 2 (V, d), got shape {tuple(weight.shape)}")
    R, d = hidden.shape
    V = weight.shape[0]
    if weight.shape[1] != d:
        raise ValueError(f"hidden size mismatch: hidden has d={d}, weight has d={weight.shape[1]}")
    if V == 0:
        raise ValueError("weight has an empty vocabulary (V=0)")
    check_same_device_dtype({"hidden": hidden, "weight": weight}, dtypes=SUPPORTED_DTYPES)
    if label_ids.device != hidden.device:
        raise ValueError(f"label_ids is on {label_ids.device} but hidden is on {hidden.device}")
    if label_ids.dtype.is_floating_point or label_ids.dtype.is_complex or label_ids.dtype == torch.bool:
        raise ValueError(f"label_ids must hold integer token ids, got dtype {label_ids.dtype}")
    if label_ids.dim() == 1:
        label_ids = label_ids.unsqueeze(0).expand(R, -1)
    elif label_ids.dim() != 2 or label_ids.shape[0] != R:
        raise ValueError(f"label_ids must be (R, M) with R={R} or (M,), got shape {tuple(label_ids.shape)}")
    if label_ids.numel():
        lo, hi = int(label_ids.min()), int(label_ids.max())
        if lo < 0 or hi >= V:
            raise ValueError(f"label_ids must lie in [0, {V}), got values in [{lo}, {hi}]")
    if softcap is not None and not (isinstance(softcap, (int, float)) and softcap > 0):
        raise ValueError(f"softcap must be None or a positive float, got {softcap!r}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive int, got {chunk!r}")
    return label_ids.long()


def _label_logits(hidden, weight, label_ids, softcap) -> torch.Tensor:
    """(R, M) fp32 logits of the label tokens: one small dot against the gathered weight rows."""
    w = weight[label_ids].float()  # (R, M, d)
    return _softcap(torch.einsum("rd,rmd->rm", hidden.float(), w), softcap)


# ----------------------------------------------------------------------------------------------- reference
def _lse_ref(hidden, weight, softcap, chunk) -> torch.Tensor:
    h = hidden.float()
    lse = torch.full((hidden.shape[0],), float("-inf"), dtype=torch.float32, device=hidden.device)
    if hidden.device.type == "cpu":  # one GEMM of at most CALL_MACS, as the C kernel's calls: Ctrl-C / SIGTERM
        # are handled between GEMMs (many read rows made a single chunk a minute-long uninterruptible call)
        chunk = min(chunk, max(256, CALL_MACS // max(1, hidden.shape[0] * hidden.shape[1])))
    for start in range(0, weight.shape[0], chunk):
        logits = h @ weight[start:start + chunk].float().T  # (R, chunk) fp32
        if softcap is not None:
            logits.div_(softcap).tanh_().mul_(softcap)
        lse = torch.logaddexp(lse, torch.logsumexp(logits, dim=1))  # online max / sum-exp, in log space
    return lse


def label_logprobs_ref(hidden, weight, label_ids, *, softcap: float | None = None,
                       chunk: int = 8192) -> LabelReadout:
    """PyTorch reference: fp32 online log-sum-exp over V chunks of ``chunk`` entries."""
    label_ids = _check_inputs(hidden, weight, label_ids, softcap, chunk)
    lse = _lse_ref(hidden, weight, softcap, chunk)
    return LabelReadout(lse, _label_logits(hidden, weight, label_ids, softcap))


def label_logprobs_plain(hidden, weight, label_ids, *, softcap: float | None = None) -> LabelReadout:
    """Ground truth: the full (R, V) fp32 logits, torch.logsumexp (log-softmax normaliser) and a gather."""
    label_ids = _check_inputs(hidden, weight, label_ids, softcap)
    logits = _softcap(hidden.float() @ weight.float().T, softcap)
    return LabelReadout(torch.logsumexp(logits, dim=-1), logits.gather(1, label_ids))


# ------------------------------------------------------------------------------------------------- triton
if HAS_TRITON:

    @triton.jit
    def _tanh(x):
        t = tl.exp(-2.0 * tl.abs(x))
        y = (1.0 - t) / (1.0 + t)
        return tl.where(x >= 0, y, -y)

    @triton.jit
    def _lse_partial_kernel(
        H, W, PM, PS, R, V, DM, s_hr, s_hd, s_wv, s_wd, softcap,
        BLOCK_R: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr, TILES: tl.constexpr,
        USE_SOFTCAP: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr,
    ):
        """Partial (max, sum-exp) of rows ``pid_r`` tile over vocabulary span ``pid_v`` (TILES x BLOCK_V)."""
        pid_r = tl.program_id(0)
        pid_v = tl.program_id(1)
        offs_r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
        r_ok = offs_r < R
        offs_k0 = tl.arange(0, BLOCK_K)
        m_i = tl.full([BLOCK_R], float("-inf"), dtype=tl.float32)
        s_i = tl.zeros([BLOCK_R], dtype=tl.float32)
        for t in range(TILES):
            offs_v = (pid_v * TILES + t) * BLOCK_V + tl.arange(0, BLOCK_V)
            v_ok = offs_v < V
            acc = tl.zeros([BLOCK_R, BLOCK_V], dtype=tl.float32)
            for k0 in range(0, DM, BLOCK_K):
                offs_k = k0 + offs_k0
                k_ok = offs_k < DM
                h = tl.load(H + offs_r[:, None] * s_hr + offs_k[None, :] * s_hd,
                            mask=r_ok[:, None] & k_ok[None, :], other=0.0)
                w = tl.load(W + offs_v.to(tl.int64)[:, None] * s_wv + offs_k[None, :] * s_wd,
                            mask=v_ok[:, None] & k_ok[None, :], other=0.0)
                if UPCAST:
                    h = h.to(tl.float32)
                    w = w.to(tl.float32)
                if IEEE:
                    acc += tl.dot(h, tl.trans(w), input_precision="ieee")
                else:
                    acc += tl.dot(h, tl.trans(w))
            if USE_SOFTCAP:
                acc = softcap * _tanh(acc / softcap)
            acc = tl.where(v_ok[None, :], acc, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(acc, 1))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            s_i = s_i * tl.exp(m_i - m_use) + tl.sum(tl.exp(acc - m_use[:, None]), 1)
            m_i = m_new
        tl.store(PM + pid_v * R + offs_r, m_i, mask=r_ok)
        tl.store(PS + pid_v * R + offs_r, s_i, mask=r_ok)


def _readout_blocks(R: int, elem_bytes: int) -> tuple[int, int, int, int, int]:
    """(BLOCK_R, BLOCK_V, BLOCK_K, num_warps, num_stages)."""
    if interpreter_active():
        return 16, 64, 32, 1, 1
    block_r = min(128, max(16, next_pow2(R)))
    return block_r, 128, 64, 8 if block_r >= 64 else 4, 3 if elem_bytes == 2 else 2


def _lse_triton(hidden, weight, softcap, chunk) -> torch.Tensor:
    R, d = hidden.shape
    V = weight.shape[0]
    br, bv, bk, warps, stages = _readout_blocks(R, hidden.element_size())
    n_tiles, n_row_blocks = triton.cdiv(V, bv), triton.cdiv(R, br)
    # Spans of TILES vocabulary tiles per program: long enough to amortise the partial write, short
    # enough to give every SM several programs, and never longer than ``chunk`` entries.
    sms = torch.cuda.get_device_properties(hidden.device).multi_processor_count if hidden.is_cuda else 1
    target = 4 * sms
    tiles = max(1, min(64, max(1, chunk // bv), (n_tiles * n_row_blocks) // target))
    tiles = 1 << (tiles.bit_length() - 1)  # power of two: few distinct compilations
    n_spans = triton.cdiv(n_tiles, tiles)
    pm = torch.empty((n_spans, R), dtype=torch.float32, device=hidden.device)
    ps = torch.empty_like(pm)
    upcast = interpreter_active() and hidden.dtype == torch.bfloat16  # interpreter: no bf16 tl.dot
    _lse_partial_kernel[(n_row_blocks, n_spans)](
        hidden, weight, pm, ps, R, V, d, *hidden.stride(), *weight.stride(), float(softcap or 1.0),
        BLOCK_R=br, BLOCK_V=bv, BLOCK_K=bk, TILES=tiles, USE_SOFTCAP=softcap is not None, UPCAST=upcast,
        IEEE=hidden.dtype == torch.float32, num_warps=warps, num_stages=stages,
    )
    m = pm.max(dim=0).values
    return m + torch.log((ps * torch.exp(pm - m)).sum(dim=0))


def label_logprobs_triton(hidden, weight, label_ids, *, softcap: float | None = None,
                          chunk: int = 8192) -> LabelReadout:
    """Host wrapper of the Triton read-out (CUDA tensors, or CPU tensors under TRITON_INTERPRET=1)."""
    if not HAS_TRITON:
        raise RuntimeError("triton is not installed")
    label_ids = _check_inputs(hidden, weight, label_ids, softcap, chunk)
    if hidden.shape[0] == 0:
        lse = torch.empty(0, dtype=torch.float32, device=hidden.device)
    else:
        lse = _lse_triton(hidden, weight, softcap, chunk)
    return LabelReadout(lse, _label_logits(hidden, weight, label_ids, softcap))


# --------------------------------------------------------------------------------------------- dispatcher
MEASURE_VOCAB = 32_768  # the dispatcher times the candidates on this many vocabulary rows (time ~ linear in V)


def _lse_bucket(hidden, weight, softcap, chunk) -> str:
    return (f"rows {pow2_bucket(hidden.shape[0])}, d {hidden.shape[1]}, {str(hidden.dtype)[6:]}"
            + (", softcap" if softcap is not None else ""))


def _lse_tolerance(ref) -> float:
    """1e-5 absolute on log-sum-exps of magnitude <= 10, relative 1e-6 above (fp32 rounding of the logits)."""
    return max(1e-5, 1e-6 * float(ref.abs().max())) if ref.numel() else 1e-5


READOUT_LSE = Kernel(
    "readout",
    [Candidate("C", lambda h, w, softcap, chunk: logsumexp_c(h, w),
               lambda h, w, softcap, chunk: c_readout_refusal(h, w, softcap), native=True),
     Candidate("torch", _lse_ref)],  # chunked hidden @ weight.T (MKL) + torch.logsumexp
    reference="torch", bucket=_lse_bucket, error=max_abs, tolerance=_lse_tolerance,
    work=lambda h, w, softcap, chunk: 2 * h.shape[0] * w.shape[0] * h.shape[1],
    sample=lambda h, w, softcap, chunk: ((h, w[:MEASURE_VOCAB], softcap, chunk), {}))


def label_logprobs(hidden, weight, label_ids, *, softcap: float | None = None, chunk: int = 8192,
                   backend: str = "auto") -> LabelReadout:
    """Full-vocabulary log-sum-exp and label logits of ``hidden @ weight.T`` without (R, V) logits.

    Args:
        hidden: (R, d) final hidden states at the read points (after the final norm).
        weight: (V, d) unembedding matrix (same dtype and device as ``hidden``).
        label_ids: (R, M) integer token ids per row, or (M,) shared by all rows.
        softcap: final-logit soft-capping, logits <- softcap * tanh(logits / softcap).
        chunk: vocabulary entries processed per step (bounds the temporary (R, chunk) logits).
        backend: "auto" (Triton on CUDA; on CPU :data:`READOUT_LSE`: the C kernel of ``cpu_readout`` or the
            reference, whichever measured faster here for this many rows), "ref", "triton" or "cpu" (the C kernel).

    Returns: :class:`LabelReadout` with fp32 ``logsumexp`` (R,), ``label_logits`` (R, M) and the
    ``label_logprobs`` property.
    """
    label_ids = _check_inputs(hidden, weight, label_ids, softcap, chunk)
    if backend == "auto" and hidden.device.type == "cpu":
        lse = READOUT_LSE(hidden, weight, softcap, chunk)
        return LabelReadout(lse, _label_logits(hidden, weight, label_ids, softcap))
    bucket = _lse_bucket(hidden, weight, softcap, chunk)
    if backend == "cpu":
        reason = c_readout_refusal(hidden, weight, softcap)
        if reason:
            raise ValueError(f"backend='cpu' cannot run: {reason}; use backend='ref'")
        record("readout", "C", bucket, {"choice": "C", "why": "backend='cpu'"})
        return LabelReadout(logsumexp_c(hidden, weight), _label_logits(hidden, weight, label_ids, softcap))
    path = resolve_backend(backend, hidden.device)
    if path == "triton" and hidden.shape[0] > 0:
        lse = _lse_triton(hidden, weight, softcap, chunk)
    else:
        lse = _lse_ref(hidden, weight, softcap, chunk)
        path = "torch"
    record("readout", path, bucket, {"choice": path, "why": f"backend={backend!r} on {hidden.device.type}"})
    return LabelReadout(lse, _label_logits(hidden, weight, label_ids, softcap))
