"""Benchmark the logitjudge kernels against the plain PyTorch paths.

On CPU (the default there): for the running CPU, each kernel's rate by every implementation the dispatcher
(``logitjudge_kernels.dispatch``) chooses among - the C kernel of the native build, ATen's fused path, the torch
reference - at 1/4/16/64/256 rows of Gemma-3-270M's shapes, the one the dispatcher chose marked ``*``, and
``default / off``: the time of the default (what ``auto`` runs) over the time with ``LOGITJUDGE_CPU_KERNELS=0``.
On a CPU with AVX-512 the C kernels built for ``-march=x86-64-v3`` (AVX2) are timed beside the native ones
(rows ``C x86-64-v3``). The JSON holds the CPU model, its ISA flags and the load average beside every row: on a
shared machine, compare rows taken at similar load.

    python -m benchmarks.kernel_speed --threads 2            # CPU: the per-kernel table (~3-5 min)
    python -m benchmarks.kernel_speed --threads 2 --quick    # fewer repeats, 1/16/64 rows

On CUDA, the grid below:

* Attention: ``shared_prefix_attention`` (prefix K/V stored once) vs the copied-prefix path of plain
  Hugging Face: per-row K/V = [prefix ; suffix] materialised for every row, KV heads repeated to the
  query heads (HF ``repeat_kv``), then ``F.scaled_dot_product_attention`` with the causal/window mask.
  The timed region of the plain path is the SDPA call only (in HF the copy already sits in the cache),
  which favours the plain path; its memory includes the materialised K/V.
* Read-out: ``label_logprobs`` vs full (R, V) logits in the model dtype + fp32 log-softmax + gather.

Shapes follow Gemma-3-270M: Hq=4, Hkv=1, D=256, hidden 640, V=262,144.

Rates are *effective*: both paths are credited the same nominal work (FLOPs of the visible
score/value products; bytes of the inputs read once and the output written), so the ratio of rates is
the speed-up. Memory: on CUDA ``torch.cuda.max_memory_allocated`` over one call (minus what was
allocated before it; the plain attention call includes building its per-row K/V). On CPU there are no
allocator statistics, so the column is analytic: the bytes of K/V (attention) or of logits-sized
temporaries (read-out) that each path materialises.

    python -m benchmarks.kernel_speed                # CUDA if available: full grid
    python -m benchmarks.kernel_speed --quick        # reduced grid
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from logitjudge_kernels import HAS_TRITON, label_logprobs, shared_prefix_attention, shared_prefix_attention_aten
from logitjudge_kernels.cpu_attention import c_attention_refusal

from benchmarks.cpu_kernels import cpu_table, print_cpu_table
from benchmarks.timing import best_of_interleaved

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
HQ, HKV, HEAD_DIM, HIDDEN, VOCAB = 4, 1, 256, 640, 262_144


def _timeit(fn, device: torch.device, repeats: int, warmup: int) -> float:
    """Wall time of ``fn()`` in milliseconds after ``warmup`` untimed calls: the best of ``repeats``
    (``benchmarks.timing``; on CUDA the device is synchronised around each call, so its work is inside the time)."""
    for _ in range(warmup):
        fn()
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    return best_of_interleaved({"fn": fn}, repeats, sync=sync)["fn"].best * 1e3


def _peak_bytes(fn, device: torch.device) -> int | None:
    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    del out
    return torch.cuda.max_memory_allocated() - before


def _window_mask(S: int, L: int, window: int | None, device) -> torch.Tensor:
    qpos = torch.arange(L, L + S, device=device)[:, None]
    diff = qpos - torch.arange(L + S, device=device)[None, :]
    vis = diff >= 0
    return vis if window is None else vis & (diff < window)


def _visible_keys(S: int, L: int, window: int | None) -> int:
    return sum(L + i + 1 if window is None else min(L + i + 1, window) for i in range(S))


# ------------------------------------------------------------------------------------------- attention
def bench_attention(B, L, S, window, dtype, device, repeats, warmup) -> list[dict]:
    g = torch.Generator(device="cpu").manual_seed(0)

    def mk(*shape):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    q, kp, vp = mk(B, HQ, S, HEAD_DIM), mk(HKV, L, HEAD_DIM), mk(HKV, L, HEAD_DIM)
    ks, vs = mk(B, HKV, S, HEAD_DIM), mk(B, HKV, S, HEAD_DIM)
    scale = HEAD_DIM**-0.5
    mask = _window_mask(S, L, window, device)
    G = HQ // HKV

    def copied_kv():
        k = torch.cat([kp.unsqueeze(0).expand(B, -1, -1, -1), ks], dim=2).repeat_interleave(G, dim=1)
        v = torch.cat([vp.unsqueeze(0).expand(B, -1, -1, -1), vs], dim=2).repeat_interleave(G, dim=1)
        return k, v

    def sdpa(kv):
        return F.scaled_dot_product_attention(q, kv[0], kv[1], attn_mask=mask, scale=scale)

    def plain_full():
        return sdpa(copied_kv())

    def ours():
        return shared_prefix_attention(q, kp, vp, ks, vs, scale=scale, sliding_window=window)

    def aten():
        return shared_prefix_attention_aten(q, kp, vp, ks, vs, scale=scale, sliding_window=window)

    elt = q.element_size()
    flops = 4 * B * HQ * HEAD_DIM * _visible_keys(S, L, window)
    nbytes = elt * (2 * q.numel() + 2 * kp.numel() + 2 * ks.numel())
    kv_bytes = {"plain": 2 * B * HQ * (L + S) * HEAD_DIM * elt, "ours": elt * 2 * (kp.numel() + ks.numel())}
    kv_bytes["aten"] = kv_bytes["ours"]
    config = dict(kernel="attention", B=B, L=L, S=S, window=window, dtype=str(dtype)[6:])
    rows = []
    try:
        kv = copied_kv()
        plain_ms = _timeit(functools.partial(sdpa, kv), device, repeats, warmup)
        reference = sdpa(kv).float()
        kv = None  # free the copies before measuring peak memory
        plain_mem = _peak_bytes(plain_full, device)
    except torch.OutOfMemoryError:
        plain_ms = plain_mem = reference = None
        if device.type == "cuda":
            torch.cuda.empty_cache()
    paths = [("plain", None), ("ours", ours)]
    if device.type == "cpu" and c_attention_refusal(q) is None:  # "ours" is the C kernel: ATen's path beside it
        paths.insert(1, ("aten", aten))
    for path, fn in paths:
        ms, mem, diff = plain_ms, plain_mem, None
        if fn is not None:
            ms, mem = _timeit(fn, device, repeats, warmup), _peak_bytes(fn, device)
            diff = None if reference is None else (fn().float() - reference).abs().max().item()
        rows.append(dict(config, path=path, ms=ms, tflops=None if ms is None else flops / ms / 1e9,
                         gbps=None if ms is None else nbytes / ms / 1e6, mem_bytes=mem if mem is not None
                         else kv_bytes[path], mem_kind="peak" if mem is not None else "kv_materialised",
                         max_abs_diff=diff, speedup=None if (ms is None or plain_ms is None) else plain_ms / ms))
    return rows


# --------------------------------------------------------------------------------------------- read-out
def bench_readout(R, V, M, dtype, device, repeats, warmup, softcap=None) -> list[dict]:
    g = torch.Generator(device="cpu").manual_seed(1)
    hidden = torch.randn(R, HIDDEN, generator=g).to(device=device, dtype=dtype)
    weight = (torch.randn(V, HIDDEN, generator=g) * 0.05).to(device=device, dtype=dtype)
    ids = torch.randint(0, V, (R, M), generator=g).to(device)

    def plain():
        logits = (hidden @ weight.T).float()
        if softcap is not None:
            logits = softcap * torch.tanh(logits / softcap)
        return torch.log_softmax(logits, dim=-1).gather(1, ids)

    def ours():
        return label_logprobs(hidden, weight, ids, softcap=softcap).label_logprobs

    elt = hidden.element_size()
    flops = 2 * R * V * HIDDEN
    nbytes = elt * (weight.numel() + hidden.numel())
    temp_bytes = {"plain": R * V * (elt + 4 + 4), "ours": R * min(8192, V) * 4 * 3}
    config = dict(kernel="readout", R=R, V=V, d=HIDDEN, dtype=str(dtype)[6:])
    rows = []
    try:
        plain_ms = _timeit(plain, device, repeats, warmup)
        reference = plain()
        plain_mem = _peak_bytes(plain, device)
    except torch.OutOfMemoryError:
        plain_ms = plain_mem = reference = None
    ours_ms = _timeit(ours, device, repeats, warmup)
    diff = None if reference is None else (ours() - reference).abs().max().item()
    for path, ms, mem in (("plain", plain_ms, plain_mem), ("ours", ours_ms, _peak_bytes(ours, device))):
        rows.append(dict(config, path=path, ms=ms, tflops=None if ms is None else flops / ms / 1e9,
                         gbps=None if ms is None else nbytes / ms / 1e6, mem_bytes=mem if mem is not None
                         else temp_bytes[path], mem_kind="peak" if mem is not None else "temporaries",
                         max_abs_diff=diff if path == "ours" else None,
                         speedup=None if (ms is None or plain_ms is None) else plain_ms / ms))
    return rows


# ------------------------------------------------------------------------------------------------ driver
def grids(device: torch.device, quick: bool):
    """The CUDA grid: (B, L, S, window) attention shapes and (R, V, M) read-outs."""
    prefixes, rows_b, S = ([512, 4096, 16384], [10, 256], 64) if quick else ([512, 2048, 8192, 16384],
                                                                            [10, 64, 256], 64)
    attn = [(B, L, S, w) for L in prefixes for B in rows_b for w in (None, 512)]
    readout = [(R, VOCAB, 8) for R in ([10, 256] if quick else [10, 64, 256])]
    return attn, readout


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def print_table(rows: list[dict]) -> None:
    header = f"{'kernel':<9} {'config':<34} {'path':<6} {'ms':>9} {'TFLOP/s':>8} {'GB/s':>8} " \
             f"{'mem MiB':>9} {'speedup':>8} {'max|diff|':>9}"
    print(header)
    print("-" * len(header))
    for r in rows:
        if r["kernel"] == "attention":
            cfg = f"B={r['B']} L={r['L']} S={r['S']} w={r['window']} {r['dtype']}"
        else:
            cfg = f"R={r['R']} V={r['V']} d={r['d']} {r['dtype']}"
        mem = None if r["mem_bytes"] is None else r["mem_bytes"] / 2**20
        cols = [_fmt(r["ms"], "9.3f"), _fmt(r["tflops"], "8.3f"), _fmt(r["gbps"], "8.1f"), _fmt(mem, "9.1f"),
                _fmt(r["speedup"], "8.2f"), _fmt(r["max_abs_diff"], "9.2e")]
        print(f"{r['kernel']:<9} {cfg:<34} {r['path']:<6} " + " ".join(cols))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                    help="default: bf16 on CUDA, fp32 on CPU")
    ap.add_argument("--quick", action="store_true", help="reduced grid")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch CPU threads (on a busy machine, 1 avoids stalls of many small parallel ops)")
    ap.add_argument("--rows", type=int, nargs="+", default=None, help="CPU table: rows (default 1 4 16 64 256)")
    ap.add_argument("--kernels", nargs="+", default=None, help="CPU table: only these kernels")
    ap.add_argument("--remeasure", action="store_true", help="CPU: drop the dispatcher's cached decisions first")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="CPU: cpu = process CPU time (with --threads 1 on a shared machine: the work alone)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/kernels.json"))
    args = ap.parse_args(argv)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda requested but CUDA is not available")
    device = torch.device(args.device)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if device.type == "cpu":
        rows = args.rows or ([1, 16, 64] if args.quick else [1, 4, 16, 64, 256])
        table = cpu_table(rows, repeats=args.repeats or (2 if args.quick else 3), kernels=args.kernels,
                          remeasure=args.remeasure, out=args.out, clock=args.clock)
        print_cpu_table(table)
        print(f"\n{len(table['results'])} rows in {table['meta']['seconds']} s -> {args.out}")
        return 0
    dtype = DTYPES[args.dtype or "bf16"]
    repeats = args.repeats or 10
    warmup = 2
    attn_grid, readout_grid = grids(device, args.quick)
    t0 = time.perf_counter()
    meta = dict(device=torch.cuda.get_device_name(device), torch=torch.__version__, triton=HAS_TRITON,
                dtype=str(dtype)[6:], quick=args.quick, heads=dict(Hq=HQ, Hkv=HKV, D=HEAD_DIM),
                memory_note="peak = torch.cuda.max_memory_allocated over one call")
    rows: list[dict] = []

    def save():  # after every configuration, so that a run cut short by a timeout keeps what it measured
        meta["seconds"] = round(time.perf_counter() - t0, 1)
        args.out.write_text(json.dumps(dict(meta=meta, results=rows), indent=1, default=str))

    for B, L, S, w in attn_grid:
        rows += bench_attention(B, L, S, w, dtype, device, repeats, warmup)
        save()
    for R, V, M in readout_grid:
        rows += bench_readout(R, V, M, dtype, device, repeats, warmup)
        save()
    print_table(rows)
    print(f"\n{len(rows)} rows in {meta['seconds']} s -> {args.out}")
    return 0 if all(r["ms"] is None or math.isfinite(r["ms"]) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
