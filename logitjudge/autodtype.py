"""``--dtype auto``: the fastest dtype whose stated tolerance the user accepts, measured once per CPU (or GPU).

Whether bf16 is faster than fp32 depends on the chip, not on the model: on an AMD EPYC (Zen 4) bf16 runs the
engine 1.64x faster than fp32 (docs/performance.md); on an Intel Xeon with AVX-512 BF16 but no AMX,
``vdpbf16ps`` issues at a quarter of the rate of ``vfmadd231ps`` (1.35 vs 5.5 G instructions/s per core), so
oneDNN's bf16 GEMMs run at ~0.57x the fp32 rate and bf16 ran the engine 1.5x slower than fp32.
So the choice is measured: the GEMM rates of one transformer layer's projections (Gemma-3-270M's shapes, 512
rows: ~75% of the engine's time is in them, ``benchmarks/breakdown.py``), for each route the native step function
can take (:func:`logitjudge.judge.backends.native_gemms.gemm_route`):

* ``fp32``: fp32 weights, oneDNN-packed where available;
* ``bf16``: bf16 weights packed for the CPU's bf16 GEMMs (``vdpbf16ps`` / AMX / ARM BF16 dot products);
* ``bf16_upcast``: bf16 weights whose packed copy is fp32 (exactly their values), activations upcast per GEMM
  and rounded back: the fp32 FMA units for a bf16 model, where they beat the CPU's bf16 dot products.

Whether an fp32 (or bf16) GEMM runs oneDNN-packed or as plain ``F.linear`` is not decided here: these probe
shapes do not say what the step's own calls do (issue 48: on an Intel Xeon packed measured 286 vs plain 280
GFLOP/s here, while inside the step the packed GEMMs with epilogues ran at 147-155 and the plain ones at 262),
so the native step measures both per bucket of row counts and weight shape
(:data:`logitjudge.judge.backends.native_gemms.LINEAR`, ``GATE_UP``).

The rates are cached in ``$LOGITJUDGE_CACHE`` (default ``~/.cache/logitjudge``) ``/gemm_rates.json``, keyed by the
CPU model name, its feature flags, torch's version and the thread count (the GPU's name on CUDA), so the ~1 s
measurement runs once per machine. The native path reads the same rates to pick its bf16 route
(:func:`bf16_route`), and :func:`resolve_dtype` picks the dtype: bf16 only where it is faster and its error,
measured once per machine on a fixed calibration workload (:func:`bf16_error`, cached in ``bf16_error.json``), is
within its stated bound (:data:`TOLERANCE`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import time
from functools import cache
from pathlib import Path

import torch
import torch.nn.functional as F
from logitjudge_kernels._cbuild import cpu_model  # one reading of the CPU name, the kernels' cache key too

log = logging.getLogger("logitjudge")

# stated tolerance of each dtype: max |dp| of option probabilities against the exact fp32 path
# (docs/how-it-works.md, Exactness; tests/test_native.py checks bf16 on Gemma-3-270M)
TOLERANCE = {"fp32": 0.0, "bf16": 0.05}
MIN_SPEEDUP = 1.2  # bf16 only when its GEMMs are this much faster: fp32 is exact, and the GEMMs are ~75% of a run
ROWS = 512
SHAPES = ((640, 1152), (1024, 640), (640, 2048), (640, 2048), (2048, 640))  # (in, out): q/k/v, o, gate, up, down


def _cache_file(name: str = "gemm_rates.json") -> Path:
    return Path(os.environ.get("LOGITJUDGE_CACHE", Path.home() / ".cache" / "logitjudge")) / name


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _save(path: Path, key: str, entry: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps({**_load(path), key: entry}, indent=1))
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
    path = _cache_file()
    saved = _load(path)
    from logitjudge_kernels.dispatch import busy

    # rates measured while other processes oversubscribed the CPU are provisional (as the kernels' dispatch
    # decisions): the first process that finds the machine quieter measures them again
    if key in saved and not (saved[key].get("provisional") and not busy()):
        return {"key": key, **saved[key]}
    rates = measure_gemm_rates(device)
    entry = {"rates": rates, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "load": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
             "provisional": busy()}
    _save(path, key, entry)
    return {"key": key, **entry}


def bf16_route(device: str = "cpu") -> str:
    """"bf16" (the CPU's bf16 GEMMs) or "bf16_upcast" (fp32 GEMMs on bf16 weights), whichever measured faster."""
    rates = gemm_rates(device)["rates"]
    return "bf16_upcast" if rates.get("bf16_upcast", 0.0) > rates["bf16"] else "bf16"


# bf16's error is measured once per machine on a fixed workload (issue 55: 0.062 was measured on a Zen 4 where
# 0.023 was on an Intel): the demo judge, the first 2 demo texts x the first 2 balanced orderings of the default
# rubric (tests/golden.py's plan), by the engine's bf16 route on this machine against its fp32 route
CALIBRATION_JUDGE, CALIBRATION_ITEMS, CALIBRATION_ORDERINGS = "gemma-3-270m", 2, 2


def calibration_plan(lm):
    """The calibration workload on ``lm`` (a RequestPlan: :func:`logitjudge.requests.demo_plan`)."""
    from .requests import demo_plan

    return demo_plan(lm, items=CALIBRATION_ITEMS, orderings=CALIBRATION_ORDERINGS)


def _option_probs(lm) -> tuple:
    """The calibration plan's option probabilities by the engine on ``lm`` ((prompts, options), float64) and the
    GEMM route it took."""
    import numpy as np

    from .engine import Engine

    rp, eng = calibration_plan(lm), Engine(lm)
    lps = [np.asarray(lp, dtype=np.float64) for g in eng.prompt_logprobs([rp.prompts(i) for i in range(len(rp))])
           for lp in g]
    p = np.exp(np.stack([lp - lp.max() for lp in lps]))
    return p / p.sum(axis=1, keepdims=True), eng.gemm_route


def measure_bf16_error(device: str = "cpu", lm32=None) -> dict:
    """Max |dp| over every option of the calibration plan's prompts: :data:`CALIBRATION_JUDGE` in bf16 (by the
    route the engine takes here) against fp32 (``lm32``, else loaded). Deterministic: same prompts, tokens and
    weights every time, no timing."""
    from .models import load_model

    lm32 = lm32 or load_model(CALIBRATION_JUDGE, dtype="fp32", device=device)
    p32, _ = _option_probs(lm32)
    p16, route = _option_probs(load_model(CALIBRATION_JUDGE, dtype="bf16", device=device))
    return {"max_abs_dp": float(abs(p16 - p32).max()), "prompts": len(p32), "route": route}


def bf16_error(device: str = "cpu") -> dict:
    """bf16's measured error here (:func:`measure_bf16_error`), cached in ``bf16_error.json`` beside the GEMM
    rates, keyed by :func:`machine_key` and the bf16 route (a route chosen anew is measured anew). Returns
    {"key", "max_abs_dp", "prompts", "route", "measured_at"}."""
    route = bf16_route(device) if device == "cpu" else "plain"
    return _bf16_error(f"{machine_key(device)} | {CALIBRATION_JUDGE} bf16 {route}", device)


@cache
def _bf16_error(key: str, device: str) -> dict:
    path = _cache_file("bf16_error.json")
    saved = _load(path)
    if key in saved:
        return {"key": key, **saved[key]}
    t0 = time.perf_counter()
    entry = {**measure_bf16_error(device), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    log.info("measured bf16's error on this machine (%.0f s, once: cached in %s)", time.perf_counter() - t0, path)
    _save(path, key, entry)
    return {"key": key, **entry}


def resolve_dtype(dtype: str, device: str = "cpu", *, tolerance: float = TOLERANCE["bf16"]) -> tuple[str, str]:
    """(dtype to load, why). A dtype other than "auto" is returned as asked. "auto": bf16 where its stated
    tolerance (:data:`TOLERANCE`) is within ``tolerance``, its GEMMs measured at least :data:`MIN_SPEEDUP` times
    faster than fp32 on this machine (:func:`gemm_rates`) and its error measured here (:func:`bf16_error`) is
    within that stated tolerance; else fp32 (exact), the reason logged in one line where bf16's error decided."""
    if dtype != "auto":
        return dtype, "asked for"
    if tolerance < TOLERANCE["bf16"]:
        return "fp32", (f"tolerance {tolerance:g} is below bf16's stated {TOLERANCE['bf16']:g}: only the exact "
                        "fp32 path qualifies")
    device = "cuda" if device == "auto" and torch.cuda.is_available() else ("cpu" if device == "auto" else device)
    got = gemm_rates(device)
    rates = got["rates"]
    bf16 = max(rates["bf16"], rates.get("bf16_upcast", 0.0))
    speedup = bf16 / rates["fp32"]
    pick = "bf16" if speedup >= MIN_SPEEDUP else "fp32"
    why = (f"bf16 GEMMs at {bf16 / 1e9:.0f} GFLOP/s vs fp32 {rates['fp32'] / 1e9:.0f} ({speedup:.2f}x; bf16 is "
           f"taken from {MIN_SPEEDUP}x) on {got['key']}, measured {got['measured_at']}")
    if pick == "fp32":
        return pick, f"fp32: {why}"
    try:
        err = bf16_error(device)
    except Exception as e:  # no calibration judge here (offline, not converted): unmeasured is not within bounds
        no = f"fp32: bf16's error could not be measured on this machine ({type(e).__name__}: {e})"
        log.info("--dtype auto keeps %s", no)
        return "fp32", f"{no}; {why}"
    if err["max_abs_dp"] > TOLERANCE["bf16"]:
        no = (f"fp32: bf16 is {speedup:.2f}x faster here but its error measured on this machine, max |dp| "
              f"{err['max_abs_dp']:.3g} of option probabilities against fp32 ({err['prompts']} prompts of "
              f"{CALIBRATION_JUDGE}, route {err['route']}), is over its stated bound {TOLERANCE['bf16']:g}")
        log.info("--dtype auto keeps %s", no)
        return "fp32", f"{no}; {why}"
    return "bf16", (f"bf16: {why}; its error measured here max |dp| {err['max_abs_dp']:.3g} <= "
                    f"{TOLERANCE['bf16']:g} ({err['prompts']} prompts of {CALIBRATION_JUDGE}, route {err['route']})")
