"""What a run asks of an engine (:class:`Engine`) and of an engine's settings (:class:`EngineConfig`).

The run, the steps, the exactness audit and the experiment call these and nothing else: no branch on an engine's
name, no look at its attributes. An engine is one file holding its config dataclass (what ``--engine NAME`` and
its [model] settings make: checked before anything loads, then the judge it loads and the engine it makes) and
one line in :data:`logitjudge.engines.ENGINES`, the registry. Modelled on vLLM's ``EngineArgs`` (the config) and
``LLM`` (the engine).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from ..spec import ModelSpec

if TYPE_CHECKING:
    import numpy as np

    from ..engine import Job, JobResult
    from ..verify import AuditResult


TOKEN_BUDGET = ModelSpec.token_budget  # every engine's default: the [model] token_budget's (one default, issue 53)


@runtime_checkable
class Engine(Protocol):
    """Exact label log-probabilities for a run's engine jobs (:class:`~logitjudge.engine.Job`).

    ``name``: the engine's registry name. ``prefix_mode``: what the table's meta and the run's fingerprint
    record (the native engine: the backend that ran, as tables have always recorded it; a served engine: its
    name). ``token_budget``: sizes the run's batches. ``stats``: counters copied into the meta and each checkpoint
    record. ``gemm_route``: how the GEMMs ran (None: not in this process). ``on_forward``: called with the tokens
    of each finished forward call (the run's progress bar), or None."""

    name: str
    prefix_mode: str
    token_budget: int
    stats: dict
    gemm_route: str | None
    on_forward: Callable[[int], Any] | None

    def evaluate(self, jobs: list[Job]) -> list[JobResult]:
        """Every read of every job (and the kept prefixes the job's ``keep`` names)."""

    def prompt_logprobs(self, groups: list) -> list[list[np.ndarray]]:
        """Per group (an item's prompts) and prompt: each whole label continuation's log-probability."""

    def planned_tokens(self, jobs: list[Job]) -> int:
        """The tokens :meth:`evaluate` will count for ``jobs``, without the model (the progress bar's total)."""

    def kernels(self) -> dict:
        """The kernel dispatcher's record of what ran (``{}``: none of logitjudge's kernels)."""

    def meta(self) -> dict:
        """The engine's part of the table's meta: prefix_mode, token_budget, batch_tokens, kernels, engine_stats
        and what the engine adds (its choice of backend, its arguments, the exactness audit)."""

    def reference(self):
        """The transformers model of the same weights, in this process: the plain fp32 forward the exactness
        audit compares the engine against (loaded on first use where the engine holds no weights here)."""

    def audit_defaults(self) -> tuple[int, float]:
        """(prompts, tolerance) of the exactness audit when the run does not set them."""

    def record_audit(self, result: AuditResult) -> None:
        """Keep the audit's result for :meth:`meta`."""

    def internals(self):
        """The :class:`~logitjudge.judge.backends.base.Backend` the probe reads (its forward, hook points and
        read-out), or None where the engine does not expose the judge's internals."""


class EngineConfig(Protocol):
    """An engine's settings (a frozen dataclass, one file per engine): :meth:`from_spec` takes them from a spec's
    [model] section and refuses a bad one in one line before anything loads; :meth:`load_judge` loads the judge
    this engine runs; :meth:`make` makes the engine on it."""

    name: ClassVar[str]

    @classmethod
    def from_spec(cls, model_spec) -> EngineConfig:
        """The settings of ``model_spec`` (a :class:`~logitjudge.spec.ModelSpec`), checked without a model."""

    def check(self, *, probing: bool) -> None:
        """Refuse, before anything loads, what this engine cannot run (``probing``: the run probes)."""

    def load_judge(self, source: str, model_spec):
        """The judge of ``source`` (a resolved model id or folder) as this engine needs it: its weights loaded, or
        its tokenizer and config only where the engine loads the weights itself."""

    def make(self, lm, *, texts: Callable[[], list[str]], seed: int = 0) -> Engine:
        """The engine on judge ``lm``. ``texts()``: a prompt and its label continuations as the run will send
        them, for an engine that checks that it tokenizes and reads them alike (called only by those)."""


def refuse_native_settings(what: str, *, prefix_mode: str, quantize: str | None, probing: bool) -> None:
    """One line for a setting only the native engine runs (a prefix mode, quantization, probing), for an engine
    that computes the prompts itself (``what``: how the user named it, e.g. ``--engine vllm``)."""
    from ..engine import EngineError

    if prefix_mode != "auto":
        raise EngineError(f"{what} computes the prompts itself; --prefix-mode {prefix_mode} is the native "
                          "engine's: drop it or use --engine native")
    if quantize:
        raise EngineError(f"{what} loads the weights itself; --quantize is the native engine's (serve a quantized "
                          "checkpoint instead) or use --engine native")
    if probing:
        raise EngineError(f"probing reads the judge's internals, which {what} does not expose; probe with "
                          "--engine native")
