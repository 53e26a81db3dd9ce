"""The exactness audit's tolerances, stated once and read low: the engine's own audit defaults
(:meth:`logitjudge.engine.Engine.audit_defaults`), a serving engine's, and the audit itself
(:mod:`logitjudge.verify`) all take them from here."""

from __future__ import annotations

DEFAULT_TOL = 1e-5  # absolute, on each option probability (normalised over the options), fp32 models
LOW_PRECISION_TOL = 0.05  # bf16/fp16 weights: their stated tolerance against fp32 (docs/how-it-works.md)


def default_tol(model) -> float:
    """:data:`DEFAULT_TOL` for an fp32 model, :data:`LOW_PRECISION_TOL` when its weights are bf16/fp16 (the
    engine's and the plain path's roundings then differ by more than fp32 reassociation)."""
    import torch

    dtype = next(model.parameters()).dtype
    return DEFAULT_TOL if dtype in (torch.float32, torch.float64) else LOW_PRECISION_TOL
