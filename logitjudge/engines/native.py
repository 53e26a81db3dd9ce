"""logitjudge's own engine (``--engine native``, the default): the token trie of :mod:`logitjudge.engine` over the
backends of :mod:`logitjudge.judge`, the judge's weights loaded in this process. The only engine that probes."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from ..engine import Engine, EngineError
from .base import TOKEN_BUDGET

log = logging.getLogger("logitjudge")


@dataclass(frozen=True)
class NativeConfig:
    """The native engine's [model] settings: ``token_budget`` (rows x padded tokens per forward batch) and
    ``prefix_mode`` (the backend: auto, native, shared, copy, plain) for the engine; ``dtype``, ``device``,
    ``quantize`` and ``attn_implementation`` for the judge it loads."""

    name: ClassVar[str] = "native"
    token_budget: int = TOKEN_BUDGET
    prefix_mode: str = "auto"
    dtype: str = "fp32"
    device: str = "cpu"
    quantize: str | None = None
    attn_implementation: str | None = None

    @classmethod
    def from_spec(cls, model_spec) -> NativeConfig:
        m = model_spec
        return cls(m.token_budget, m.prefix_mode, m.dtype, m.device, m.quantize, m.attn_implementation)

    def check(self, *, probing: bool) -> None:
        """The native engine runs every setting and probes; its backend is chosen (and a mode that cannot compute
        the model exactly refused) once the model is loaded. Refused before: a bad $LOGITJUDGE_SPARE_THREAD."""
        from logitjudge_kernels import spare_thread

        try:
            spare_thread.mode()
        except ValueError as e:
            raise EngineError(str(e)) from None

    def load_judge(self, source: str, model_spec=None):
        """The judge's weights in this process. Under torchrun each rank loads them on its own GPU
        (:func:`logitjudge.distributed.rank_device`); ``dtype`` auto is measured once per machine and judge (cached:
        bf16's speed here, and its error on this judge)."""
        from ..autodtype import resolve_dtype
        from ..distributed import rank_device
        from ..models import load_model

        device = rank_device(self.device)  # cuda -> cuda:LOCAL_RANK before anything is loaded
        dtype, why = resolve_dtype(self.dtype, device, judge=source)
        if device != self.device:
            log.info("rank %s: judge on %s", os.environ.get("RANK", "?"), device)
        return load_model(source, dtype=dtype, device=device, quantize=self.quantize,
                          attn_implementation=self.attn_implementation, settings=model_spec,
                          info={"dtype_choice": {"asked": self.dtype, "chosen": dtype, "reason": why}})

    def make(self, lm, *, texts: Callable[[], list[str]] | None = None, seed: int = 0) -> Engine:
        """The trie engine on ``lm``'s weights (its backend computes the model exactly or is refused)."""
        return Engine(lm, token_budget=self.token_budget, prefix_mode=self.prefix_mode)
