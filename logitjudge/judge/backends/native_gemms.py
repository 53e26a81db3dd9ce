"""The native step's projections: fused, pre-packed GEMMs and the gated MLP, on CPU in row blocks where that
measures faster.

* q/k/v and gate/up run as one GEMM each (:func:`fuse`): the model's own ``nn.Linear`` weights become views into
  the fused matrices, so no memory is added and the model still runs unchanged through transformers;
* on CPU in fp32 and bf16 the weights are pre-packed for oneDNN (:class:`Weight`, no per-call re-layout; each
  copy is made when a call first runs the packed route) and the gate GEMM applies the activation and the up GEMM
  the product in oneDNN's epilogues (:class:`GatedMLP`);
  which packed copy is kept is decided once per CPU (:func:`gemm_route`);
* in fp32 where torch carries MKL, a third route: MKL's GEMM on a copy packed once for it
  (``logitjudge_kernels.mkl_gemm``; the gated MLP's activation and product then run as in the plain route).
  ``F.linear`` is MKL's unpacked GEMM, which lays W out again in every call: on an Intel Xeon (AMX, 2 threads)
  the dispatcher took MKL's packed GEMM in most of both judges' buckets, and a 1x350 run fell by 5%
  (gemma-3-270m) and 13% (Qwen2.5-Coder-0.5B; medians of three processes, docs/performance.md);
* each GEMM call runs a packed route or plain ``F.linear`` (for the MLP: ``F.linear``, the activation, the
  product), whichever measured faster for its bucket of row counts, weight shape and dtype on this machine
  (:data:`LINEAR`, :data:`GATE_UP`, chosen by the kernels' dispatcher, ``logitjudge_kernels.dispatch``, and
  cached per CPU). A route measured once on other shapes does not say what the step's own calls do: on an Intel
  Xeon (AVX-512, 2 threads, issue 48) the packed GEMMs with epilogues ran at 147-155 GFLOP/s inside the step,
  the same layer's plain matmuls at 262, while the load-time probe had packed 286 vs plain 280;
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
from logitjudge_kernels import mkl_gemm, spare_thread
from logitjudge_kernels.cpu_norm import act_mul, act_mul_ref
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
    """A projection weight (out, in), an optional bias (out,) and, where ``packs``, a oneDNN-packed copy of the
    weight, made at its first use (:attr:`packed`). Packing once saves the per-call re-layout: 15-25% faster fp32
    GEMMs on the shapes of Gemma-3-270M (``benchmarks/peers.py`` prints both rates: ``layer_flops_per_s_by_path``
    in its JSON). The copy is made when a call first runs (or measures) the packed route, not when the model
    loads: a weight whose calls all run plain ``F.linear`` here (the dispatcher's choice per bucket, cached per
    machine) never holds one, which on CPUs where plain wins most buckets saves most of the copies' memory.
    ``upcast``: a bf16/fp16 weight whose packed copy is fp32 (exactly its values); the GEMM then runs on fp32
    FMAs with the input upcast and the output rounded back to the input's dtype: on CPUs whose bf16 dot products
    are slower than fp32 FMAs (:func:`logitjudge.gemm_rates.bf16_route`)."""

    __slots__ = ("weight", "bias", "packs", "upcast", "_packed", "_mkl")

    def __init__(self, weight: torch.Tensor, pack: bool, upcast: bool = False, bias: torch.Tensor | None = None):
        self.weight, self.bias, self.packs, self._packed, self._mkl = weight, bias, bool(pack), None, None
        self.upcast = bool(pack and upcast and weight.dtype != torch.float32)
        if pack and bias is not None:
            self.bias = bias.float() if self.upcast else bias

    @property
    def packed(self) -> torch.Tensor:
        """The oneDNN-packed copy (fp32 where ``upcast``), made at first use; only where ``packs``."""
        if self._packed is None:
            if not self.packs:
                raise ModeError("this weight keeps no packed copy (packing is off)")
            src = self.weight.float() if self.upcast else self.weight
            # two threads' concurrent first calls may both pack: either copy is the same, one is kept
            self._packed = torch.ops.mkldnn._reorder_linear_weight(src, 256)
        return self._packed

    @property
    def mkl_packed(self) -> mkl_gemm.Packed:
        """MKL's packed copy of the fp32 weight (:mod:`logitjudge_kernels.mkl_gemm`), packed at first use."""
        if self._mkl is None:
            self._mkl = mkl_gemm.Packed(self.weight)
        return self._mkl

    def rows(self, start: int, stop: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Output rows [start, stop) of the weight and bias, in ``dtype`` (the pruned last layer's GEMMs)."""
        b = None if self.bias is None else self.bias[start:stop].to(dtype)
        return self.weight[start:stop].to(dtype), b

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in) -> (..., out): a packed route or plain, whichever measured faster for the call's bucket
        (:data:`LINEAR`)."""
        out = LINEAR(self, x.reshape(-1, x.shape[-1]))
        return out.view(*x.shape[:-1], self.weight.shape[0])


class GatedMLP:
    """The gated MLP input ``act(x W_gate^T) * (x W_up^T)`` from one fused (2 I, d) weight (gate rows first),
    ``act`` GELU-tanh (Gemma) or SiLU (Llama, Qwen, Mistral, Phi-3). With packed weights the activation and the
    product run inside oneDNN's GEMM epilogues (post-ops), while the output tile is in cache, instead of as two
    more passes over a (rows, 2 I) matrix: 17% faster on 2048 x 640 -> 2 x 2048, and 8x350 in
    ``benchmarks/engine.py`` went from 14.0 to 13.3 s; the same values (max |diff| 2e-6 at outputs of magnitude
    20)."""

    __slots__ = ("weight", "gate", "up", "act", "_mkl")

    def __init__(self, weight: torch.Tensor, pack: bool, upcast: bool = False, act: str = "gelu_tanh"):
        if act not in ACTIVATIONS:
            raise ModeError(f"activation {act!r} is not one of {sorted(ACTIVATIONS)}")
        self.weight, self.act, self._mkl = weight, act, None
        half = weight.shape[0] // 2
        self.gate, self.up = Weight(weight[:half], pack, upcast), Weight(weight[half:], pack, upcast)

    @property
    def packs(self) -> bool:
        return self.gate.packs

    @property
    def mkl_packed(self) -> mkl_gemm.Packed:
        """MKL's packed copy of the fused (2 I, d) fp32 weight, packed at first use."""
        if self._mkl is None:
            self._mkl = mkl_gemm.Packed(self.weight)
        return self._mkl

    @property
    def upcast(self) -> bool:
        return self.up.upcast

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., d) -> (..., I): the epilogues, MKL's packed or the plain GEMM + activation + product, whichever
        measured faster for the call's bucket (:data:`GATE_UP`)."""
        out = GATE_UP(self, x.reshape(-1, x.shape[-1]))
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
    """Which packed copies the native path keeps for a model in ``dtype`` on ``device``: "fp32" (oneDNN-packed
    fp32), "bf16" (packed for the CPU's bf16 GEMMs), "bf16_upcast" (bf16 weights, fp32 packed copies and FMAs:
    where the CPU's bf16 dot products measured slower, e.g. AVX-512 BF16 without AMX on Intel, or none at all)
    or "plain" (none: ``F.linear`` on the weights as they are: GPUs, fp16, no oneDNN). With a packed copy, each
    call still runs packed or plain ``F.linear``, whichever measured faster on its shapes (:data:`LINEAR`,
    :data:`GATE_UP`): the plain route needs no copy of its own, so it is always a candidate."""
    if device.type != "cpu" or not packing_available():
        return "plain"
    if dtype == torch.float32:
        return "fp32"
    if dtype != torch.bfloat16:
        return "plain"
    if not _bf16_gemms_available():
        return "bf16_upcast"
    from ...gemm_rates import bf16_route  # read when called: tests and benchmarks/bf16_error.py set the route there

    return bf16_route("cpu")


