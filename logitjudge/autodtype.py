"""``--dtype auto``: the fastest dtype whose stated tolerance the user accepts, measured once per CPU (or GPU).

Whether bf16 is faster than fp32 depends on the chip, not on the model: on an AMD EPYC (Zen 4) bf16 runs the
engine 1.64x faster than fp32 (docs/performance.md); on an Intel Xeon with AVX-512 BF16 but no AMX, oneDNN's bf16
GEMMs run at ~0.57x the fp32 rate and bf16 ran the engine 1.5x slower than fp32. So the choice is measured:
:func:`resolve_dtype` picks bf16 only where its GEMMs measured at least :data:`MIN_SPEEDUP` times faster than fp32
on this machine (the rates of one layer's projections by each route the native step can take, measured once per
machine and cached: :mod:`logitjudge.gemm_rates`) and its error, measured once per machine on a fixed calibration
workload (:func:`bf16_error`, cached in ``bf16_error.json`` beside the GEMM rates), is within its stated bound
(:data:`TOLERANCE`).
"""

from __future__ import annotations

import logging
import time
from functools import cache

import torch

from .gemm_rates import bf16_route, cache_file, gemm_rates, load_cache, machine_key, save_cache
from .tolerance import LOW_PRECISION_TOL

log = logging.getLogger("logitjudge")

# stated tolerance of each dtype: max |dp| of option probabilities against the exact fp32 path
# (docs/how-it-works.md, Exactness; tests/test_native.py checks bf16 on Gemma-3-270M)
TOLERANCE = {"fp32": 0.0, "bf16": LOW_PRECISION_TOL}
MIN_SPEEDUP = 1.2  # bf16 only when its GEMMs are this much faster: fp32 is exact, and the GEMMs are ~75% of a run


# bf16's error is measured once per machine and judge on a fixed workload (issue 55: 0.062 was measured on a Zen 4
# where 0.023 was on an Intel): the judge to be loaded (the demo judge where none is named), the first 2 demo texts
# x the first 2 balanced orderings of the default rubric (tests/golden.py's plan), by the engine's bf16 route on
# this machine against its fp32 route
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


def measure_bf16_error(device: str = "cpu", lm32=None, judge: str = CALIBRATION_JUDGE) -> dict:
    """Max |dp| over every option of the calibration plan's prompts: ``judge`` in bf16 (by the route the engine
    takes here) against fp32 (``lm32``, else loaded, and let go before the bf16 copy loads). Deterministic: same
    prompts, tokens and weights every time, no timing."""
    from .models import load_model

    p32, _ = _option_probs(lm32 or load_model(judge, dtype="fp32", device=device))
    p16, route = _option_probs(load_model(judge, dtype="bf16", device=device))
    return {"max_abs_dp": float(abs(p16 - p32).max()), "prompts": len(p32), "route": route}


def bf16_error(device: str = "cpu", judge: str = CALIBRATION_JUDGE) -> dict:
    """bf16's measured error on ``judge`` here (:func:`measure_bf16_error`), cached in ``bf16_error.json`` beside
    the GEMM rates, keyed by :func:`logitjudge.gemm_rates.machine_key`, the judge and the bf16 route (a route
    chosen anew is measured anew). Returns {"key", "max_abs_dp", "prompts", "route", "measured_at"}."""
    route = bf16_route(device) if device == "cpu" else "plain"
    return _bf16_error(f"{machine_key(device)} | {judge} bf16 {route}", device, judge)


@cache
def _bf16_error(key: str, device: str, judge: str) -> dict:
    path = cache_file("bf16_error.json")
    saved = load_cache(path)
    if key in saved:
        return {"key": key, **saved[key]}
    t0 = time.perf_counter()
    entry = {**measure_bf16_error(device, judge=judge),
             "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    log.info("measured bf16's error on this machine (%.0f s, once: cached in %s)", time.perf_counter() - t0, path)
    save_cache(path, key, entry)
    return {"key": key, **entry}


def resolve_dtype(dtype: str, device: str = "cpu", *, tolerance: float = TOLERANCE["bf16"],
                  judge: str = CALIBRATION_JUDGE) -> tuple[str, str]:
    """(dtype to load, why). A dtype other than "auto" is returned as asked. "auto": bf16 where its stated
    tolerance (:data:`TOLERANCE`) is within ``tolerance``, its GEMMs measured at least :data:`MIN_SPEEDUP` times
    faster than fp32 on this machine (:func:`logitjudge.gemm_rates.gemm_rates`) and its error measured here on
    ``judge`` (the judge to be loaded; :func:`bf16_error`) is within that stated tolerance; else fp32 (exact), the
    reason logged in one line where bf16's error decided."""
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
        err = bf16_error(device, judge)
    except Exception as e:  # no calibration judge here (offline, not converted): unmeasured is not within bounds
        no = f"fp32: bf16's error could not be measured on this machine ({type(e).__name__}: {e})"
        log.info("--dtype auto keeps %s", no)
        return "fp32", f"{no}; {why}"
    if err["max_abs_dp"] > TOLERANCE["bf16"]:
        no = (f"fp32: bf16 is {speedup:.2f}x faster here but its error measured on this machine, max |dp| "
              f"{err['max_abs_dp']:.3g} of option probabilities against fp32 ({err['prompts']} prompts of "
              f"{judge}, route {err['route']}), is over its stated bound {TOLERANCE['bf16']:g}")
        log.info("--dtype auto keeps %s", no)
        return "fp32", f"{no}; {why}"
    return "bf16", (f"bf16: {why}; its error measured here max |dp| {err['max_abs_dp']:.3g} <= "
                    f"{TOLERANCE['bf16']:g} ({err['prompts']} prompts of {judge}, route {err['route']})")
