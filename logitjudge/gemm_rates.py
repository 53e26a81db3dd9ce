"""This machine's GEMM rates: what the CPU is (:func:`cpu_info`, :func:`isa_flags`, :func:`machine_key`) and how
fast it runs one transformer layer's projections by each route the native step function can take
(:func:`measure_gemm_rates`, cached per machine: :func:`gemm_rates`).

Low-level facts about the machine, no engine: the module sits low because the native step reads it (its bf16 route,
:func:`bf16_route`, from :func:`logitjudge.judge.backends.native_gemms.gemm_route`), and ``--dtype auto``
(:mod:`logitjudge.autodtype`, which runs the engine) reads the same rates to choose the dtype.

The rates are those of one transformer layer's projections (Gemma-3-270M's shapes, :data:`ROWS` rows: ~75% of the
engine's time is in them, ``benchmarks/breakdown.py``), for each route:

* ``fp32``: fp32 weights, oneDNN-packed where available;
* ``bf16``: bf16 weights packed for the CPU's bf16 GEMMs (``vdpbf16ps`` / AMX / ARM BF16 dot products);
* ``bf16_upcast``: bf16 weights whose packed copy is fp32 (exactly their values), activations upcast per GEMM
  and rounded back: the fp32 FMA units for a bf16 model, where they beat the CPU's bf16 dot products (on an Intel
  Xeon with AVX-512 BF16 but no AMX, ``vdpbf16ps`` issues at a quarter of the rate of ``vfmadd231ps``, 1.35 vs
  5.5 G instructions/s per core, so oneDNN's bf16 GEMMs run at ~0.57x the fp32 rate).

Whether an fp32 (or bf16) GEMM runs oneDNN-packed or as plain ``F.linear`` is not decided here: these probe
shapes do not say what the step's own calls do (issue 48: on an Intel Xeon packed measured 286 vs plain 280
GFLOP/s here, while inside the step the packed GEMMs with epilogues ran at 147-155 and the plain ones at 262),
so the native step measures both per bucket of row counts and weight shape
(:data:`logitjudge.judge.backends.native_gemms.LINEAR`, ``GATE_UP``).

The rates are cached in ``$LOGITJUDGE_CACHE`` (default ``~/.cache/logitjudge``) ``/gemm_rates.json``, keyed by the
CPU model name, its feature flags, torch's version and the thread count (the GPU's name on CUDA), so the ~1 s
measurement runs once per machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from functools import cache
from pathlib import Path

import torch
import torch.nn.functional as F
from logitjudge_kernels._cbuild import cpu_model  # one reading of the CPU name, the kernels' cache key too

ROWS = 512
SHAPES = ((640, 1152), (1024, 640), (640, 2048), (640, 2048), (2048, 640))  # (in, out): q/k/v, o, gate, up, down


def cache_file(name: str = "gemm_rates.json") -> Path:
    return Path(os.environ.get("LOGITJUDGE_CACHE", Path.home() / ".cache" / "logitjudge")) / name


def load_cache(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def save_cache(path: Path, key: str, entry: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps({**load_cache(path), key: entry}, indent=1))
        os.replace(tmp, path)  # atomic; a concurrent writer may drop another machine's entry, never corrupt it
    except OSError:
        pass  # read-only home: measured again next time


def cpu_info() -> dict:
    """The CPU a measurement ran on: model name, vendor, family/model/stepping numbers (x86; a VM often shows
    only a generic name), logical CPUs and the :data:`ISA_FLAGS` it has."""
    info = {"model": cpu_model(), "cpus": os.cpu_count(), "machine": platform.machine()}
    fields = {"vendor_id": "vendor", "cpu family": "family", "model": "model_number", "stepping": "stepping",
              "CPU implementer": "implementer", "CPU part": "part"}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break  # the first processor's block is enough
            name, _, value = (x.strip() for x in line.partition(":"))
            if name in fields:
                info[fields[name]] = value
    except OSError:
        pass
    info["isa"] = isa_flags()
    return info


def describe_cpu(info: dict | None = None) -> str:
    """One line: model, vendor/family/model numbers, CPUs, ISA flags (and "no AMX" on x86 without it)."""
    info = info or cpu_info()
    ids = ", ".join(f"{k.replace('_number', '')} {info[k]}" for k in ("vendor", "family", "model_number",
                                                                        "stepping", "implementer", "part")
                    if k in info)
    isa = " ".join(info["isa"]) or "unknown"
    if info["machine"] in ("x86_64", "AMD64") and not any(f.startswith("amx") for f in info["isa"]):
        isa += " (no AMX)"
    return f"{info['model']} ({ids}; {info['cpus']} CPUs); ISA: {isa}"


def cpu_flags() -> list[str]:
    """The CPU's feature flags (x86 ``flags`` / ARM ``Features`` of ``/proc/cpuinfo``), empty where unknown."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line.split(":", 1)[1].split()
    except OSError:
        pass
    return []


