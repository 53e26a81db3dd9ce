"""The scoring steps a :class:`logitjudge.runs.Run` drives (through its mode, :mod:`logitjudge.modes`): one per
batch of items (single-criterion) and one per item (several criteria in one prompt).

Single-criterion: every (criterion, ordering) of an item is one prompt; an item's prompts form one token trie, and
the items of a batch run through the engine together. Batches are formed within fixed windows of the item list,
from the prompts' lengths alone, so an interrupted run that resumes forms exactly the batches it would have formed.

Several criteria in one prompt: the judge answers one line per criterion, in the listed order (``Coherence: 4``
newline ``Empathy: 3``); each line's prefix is forced. Slot j's distribution depends on the answers written before
it:

* ``greedy``: earlier slots hold their most probable label (teacher forcing). Each slot is one extra pass over
  the short answer text on top of the cached prompt (the cache is cut back to the tokens the new context shares
  with it, so tokenizers that merge across the answer boundary stay exact).
* ``marginal``: the exact marginal of each slot, summing over every answer to earlier slots weighted by its
  probability (renormalised over the labels). All contexts form one token trie, so every common part is computed
  once, but their number grows as n^j for slot j: above ``max_continuations`` label continuations per prompt the
  run is refused. Use it for few criteria and options (e.g. 3 x 3, 4 x 5); use greedy for HANNA-sized rubrics.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .engine import Job, NonFiniteError, continuation_logprobs, distribution, label_reads, prompt_job
from .engines.base import Engine
from .prompts import EncodedPrompt
from .requests import encode, slot_request
from .slots import SLOT_MODES

WINDOW = 64  # items encoded at once: huge data sets never hold every prompt in memory


def plan_batches(prompts: list[list[EncodedPrompt]], budget: int) -> list[list[int]]:
    """Positions in ``prompts`` grouped so a batch's top-level tokens stay near the budget; longest first."""
    lengths = [max(len(p.prompt_ids) for p in g) for g in prompts]
    order = sorted(range(len(prompts)), key=lambda i: -lengths[i])  # stable: ties keep the item order
    out, cur, tot = [], [], 0
    for i in order:
        if cur and tot + lengths[i] > budget:
            out.append(cur)
            cur, tot = [], 0
        cur.append(i)
        tot += lengths[i]
    if cur:
        out.append(cur)
    return out


def score_batch(engine: Engine, prompts: list[list[EncodedPrompt]], n_criteria: int, share=None) -> list[tuple]:
    """(probs[C, K, n], mass[C, K]) of each item of a batch from its criterion-major prompts (c * K + k).
    ``share``: a key per item (:func:`trie_groups`); the items of one key run as one token trie (the pairs of a
    group share the instructions and the group's context, computed once), which changes a number only as any
    other batch split does (fp32 reassociation)."""
    out = []
    for item_lps in shared_logprobs(engine, prompts, share):
        K = len(item_lps) // n_criteria
        dists = [distribution(lp) for lp in item_lps]
        probs = np.stack([p for p, _ in dists]).reshape(n_criteria, K, -1)  # (C, K, n)
        mass = np.array([m for _, m in dists]).reshape(n_criteria, K)  # (C, K)
        out.append((probs, mass))
    return out


def trie_groups(keys, n: int) -> list[list[int]]:
    """The batch positions that form one token trie: those of one key (keys in order of first appearance);
    ``keys`` None: each of the ``n`` items its own trie."""
    if keys is None:
        return [[b] for b in range(n)]
    by_key: dict = {}
    for b, key in enumerate(keys):
        by_key.setdefault(key, []).append(b)
    return list(by_key.values())


def batch_jobs(prompts: list[list[EncodedPrompt]], share=None) -> list[Job]:
    """The engine jobs :func:`score_batch` evaluates (what a run's progress counts)."""
    return [prompt_job([ep for b in bs for ep in prompts[b]]) for bs in trie_groups(share, len(prompts))]


