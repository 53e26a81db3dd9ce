"""The backends, fastest first (the order ``auto`` tries them in):

* ``native`` (:mod:`.native`, the registry of the families: one step file per family group, :mod:`.native_gemma3`
  for Gemma-3, :mod:`.native_llama` for Llama, Qwen2/2.5, Qwen3, Mistral and Phi-3, sharing the loop of
  :mod:`.native_common`): fused step functions;
* ``shared`` (:mod:`.shared`, with :mod:`.linear_attention` for Gated DeltaNet layers): transformers' forward
  with the prefix held once;
* ``copy`` (:mod:`.copy`): the prefix copied per row into a ``DynamicCache``;
* ``plain`` (:mod:`.plain`): every sequence from its first token (exact for any causal LM).

Adding a native family is one step file here (a :class:`~.native_common.NativeStep` subclass), its line in
:data:`.native.STEPS` and a tiny model of each of its model types in ``tests/test_families.py`` (the parity test
against the plain forward). A new prefix mode is a :class:`~.base.Backend` subclass with its line in
:data:`BACKENDS`.
"""

from __future__ import annotations

from .base import Backend
from .copy import CopyBackend
from .native import NativeBackend
from .plain import PlainBackend
from .shared import SharedBackend

NativeGemma3Backend = NativeBackend  # the name before the native step took the Llama-style families too

BACKENDS: dict[str, type[Backend]] = {b.name: b for b in (NativeBackend, SharedBackend, CopyBackend, PlainBackend)}

__all__ = ["BACKENDS", "Backend", "CopyBackend", "NativeBackend", "NativeGemma3Backend", "PlainBackend",
           "SharedBackend"]
