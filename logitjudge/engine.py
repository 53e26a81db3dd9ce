"""The scoring engine: exact label probabilities for many prompts that share a prefix.

Per item, all prompt + label-continuation sequences go into one token trie (:mod:`logitjudge.trie`). The tries are
evaluated level by level: a level's segments (of all items) run as right-padded batches on top of their parents'
caches (:class:`~logitjudge.judge.prefix.PrefixKV`, held once, never copied per row or per child), hidden states
are read only where a label token is predicted, and the unembedding + full-vocabulary log-softmax (fp32) is
applied only there, once per evaluation. The model is reached only through its backend
(:class:`~logitjudge.judge.backends.base.Backend`: the forward, the read-out head).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from . import faults
from . import trie as trie_mod
from .errors import LogitJudgeError
from .judge import MODES, ModeError, PrefixKV, backend_for, default_audit_prompts
from .prompts import EncodedPrompt

# below an item's prefix, trie segments shorter than this run once per branch: balanced orders otherwise add a
# forward call per trie level for their first option lines (13-16 tokens each; two rows each on a backend that runs
# one prefix's rows per call). A call of a few dozen rows per layer costs more than duplicating those tokens, on
# the native step too (whose calls mix prefixes): gemma-3-270m 1x350 1.56 -> 1.42 s, the Qwen judge 4.14 -> 3.88 s
# (`python -m benchmarks.shared_path --prefix-mode native --min-shared 0,32`, docs/performance.md)
MIN_SHARED = 32


class EngineError(LogitJudgeError, RuntimeError):
    pass


class NonFiniteError(EngineError):
    """The model gave a NaN or infinite log-probability: for ``key`` of job ``job`` (the first such read)."""

    def __init__(self, job: int, key, value: float, count: int):
        self.job, self.key, self.value = job, key, value
        super().__init__(f"the model returned non-finite logits ({value}) at {count} label read(s), first job "
                         f"{job} read {key}; nothing was written for them")


def is_oom(e: BaseException) -> bool:
    """Out of memory on CUDA (torch.OutOfMemoryError) or in torch's CPU allocator (a RuntimeError)."""
    if isinstance(e, (torch.OutOfMemoryError, MemoryError)):
        return True
    msg = str(e)
    return isinstance(e, RuntimeError) and ("out of memory" in msg or "can't allocate memory" in msg)


@dataclass
class Job:
    """Sequences to evaluate after one cached prefix (``None``: no prefix, the sequences start the context).

    ``reads[s]`` = [(index, token, key)]: log p(token | prefix + sequences[s][:index+1]) is returned under key.
    ``keep`` = keys whose sequence-end cache is returned (to extend them later, e.g. multi-criteria slots).
    """

    sequences: list[list[int]]
    reads: list[list[tuple]]
    prefix: PrefixKV | None = None
    keep: list | None = None


@dataclass
class JobResult:
    logprobs: dict = field(default_factory=dict)  # key -> float
    caches: dict = field(default_factory=dict)  # keep key -> PrefixKV


