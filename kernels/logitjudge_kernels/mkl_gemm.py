"""MKL's packed fp32 GEMM, ``y = x . W^T`` with W packed once (``cblas_sgemm_pack`` / ``cblas_sgemm_compute``).

torch's x86 library carries MKL and exports these functions; they are reached through ctypes, no headers and no
linking. ``F.linear`` on CPU is MKL's unpacked GEMM, which lays W out again inside every call; a copy packed once
skips that: on an Intel Xeon with AMX (2 threads) the dispatcher measured 310 against 241 GFLOP/s (plain) for
385-512 rows of Qwen2.5-Coder-0.5B's 896 -> 9,728 gate/up (docs/performance.md, "MKL's packed GEMM as a third
route").

The packed buffer carries MKL's own metadata, so it must not move (a torch tensor's storage does not) and it
serves any row count: ``m`` given to the packing is a blocking hint (MKL's documentation asks for the same
value; tests/test_gemm_routes.py computes 1 to 2,000 rows on one copy against the float64 truth, and the
dispatcher's exactness gate judges each bucket of row counts on its own calls before the route is chosen).
Where torch has no MKL (ARM builds) :func:`available` is False and the route is refused.

Inside a step raised by one thread while another process takes a core (:mod:`.spare_thread`) it runs on the
raised count where that gives the same bits (``spare_thread.checked``: once per process for each weight shape
and power-of-two bucket of row counts). MKL splits rows and columns over its threads, not the sum, on the
judges' shapes: the same bits at 1 to 4 threads on 8 weights x 10 row counts of gemma-3-270m and
Qwen2.5-Coder-0.5B (tests/test_spare_thread.py). The copy is packed at the count a call runs on (:class:`Packed`).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from . import spare_thread

ROW_MAJOR, NO_TRANS, TRANS, PACKED, B_MATRIX = 101, 111, 112, 151, 162  # MKL's CBLAS enum values
PACK_ROWS = 256  # the row-count hint the copy is packed for (the engine's calls: tens to 1,024 rows)


@functools.cache
def library():
    """torch's CPU library with the three functions' signatures, or None where it has no MKL (benchmarks/busy_core.py
    also calls ``cblas_sgemm_compute`` on it directly, into one output buffer)."""
    try:
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        size, pack, compute = lib.cblas_sgemm_pack_get_size, lib.cblas_sgemm_pack, lib.cblas_sgemm_compute
    except (OSError, AttributeError):
        return None
    i, p, f = ctypes.c_int, ctypes.c_void_p, ctypes.c_float
    size.restype, size.argtypes = ctypes.c_size_t, [i] * 4
    pack.argtypes = [i] * 6 + [f, p, i, p]
    compute.argtypes = [i] * 6 + [p, i, p, i, f, p, i]
    return lib


def available() -> bool:
    """torch's library here exports MKL's packed GEMM (x86 builds of torch)."""
    return torch.backends.mkl.is_available() and library() is not None


def pack(w: torch.Tensor, rows: int = PACK_ROWS) -> torch.Tensor:
    """W (out, in) fp32, packed as the B of ``x . W^T``: a uint8 buffer (keep it alive; never copy it)."""
    if w.dtype != torch.float32 or w.device.type != "cpu":
        raise ValueError(f"MKL's packed GEMM takes fp32 CPU weights, not {w.dtype} on {w.device}")
    w = w.contiguous()
    out, d = w.shape
    lib = library()
    buf = torch.empty(lib.cblas_sgemm_pack_get_size(B_MATRIX, rows, out, d), dtype=torch.uint8)
    lib.cblas_sgemm_pack(ROW_MAJOR, B_MATRIX, TRANS, rows, out, d, 1.0, w.data_ptr(), d, buf.data_ptr())
    return buf


class Packed:
    """W's packed copy for the thread count a call runs on, made again when that count changes.

    MKL lays the copy out for the count it is packed at (``mkl_get_max_threads``, which torch's count sets), and a
    call at another count runs slower: Qwen2.5-Coder-0.5B's 896 -> 9,728 gate/up packed at 2 threads ran its
    238-row calls on 2 of 3 threads inside a step raised by one (the third idle: 20.1-20.4 ms a call beside a
    busy process, against 16.5-18.6 ms packed at 3), and packed at 3 its 2-thread calls were 35% slower quietly
    (13.8 against 10.2 ms). The values are the same bits from either copy at either count (tests). One copy is
    kept, the current count's: when the spare thread is taken or given back the copies are made again at their
    first call (Qwen's 72 in ~0.4 s), so no second copy is held."""

    __slots__ = ("weight", "rows", "_copy")

    def __init__(self, w: torch.Tensor, rows: int = PACK_ROWS):
        self.weight, self.rows = w, rows
        self._copy: tuple[int, torch.Tensor] | None = None  # (threads packed at, buffer): swapped as one

    def buffer(self) -> torch.Tensor:
        """The copy packed at torch's current count (made now if the kept one is for another count)."""
        threads, copy = torch.get_num_threads(), self._copy
        if copy is None or copy[0] != threads:
            copy = self._copy = (threads, pack(self.weight, self.rows))
        return copy[1]


def linear(x: torch.Tensor, packed: Packed, out_features: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x . W^T (+ bias)`` on W's packed copy. x (M, in) fp32 -> (M, out). With a bias, C starts as the bias
    row (beta 1), as torch's own packed route (``mkl::_mkl_linear``) does."""
    x = x.contiguous()
    m, d = x.shape
    return spare_thread.checked(("mkl packed", out_features, d, bias is not None, spare_thread.rows_bucket(m)),
                                lambda: _compute(x, packed.buffer(), out_features, bias))


def _compute(x: torch.Tensor, packed: torch.Tensor, out_features: int, bias: torch.Tensor | None) -> torch.Tensor:
    """One ``cblas_sgemm_compute`` on MKL's count (torch's)."""
    m, d = x.shape
    y = torch.empty(m, out_features, dtype=x.dtype)
    if bias is not None:
        y.copy_(bias)  # a new buffer: C is written in place, and bias.expand(1, n).contiguous() would be bias itself
    if not m:
        return y
    library().cblas_sgemm_compute(ROW_MAJOR, NO_TRANS, PACKED, m, out_features, d, x.data_ptr(), d,
                                  packed.data_ptr(), d, 0.0 if bias is None else 1.0, y.data_ptr(), out_features)
    return y
