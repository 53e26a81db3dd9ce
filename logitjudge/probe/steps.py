"""A probe run: items x orderings of one criterion -> ProbeTable (resumable, like ``score``)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from ..orderings import validate
from ..prompts import load_template
from ..run import run_fingerprint
from ..stats._result import detect_design
from .capture import capture_item
from .hooks import ProbeError, architecture
from .lens import option_distribution
from .patching import KINDS, PAIRS, make_pairs, make_sites, patch_item
from .prompts import probe_prompts
from .table import ProbeCheckpoint, ProbeTable

PROBES = ("lens", "attention", "patch", "linear")
log = logging.getLogger(__name__)


def check_probe_args(probes, option_orders, *, pairs: str = "reverse", kinds=KINDS) -> tuple[str, ...]:
    """Validate the cheap settings before the model loads; returns the probes as a tuple."""
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
    return probes


def forward_mode(model, mode: str = "auto") -> str:
    """'shared' (prefix KV held once) where the model uses transformers' attention interface, else 'copy'."""
    if mode == "auto":
        mode = "shared" if getattr(model, "_supports_attention_backend", False) else "copy"
    if mode not in ("shared", "copy"):
        raise ProbeError(f"unknown probe forward mode {mode!r}; use auto, shared or copy")
    if mode == "shared":
        from ..forward import install_shared_attention

        install_shared_attention(model)
    return mode


def probe(lm, items, rubric, option_orders, *, probes=PROBES, template=None, criterion: int = 0,
          pairs: str = "reverse", kinds=KINDS, hidden_layers=None, mode: str = "auto", max_rows: int = 256,
          out=None, progress: bool = True) -> ProbeTable:
    """Run the chosen probes on every item's prompts (one criterion, every ordering) into a ProbeTable.

    ``hidden_layers``: layers whose residual stream the linear probe exports (default: all). ``pairs`` and
    ``kinds`` choose the patching pairs (:func:`~.patching.make_pairs`) and sites (:func:`~.patching.make_sites`).
    With ``out``, finished items are checkpointed and an interrupted run continues where it stopped."""
    template = load_template(template)
    if not 0 <= criterion < rubric.n_criteria:
        raise ProbeError(f"criterion index {criterion} outside the rubric's {rubric.n_criteria} criteria")
    orders = validate(option_orders, len(rubric.criteria[criterion].options))
    probes = check_probe_args(probes, orders, pairs=pairs, kinds=kinds)
    ids = [it.id for it in items]
    if not items or len(set(ids)) != len(ids):
        raise ProbeError("probe needs a non-empty list of items with unique ids")
    model = lm.model
    arch = architecture(model)
    layers = list(range(arch.n_layers)) if hidden_layers is None else sorted(int(x) for x in hidden_layers)
    if any(not 0 <= x < arch.n_layers for x in layers):
        raise ProbeError(f"hidden layers {layers} outside 0..{arch.n_layers - 1}")
    need_capture = bool({"lens", "attention", "linear"} & set(probes))
    pair_idx = make_pairs(orders, pairs) if "patch" in probes else np.zeros((0, 2), np.int64)
    sites = make_sites(arch.n_layers, arch.n_heads, kinds)
    mode = forward_mode(model, mode) if "patch" in probes else mode
    settings = {"mode": "probe", "probes": probes, "criterion": criterion, "pairs": pairs, "kinds": list(kinds),
                "hidden_layers": layers if "linear" in probes else []}
    fingerprint = run_fingerprint(lm, rubric, items, orders, template, settings)
    if out is not None and Path(out).exists():  # a finished table of these settings is reused, as by `score`
        done = ProbeTable.load(out)
        if done.meta.get("fingerprint") == fingerprint:
            log.info("reusing the finished probe table %s (same settings)", out)
            return done
    ckpt = ProbeCheckpoint(out, fingerprint)
    t0 = time.perf_counter()
    from tqdm.auto import tqdm

    bar = tqdm(total=len(items), initial=len(ckpt.done), disable=not progress, unit="item", desc="probing")
    for i, it in enumerate(items):
        if it.id in ckpt.done:
            continue
        pps = probe_prompts(lm, rubric, it, orders, template, criterion=criterion)
        rec = {}
        if need_capture:
            cap = capture_item(model, arch, pps, attention="attention" in probes,
                               hidden_layers=layers if "linear" in probes else None)
            rec["lens_logprobs"] = cap.lens_logprobs
            rec["probs"] = option_distribution(cap.lens_logprobs[:, -1])
            if cap.attention is not None:
                rec["attention"] = cap.attention
            if cap.hidden is not None:
                rec["hidden"] = cap.hidden.astype(np.float32)
        if "patch" in probes:
            rec["clean"], rec["patched"] = patch_item(model, arch, pps, pair_idx, sites, mode=mode,
                                                      max_rows=max_rows)
            rec.setdefault("probs", rec["clean"])
        ckpt.add(i, it.id, rec)
        bar.update(1)
    bar.close()
    crit = rubric.criteria[criterion]
    stack = {k: np.stack([ckpt.done[it.id][k] for it in items]) for k in ckpt.done[items[0].id]}
    if "lens" not in probes:
        stack.pop("lens_logprobs", None)
    table = ProbeTable(ids, orders, [o.label for o in crit.options], crit.name, stack.pop("probs"),
                       hidden_layers=np.array(layers if "linear" in probes else [], dtype=np.int64),
                       pairs=pair_idx, site_layer=sites.layer if "patch" in probes else np.zeros(0, np.int64),
                       site_kind=sites.kind if "patch" in probes else np.zeros(0, np.int64),
                       site_head=sites.head if "patch" in probes else np.zeros(0, np.int64),
                       meta={"model_id": lm.model_id, "revision": lm.revision, "dtype": lm.dtype,
                             "probes": list(probes), "pairs": pairs, "forward_mode": mode,
                             "n_layers": arch.n_layers, "n_heads": arch.n_heads,
                             "template": template.name, "seconds": time.perf_counter() - t0,
                             "fingerprint": fingerprint}, **stack)
    if out is not None:
        table.save(out)
        ckpt.finish()
    return table