def shared_logprobs(engine: Engine, prompts: list[list[EncodedPrompt]], keys=None) -> list[list[np.ndarray]]:
    """``engine.prompt_logprobs`` with the prompts of the items of one key in one trie, split back per item."""
    groups = trie_groups(keys, len(prompts))
    try:
        merged = engine.prompt_logprobs([[ep for b in bs for ep in prompts[b]] for bs in groups])
    except NonFiniteError as e:  # name the item and its own prompt index, not the merged trie's
        start = 0
        for b in groups[e.job]:
            if e.key[0] < start + len(prompts[b]):
                e.job, e.key = b, (e.key[0] - start, *e.key[1:])
                break
            start += len(prompts[b])
        raise
    out: list = [None] * len(prompts)
    for bs, lps in zip(groups, merged):
        start = 0
        for b in bs:
            out[b] = lps[start:start + len(prompts[b])]
            start += len(prompts[b])
    return out


@dataclass(frozen=True, eq=False)  # holds arrays: compared and hashed by identity
class SlotItem:
    """One item of a several-criteria run and what its slots are read with: the judge (``lm``), ``template``,
    ``rubric``, the item's own ``option_orders`` (K, n) and the run's ``criterion_orders`` (K, C), aligned row by
    row; ``max_length``: the longest prompt and label the engine takes (default: the judge's context)."""

    lm: Any
    template: Any
    rubric: Any
    item: Any
    option_orders: np.ndarray
    criterion_orders: np.ndarray
    max_length: int | str = "judge"

    def encode(self, answers, k: int) -> EncodedPrompt:
        """Ordering ``k``'s prompt for the slot after ``answers`` (the labels written so far)."""
        req = slot_request(self.item, self.option_orders[k], self.criterion_orders[k], answers, k)
        return encode(self.lm, self.template, self.rubric, req, max_length=self.max_length)

    def criterion(self, k: int, j: int):
        """The criterion ordering ``k`` shows in slot ``j``."""
        return self.rubric.criteria[self.criterion_orders[k][j]]


def greedy_item(engine: Engine, ctx: SlotItem):
    """(probs[C, K, n], mass[C, K]) of one item, earlier slots holding their most probable label."""
    K, C, n = len(ctx.option_orders), ctx.rubric.n_criteria, ctx.rubric.n_options
    probs, mass = np.zeros((C, K, n)), np.zeros((C, K))
    answers: list[list[str]] = [[] for _ in range(K)]
    cached: list = [None] * K  # (token ids, PrefixKV) of each ordering's context so far
    for j in range(C):
        eps, jobs = greedy_slot(ctx, answers, cached)
        results = engine.evaluate(jobs)
        if j == 0:  # one trie over all orderings
            results = [results[0]] * K
        for k, ep in enumerate(eps):
            c = ctx.criterion_orders[k][j]
            p, m_ = distribution(continuation_logprobs(results[k].logprobs, ep, k))
            probs[c, k], mass[c, k] = p, m_
            answers[k].append(ctx.rubric.criteria[c].options[int(np.argmax(p))].label)
            cached[k] = (list(ep.prompt_ids), results[k].caches[("ctx", k)])
    return probs, mass


def greedy_slot(ctx: SlotItem, answers, cached):
    """The next slot of every ordering: its encoded prompts and the engine jobs that read its labels.
    ``answers[k]``: the labels written so far in ordering k; ``cached[k]``: (token ids, PrefixKV or None) of its
    context so far (None at slot 0, where one trie holds every ordering: the text is shared by all of them)."""
    eps = [ctx.encode(answers[k], k) for k in range(len(answers))]
    if not answers[0]:
        seqs, reads, ends = [], [], []
        for k, ep in enumerate(eps):
            s, r = label_reads(ep, k)
            seqs += s + [list(ep.prompt_ids)]
            reads += r + [[]]
            ends += [None] * len(s) + [("ctx", k)]
        return eps, [Job(seqs, reads, keep=ends)]
    jobs = []
    for k, ep in enumerate(eps):
        toks, pkv = cached[k]
        # the cache is cut back to the tokens the new context shares with it (merges across the answer boundary)
        m = _common_prefix(toks, ep.prompt_ids, limit=len(ep.prompt_ids) - 1)
        s, r = label_reads(ep, k, m)
        jobs.append(Job(s + [list(ep.prompt_ids[m:])], r + [[]], prefix=None if pkv is None else pkv.truncate(m),
                        keep=[None] * len(s) + [("ctx", k)]))
    return eps, jobs


