"""The exactness gate: one rule by which every kernel route (fp32 and bf16/fp16) is judged exact or not.

A route is compared with the kernel's reference on :data:`DRAWS` draws of the sampled call: the call itself and
perturbed copies (each floating input times ``1 + u``, ``|u| <= PERTURB``, a fixed seed), so that one unlucky
sample, whose maximum rounding error happens to land high, cannot decide. Errors are pooled over the draws (the
largest, and the root mean square over every element of every draw) and measured against a float64 evaluation
of the same call (the kernel's ``exact``):

* fp32 outputs: the candidate's max error is at most :data:`FP32_MAX_MULTIPLE` times, and its RMS error at most
  :data:`FP32_RMS_MULTIPLE` times, the fp32 reference's own error (each at least one fp32 ulp of the output's
  largest magnitude, where fp32 happens to be exact);
* bf16/fp16 outputs: the candidate's max error is at most the reference's own max error in that dtype plus one
  ulp of that dtype at the output's largest magnitude;
* a kernel without a float64 evaluation: the kernel's stated tolerance against the reference's output, in every
  draw.

docs/how-it-works.md states this bound; the functions here are pure and their results frozen, so the same
outputs always get the same verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

DRAWS = 3  # the sampled call and two perturbed copies
PERTURB = 2.0 ** -10  # relative size of a perturbed copy's change to each floating input
SEED = 55
# Why 16x and 8x: an exact fp32 kernel that sums in another order has errors of the reference's size, not its
# errors; the largest of them is a noisy statistic (0.5-4x of the reference's, issue 55 saw 4.2x on one sample),
# the RMS over all elements a steady one (within ~2x). A kernel that rounds through a narrower type or drops
# terms is off by 100x or more, so these bounds still separate the two with room on either side.
FP32_MAX_MULTIPLE = 16.0
FP32_RMS_MULTIPLE = 8.0
LOW_PRECISION_ULPS = 1.0


def _tensors(obj) -> list[torch.Tensor]:
    return [t for o in obj for t in _tensors(o)] if isinstance(obj, (tuple, list)) else [obj]


def perturbed(obj, gen: torch.Generator):
    """``obj`` (a tensor, or a tuple/list/dict of them, other values kept) with each floating tensor times
    ``1 + u``, ``u`` uniform in [-PERTURB, PERTURB] (zeros and infinities stay as they are; same dtype)."""
    if isinstance(obj, torch.Tensor):
        if not obj.is_floating_point() or obj.numel() == 0:
            return obj
        u = (torch.rand(obj.shape, generator=gen, dtype=torch.float64) * 2 - 1) * PERTURB
        return (obj.double() * (1 + u).to(obj.device)).to(obj.dtype)
    if isinstance(obj, dict):
        return {k: perturbed(v, gen) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(perturbed(v, gen) for v in obj)
    return obj


def draws(args: tuple, kw: dict, n: int = DRAWS) -> list[tuple[tuple, dict]]:
    """The call and ``n - 1`` perturbed copies of it (deterministic: a fixed seed)."""
    gen = torch.Generator().manual_seed(SEED)
    return [(args, kw)] + [(perturbed(args, gen), perturbed(kw, gen)) for _ in range(n - 1)]


@dataclass(frozen=True)
class Errors:
    """Pooled errors of one output against the truth over the draws: the largest and the RMS; ``scale``: the
    truth's largest magnitude."""

    max: float
    rms: float
    scale: float


def errors(outs: list, truths: list) -> Errors:
    """Pooled over draws (``outs[i]`` against ``truths[i]``, each a tensor or a tuple of them), in float64. NaN
    where an output has a NaN the truth does not."""
    mx, sq, n, scale = 0.0, 0.0, 0, 0.0
    for out, truth in zip(outs, truths):
        for o, t in zip(_tensors(out), _tensors(truth)):
            d = (o.double() - t.double()).abs()
            if d.numel() == 0:
                continue
            d = torch.where(torch.isnan(o.double()) & torch.isnan(t.double()), 0.0, d)
            dmax = float(d.max())  # NaN if any element is
            mx = math.nan if math.isnan(dmax) or math.isnan(mx) else max(mx, dmax)
            sq += float((d * d).sum())
            n += d.numel()
            scale = max(scale, float(t.double().abs().nan_to_num(0.0, 0.0, 0.0).max()))
    return Errors(mx, math.sqrt(sq / n) if n else 0.0, scale)