class Engine:
    """Exact label log-probabilities with a shared-prefix trie.

    ``prefix_mode`` names the backend (:mod:`logitjudge.judge.backends`): "auto" (default: the fastest that
    computes the model exactly, :func:`logitjudge.judge.choose_mode`; ``mode_meta`` says which and why),
    "native" (the fused step of Gemma-3 and the Llama-style decoders), "shared" (transformers' forward with the
    prefix KV, or a linear-attention layer's recurrent state, held once, read through the shared-prefix
    attention function),
    "copy" (the prefix copied into a per-row ``DynamicCache``) or "plain" (every sequence from its first token,
    no cache; exact for any causal LM, no shared work). A mode that cannot compute the model exactly is refused
    (EngineError). ``token_budget`` bounds
    rows x padded length of one batch. ``min_shared``: shared runs shorter than this (below the item's prefix)
    are recomputed per branch so that their siblings run in one batch: one forward call costs more than a few
    duplicated tokens. None (default): :data:`MIN_SHARED`; 0 runs the pure trie (every shared token once).
    """

    name = "native"  # its name in the engines' registry (logitjudge.engines.ENGINES)
    context = None  # no context of its own: the judge's bounds the prompts

    def __init__(self, lm, *, token_budget: int = 4096, prefix_mode: str = "auto", min_shared: int | None = None):
        modes = ["auto", *MODES]
        if prefix_mode not in modes:
            raise EngineError(f"unknown prefix_mode {prefix_mode!r}; use one of {modes}")
        self.model = lm.model
        if int(token_budget) != token_budget or token_budget < 1:
            raise EngineError(f"token_budget must be a positive integer (rows x padded tokens per batch), got "
                              f"{token_budget!r}; use e.g. --token-budget 4096")
        try:
            self.backend, self.mode_choice = backend_for(self.model, prefix_mode)
        except ModeError as e:
            raise EngineError(str(e)) from None
        self.mode_meta = self.mode_choice.meta()  # copied into the table's meta
        self.prefix_mode = self.backend.name
        self.token_budget = int(token_budget)
        self.min_shared = MIN_SHARED if min_shared is None else int(min_shared)
        # how the GEMMs ran: the native route (fp32, bf16, bf16_upcast, plain) or transformers' modules
        self.gemm_route = self.backend.route
        self.n_layers = self.backend.n_layers
        self.head = self.backend.head
        self.device = self.backend.device
        self.stats = {"tokens": 0, "padded_tokens": 0, "forward_calls": 0, "reads": 0}
        # called with the tokens of every forward call that finished (a run's progress bar); None: nobody listens
        self.on_forward = None

    @property
    def batch_tokens(self) -> int | None:
        """The backend's own bound on one forward call's tokens (the native step's on CPU; None: none)."""
        return self.backend.batch_tokens

    def kernels(self) -> dict:
        """The kernel dispatcher's record of what the backend ran (the table's ``kernels`` meta)."""
        return self.backend.kernels()

    # ---- what a run asks of every engine besides the reads (logitjudge.engines.base.Engine) -----------------
    def meta(self) -> dict:
        return engine_meta(self)

    def reference(self):
        """The judge's own weights: the plain forward runs the model this engine computes."""
        return self.model

    def audit_defaults(self) -> tuple[int, float]:
        """No audit for an architecture the parity tests hold (else 3 prompts); fp32's tolerance or, for bf16/fp16
        weights, theirs."""
        from .tolerance import default_tol

        return default_audit_prompts(self.model), default_tol(self.model)

    def record_audit(self, result) -> None:
        self.mode_meta.update(result.meta())

    def internals(self):
        """The backend: the probe runs its forward, hook points and read-out."""
        return self.backend

    # ---- core ----------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def evaluate(self, jobs: list[Job]) -> list[JobResult]:
        """Evaluate jobs: every job's trie, level by level, the segments of all jobs batched together."""
        results = [JobResult() for _ in jobs]
        self._pending: list = []  # read points of every batch, read out together at the end
        empty = PrefixKV.empty(self.n_layers)
        entries = []  # (job index, trie node, the prefix it continues)
        for j, job in enumerate(jobs):
            entries += [(j, n, job.prefix if job.prefix is not None else empty) for n in self._roots(job)]
        self._descend(entries, results)
        self._flush_reads(results)
        return results

    def _roots(self, job: Job) -> list:
        """The top-level trie nodes of a job, as :meth:`evaluate` runs them."""
        if not self.backend.caches:  # whole sequences, one node each: nothing shared, nothing cached
            if job.prefix is not None or job.keep is not None:
                raise EngineError(f"prefix_mode={self.prefix_mode!r} cannot continue or keep prefix caches "
                                  "(multi-criteria slots); this model has no exact cached mode for them")
            return [r for s, rd in zip(job.sequences, job.reads) for r in trie_mod.build([s], [rd])]
        ends = None if job.keep is None else list(job.keep)
        return trie_mod.build(job.sequences, job.reads, ends, min_shared=self.min_shared)

    def planned_tokens(self, jobs: list[Job]) -> int:
        """The tokens :meth:`evaluate` will run for ``jobs`` (each trie node's segment once), without the model:
        what a run's progress counts against (an out-of-memory retry runs the same tokens in smaller batches)."""
        return sum(trie_mod.count_tokens(self._roots(job)) for job in jobs)

    def _flush_reads(self, results: list[JobResult]) -> None:
        """One read-out per evaluation: the unembedding matrix (V x d) is streamed from memory once."""
        if not self._pending:
            return
        h = torch.cat([p[0] for p in self._pending])  # (R, d)
        reads = [lst for p in self._pending for lst in p[1]]
        self._pending = []
        lp = self.head.read_lists(h, [[t for t, _, _ in lst] for lst in reads])  # (R, M)
        _check_finite(lp, reads)
        for r, lst in enumerate(reads):
            for m, (_, j, ks) in enumerate(lst):
                self.stats["reads"] += 1
                for k in ks:
                    results[j].logprobs[k] = float(lp[r, m])

    def _descend(self, entries: list, results: list[JobResult]) -> None:
        """Segments breadth-first in chunks: one forward call per chunk, then the children of all the chunk's rows
        form the next level (whichever parent they continue), so each level runs in few, large batches; going
        depth-first over chunks bounds the memory held to about one token budget per level."""
        for chunk in self._chunks(entries):
            try:
                children = self._batch(chunk, results)
            except Exception as e:  # noqa: BLE001 - only out-of-memory is retried
                if not is_oom(e):
                    raise
                self._shrink(e, chunk)
                self._descend(chunk, results)  # the same segments, re-chunked under the halved budget
                continue
            if children:
                self._descend(children, results)

    def _shrink(self, error: BaseException, chunk: list) -> None:
        """Out of memory in a batch: halve the engine's token budget from here on (the failed batch queued
        nothing, so it is simply run again in smaller pieces)."""
        width = max(len(n.tokens) for _, n, _ in chunk)
        if len(chunk) == 1 or self.token_budget // 2 < 1:
            raise EngineError(f"out of memory on one row of {width} tokens even at token budget "
                              f"{self.token_budget}; use a smaller model or dtype (--dtype bf16) or another "
                              f"device ({type(error).__name__}: {str(error)[:200]})") from None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        self.token_budget //= 2
        self.stats["oom_retries"] = self.stats.get("oom_retries", 0) + 1
        self.stats["token_budget_after_oom"] = self.token_budget

    def _chunks(self, entries: list):
        """Right-padded batches within the token budget (and the backend's own ``batch_tokens``, the native step's
        on CPU), longest rows first. Padded positions cost as much as real
        ones, so a much shorter row starts a new batch. Rows continuing different prefixes share a batch only
        where the forward takes several prefixes (native mode)."""
        pools = [entries] if self.backend.mixes_prefixes else _by_prefix(entries)
        budget = min(self.token_budget, self.backend.batch_tokens or self.token_budget)
        for pool in pools:
            order = sorted(pool, key=lambda e: -len(e[1].tokens))
            start = 0
            while start < len(order):
                width = len(order[start][1].tokens)
                rows = max(1, budget // max(width, 1))
                end = start + 1
                while end < len(order) and end - start < rows and \
                        width - len(order[end][1].tokens) <= max(8, width // 4):
                    end += 1
                yield order[start:end]
                start = end

    def _batch(self, chunk: list, results: list[JobResult]) -> list:
        """One forward call over the chunk's segments; queues its reads and returns the next level's entries."""
        by_prefix = _by_prefix(chunk)  # rows of one prefix are contiguous: (prefix, rows) groups
        chunk = [e for rows in by_prefix for e in rows]
        groups = [(rows[0][2], len(rows)) for rows in by_prefix]
        B = len(chunk)
        S = max(len(n.tokens) for _, n, _ in chunk)
        ids = torch.zeros((B, S), dtype=torch.long)
        for r, (_, n, _) in enumerate(chunk):
            ids[r, :len(n.tokens)] = torch.tensor(n.tokens)
        faults.at_batch()
        need_cache = any(n.children or n.ends for _, n, _ in chunk)
        # read-out only where a label token is predicted; one hidden row per position, all its label tokens
        rows, offs, reads = [], [], []
        for r, (j, n, _) in enumerate(chunk):
            at: dict[int, list] = {}
            for (off, tok), ks in n.reads.items():
                at.setdefault(off, []).append((tok, j, ks))
            for off, lst in at.items():
                rows.append(r)
                offs.append(off)
                reads.append(lst)
        select = (torch.tensor(rows, dtype=torch.long, device=self.device),
                  torch.tensor(offs, dtype=torch.long, device=self.device))
        hidden, captured = self.backend.forward(ids.to(self.device), groups,
                                                lengths=[len(n.tokens) for _, n, _ in chunk],  # right padding
                                                read=select, capture=need_cache)  # (R, d)
        tokens = sum(len(n.tokens) for _, n, _ in chunk)
        self.stats["forward_calls"] += 1
        self.stats["tokens"] += tokens
        self.stats["padded_tokens"] += B * S
        if rows:
            self._pending.append((hidden, reads))
        if self.on_forward is not None:
            self.on_forward(tokens)
        children = []
        for r, (j, n, pre) in enumerate(chunk):
            if n.ends or n.children:
                ext = pre.extend(captured, r, len(n.tokens))
                for key in n.ends:
                    results[j].caches[key] = ext
                children += [(j, c, ext) for c in n.children]
        return children

    # ---- prompts -------------------------------------------------------------------------------------------
    def prompt_logprobs(self, groups: list[list[EncodedPrompt]]) -> list[list[np.ndarray]]:
        """For each group (an item's prompts) and prompt: log-probability of each whole label continuation."""
        res = self.evaluate([prompt_job(g) for g in groups])
        return [[continuation_logprobs(r.logprobs, ep, p) for p, ep in enumerate(g)] for g, r in zip(groups, res)]


def engine_meta(engine) -> dict:
    """An engine's part of the table's meta (:meth:`Engine.meta`), in the order the run writes it."""
    return {"prefix_mode": engine.prefix_mode, "token_budget": engine.token_budget,
            "batch_tokens": engine.batch_tokens, "kernels": engine.kernels(), "engine_stats": dict(engine.stats),
            **engine.mode_meta}


def _check_finite(lp: np.ndarray, reads: list) -> None:
    """Refuse NaN / infinite log-probabilities at the read slots in use (a softmax over finite logits is
    finite), naming the first job and read key."""
    used = np.zeros(lp.shape, dtype=bool)
    for r, lst in enumerate(reads):
        used[r, :len(lst)] = True
    bad = used & ~np.isfinite(lp)
    if bad.any():
        r, m = np.argwhere(bad)[0]
        _, j, ks = reads[r][m]
        raise NonFiniteError(j, ks[0], float(lp[r, m]), int(bad.sum()))


def _by_prefix(entries: list) -> list[list]:
    """(job, node, prefix) entries grouped by the prefix object they continue, in order of first appearance."""
    groups: dict[int, list] = {}
    for e in entries:
        groups.setdefault(id(e[2]), []).append(e)
    return list(groups.values())


def label_reads(ep: EncodedPrompt, tag, start: int = 0) -> tuple[list[list[int]], list[list[tuple]]]:
    """The one label-read form: per option, the sequence prompt[start:] + continuation[:-1] and its reads
    (index, token, (tag, option, t)) at every continuation token. ``start``: prompt tokens already cached."""
    seqs, reads = [], []
    base = len(ep.prompt_ids) - 1 - start
    for o, cont in enumerate(ep.continuation_ids):
        seqs.append(list(ep.prompt_ids[start:]) + list(cont[:-1]))
        reads.append([(base + t, cont[t], (tag, o, t)) for t in range(len(cont))])
    return seqs, reads


def distribution(logprobs: np.ndarray) -> tuple[np.ndarray, float]:
    """Renormalised option probabilities and the label mass (total probability of all labels)."""
    lp = np.asarray(logprobs, dtype=np.float64)
    m = lp.max()
    w = np.exp(lp - m)
    return w / w.sum(), float(np.exp(m) * w.sum())


def continuation_logprobs(logprobs: dict, ep: EncodedPrompt, tag) -> np.ndarray:
    """Log-probability of each option's whole continuation: the sum of its token reads under ``tag``."""
    return np.array([sum(logprobs[(tag, o, t)] for t in range(len(c))) for o, c in enumerate(ep.continuation_ids)])


def prompt_job(prompts: list[EncodedPrompt]) -> Job:
    """All label reads of a group of prompts from scratch (prompt p's reads are tagged p)."""
    seqs, reads = [], []
    for p, ep in enumerate(prompts):
        s, r = label_reads(ep, p)
        seqs += s
        reads += r
    return Job(seqs, reads)


def plain_prompt_logprobs(model, prompts: list[EncodedPrompt], *, logits: str = "all") -> list[np.ndarray]:
    """Reference path: the model's own full forward per (prompt, label) sequence, no cache, its fp32 logits and a
    full-vocabulary log-softmax of them (in fp64). Options whose label is one token share the forward of the bare
    prompt.

    ``logits="all"`` computes the vocabulary logits at every position, as a plain forward does; ``"read"`` only
    at the positions read (the last prompt token and the label tokens: ``logits_to_keep``). The numbers are the
    same up to fp32 rounding (the unembedding's row count may change its summation order); "read" skips the
    unembedding of every other prompt token, which on a large vocabulary costs more than the whole model
    (Gemma-3's 262,144 entries at a few hundred tokens), so the slow tests on real judges use it."""
    if logits not in ("all", "read"):
        raise EngineError(f"logits={logits!r}: use 'all' or 'read'")
    out = []
    device = next(model.parameters()).device
    with torch.inference_mode():
        for ep in prompts:
            seqs = {tuple(ep.prompt_ids) + tuple(c[:-1]) for c in ep.continuation_ids}
            logp = {}
            n = len(ep.prompt_ids)
            for seq in seqs:
                keep = {"logits_to_keep": len(seq) - (n - 1)} if logits == "read" else {}
                out_logits = model(input_ids=torch.tensor([seq], device=device), **keep).logits[0]  # (T or kept, V)
                # the model's fp32 logits, normalised in fp64 at the read positions: torch's fp32 log_softmax over
                # Gemma-3's 262,144 entries is itself off by up to ~1e-4 (the engine's read-out is not)
                read = out_logits if logits == "read" else out_logits[n - 1:]
                logp[seq] = torch.log_softmax(read.float().double(), dim=-1)
            out.append(np.array([sum(float(logp[tuple(ep.prompt_ids) + tuple(c[:-1])][t, c[t]])
                                     for t in range(len(c))) for c in ep.continuation_ids]))
    return out