# ------------------------------------------------------------------------------------------------ the GEMMs
BUCKET_ROWS = 128  # above 256 rows, row counts are bucketed by 128: whole calls slow down past a row count that
# depends on the shapes and the cache (0.5B: between 848 and 864 rows), which a power-of-two bucket would straddle


def _rows_bucket(rows: int) -> tuple[int, int]:
    """(smallest, largest) row count of the bucket of ``rows``: powers of two up to 256, then steps of 128."""
    if rows <= 2 * BUCKET_ROWS:
        hi = 1 << max(0, rows - 1).bit_length()
        return (hi // 2 + 1 if hi > 1 else 1), hi
    hi = -(-rows // BUCKET_ROWS) * BUCKET_ROWS
    return hi - BUCKET_ROWS + 1, hi


def _rows_label(rows: int) -> str:
    lo, hi = _rows_bucket(rows)
    return f"rows {lo if lo == hi else f'{lo}-{hi}'}"


def _route_label(w) -> str:
    """How a :class:`Weight` or :class:`GatedMLP` can run: "plain" (no packed copy) or packed (on fp32 FMAs)."""
    return "plain" if not w.packs else ("packed, fp32 FMAs" if w.upcast else "packed")


def _packed_refusal(w, x) -> str | None:
    return None if w.packs else "no packed copy (packing is off)"


def _mkl_refusal(w, x) -> str | None:
    """MKL's packed GEMM: fp32 weights and inputs, packing on, torch built with MKL."""
    if not w.packs:
        return "no packed copy (packing is off)"
    if w.weight.dtype != torch.float32 or x.dtype != torch.float32 or x.device.type != "cpu":
        return "MKL's packed GEMM runs fp32 on CPU only"
    return None if mkl_gemm.available() else "torch here has no MKL (cblas_sgemm_compute)"


def linear_plain(w: Weight, x: torch.Tensor) -> torch.Tensor:
    """``F.linear`` on the weight as it is (the reference). x (M, in) -> (M, out). An ``upcast`` weight runs in
    fp32 (the bf16 values converted per call): the same math as its packed fp32 copy."""
    if w.upcast:
        return f_linear(x.float(), w.weight.float(), w.bias).to(x.dtype)
    return f_linear(x, w.weight, w.bias)


def f_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` (on CPU in fp32, MKL's GEMM), on a raised step's count where its bits hold there
    (``spare_thread.checked``). x (M, in) -> (M, out)."""
    return spare_thread.checked(("plain", *weight.shape, bias is not None, str(x.dtype),
                                 spare_thread.rows_bucket(x.shape[0])),
                                lambda: F.linear(x, weight, bias))


def linear_packed(w: Weight, x: torch.Tensor) -> torch.Tensor:
    """oneDNN's GEMM on the packed copy (on a raised step's count where its bits hold there). x (M, in) ->
    (M, out)."""
    xs = x.float() if w.upcast else x
    out = spare_thread.checked(
        ("packed", *w.weight.shape, w.bias is not None, str(xs.dtype), spare_thread.rows_bucket(x.shape[0])),
        lambda: torch.ops.mkldnn._linear_pointwise(xs, w.packed, w.bias, "none", [], ""))
    return out.to(x.dtype) if w.upcast else out


def linear_mkl(w: Weight, x: torch.Tensor) -> torch.Tensor:
    """MKL's GEMM on its packed copy (no per-call re-layout of W, which ``F.linear`` does). x (M, in) -> (M, out)."""
    return mkl_gemm.linear(x, w.mkl_packed, w.weight.shape[0], w.bias)


def linear_exact(w: Weight, x: torch.Tensor) -> torch.Tensor:
    """The float64 truth (``x`` float64)."""
    return F.linear(x, w.weight.double(), None if w.bias is None else w.bias.double())


def _linear_bucket(w: Weight, x: torch.Tensor) -> str:
    out, d = w.weight.shape
    return (f"{_rows_label(x.shape[0])}, {d} -> {out}{' + bias' if w.bias is not None else ''}, "
            f"{str(w.weight.dtype)[6:]}, {_route_label(w)}")


def gate_up_plain(mlp: GatedMLP, x: torch.Tensor) -> torch.Tensor:
    """``act(x W_gate^T) * (x W_up^T)`` as one plain GEMM, then the activation and the product in one pass
    (``cpu_norm.act_mul``: its C kernel or torch's, whichever measured faster) (the reference). x (M, d) -> (M, I)."""
    w, xs = (mlp.weight.float(), x.float()) if mlp.upcast else (mlp.weight, x)
    return act_mul(f_linear(xs, w), mlp.act).to(x.dtype)


def gate_up_packed(mlp: GatedMLP, x: torch.Tensor) -> torch.Tensor:
    """The activation in the gate GEMM's epilogue, the product in the up GEMM's. x (M, d) -> (M, I)."""
    xs = x.float() if mlp.upcast else x
    post, algorithm = ACTIVATIONS[mlp.act]

    def run() -> torch.Tensor:
        gate = torch.ops.mkldnn._linear_pointwise(xs, mlp.gate.packed, None, post, [], algorithm)
        return torch.ops.mkldnn._linear_pointwise.binary(xs, gate, mlp.up.packed, None, "mul")

    key = ("packed epilogues", *mlp.weight.shape, mlp.act, str(xs.dtype), spare_thread.rows_bucket(x.shape[0]))
    out = spare_thread.checked(key, run)
    return out.to(x.dtype) if mlp.upcast else out


def gate_up_mkl(mlp: GatedMLP, x: torch.Tensor) -> torch.Tensor:
    """The fused gate/up GEMM on MKL's packed copy, then the activation and the product as in
    :func:`gate_up_plain`. x (M, d) -> (M, I)."""
    return act_mul(mkl_gemm.linear(x, mlp.mkl_packed, mlp.weight.shape[0]), mlp.act)


def gate_up_exact(mlp: GatedMLP, x: torch.Tensor) -> torch.Tensor:
    """The float64 truth (``x`` float64)."""
    return act_mul_ref(F.linear(x, mlp.weight.double()), mlp.act)


def _gate_up_bucket(mlp: GatedMLP, x: torch.Tensor) -> str:
    return (f"{_rows_label(x.shape[0])}, d {x.shape[1]}, I {mlp.up.weight.shape[0]}, {mlp.act}, "
            f"{str(mlp.weight.dtype)[6:]}, {_route_label(mlp)}")


# Packed first: LOGITJUDGE_CPU_KERNELS=0 (no measuring, each kernel's first candidate) keeps the route that ran
# before these were measured. Plain is the reference, applies everywhere and is timed beside packed in every
# bucket, so a packed GEMM that is slower on the step's own shapes is never run. The median of the rounds
# decides (``typical``), as for the MLP's row blocks: the routes differ in how much other load slows them.
GEMM_MEASURING = dict(error=max_abs, tolerance=scaled_tolerance(1e-5), typical=True, repeats=7)
LINEAR = Kernel(
    "linear", [Candidate("packed", linear_packed, _packed_refusal, spare=True),
               Candidate("plain", linear_plain, spare=True),
               Candidate("mkl packed", linear_mkl, _mkl_refusal, spare=True)],
    reference="plain", bucket=_linear_bucket, work=lambda w, x: 2 * x.shape[0] * w.weight.numel(),
    exact=linear_exact, **GEMM_MEASURING)
GATE_UP = Kernel(
    "gate_up", [Candidate("packed epilogues", gate_up_packed, _packed_refusal, spare=True),
                Candidate("plain", gate_up_plain, spare=True),
                Candidate("mkl packed", gate_up_mkl, _mkl_refusal, spare=True)],
    reference="plain", bucket=_gate_up_bucket, work=lambda mlp, x: 2 * x.shape[0] * mlp.weight.numel(),
    exact=gate_up_exact, **GEMM_MEASURING)


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
    return linear_exact(down, gate_up_exact(mlp, h))


def _mlp_bucket(mlp, down, h) -> str:
    return (f"{_rows_label(h.shape[0])}, d {h.shape[1]}, I {down.weight.shape[1]}, {str(h.dtype)[6:]}, "
            f"{_route_label(mlp)}")


MLP_DOWN = Kernel(
    "mlp_rows",
    [Candidate("whole", mlp_whole, spare=True)]
    + [Candidate(f"blocks of {r}", _in_blocks(r), _block_refusal(r), spare=True) for r in MLP_ROW_BLOCKS],
    reference="whole", bucket=_mlp_bucket, error=max_abs, tolerance=scaled_tolerance(1e-5),
    work=lambda mlp, down, h: 2 * h.shape[0] * (mlp.weight.numel() + down.weight.numel()), exact=mlp_exact,
    # blocks and the whole call differ by 5-20%, and by how much other load on the machine slows them: the whole
    # call's (rows, 2 I) intermediate competes for the shared cache, so it is fastest only on a quiet machine
    repeats=9, measure_seconds=4.0, typical=True)
# Nested measurement: each candidate above calls GATE_UP and LINEAR, themselves measured per bucket of rows. The
# inner buckets are settled before MLP_DOWN times anything: Kernel.measure runs the reference and then every
# candidate once (the exactness check, untimed: ``typical``) before the timed rounds, and those first runs make
# GATE_UP and LINEAR decide (or read from the cache) each bucket the whole call and every block size touch. The
# timed rounds then run the inner routes that every later call of those buckets runs too, so "whole" against
# "blocks" is measured on the routes the step will take (tests/test_gemm_routes.py checks the order). The inner
# kernels' calls while measuring are not recorded as run (dispatch.Kernel.measure).


def mlp_down(mlp: GatedMLP, down: Weight, h: torch.Tensor) -> torch.Tensor:
    """``down(mlp(h))`` for h (..., d) -> (..., d), whole or in row blocks: whichever measured faster here
    (:data:`MLP_DOWN`)."""
    out = MLP_DOWN(mlp, down, h.reshape(-1, h.shape[-1]))
    return out.view(*h.shape[:-1], out.shape[-1])
