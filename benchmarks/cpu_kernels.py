"""The CPU table of ``benchmarks/kernel_speed.py``: every implementation of every dispatched kernel at 1/4/16/64/256
rows of Gemma-3-270M's shapes, the dispatcher's choice marked, and the default's time against the switch's off.

Rows of each kernel (what 1, 4, ..., 256 stands for):

* ``readout``: read rows (hidden states) against the whole head, V = 262,144 x d = 640 (the engine's call; torch
  with the engine's chunk of the vocabulary);
* ``attention``: suffix rows of S = 78 queries continuing one L = 404-token prefix, sliding window 512, 4 query
  heads on 1 KV head of 256 (a level of the 8x350 trie);
* ``rms_norm`` / ``residual_rms_norm``: token rows of d = 640; ``qk_norm_rope``: token rows of 4 + 2 x 1 heads of 256.

Implementations: ``C`` (the native build), ``C x86-64-v3`` (the AVX2 build, where the CPU has AVX-512), ``aten``
(attention: ATen's flash kernel), ``torch`` (the reference). Interleaved repeats, the best of each
(``benchmarks.timing``).
"""

from __future__ import annotations

import json
import os
import time

import torch
from logitjudge_kernels import _cbuild, dispatch
from logitjudge_kernels import cpu_norm as cn
from logitjudge_kernels.cpu_attention import shared_prefix_attention_c
from logitjudge_kernels.cpu_readout import logsumexp_c
from logitjudge_kernels.prefix_attention import (
    ATTENTION,
    shared_prefix_attention_aten,
    shared_prefix_attention_ref,
)
from logitjudge_kernels.readout import READOUT_LSE, _lse_ref

from benchmarks.timing import best_of_interleaved

KERNELS = ("readout", "attention", "rms_norm", "residual_rms_norm", "qk_norm_rope")
V, HIDDEN, HQ, HKV, HEAD_DIM, PREFIX, SUFFIX, WINDOW = 262_144, 640, 4, 1, 256, 404, 78, 512
READ_CHUNK_ELEMS = 1 << 27  # as logitjudge.engine: the torch read-out's vocabulary chunk
DISPATCHED = {"readout": READOUT_LSE, "attention": ATTENTION, "rms_norm": cn.RMS_NORM,
              "residual_rms_norm": cn.RESIDUAL_RMS_NORM, "qk_norm_rope": cn.QK_NORM_ROPE}


def _load() -> float:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else float("nan")


def extra_targets() -> list[str]:
    """The AVX2 build beside the native one where the CPU has AVX-512 (the native build then uses its tiles)."""
    return ["x86-64-v3"] if "avx512f" in _cbuild.cpu_flags().split() else []


