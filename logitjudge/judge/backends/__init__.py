"""The backends, one file per family group, fastest first (the order ``auto`` tries them in):

* ``native`` (:mod:`.native_gemma3`): Gemma-3's fused step function;
* ``shared`` (:mod:`.shared`, with :mod:`.linear_attention` for Gated DeltaNet layers): transformers' forward
  with the prefix held once;
* ``copy`` (:mod:`.copy`): the prefix copied per row into a ``DynamicCache``;
* ``plain`` (:mod:`.plain`): every sequence from its first token (exact for any causal LM).

Adding a family is one file here with a :class:`~.base.Backend` subclass, its line in :data:`BACKENDS`, and its
entry in ``tests/test_families.py`` (the parity test against the plain forward).
"""

from __future__ import annotations

from .base import Backend
from .copy import CopyBackend
from .native_gemma3 import NativeGemma3Backend
from .plain import PlainBackend
from .shared import SharedBackend

BACKENDS: dict[str, type[Backend]] = {b.name: b for b in (NativeGemma3Backend, SharedBackend, CopyBackend,
                                                          PlainBackend)}

__all__ = ["BACKENDS", "Backend", "CopyBackend", "NativeGemma3Backend", "PlainBackend", "SharedBackend"]
