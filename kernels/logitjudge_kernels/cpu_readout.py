"""Full-vocabulary log-sum-exp in C for CPU, fp32 (``cpu_readout.c``): the CPU path of
:func:`logitjudge_kernels.label_logprobs`.

Same result as :func:`~logitjudge_kernels.readout.label_logprobs_ref`'s log-sum-exp (its reference): log sum_v
exp(hidden_r . weight_v) over the whole vocabulary, without (R, V) logits. Why a kernel: the reference's chunked
``hidden @ weight.T`` is MKL at small M followed by a separate exp pass; this one packs each block of 256
vocabulary rows once (by register transposes of VW x VW tiles: packed element by element, the packing took
half the call on an AVX-512 Zen 5) and reuses attention's register tile (``cpu_tiles.h``) for every block of 6
read rows, exp and sum in the same pass (``benchmarks/kernel_speed.py``: 1.3x the full-logits path at 10-64 rows; on
8x350 the time outside the engine's step function went from 0.56 to 0.24 s, ``benchmarks/breakdown.py``). The
vocabulary blocks are summed in 12 fixed lanes combined in order, so a result has the same bits at any thread
count (a step runs one thread more while the machine is busy, :mod:`.spare_thread`). Built by :mod:`._cbuild`; no
soft-capping (that goes to the reference). Tolerance against the reference: 1e-5
absolute on the log-sum-exp.

A long read-out is cut into C calls of at most :data:`CALL_MACS` multiply-adds (vocabulary spans of
:data:`VOCAB_SPAN` rows, groups of read rows), whose partial log-sum-exps are combined in fp64: a ctypes call cannot
be interrupted, and Python runs a Ctrl-C / SIGTERM handler between calls. The spans do not depend on the number of
read rows, so a row's result does not either.
"""

from __future__ import annotations

from pathlib import Path

import torch

from . import _cbuild
from ._cbuild import c_int, f32p, i64, ptr

SOURCE = Path(__file__).with_name("cpu_readout.c")
_SIGNATURES = (("logsumexp_f32", (f32p, f32p, f32p, i64, i64, i64, c_int), c_int),)
VOCAB_SPAN = 32_768  # vocabulary rows per C call (a multiple of the kernel's 256-row blocks)
CALL_MACS = 1 << 32  # multiply-adds per C call at most (~0.1-0.5 s): read rows per call = CALL_MACS / (span x d)
PARALLEL_MIN = 1 << 22  # vocabulary x width below which one thread runs (a fork and join cost more); the sum
# order is the C kernel's fixed lanes, so no result depends on the thread count (or on the other rows of the call)


def _library(target: str = _cbuild.TARGET):
    return _cbuild.load(SOURCE, _SIGNATURES, target)


def c_readout_refusal(hidden: torch.Tensor, weight: torch.Tensor, softcap: float | None = None) -> str | None:
    """None if :func:`logsumexp_c` takes these inputs, else why not."""
    if hidden.device.type != "cpu" or hidden.dtype != torch.float32 or weight.dtype != torch.float32:
        return f"the C read-out is fp32 CPU only (got {hidden.dtype}/{weight.dtype} on {hidden.device.type})"
    if softcap is not None:
        return "no soft-capping in the C read-out"
    return _library()[1] or None


def logsumexp_c(hidden: torch.Tensor, weight: torch.Tensor, *, target: str = _cbuild.TARGET) -> torch.Tensor:
    """(R,) fp32 log sum_v exp(hidden[r] . weight[v]) for hidden (R, d), weight (V, d) (inputs checked by the
    dispatcher). ``target``: the build's ``-march`` (default native; ``x86-64-v3`` for the AVX2 build, in tests)."""
    reason = c_readout_refusal(hidden, weight) if target == _cbuild.TARGET else (_library(target)[1] or None)
    if reason:
        raise ValueError(f"logsumexp_c cannot run: {reason}; use backend='ref'")
    hidden, weight = hidden.contiguous(), weight.contiguous()
    R, d = hidden.shape
    V = weight.shape[0]
    fn = _library(target)[0].logsumexp_f32
    threads = _cbuild.threads_for(V * d, PARALLEL_MIN)
    spans = range(0, V, VOCAB_SPAN)
    rows = max(1, CALL_MACS // (min(V, VOCAB_SPAN) * max(d, 1)))
    parts = torch.empty(len(spans), R)  # (spans, R) partial log-sum-exps
    for i, v0 in enumerate(spans):
        w = weight[v0:v0 + VOCAB_SPAN]
        for r0 in range(0, R, rows):
            h, out = hidden[r0:r0 + rows], parts[i, r0:r0 + rows]
            if fn(ptr(h), ptr(w), ptr(out), h.shape[0], w.shape[0], d, threads):
                raise MemoryError(f"the C read-out could not allocate its scratch for {R} rows of width {d}")
    if len(spans) == 1:
        return parts[0]
    return torch.logsumexp(parts.double(), dim=0).float()  # the spans combined in fp64