# the flags that decide which GEMM and kernel paths a CPU has (printed by benchmarks/peers.py)
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni", "amx_bf16",
             "amx_tile", "amx_int8", "asimd", "bf16", "i8mm", "sve", "sve2", "svebf16")


def isa_flags() -> list[str]:
    have = set(cpu_flags())
    return [f for f in ISA_FLAGS if f in have]


def machine_key(device: str) -> str:
    if device.startswith("cuda"):
        return f"cuda | {torch.cuda.get_device_name(torch.device(device))} | torch {torch.__version__}"
    flags = hashlib.sha256(" ".join(cpu_flags()).encode()).hexdigest()[:12]
    return f"cpu | {cpu_model()} | flags {flags} | torch {torch.__version__} | {torch.get_num_threads()} threads"


def _packing() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def _bf16_packing() -> bool:
    try:
        return _packing() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _layer_fn(device: str, route: str):
    """A function running one layer's projections on ``ROWS`` rows by ``route``, and its FLOPs."""
    g = torch.Generator().manual_seed(0)
    wdt = torch.float32 if route == "fp32" else torch.bfloat16
    xs = {i: torch.randn(ROWS, i, generator=g).to(device, wdt) for i, _ in SHAPES}
    ws = [(torch.randn(o, i, generator=g) / i ** 0.5).to(device, wdt) for i, o in SHAPES]
    flops = sum(2 * ROWS * i * o for i, o in SHAPES)
    if device.startswith("cuda") or not _packing() or (route == "bf16" and not _bf16_packing()):
        return (lambda: [F.linear(xs[w.shape[1]], w) for w in ws]), flops
    lin = torch.ops.mkldnn._linear_pointwise
    if route == "bf16_upcast":
        packed = [torch.ops.mkldnn._reorder_linear_weight(w.float(), ROWS) for w in ws]
        return (lambda: [lin(xs[i].float(), p, None, "none", [], "").to(torch.bfloat16)
                         for (i, _), p in zip(SHAPES, packed)]), flops
    packed = [torch.ops.mkldnn._reorder_linear_weight(w, ROWS) for w in ws]
    return (lambda: [lin(xs[i], p, None, "none", [], "") for (i, _), p in zip(SHAPES, packed)]), flops


def measure_gemm_rates(device: str = "cpu", *, repeats: int = 7, routes: tuple | None = None) -> dict:
    """FLOP/s of each route (default ``fp32``, ``bf16``, and on CPU ``bf16_upcast``), best of ``repeats``
    interleaved runs (other load on the machine only slows a run down, and interleaving spreads it over the
    routes)."""
    routes = routes or (("fp32", "bf16") if device.startswith("cuda") else ("fp32", "bf16", "bf16_upcast"))
    fns = {r: _layer_fn(device, r) for r in routes}
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    best = dict.fromkeys(routes, float("inf"))
    for fn, _ in fns.values():  # warm-up (oneDNN builds its kernels at the first call)
        fn()
    for _ in range(repeats):
        for r, (fn, _) in fns.items():
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            best[r] = min(best[r], time.perf_counter() - t0)
    return {r: fns[r][1] / best[r] for r in routes}


def gemm_rates(device: str = "cpu") -> dict:
    """The measured rates for this machine: from the cache file, else measured now and cached. Returns
    {"key", "rates": {route: FLOP/s}, "measured_at"}."""
    return _gemm_rates(machine_key(device), device)


@cache
def _gemm_rates(key: str, device: str) -> dict:
    path = cache_file()
    saved = load_cache(path)
    from logitjudge_kernels.dispatch import busy

    # rates measured while other processes oversubscribed the CPU are provisional (as the kernels' dispatch
    # decisions): the first process that finds the machine quieter measures them again
    if key in saved and not (saved[key].get("provisional") and not busy()):
        return {"key": key, **saved[key]}
    rates = measure_gemm_rates(device)
    entry = {"rates": rates, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "load": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
             "provisional": busy()}
    save_cache(path, key, entry)
    return {"key": key, **entry}


def bf16_route(device: str = "cpu") -> str:
    """"bf16" (the CPU's bf16 GEMMs) or "bf16_upcast" (fp32 GEMMs on bf16 weights), whichever measured faster."""
    rates = gemm_rates(device)["rates"]
    return "bf16_upcast" if rates.get("bf16_upcast", 0.0) > rates["bf16"] else "bf16"
