"""Which backend computes which model exactly, and which one ``auto`` picks: exact or refused, never wrong.

A model's attention features are read from its config and modules (:func:`~.features.model_features`). Each
backend declares the features it computes exactly (``Backend.supports``) and any family-specific condition
(``Backend.refuses``); a backend that cannot take the model is refused with the reason. ``auto`` takes the first
backend of :data:`~.backends.BACKENDS` (fastest first) that takes the model: ``native`` (fused step functions,
one per family in the registry :mod:`.backends.native`: Gemma-3, Llama, Qwen2/2.5, Qwen3, Mistral, Phi-3),
``shared`` (prefix K/V or recurrent state held once), ``copy`` (per-row cache copies), ``plain`` (every sequence
from its first token: the model's own forward, no cache; always exact).

What no config says (an attention that adds a bias of its own, a new architecture) is what the exactness
audit (:mod:`logitjudge.verify`) is for: it runs by default for model types outside :data:`TESTED_MODEL_TYPES`
(the families ``tests/test_families.py`` holds to the plain forward).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..errors import ModeError
from .backends import BACKENDS, Backend
from .backends.native import MODEL_TYPES as NATIVE_MODEL_TYPES
from .features import model_features, model_types

log = logging.getLogger("logitjudge")

MODES = tuple(BACKENDS)  # the prefix modes, fastest first
# model types with a parity test per mode in tests/test_families.py; others get an exactness audit by default.
# The native registry's types (that test fails where one has no tiny model), and by hand the types the native
# step does not take: the test's tiny models of them are what makes them tested (gemma3 and qwen3_5 are the
# multimodal checkpoints' types around gemma3_text and qwen3_5_text)
TESTED_MODEL_TYPES = frozenset(NATIVE_MODEL_TYPES) | frozenset({
    "gemma3", "qwen3_5", "qwen3_5_text", "qwen3_next", "gpt2", "olmo2", "gemma2", "gpt_oss"})
DEFAULT_AUDIT_PROMPTS = 3  # --verify default for an untested model type


def mode_refusal(model, mode: str, features: dict | None = None) -> str | None:
    """None if backend ``mode`` computes ``model`` exactly, else why not (one line)."""
    if mode not in BACKENDS:
        raise ModeError(f"unknown prefix mode {mode!r}; use one of {list(MODES)}")
    return BACKENDS[mode].refusal(model, model_features(model) if features is None else features)


@dataclass(frozen=True)
class ModeChoice:
    """The backend a model runs and why: ``refused`` maps each faster mode passed over to its reason."""

    mode: str
    asked: str
    refused: dict = field(default_factory=dict)
    features: dict = field(default_factory=dict)

    @property
    def backend(self) -> type[Backend]:
        return BACKENDS[self.mode]

    def meta(self) -> dict:
        return {"prefix_mode": self.mode, "prefix_mode_asked": self.asked, "prefix_mode_refused": dict(self.refused),
                "attention_features": dict(self.features)}


def choose_mode(model, asked: str = "auto") -> ModeChoice:
    """The backend for ``model``: ``asked`` if it takes the model (else :class:`ModeError` with the reason), or
    for "auto" the fastest that does. A fall-back past ``shared`` is logged once (it costs speed or memory)."""
    if asked != "auto" and asked not in BACKENDS:
        raise ModeError(f"unknown prefix_mode {asked!r}; use one of {['auto', *MODES]}")
    features = model_features(model)
    if asked != "auto":
        reason = mode_refusal(model, asked, features)
        if reason:
            ok = [m for m in MODES if mode_refusal(model, m, features) is None]
            raise ModeError(f"prefix_mode={asked!r} cannot compute this model exactly: {reason}; use "
                            f"'auto' or one of {ok}")
        return ModeChoice(asked, asked, {}, features)
    refused = {}
    for mode in MODES:
        reason = mode_refusal(model, mode, features)
        if reason is None:
            if mode in ("copy", "plain"):
                log.warning("logitjudge: prefix mode %r (slower) for this model: %s", mode,
                            " | ".join(f"{m}: {r}" for m, r in refused.items() if m != "native"))
            return ModeChoice(mode, asked, refused, features)
        refused[mode] = reason
    raise AssertionError("'plain' supports every feature")  # unreachable: plain takes every model


def default_audit_prompts(model) -> int:
    """--verify default: 0 for a tested model type, :data:`DEFAULT_AUDIT_PROMPTS` otherwise."""
    return 0 if model_types(model) & TESTED_MODEL_TYPES else DEFAULT_AUDIT_PROMPTS
