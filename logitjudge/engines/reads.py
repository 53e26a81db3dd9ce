"""Label reads on a serving engine: the run's engine jobs as next-token questions, and the answers as job results.

An engine job (:class:`~logitjudge.engine.Job`) asks for log p(token | prefix + sequence[:index + 1]) at each of its
reads. A serving engine (vLLM in-process, a vLLM server) holds its own prefix cache, so each distinct context (the
token ids up to a read) becomes one request that runs the context and reads the next-token log-probabilities of the
label tokens asked there: an fp32 log-softmax over the full vocabulary, gathered at those ids. Options whose labels
share a first token share that request; a multi-token label is one request per further token. A job's ``keep``
keys return the context's token ids (:class:`TokenPrefix`): a later job continues them, and the serving engine's
prefix cache, not logitjudge, holds their keys and values.

:class:`ServedEngine` is what :class:`~logitjudge.runs.Run` needs of an engine
(:class:`~logitjudge.engines.base.Engine`: ``evaluate``, ``prompt_logprobs``, ``planned_tokens``, the counters and
the meta); a subclass answers :meth:`ServedEngine.read`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import faults
from ..engine import EngineError, Job, JobResult, NonFiniteError, continuation_logprobs, engine_meta, prompt_job

# vLLM's bound on the label ids one request may read (vllm.sampling_params.MAX_LOGPROB_TOKEN_IDS)
MAX_LABEL_IDS = 128


@dataclass(frozen=True)
class TokenPrefix:
    """A context a later job continues: its token ids (the serving engine caches their keys and values)."""

    tokens: tuple[int, ...]

    def truncate(self, n: int) -> TokenPrefix:
        return TokenPrefix(self.tokens[:n])


@dataclass(frozen=True)
class Context:
    """One request: ``tokens`` run through the model, then the next-token log-probabilities of ``labels`` read."""

    tokens: tuple[int, ...]
    labels: tuple[int, ...]


def contexts_of(jobs: list[Job]) -> tuple[list[Context], list[list[tuple]]]:
    """The distinct contexts of ``jobs`` and, per context, the reads it answers: (job index, token, key). Sorted,
    so that contexts that share a prefix go to the engine one after another: vLLM reuses a block only once a
    request before it has computed it (requests prefilled in the same scheduler step do not share), so it runs
    a few more tokens than the trie (1,364 against 1,258 on peers.py's 1x350, 72% of the prompt tokens from its
    cache)."""
    asked: dict[tuple, dict[int, list]] = {}
    for j, job in enumerate(jobs):
        base = tuple(job.prefix.tokens) if job.prefix is not None else ()
        for seq, reads in zip(job.sequences, job.reads):
            for index, token, key in reads:
                asked.setdefault(base + tuple(seq[:index + 1]), {}).setdefault(int(token), []).append((j, key))
    contexts, answers = [], []
    for tokens in sorted(asked):
        labels = asked[tokens]
        if len(labels) > MAX_LABEL_IDS:
            raise EngineError(f"{len(labels)} label tokens are read at one position, above the serving engine's "
                              f"{MAX_LABEL_IDS}; use fewer options or labels that share fewer first tokens")
        contexts.append(Context(tokens, tuple(sorted(labels))))
        answers.append([(j, t, key) for t in sorted(labels) for j, key in labels[t]])
    return contexts, answers


def trie_tokens(contexts: list[Context]) -> int:
    """The tokens a perfect prefix cache computes for these contexts: the nodes of their token trie (each
    sorted context adds the tokens it does not share with the one before it)."""
    total, prev = 0, ()
    for c in sorted(contexts, key=lambda c: c.tokens):
        shared = 0
        for a, b in zip(prev, c.tokens):
            if a != b:
                break
            shared += 1
        total += len(c.tokens) - shared
        prev = c.tokens
    return total


class ServedEngine:
    """An engine that serves label reads by requests (a subclass answers :meth:`read`): a
    :class:`logitjudge.engines.base.Engine`. ``name`` (its registry name) is also its ``prefix_mode`` in the table's
    meta and fingerprint; ``token_budget`` sizes the run's batches of items (the prompt tokens one :meth:`evaluate`
    call sends at most, before the engine's prefix cache). Its weights are not in this process: the audit loads
    them in transformers (:meth:`reference`)."""

    name = "served"
    gemm_route = None
    batch_tokens = None
    max_model_len: int | None = None  # the engine's own context (vllm serve --max-model-len), where it says

    @property
    def context(self) -> int | None:
        """The engine's own context, which bounds the judge's (a prompt past it is refused when the run plans
        it: :meth:`~logitjudge.models.Judge.max_length_on`)."""
        return self.max_model_len

    def __init__(self, *, token_budget: int, dtype: str):
        if int(token_budget) != token_budget or token_budget < 1:
            raise EngineError(f"token_budget must be a positive integer (prompt tokens per batch of items), got "
                              f"{token_budget!r}; use e.g. --token-budget 4096")
        self.token_budget, self.dtype = int(token_budget), dtype
        self.stats = {"tokens": 0, "prompt_tokens": 0, "cached_tokens": 0, "requests": 0, "reads": 0}
        self.mode_meta: dict = {}
        self.on_forward = None  # called with the trie tokens of every answered evaluate (a run's progress bar)

    # ---- what a subclass answers -------------------------------------------------------------------------------
    def read(self, contexts: list[Context]) -> list[np.ndarray]:
        """Per context, the log-probability of each of its labels (float64, in ``labels`` order)."""
        raise NotImplementedError

    def reference(self):
        """The transformers model of the same weights, for the exactness audit (loaded on first use)."""
        raise NotImplementedError

    def kernels(self) -> dict:
        """The native kernel dispatcher's record: a serving engine runs none of logitjudge's kernels."""
        return {}

    @property
    def prefix_mode(self) -> str:
        return self.name

    def meta(self) -> dict:
        return engine_meta(self)

    def audit_defaults(self) -> tuple[int, float]:
        """No audit unless asked (it loads the weights a second time, in transformers); the tolerance of the
        precision the engine runs."""
        from ..tolerance import DEFAULT_TOL, LOW_PRECISION_TOL

        return 0, DEFAULT_TOL if self.dtype == "fp32" else LOW_PRECISION_TOL

    def record_audit(self, result) -> None:
        """The audit's result, or that the rows were not audited (the meta says so rather than stay silent)."""
        from ..verify import NOT_AUDITED

        self.mode_meta.update(result.meta() if result.n_prompts else {"exactness_audit": NOT_AUDITED})

    def internals(self):
        """None: the judge's internals are in the serving engine, out of the probe's reach."""
        return None

    # ---- the seam ----------------------------------------------------------------------------------------------
    def evaluate(self, jobs: list[Job]) -> list[JobResult]:
        """Every read of every job, as :meth:`logitjudge.engine.Engine.evaluate` answers it."""
        results = [JobResult() for _ in jobs]
        contexts, answers = contexts_of(jobs)
        if contexts:
            faults.at_batch()  # the fault tests' kill@batch:N, as the native engine's forward batches
            values = self.read(contexts)
            bad = [(c, m) for c, v in enumerate(values) for m in range(len(v)) if not np.isfinite(v[m])]
            if bad:
                c, m = bad[0]
                j, _, key = next(a for a in answers[c] if a[1] == contexts[c].labels[m])
                raise NonFiniteError(j, key, float(values[c][m]), len(bad))
            for c, ctx in enumerate(contexts):
                at = dict(zip(ctx.labels, values[c]))
                for j, token, key in answers[c]:
                    results[j].logprobs[key] = float(at[token])
            tokens = trie_tokens(contexts)
            self.stats["tokens"] += tokens
            self.stats["prompt_tokens"] += sum(len(c.tokens) for c in contexts)
            self.stats["requests"] += len(contexts)
            self.stats["reads"] += sum(len(a) for a in answers)
            if self.on_forward is not None:
                self.on_forward(tokens)
        for j, job in enumerate(jobs):
            base = tuple(job.prefix.tokens) if job.prefix is not None else ()
            for seq, key in zip(job.sequences, job.keep or ()):
                if key is not None:
                    results[j].caches[key] = TokenPrefix(base + tuple(seq))
        return results

    def prompt_logprobs(self, groups: list) -> list[list[np.ndarray]]:
        """For each group (an item's prompts) and prompt: log-probability of each whole label continuation."""
        res = self.evaluate([prompt_job(g) for g in groups])
        return [[continuation_logprobs(r.logprobs, ep, p) for p, ep in enumerate(g)] for g, r in zip(groups, res)]

    def planned_tokens(self, jobs: list[Job]) -> int:
        """The tokens :meth:`evaluate` will count for ``jobs`` (their contexts' trie), without the engine."""
        return trie_tokens(contexts_of(jobs)[0])


def load_served_judge(source: str, model_spec, *, device: str):
    """The judge of an engine that loads the weights itself: its tokenizer and config
    (:func:`~logitjudge.models.read_judge`), ``device`` where the weights run (``server``: a server's own),
    ``dtype`` auto as fp32 unless the weights run here on a GPU (bf16). ``model_spec``: the [model] settings it is
    loaded with, which :func:`logitjudge.score` runs on."""
    from ..models import read_judge

    m = model_spec
    dtype = m.dtype if m.dtype != "auto" else ("bf16" if device == "cuda" else "fp32")
    why = "a serving engine: fp32 unless vLLM runs here on a GPU" if m.dtype == "auto" else "asked for"
    return read_judge(source, dtype=dtype, device=device, settings=m,
                      info={"dtype_choice": {"asked": m.dtype, "chosen": dtype, "reason": why}})


def reference_loader(lm, device: str):
    """What a served engine's :meth:`~ServedEngine.reference` calls: ``lm``'s weights in transformers, fp32, on the
    GPU when the run's ``device`` is one, else the CPU."""
    return lambda: lm.reference("cuda" if device.startswith("cuda") else "cpu")
