"""How much of a 2-core machine one GEMM gets beside a busy process, by how its work is split over threads
(issue 55): the engine's oneDNN-packed GEMM on torch's threads, the same on one thread, MKL's packed GEMM
(``cblas_sgemm_pack`` / ``cblas_sgemm_compute``, which torch's library exports) on MKL's threads, and MKL's packed
GEMM in column chunks that the threads claim as they come (dynamic) or in equal shares (static)
(``benchmarks/busy_core.c``), each with the threads unpinned and pinned one per core (``GOMP_CPU_AFFINITY``).

Each variant runs in a child process of its own (the pinning is read when the OpenMP runtime starts), quiet and
then beside ``--load`` busy single-threaded matmul processes (``benchmarks/load.py``), which report the share of
a core they got. Printed per shape and variant: the median call's GFLOP/s quiet and busy, busy / quiet, the
load's share of a core, and the largest difference from ``F.linear`` (MKL's unpacked GEMM).

    .venv/bin/python -m benchmarks.busy_core [--shapes 350x640x2048,...] [--threads 2] [--load 1]
        [--calls 300] [--out benchmarks/results/busy_core.json]

A shape is rows x in x out. What it showed on an Intel Xeon (AMX, 2 cores) is in docs/performance.md.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import load

HERE = Path(__file__).resolve().parent
VARIANTS = ("onednn-packed", "onednn-packed-1-thread", "mkl-packed", "mkl-chunks-dynamic", "mkl-chunks-static")
def mkl_available() -> bool:
    """torch's library exports MKL's packed GEMM (x86 builds of torch; ARM builds have no MKL)."""
    from logitjudge_kernels import mkl_gemm

    return mkl_gemm.available()


def _call(variant: str, x, w, threads: int, chunk: int):
    """A no-argument function computing x . W^T by ``variant`` into a tensor it returns."""
    import torch

    rows, d = x.shape
    out = w.shape[0]
    if variant.startswith("onednn"):
        torch.set_num_threads(1 if variant.endswith("1-thread") else threads)
        packed = torch.ops.mkldnn._reorder_linear_weight(w, 256)
        return lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    torch.set_num_threads(threads)
    if not mkl_available():
        raise SystemExit("torch's library here has no MKL packed GEMM (cblas_sgemm_compute)")
    from logitjudge_kernels import mkl_gemm as m

    mkl, y = m.library(), torch.empty(rows, out)
    if variant == "mkl-packed":
        buf = m.pack(w, rows)

        def whole():
            mkl.cblas_sgemm_compute(m.ROW_MAJOR, m.NO_TRANS, m.PACKED, rows, out, d, x.data_ptr(), d,
                                    buf.data_ptr(), d, 0.0, y.data_ptr(), out)
            return y
        return whole
    from logitjudge_kernels import _cbuild

    vp, ci = ctypes.c_void_p, ctypes.c_int
    lib, why = _cbuild.load(HERE / "busy_core.c", (("chunked_linear", (vp, vp, vp, ci, ci, ci, ci, vp, vp, ci, ci),
                                                    None),))
    if lib is None:
        raise SystemExit(f"busy_core.c did not build: {why}")
    bufs = [m.pack(w[i:i + chunk], rows) for i in range(0, out, chunk)]
    ptrs = (vp * len(bufs))(*[b.data_ptr() for b in bufs])
    fns = [ctypes.cast(getattr(mkl, n), vp).value for n in ("cblas_sgemm_compute", "MKL_Set_Num_Threads_Local")]
    dynamic = int(variant.endswith("dynamic"))

    def chunks(keep=bufs):  # keep: the packed buffers live as long as the function (ptrs holds raw addresses)
        lib.chunked_linear(*fns, x.data_ptr(), rows, d, out, chunk, ptrs, y.data_ptr(), threads, dynamic)
        return y
    return chunks


def child(variant: str, shape: tuple[int, int, int], threads: int, calls: int, chunk: int) -> dict:
    """One variant timed in this process: median call, GFLOP/s and max |diff| from F.linear."""
    import torch

    torch.manual_seed(0)
    rows, d, out = shape
    x, w = torch.randn(rows, d), torch.randn(out, d)
    f = _call(variant, x, w, threads, chunk)
    err = (f() - torch.nn.functional.linear(x, w)).abs().max().item()
    for _ in range(10):
        f()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    median = sorted(times)[len(times) // 2]
    return {"median_ms": median * 1e3, "gflops": 2 * rows * d * out / median / 1e9, "max_abs_diff": err}


def run_child(variant: str, shape, args, pinned: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), str(HERE.parent / "kernels"),
                                                       os.environ.get("PYTHONPATH", "")]))
    if pinned:
        env["GOMP_CPU_AFFINITY"] = f"0-{args.threads - 1}"
    cmd = [sys.executable, "-m", "benchmarks.busy_core", "--child", variant, "--shapes", "x".join(map(str, shape)),
           "--threads", str(args.threads), "--calls", str(args.calls), "--chunk", str(args.chunk)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=HERE.parent, timeout=600)
    if res.returncode:
        return {"error": (res.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="350x640x2048", help="rows x in x out, comma-separated")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--load", type=int, default=1, help="busy single-threaded processes beside the busy run")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--chunk", type=int, default=256, help="output columns per chunk (mkl-chunks-*)")
    ap.add_argument("--no-pin", action="store_true", help="unpinned threads only")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="benchmarks/results/busy_core.json")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    if args.child:
        print(json.dumps(child(args.child, shapes[0], args.threads, args.calls, args.chunk)))
        return
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; use some of {VARIANTS}")
    from logitjudge.gemm_rates import cpu_info, describe_cpu

    rows_out = []
    print(f"{describe_cpu(cpu_info())}; {args.threads} threads; busy: {args.load} single-threaded matmul process(es)")
    print("shape, variant, pinned: GFLOP/s quiet, busy, busy/quiet, the load's share of a core, max |diff| vs F.linear")
    for shape in shapes:
        for variant in variants:
            for pinned in (False,) if args.no_pin else (False, True):
                quiet = run_child(variant, shape, args, pinned)
                with load.busy(args.load, "matmul", 1) as work:
                    busy = run_child(variant, shape, args, pinned)
                row = {"shape": shape, "variant": variant, "pinned": pinned, "quiet": quiet, "busy": busy,
                       "load_cpu_share": work["cpu_share"]}
                rows_out.append(row)
                if "error" in quiet or "error" in busy:
                    print(f"  {'x'.join(map(str, shape))} {variant:<24} {quiet.get('error') or busy.get('error')}")
                    continue
                shares = " ".join(f"{s:.2f}" for s in work["cpu_share"] if s is not None)
                print(f"  {'x'.join(map(str, shape))} {variant:<24} {'pinned' if pinned else 'free':<6} "
                      f"{quiet['gflops']:6.0f} {busy['gflops']:6.0f} {quiet['gflops'] / busy['gflops']:5.2f}x "
                      f"{shares:>5}  {quiet['max_abs_diff']:.1e}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cpu": describe_cpu(cpu_info()), "threads": args.threads, "load": args.load,
                               "chunk": args.chunk, "rows": rows_out}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