def case(kernel: str, rows: int, g: torch.Generator):
    """(args, kw, work, unit, shape) of one call: the dispatcher's arguments."""
    def rn(*shape, scale=1.0):
        return torch.randn(*shape, generator=g) * scale

    if kernel == "readout":
        h, w = rn(rows, HIDDEN), rn(V, HIDDEN, scale=0.05)
        chunk = max(8192, min(V, READ_CHUNK_ELEMS // rows))
        return (h, w, None, chunk), {}, 2 * rows * V * HIDDEN, "GFLOP/s", f"R={rows} V={V} d={HIDDEN}"
    if kernel == "attention":
        q, ks, vs = rn(rows, HQ, SUFFIX, HEAD_DIM), rn(rows, HKV, SUFFIX, HEAD_DIM), rn(rows, HKV, SUFFIX, HEAD_DIM)
        kp, vp = rn(HKV, PREFIX, HEAD_DIM), rn(HKV, PREFIX, HEAD_DIM)
        kw = dict(scale=HEAD_DIM ** -0.5, sliding_window=WINDOW, softcap=None, sinks=None)
        pairs = sum(min(PREFIX + i + 1, WINDOW) for i in range(SUFFIX))
        return ((q, kp, vp, ks, vs), kw, 4 * rows * HQ * HEAD_DIM * pairs, "GFLOP/s",
                f"B={rows} L={PREFIX} S={SUFFIX} w={WINDOW}")
    w1, w2 = 1 + 0.1 * rn(HIDDEN), 1 + 0.1 * rn(HIDDEN)
    if kernel == "rms_norm":
        x = rn(rows, HIDDEN)
        return (x, w1, 1e-6), {}, 2 * 4 * x.numel(), "GB/s", f"{rows} x {HIDDEN}"
    if kernel == "residual_rms_norm":
        x, y = rn(rows, HIDDEN), rn(rows, HIDDEN)
        return (x, y, w1, w2, 1e-6), {}, 4 * 4 * x.numel(), "GB/s", f"{rows} x {HIDDEN}"
    qkv = rn(1, rows, (HQ + 2 * HKV) * HEAD_DIM)
    ang = rn(1, rows, HEAD_DIM // 2)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    return ((qkv, w1[:HEAD_DIM], w2[:HEAD_DIM], cos, sin), dict(heads=HQ, kv_heads=HKV, eps=1e-6),
            2 * 4 * qkv.numel(), "GB/s", f"{rows} x ({HQ}+2x{HKV}) x {HEAD_DIM}")


def implementations(kernel: str, targets: list[str]) -> dict:
    """name -> fn(*args, **kw) of the dispatcher's arguments."""
    if kernel == "readout":
        impls = {"C": lambda h, w, sc, ch: logsumexp_c(h, w)}
        impls |= {f"C {t}": (lambda h, w, sc, ch, _t=t: logsumexp_c(h, w, target=_t)) for t in targets}
        return impls | {"torch": _lse_ref}
    if kernel == "attention":
        def drop(fn, **fixed):
            return lambda *a, softcap=None, **k: fn(*a, **k, **fixed)
        impls = {"C": drop(shared_prefix_attention_c)}
        impls |= {f"C {t}": drop(shared_prefix_attention_c, target=t) for t in targets}
        return impls | {"aten": drop(shared_prefix_attention_aten), "torch": shared_prefix_attention_ref}
    c = getattr(cn, f"{kernel}_c")
    impls = {"C": c} | {f"C {t}": (lambda *a, _t=t, **k: c(*a, **k, target=_t)) for t in targets}
    return impls | {"torch": getattr(cn, f"{kernel}_ref")}


def cpu_table(rows: list[int], *, repeats: int = 3, kernels=None, remeasure: bool = False, out=None,
              clock: str = "wall") -> dict:
    """Measure every kernel x rows x implementation; the JSON-ready {"meta", "results"} (saved to ``out`` after
    every row, so that a run cut short keeps what it measured)."""
    from logitjudge.gemm_rates import cpu_info, describe_cpu

    t_start = time.perf_counter()
    if remeasure:
        dispatch.forget()
    targets = [t for t in extra_targets() if _cbuild.load(cn.SOURCE, cn._SIGNATURES, t)[0] is not None]
    meta = dict(cpu=cpu_info(), cpu_line=describe_cpu(), all_flags=_cbuild.cpu_flags(), torch=torch.__version__,
                threads=torch.get_num_threads(), repeats=repeats, extra_targets=targets, clock=clock,
                dispatch_key=dispatch.machine_key(), mode=dispatch.mode(), load_at_start=_load())
    print(f"CPU: {meta['cpu_line']}\n{meta['threads']} threads, {clock} clock, load average {meta['load_at_start']}")
    results = []
    g = torch.Generator().manual_seed(0)
    for kernel in kernels or KERNELS:
        impls = implementations(kernel, targets)
        for r in rows:
            args, kw, work, unit, shape = case(kernel, r, g)
            pick, bucket, decision = DISPATCHED[kernel].choose(*args, **kw)  # measured here once if not cached
            off = next((c.name for c in DISPATCHED[kernel].candidates if not c.native
                        and not c.refusal(*args, **kw)), "torch")
            # --clock cpu: the process's CPU time (1 thread on a shared machine: the work alone)
            timed = best_of_interleaved({name: (lambda fn=fn, a=args, k=kw: fn(*a, **k))
                                         for name, fn in impls.items()},
                                        repeats, warmup=True,
                                        clock=time.process_time if clock == "cpu" else time.perf_counter)
            seconds = {name: t.best for name, t in timed.items()}
            load = _load()
            for name, s in seconds.items():
                results.append(dict(kernel=kernel, rows=r, shape=shape, impl=name, seconds=s, spread=timed[name].spread,
                                    rate=work / s / 1e9, unit=unit, chosen=name == pick.name,
                                    default_over_off=seconds[pick.name] / seconds[off] if name == pick.name
                                    else None, off=off, bucket=bucket, decision_why=decision.get("why"),
                                    decision_rates=decision.get("rates"), load=load))
            if out is not None:
                meta.update(seconds=round(time.perf_counter() - t_start, 1), load_at_end=load)
                out.write_text(json.dumps(dict(meta=meta, results=results), indent=1, default=str))
    meta.update(seconds=round(time.perf_counter() - t_start, 1), load_at_end=_load())
    return dict(meta=meta, results=results)


def print_cpu_table(table: dict) -> None:
    """One line per (kernel, rows): each implementation's rate, the chosen one starred, default / off."""
    res = table["results"]
    names = list(dict.fromkeys(r["impl"] for r in res))
    print(f"\n| kernel | rows | shape | {' | '.join(names)} | unit | default / off | load |")
    print("|---|---:|---|" + "---:|" * len(names) + "---|---:|---:|")
    for kernel in dict.fromkeys(r["kernel"] for r in res):
        for rows in dict.fromkeys(r["rows"] for r in res if r["kernel"] == kernel):
            mine = {r["impl"]: r for r in res if r["kernel"] == kernel and r["rows"] == rows}
            first = next(iter(mine.values()))
            cells = [("" if n not in mine else f"{mine[n]['rate']:.3g}" + (" *" if mine[n]["chosen"] else ""))
                     for n in names]
            chosen = next(r for r in mine.values() if r["chosen"])
            print(f"| {kernel} | {rows} | {first['shape']} | {' | '.join(cells)} | {first['unit']} | "
                  f"{chosen['default_over_off']:.2f} | {first['load']} |")
    print("\n* = the dispatcher's choice (measured at first use on this machine; cached). default / off: the time of "
          "the choice over the time of the implementation LOGITJUDGE_CPU_KERNELS=0 runs.")