def greedy_jobs(ctx: SlotItem) -> list[Job]:
    """Every slot's jobs of one item as if the judge answered each criterion's first label: the token count a
    run plans with (an estimate: the real answers, and so the later slots' prompts, come from the judge)."""
    K = len(ctx.option_orders)
    answers: list[list[str]] = [[] for _ in range(K)]
    cached: list = [None] * K
    out = []
    for j in range(ctx.rubric.n_criteria):
        eps, jobs = greedy_slot(ctx, answers, cached)
        out += jobs
        for k, ep in enumerate(eps):
            answers[k].append(ctx.criterion(k, j).options[0].label)
            cached[k] = (list(ep.prompt_ids), None)
    return out


def _common_prefix(a, b, *, limit: int) -> int:
    m = 0
    for x, y in zip(a, b):
        if x != y or m >= limit:
            break
        m += 1
    return m


def marginal_item(engine: Engine, ctx: SlotItem):
    """(probs[C, K, n], mass[C, K]) of one item, each slot's exact marginal over the earlier answers."""
    K, C, n = len(ctx.option_orders), ctx.rubric.n_criteria, ctx.rubric.n_options
    job, eps = marginal_job(ctx)
    lps = engine.evaluate([job])[0].logprobs
    probs, mass = np.zeros((C, K, n)), np.zeros((C, K))
    for k in range(K):
        weight = {(): 1.0}  # P(path) under the renormalised slot distributions
        for j in range(C):
            c = ctx.criterion_orders[k][j]
            nxt = {}
            for path, w in weight.items():
                p, m_ = distribution(continuation_logprobs(lps, eps[(k, path)], (k, path)))
                probs[c, k] += w * p
                mass[c, k] += w * m_
                for a in range(n):
                    nxt[path + (a,)] = w * p[a]
            weight = nxt
    return probs, mass


def marginal_job(ctx: SlotItem) -> tuple[Job, dict]:
    """The one job of an item in marginal mode (every slot context of every answer path, one trie) and its
    encoded prompts by (ordering, path)."""
    n = ctx.rubric.n_options
    seqs, reads, eps = [], [], {}
    for k in range(len(ctx.option_orders)):
        for j in range(ctx.rubric.n_criteria):
            for path in itertools.product(range(n), repeat=j):
                ep = ctx.encode([ctx.criterion(k, i).options[a].label for i, a in enumerate(path)], k)
                eps[(k, path)] = ep
                s, r = label_reads(ep, (k, path))
                seqs += s
                reads += r
    return Job(seqs, reads), eps


def marginal_jobs(ctx: SlotItem) -> list[Job]:
    """The jobs marginal mode runs for one item (its one job): the exact count a run plans with."""
    return [marginal_job(ctx)[0]]


@dataclass(frozen=True)
class SlotMode:
    """A slot mode's steps: ``score`` (engine, item) -> (probs, mass), ``jobs`` (item) -> the engine jobs a run
    counts its planned tokens from, and ``estimate``: why that count is only an estimate ("" when exact)."""

    score: Callable[[Engine, SlotItem], tuple]
    jobs: Callable[[SlotItem], list[Job]]
    estimate: str = ""


# by the names slots.SLOT_MODES checks before any model loads
SLOT_STEPS = {
    "greedy": SlotMode(greedy_item, greedy_jobs,
                       estimate="an estimate: the slots after the first follow the judge's answers"),
    "marginal": SlotMode(marginal_item, marginal_jobs),
}
assert tuple(SLOT_STEPS) == SLOT_MODES