def ulp(dtype: torch.dtype, scale: float) -> float:
    """One ulp of ``dtype`` at magnitude ``scale``: the spacing of the floats in that binade (0 for 0)."""
    return torch.finfo(dtype).eps * 2.0 ** math.floor(math.log2(scale)) if scale > 0 else 0.0


@dataclass(frozen=True)
class Bound:
    """What a candidate's pooled errors may reach: ``max_error`` and ``rms_error`` (inf: not bounded);
    ``against``: "float64" or "reference"; ``rule``: the bound in words, for the log."""

    max_error: float
    rms_error: float
    against: str
    rule: str


def bound(ref: Errors, dtype: torch.dtype, *, against: str = "float64", tolerance: float | None = None) -> Bound:
    """The gate's bound, from the reference's own pooled errors against float64 (``ref``) and the output dtype;
    ``tolerance``: the stated one, where there is no float64 evaluation (``against="reference"``)."""
    if against == "reference":
        return Bound(float(tolerance), math.inf, against, f"the stated tolerance {tolerance:.3g}")
    if dtype == torch.float32 or dtype == torch.float64:
        floor = torch.finfo(torch.float32).eps * ref.scale  # where fp32 is exact, rounding once is exact too
        return Bound(FP32_MAX_MULTIPLE * max(ref.max, floor), FP32_RMS_MULTIPLE * max(ref.rms, floor), against,
                     f"{FP32_MAX_MULTIPLE:g} x max / {FP32_RMS_MULTIPLE:g} x RMS of the fp32 reference's own "
                     f"error {ref.max:.3g} / {ref.rms:.3g}")
    one = LOW_PRECISION_ULPS * ulp(dtype, ref.scale)
    return Bound(ref.max + one, math.inf, against,
                 f"the {str(dtype)[6:]} reference's own error {ref.max:.3g} + {LOW_PRECISION_ULPS:g} ulp {one:.3g}")


@dataclass(frozen=True)
class Verdict:
    """A candidate judged: ``exact``; its pooled errors; ``why``: None if exact, else the rejection (for the log)."""

    exact: bool
    errors: Errors
    why: str | None


def verdict(cand: Errors, b: Bound) -> Verdict:
    """``cand`` (pooled errors) within ``b``? NaN is never exact."""
    if cand.max <= b.max_error and cand.rms <= b.rms_error:
        return Verdict(True, cand, None)
    what = "max" if not cand.max <= b.max_error else "RMS"
    err, lim = (cand.max, b.max_error) if what == "max" else (cand.rms, b.rms_error)
    return Verdict(False, cand, f"{what} error {err:.3g} against {b.against} over {DRAWS} draws > {lim:.3g} "
                                f"({b.rule})")


@dataclass(frozen=True)
class Gate:
    """The gate set up for one sampled call: the draws, the reference's outputs on them, the truths the
    candidates are measured against, and the bound. ``judge(fn)`` runs a candidate on every draw."""

    draws: tuple
    truths: tuple
    bound: Bound

    def judge(self, fn: Callable) -> Verdict:
        outs = [fn(*a, **k) for a, k in self.draws]
        return verdict(errors(outs, list(self.truths)), self.bound)


def gate(reference: Callable, args: tuple, kw: dict, *, exact: Callable | None, tolerance: Callable,
         to_float64: Callable, n: int = DRAWS) -> Gate:
    """The :class:`Gate` for this call. ``exact``: the float64
    evaluation (given float64 inputs), or None: ``tolerance(ref_out)`` against the reference's output."""
    ds = draws(args, kw, n)
    refs = [reference(*a, **k) for a, k in ds]
    dtype = _tensors(refs[0])[0].dtype
    if exact is None:
        tol = min(float(tolerance(r)) for r in refs)
        return Gate(tuple(ds), tuple(refs), bound(Errors(0, 0, 0), dtype, against="reference", tolerance=tol))
    truths = [exact(*to_float64(a), **to_float64(k)) for a, k in ds]
    b = bound(errors(refs, truths), dtype)
    return Gate(tuple(ds), tuple(truths), b)
