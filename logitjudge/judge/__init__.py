"""The judge model: the only package that knows model families.

* :mod:`.backends`: one :class:`~.backends.base.Backend` per prefix mode (``native``: fused step functions, one
  per family in the registry :mod:`.backends.native`, Gemma-3 and the Llama-style decoders; ``shared``:
  transformers' forward, linear-attention layers included; ``copy``; ``plain``): exact or refused, one forward
  convention, the unembedding, hook points, the kernels it ran;
* :mod:`.capabilities`: which backend computes which model, and which one ``auto`` picks;
* :mod:`.features` (attention features read from config and modules), :mod:`.prefix` (the prefix cache held once
  on the trie), :mod:`.head` (the read-out every caller shares), :mod:`.hooks` (named hook points),
  :mod:`.baselines` (the transformers baselines of the benchmarks).
"""

from .backends import BACKENDS, Backend
from .capabilities import (
    MODES,
    TESTED_MODEL_TYPES,
    ModeChoice,
    ModeError,
    choose_mode,
    default_audit_prompts,
    mode_refusal,
)
from .features import model_features
from .head import Head
from .prefix import PrefixKV, RecurrentState


def backend_for(model, prefix_mode: str = "auto") -> tuple[Backend, ModeChoice]:
    """The backend that computes ``model`` (``prefix_mode``: "auto" or a mode name) and the choice behind it."""
    choice = choose_mode(model, prefix_mode)
    return choice.backend(model), choice


__all__ = ["BACKENDS", "MODES", "TESTED_MODEL_TYPES", "Backend", "Head", "ModeChoice", "ModeError", "PrefixKV",
           "RecurrentState", "backend_for", "choose_mode", "default_audit_prompts", "mode_refusal",
           "model_features"]
