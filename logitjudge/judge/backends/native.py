"""The ``native`` prefix mode: the registry of the native families and the backend that runs them.

Imports point down: this module imports each family's step file (:mod:`.native_gemma3`, :mod:`.native_llama`),
each of those imports the loop they share (:mod:`.native_common`), and neither knows this module. :data:`STEPS`
is the one hand-kept list, one line per family; :data:`MODEL_TYPES` (model type -> step) is derived from it and
is what every caller reads: :class:`NativeBackend` here, ``TESTED_MODEL_TYPES`` in :mod:`..capabilities`, the
family list of ``tests/test_families.py``.

Adding a family: its step file (a :class:`~.native_common.NativeStep` subclass naming its ``MODEL_TYPES``), its
line in :data:`STEPS`, and a tiny model of each of its model types in ``tests/test_families.py``.

:class:`NativeBackend` takes a model if the step of its model type takes it and refuses it with that step's
reason otherwise (``auto`` then takes the next backend).
"""

from __future__ import annotations

import contextlib

from logitjudge_kernels import spare_thread

from ...errors import ModeError
from ..hooks import parse_hook
from .base import Backend
from .native_common import NativeStep
from .native_gemma3 import NativeGemma3
from .native_llama import NativeLlama

# the native families, one line each (a family's file names the model types its step takes)
STEPS: tuple[type[NativeStep], ...] = (
    NativeGemma3,
    NativeLlama,
)
# model type -> the step that computes it (tests/test_families.py checks no type is claimed twice)
MODEL_TYPES: dict[str, type[NativeStep]] = {t: step for step in STEPS for t in step.MODEL_TYPES}

# rows x tokens per call of the native step on CPU: larger calls hold (rows, 2 I) MLP activations far beyond the
# caches and the packed GEMMs slow down. 8x350, fp32, AMD EPYC Zen 4, 2 threads, 4096 against 1024 tokens per call
# (benchmarks/batch_tokens.py measures it): Qwen2.5-Coder-0.5B 42.3 s against 37.5 s, gemma-3-270m 11.5 s against
# 11.8 s, Qwen2.5-Coder-1.5B 153.2 s against 151.6 s (2048: 142.6 s, one round): never slower within the noise.
# With the MLP in row blocks (native_gemms.mlp_down), Zen 5, Qwen 0.5B: 2048 23.82 s, 1536 23.73 s, 1024 23.56 s
# (best of 3 interleaved rounds on a loaded machine): larger calls no longer lose, nor gain
CPU_BATCH_TOKENS = 1024


def step_for(model) -> tuple[type[NativeStep] | None, str | None]:
    """(the family step that takes ``model``, None) or (None, why none does)."""
    try:
        model_type = getattr(model.get_decoder().config, "model_type", None)
    except Exception:  # noqa: BLE001 - any model without a decoder accessor is simply unsupported
        return None, "the model has no get_decoder()"
    step = MODEL_TYPES.get(model_type)
    if step is None:
        return None, f"model type {model_type!r} is not one of {tuple(MODEL_TYPES)}"
    reason = step.support(model)
    return (step, None) if reason is None else (None, reason)


def native_support(model) -> str | None:
    """None if ``model`` can run natively, else the reason it cannot."""
    return step_for(model)[1]


class NativeBackend(Backend):
    """The fused step functions (``native`` mode) of the families in :data:`STEPS`; rows of several prefixes per
    call."""

    name = "native"
    supports = frozenset({"softcap", "sliding_window"})
    mixes_prefixes = True

    @classmethod
    def refuses(cls, model, features: dict) -> str | None:
        return native_support(model)

    def __init__(self, model, *, pack: bool | None = None):
        super().__init__(model)
        step, reason = step_for(model)
        if step is None:
            raise ModeError(f"the native path does not support this model: {reason}; use prefix_mode='shared'")
        self.step = step(model, pack=pack)
        self.route = self.step.route  # fp32, bf16, bf16_upcast or plain
        if self.device.type == "cpu":
            self.batch_tokens = CPU_BATCH_TOKENS

    def _forward(self, ids, groups, lengths, read, capture):
        if self.device.type != "cpu" or self.step.hook_fns:  # a probe's functions may run any op: torch's count
            return self.step(ids, groups, capture=capture, select=read)
        with spare_thread.raised():  # one thread more while another process takes a core, the same bits
            return self.step(ids, groups, capture=capture, select=read)

    @contextlib.contextmanager
    def hooks(self, fns: dict):
        for name in fns:
            parse_hook(name, self.n_layers)
        self.step.hook_fns = dict(fns)
        try:
            yield
        finally:
            self.step.hook_fns = {}
