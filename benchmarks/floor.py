"""The FLOP floor of a peers run (``benchmarks/peers.py``) and of ``benchmarks/breakdown.py``: the fp32 matmul rate
measured on the judge's own layer shapes, the CPU's FMA peak (``peak_fma.c``) and the work any exact method must do
on a workload (every layer's matmuls at every trie token, the trie's attention QK/PV products)."""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.timing import best_of_interleaved

HERE = Path(__file__).resolve().parent

GEMMA_SHAPES = [(640, 1024), (640, 256), (640, 256), (1024, 640), (640, 2048), (640, 2048), (2048, 640)]


def matmul_rate(threads: int, rows: int = 512, reps: int = 20, shapes=None, sustain_s: float = 5.0) -> dict:
    """fp32 FLOP/s of one judge layer's matmuls ``shapes`` [(in, out)] (default Gemma-3-270M's) on ``rows`` tokens
    (nn.Linear layout), best of reps; and, on the faster path, the rate they sustain back to back over
    ``sustain_s`` seconds (0: not measured)."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    shapes = [tuple(x) for x in (shapes or GEMMA_SHAPES)]
    d_big = max(shapes, key=lambda s: s[0] * s[1])  # the largest single matmul, for the single-GEMM rate
    xs = {d: torch.randn(rows, d) for d in {i for i, _ in shapes}}
    ws = [torch.randn(o, i) / i ** 0.5 for i, o in shapes]
    flops = sum(2 * rows * i * o for i, o in shapes)

    def sustained(fn) -> float:
        """FLOP/s of ``fn`` repeated back to back for ``sustain_s`` seconds: total FLOPs / total time."""
        n, t0 = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < sustain_s:
            fn()
            n += 1
        return n * flops / elapsed

    paths = {"mkl_linear": lambda: [F.linear(xs[i], w) for (i, _), w in zip(shapes, ws)]}
    if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        packed = [torch.ops.mkldnn._reorder_linear_weight(w, rows) for w in ws]  # as the native Gemma-3 backend packs
        paths["onednn_packed"] = lambda: [torch.ops.mkldnn._linear_pointwise(xs[i], p, None, "none", [], "")
                                          for (i, _), p in zip(shapes, packed)]
    rates = {path: flops / t.best for path, t in best_of_interleaved(paths, reps, warmup=True).items()}
    fastest = max(rates, key=rates.get)
    a, b = torch.randn(rows, d_big[0]), torch.randn(*d_big)
    t_single = best_of_interleaved({"single": lambda: a @ b}, reps, warmup=True)["single"].best
    return {"rows": rows, "threads": threads, "layer_flops_per_s": rates[fastest], "shapes": shapes,
            "layer_flops_per_s_by_path": rates, "largest_matmul": list(d_big),
            "largest_matmul_flops_per_s": 2 * rows * d_big[0] * d_big[1] / t_single,
            "sustained_flops_per_s": sustained(paths[fastest]) if sustain_s > 0 else None, "sustain_s": sustain_s}


def fma_peak(threads: int) -> dict:
    """The CPU's fp32 FMA peak (``benchmarks/peak_fma.c``: register-only FMA chains), best of 5; no rate and the
    reason when the C build is unavailable."""
    import ctypes

    from logitjudge_kernels import _cbuild

    args = (ctypes.c_int, ctypes.c_int64, _cbuild.f32p)
    lib, why = _cbuild.load(HERE / "peak_fma.c", (("fma_peak_gflops", args, ctypes.c_double),
                                                   ("bf16_dot_peak_gflops", args, ctypes.c_double)))
    if lib is None:
        return {"flops_per_s": None, "why": why}
    sink = ctypes.c_float()
    best = max(lib.fma_peak_gflops(threads, 60_000_000, ctypes.byref(sink)) for _ in range(7))  # ~0.1 s each
    bf16 = max(lib.bf16_dot_peak_gflops(threads, 30_000_000, ctypes.byref(sink)) for _ in range(3))
    return {"flops_per_s": best * 1e9, "threads": threads,
            "bf16_dot_flops_per_s": bf16 * 1e9 if bf16 > 0 else None}  # None: no AVX-512 BF16 in the build


def floor_flops(facts: dict, wl) -> tuple[int, int]:
    """The floor's work on workload ``wl``: (every layer's matmuls at every trie token, the trie's attention
    (query, key) pairs' QK and PV FLOPs), from the judge's ``facts`` (``judge_model.floor_facts``)."""
    return (2 * facts["matmul_params"] * wl.trie_tokens,
            wl.attention_flops(facts["heads"], facts["head_dim"], facts["layer_windows"]))
