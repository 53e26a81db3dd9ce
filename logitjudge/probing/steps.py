"""The probe step a :class:`logitjudge.probing.run.ProbeRun` drives: one item's prompts (one criterion, every ordering)
-> the arrays of its ProbeTable row (lens, attention, hidden states, patching), through the scores' backend."""

from __future__ import annotations

import numpy as np

from ..errors import ProbeError
from ..stats._result import detect_design
from .capture import capture_item
from .lens import option_distribution
from .patching import KINDS, PAIRS, make_pairs, patch_item

PROBES = ("lens", "attention", "patch", "linear")


def check_probe_args(probes, option_orders, *, pairs: str = "reverse", kinds=KINDS) -> tuple[str, ...]:
    """Validate the cheap settings before the model loads; returns the probes as a tuple. ``option_orders``:
    (K, n) shared or (I, K, n) per item."""
    probes = tuple(probes)
    bad = sorted(set(probes) - set(PROBES))
    if bad or not probes:
        raise ProbeError(f"unknown probes {bad}; use a comma-separated subset of {','.join(PROBES)}")
    if pairs not in PAIRS:
        raise ProbeError(f"unknown --pairs {pairs!r}; use one of {list(PAIRS)}")
    badk = sorted(set(kinds) - set(KINDS))
    if badk:
        raise ProbeError(f"unknown patch sites {badk}; use a subset of {','.join(KINDS)}")
    if detect_design(np.asarray(option_orders)) == "fixed":
        raise ProbeError("probing position bias needs orderings that move the options (balanced or random:K); "
                         "fixed orderings show every option at one position only")
    if "patch" in probes:
        item_pairs(option_orders, pairs)
    return probes


def item_pairs(option_orders, pairs: str) -> np.ndarray:
    """The (P, 2) [source, target] patching pairs, the same ordering indices for every item (per-item orders
    whose reverse pairs differ between items are refused)."""
    orders = np.asarray(option_orders)
    if orders.ndim == 2:
        return make_pairs(orders, pairs)
    each = [make_pairs(o, pairs) for o in orders]
    if any(not np.array_equal(e, each[0]) for e in each):
        raise ProbeError(f"--pairs {pairs}: the items' own random orders have different reverse pairs; use "
                         "--pairs canonical or all (the same ordering indices for every item)")
    return each[0]


def probe_item(backend, prompts, probes, *, pairs: np.ndarray, sites, hidden_layers, token_budget: int) -> dict:
    """The arrays of one item: ``probs`` (K, n), and per probe ``lens_logprobs`` (K, L, n), ``attention``
    (K, L, H, C), ``hidden`` (K, layers, 1 + n, d) fp32, ``clean`` (K, n) and ``patched`` (P, S, n)."""
    rec = {}
    if {"lens", "attention", "linear"} & set(probes):
        cap = capture_item(backend, prompts, attention="attention" in probes,
                           hidden_layers=hidden_layers if "linear" in probes else None)
        if "lens" in probes:
            rec["lens_logprobs"] = cap.lens_logprobs
        rec["probs"] = option_distribution(cap.lens_logprobs[:, -1])
        if cap.attention is not None:
            rec["attention"] = cap.attention
        if cap.hidden is not None:
            rec["hidden"] = cap.hidden.astype(np.float32)
    if "patch" in probes:
        rec["clean"], rec["patched"] = patch_item(backend, prompts, pairs, sites, token_budget=token_budget)
        rec.setdefault("probs", rec["clean"])
    return rec
