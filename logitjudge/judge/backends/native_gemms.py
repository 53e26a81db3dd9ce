"""The native step's projections: fused, pre-packed GEMMs and the gated MLP, on CPU in row blocks where that
measures faster.

* q/k/v and gate/up run as one GEMM each (:func:`fuse`): the model's own ``nn.Linear`` weights become views into
  the fused matrices, so no memory is added and the model still runs unchanged through transformers;
* on CPU in fp32 and bf16 the weights are kept pre-packed for oneDNN (:class:`Weight`, no per-call re-layout) and
  the gate GEMM applies the activation and the up GEMM the product in oneDNN's epilogues (:class:`GatedMLP`);
  which GEMMs run is measured once per CPU (:func:`gemm_route`);
* the MLP (gate/up, then down) of a call's rows runs whole or in blocks of rows (:func:`mlp_down`), whichever
  measured faster for the bucket of row counts on this machine (the kernels' dispatcher,
  ``logitjudge_kernels.dispatch``): its (rows, 2 I) intermediate outgrows the caches as rows grow, and oneDNN's
  GEMMs then slow down, the more so the more other tenants load a shared L3. Qwen2.5-Coder-0.5B (d 896,
  I 4864), fp32, 2 threads, AMD EPYC Zen 5, ``benchmarks/mlp_rows.py`` (paired medians, two runs an hour apart):
  blocks of 512 rows against the whole call 1.17x / 0.97x at 1024 rows, 1.23x / 1.21x at 2048; blocks of 256 at
  512 rows 0.94x: which wins depends on the rows and the load, so it is measured.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from logitjudge_kernels.dispatch import Candidate, Kernel, max_abs, scaled_tolerance

from ...errors import ModeError

ACTIVATIONS = {"gelu_tanh": ("gelu", "tanh"), "silu": ("swish", "")}  # the gate's oneDNN post-op and algorithm


def fuse(linears) -> torch.Tensor:
    """One (sum of out, in) weight; each module's weight becomes a view into it (no memory added)."""
    weight = torch.cat([m.weight.detach() for m in linears])
    start = 0
    for m in linears:
        n = m.weight.shape[0]
        m.weight = torch.nn.Parameter(weight[start:start + n], requires_grad=False)
        start += n
    return weight


