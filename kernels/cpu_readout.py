"""Full-vocabulary log-sum-exp in C for CPU, fp32 (``cpu_readout.c``): the CPU path of
:func:`logitjudge_kernels.label_logprobs`.

Same result as :func:`~logitjudge_kernels.readout.label_logprobs_ref`'s log-sum-exp (its reference): log sum_v
exp(hidden_r . weight_v) over the whole vocabulary, without (R, V) logits. Why a kernel: the reference's chunked
``hidden @ weight.T`` is MKL at small M followed by a separate exp pass; this one packs each block of 256
vocabulary rows once and reuses attention's register tile (``cpu_tiles.h``) for every block of 6 read rows, exp
and sum in the same pass (``benchmarks/kernels.py``: 1.3x the full-logits path at 10-64 rows; on 8x350 the time
outside the engine's step function went from 0.56 to 0.24 s, ``benchmarks/breakdown.py``). Built by :mod:`._cbuild`; no
soft-capping (that goes to the reference). Tolerance against the reference: 1e-5 absolute on the log-sum-exp.
"""

from __future__ import annotations

from pathlib import Path

import torch

from . import _cbuild
from ._cbuild import c_int, f32p, i64, ptr

SOURCE = Path(__file__).with_name("cpu_readout.c")
_SIGNATURES = (("logsumexp_f32", (f32p, f32p, f32p, i64, i64, i64, c_int), c_int),)
MIN_ROWS = 4  # the dispatcher's choice: below this, packing the head costs more than the reference saves


def _library():
    return _cbuild.load(SOURCE, _SIGNATURES)


def c_readout_refusal(hidden: torch.Tensor, weight: torch.Tensor, softcap: float | None = None) -> str | None:
    """None if :func:`logsumexp_c` takes these inputs, else why not."""
    if hidden.device.type != "cpu" or hidden.dtype != torch.float32 or weight.dtype != torch.float32:
        return f"the C read-out is fp32 CPU only (got {hidden.dtype}/{weight.dtype} on {hidden.device.type})"
    if softcap is not None:
        return "no soft-capping in the C read-out"
    return _library()[1] or None


def logsumexp_c(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(R,) fp32 log sum_v exp(hidden[r] . weight[v]) for hidden (R, d), weight (V, d) (inputs checked by the
    dispatcher)."""
    reason = c_readout_refusal(hidden, weight)
    if reason:
        raise ValueError(f"logsumexp_c cannot run: {reason}; use backend='ref'")
    hidden, weight = hidden.contiguous(), weight.contiguous()
    R, d = hidden.shape
    lse = torch.empty(R)
    if R and _library()[0].logsumexp_f32(ptr(hidden), ptr(weight), ptr(lse), R, weight.shape[0], d,
                                         torch.get_num_threads()):
        raise MemoryError(f"the C read-out could not allocate its scratch for {R} rows of width {d}")
    return lse