class Weight:
    """A projection weight (out, in), an optional bias (out,) and, optionally, a oneDNN-packed copy of the
    weight. Packing once saves the per-call re-layout: 15-25% faster fp32 GEMMs on the shapes of Gemma-3-270M
    (``benchmarks/peers.py`` prints both rates: ``layer_flops_per_s_by_path`` in its JSON). ``upcast``: a
    bf16/fp16 weight whose packed copy is fp32 (exactly its values); the GEMM then runs on fp32 FMAs with the
    input upcast and the output rounded back to the input's dtype: on CPUs whose bf16 dot products are slower
    than fp32 FMAs (:func:`logitjudge.autodtype.bf16_route`)."""

    __slots__ = ("weight", "bias", "packed", "upcast")

    def __init__(self, weight: torch.Tensor, pack: bool, upcast: bool = False, bias: torch.Tensor | None = None):
        self.weight, self.bias = weight, bias
        self.upcast = bool(pack and upcast and weight.dtype != torch.float32)
        src = weight.float() if self.upcast else weight
        self.packed = torch.ops.mkldnn._reorder_linear_weight(src, 256) if pack else None
        if pack and bias is not None:
            self.bias = bias.float() if self.upcast else bias

    def rows(self, start: int, stop: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Output rows [start, stop) of the weight and bias, in ``dtype`` (the pruned last layer's GEMMs)."""
        b = None if self.bias is None else self.bias[start:stop].to(dtype)
        return self.weight[start:stop].to(dtype), b

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is None:
            return F.linear(x, self.weight, self.bias)
        x2 = x.reshape(-1, x.shape[-1])
        out = torch.ops.mkldnn._linear_pointwise(x2.float() if self.upcast else x2, self.packed, self.bias, "none",
                                                 [], "")
        return (out.to(x.dtype) if self.upcast else out).view(*x.shape[:-1], self.weight.shape[0])


class GatedMLP:
    """The gated MLP input ``act(x W_gate^T) * (x W_up^T)`` from one fused (2 I, d) weight (gate rows first),
    ``act`` GELU-tanh (Gemma) or SiLU (Llama, Qwen, Mistral, Phi-3). With packed weights the activation and the
    product run inside oneDNN's GEMM epilogues (post-ops), while the output tile is in cache, instead of as two
    more passes over a (rows, 2 I) matrix: 17% faster on 2048 x 640 -> 2 x 2048, and 8x350 in
    ``benchmarks/engine.py`` went from 14.0 to 13.3 s; the same values (max |diff| 2e-6 at outputs of magnitude
    20)."""

    __slots__ = ("weight", "gate", "up", "act")

    def __init__(self, weight: torch.Tensor, pack: bool, upcast: bool = False, act: str = "gelu_tanh"):
        if act not in ACTIVATIONS:
            raise ModeError(f"activation {act!r} is not one of {sorted(ACTIVATIONS)}")
        self.weight, self.act = weight, act
        half = weight.shape[0] // 2
        self.gate, self.up = Weight(weight[:half], pack, upcast), Weight(weight[half:], pack, upcast)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate.packed is None:
            gate, up = F.linear(x, self.weight).chunk(2, dim=-1)
            gate = F.gelu(gate, approximate="tanh") if self.act == "gelu_tanh" else F.silu(gate)
            return gate.mul_(up)
        x2 = x.reshape(-1, x.shape[-1])
        if self.up.upcast:
            x2 = x2.float()
        post, algorithm = ACTIVATIONS[self.act]
        gate = torch.ops.mkldnn._linear_pointwise(x2, self.gate.packed, None, post, [], algorithm)
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


def packing_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def gemm_route(dtype: torch.dtype, device: torch.device) -> str:
    """How the native path runs the projections of a model in ``dtype`` on ``device``: "fp32" (oneDNN-packed),
    "bf16" (packed for the CPU's bf16 GEMMs), "bf16_upcast" (bf16 weights, fp32 packed copies and FMAs: where
    the CPU's bf16 dot products measured slower, e.g. AVX-512 BF16 without AMX on Intel, or none at all) or
    "plain" (``F.linear`` on the weights as they are: GPUs, fp16, no oneDNN)."""
    if device.type != "cpu" or not packing_available():
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


# ------------------------------------------------------------------------------------------------ the MLP
MLP_ROW_BLOCKS = (512, 384, 256)  # the block sizes the MLP is measured in, against the whole call


def mlp_whole(mlp: GatedMLP, down: Weight, h: torch.Tensor) -> torch.Tensor:
    """The reference: ``down(mlp(h))`` on all rows at once. h (M, d) -> (M, d)."""
    return down(mlp(h))


def _in_blocks(rows: int):
    def mlp_blocks(mlp: GatedMLP, down: Weight, h: torch.Tensor) -> torch.Tensor:
        """``down(mlp(h))`` in near-equal blocks of at most ``rows`` rows: each row's math is the same, the
        (block, 2 I) intermediate stays in cache. h (M, d) -> (M, d)."""
        M = h.shape[0]
        step = -(-M // -(-M // rows))
        out = h.new_empty(M, down.weight.shape[0])
        for a in range(0, M, step):
            out[a:a + step] = down(mlp(h[a:a + step]))
        return out
    return mlp_blocks


BUCKET_ROWS = 128  # above 256 rows, row counts are bucketed by 128: whole calls slow down past a row count that
# depends on the shapes and the cache (0.5B: between 848 and 864 rows), which a power-of-two bucket would straddle


def _rows_bucket(rows: int) -> tuple[int, int]:
    """(smallest, largest) row count of the bucket of ``rows``: powers of two up to 256, then steps of 128."""
    if rows <= 2 * BUCKET_ROWS:
        hi = 1 << max(0, rows - 1).bit_length()
        return (hi // 2 + 1 if hi > 1 else 1), hi
    hi = -(-rows // BUCKET_ROWS) * BUCKET_ROWS
    return hi - BUCKET_ROWS + 1, hi


def _block_refusal(rows: int):
    def refusal(mlp, down, h) -> str | None:
        if h.device.type != "cpu":
            return "row blocks are measured on CPU only"
        # the bucket's smallest row count decides, so that every call of a bucket has the same candidates
        lo = _rows_bucket(h.shape[0])[0]
        return None if lo > rows else f"the bucket's calls can have at most {rows} rows (the whole call)"
    return refusal


def mlp_exact(mlp: GatedMLP, down: Weight, h: torch.Tensor) -> torch.Tensor:
    """The float64 truth of :func:`mlp_whole` (``h`` float64): the dispatcher judges fp32 outputs against it."""
    gate, up = F.linear(h, mlp.weight.double()).chunk(2, dim=-1)
    gate = F.gelu(gate, approximate="tanh") if mlp.act == "gelu_tanh" else F.silu(gate)
    bias = None if down.bias is None else down.bias.double()
    return F.linear(gate * up, down.weight.double(), bias)


def _mlp_bucket(mlp, down, h) -> str:
    route = "plain" if mlp.gate.packed is None else ("packed, fp32 FMAs" if mlp.up.upcast else "packed")
    lo, hi = _rows_bucket(h.shape[0])
    return (f"rows {lo if lo == hi else f'{lo}-{hi}'}, d {h.shape[1]}, I {down.weight.shape[1]}, {str(h.dtype)[6:]}, "
            f"{route}")


MLP_DOWN = Kernel(
    "mlp_rows",
    [Candidate("whole", mlp_whole)] + [Candidate(f"blocks of {r}", _in_blocks(r), _block_refusal(r))
                                       for r in MLP_ROW_BLOCKS],
    reference="whole", bucket=_mlp_bucket, error=max_abs, tolerance=scaled_tolerance(1e-5),
    work=lambda mlp, down, h: 2 * h.shape[0] * (mlp.weight.numel() + down.weight.numel()), exact=mlp_exact,
    # blocks and the whole call differ by 5-20%, and by how much other load on the machine slows them: the whole
    # call's (rows, 2 I) intermediate competes for the shared cache, so it is fastest only on a quiet machine
    repeats=9, measure_seconds=4.0, typical=True)


def mlp_down(mlp: GatedMLP, down: Weight, h: torch.Tensor) -> torch.Tensor:
    """``down(mlp(h))`` for h (..., d) -> (..., d), whole or in row blocks: whichever measured faster here
    (:data:`MLP_DOWN`)."""
    out = MLP_DOWN(mlp, down, h.reshape(-1, h.shape[-1]))
    return out.view(*h.shape[:-1], out.shape[-1])
