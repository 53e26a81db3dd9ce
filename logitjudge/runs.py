"""A run: one resumable table made on one set of rails: fingerprint, checkpoint and its lock, rank sharding,
progress, meta, table assembly and the atomic save.

:class:`Run` scores: single-criterion (a step per batch of items, :func:`logitjudge.steps.score_batch`) and
multi-criteria (a step per item, the slot algorithms of :mod:`logitjudge.steps`).
:class:`~logitjudge.probing.run.ProbeRun` probes the judge's internals on the same rails (a step per item,
:func:`logitjudge.probing.steps.probe_item`). The batch plan
is fixed from this rank's whole item list in fixed windows, whatever is already done, and each batch is
checkpointed as one record, so a resumed run forms exactly the batches of an uninterrupted one and its table is
equal bit for bit. Under torchrun every rank runs its share with its own checkpoint; rank 0 writes the gathered
table.

A run's prompts are one :class:`~logitjudge.requests.RequestPlan` (given, e.g. the preflight's, or made here):
each prompt is encoded once, when first read, and kept for the run's later readers within its memory bound.

Progress (:mod:`logitjudge.progress`): before the first forward a run counts what it will do from its planned
prompts (the batches' engine jobs, whose trie tokens the engine counts without the model), prints one line, and
hands the engine a callback that moves the bar after every forward call. An interrupt (Ctrl-C, SIGTERM) leaves
as :class:`~logitjudge.progress.Interrupted`, counting the items the checkpoint holds.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from . import distributed, provenance
from .checkpoint import SCORES, Checkpoint, CheckpointError, scan
from .engine import Engine as NativeEngine
from .engine import EngineError, Job, NonFiniteError
from .engines.base import Engine
from .errors import LogitJudgeError
from .orderings import fixed, validate
from .progress import Interrupted, Plan, Progress
from .prompts import chat_meta, default_template, load_template, shows_descriptions
from .requests import RequestPlan, orders_of, token_meta
from .slots import MultiCriteriaError, check_slots
from .steps import (
    SLOT_FUNCTIONS,
    SLOT_JOBS,
    WINDOW,
    batch_jobs,
    plan_batches,
    score_batch,
)
from .table import ScoreTable, TableError, bad_distributions

log = logging.getLogger(__name__)

def run_fingerprint(lm, rubric, items, option_orders, template, extra: dict | None = None) -> str:
    """Identifies the scores: model, rubric, template, orderings, texts and the settings in ``extra``."""
    h = hashlib.sha256()
    for part in (lm.model_id, lm.revision, lm.dtype, json.dumps(rubric.to_dict(), sort_keys=True),
                 json.dumps(asdict(template), sort_keys=True), np.asarray(option_orders).tobytes(),
                 json.dumps(extra or {}, sort_keys=True, default=str)):
        h.update(str(part).encode() if not isinstance(part, bytes) else part)
    for it in items:
        h.update(json.dumps([it.id, it.text, it.context]).encode())
    return h.hexdigest()[:16]


class RunError(LogitJudgeError, ValueError):
    """Items or settings a run cannot start with."""


@dataclass
class Batch:
    """One step of a run's plan: the item indices ``idx``, the ``step`` that computes their records, the
    ``prompts`` it runs and ``jobs``, the engine jobs it will evaluate (None: it does not go through the engine),
    built only when a run counts its planned tokens."""

    idx: list[int]
    step: Callable[[list[int]], list]
    prompts: int
    jobs: Callable[[], list[Job]] | None = None


class Run:
    """Score ``items`` under ``rubric``: single-criterion, or with ``criterion_orders`` (aligned with the option
    orders, K rows each) all criteria in one prompt, read slot by slot (``slots``: greedy | marginal).

    ``option_orders``: (K, n) shared by every item, or (I, K, n) per item. ``request_plan``: the prompts'
    :class:`~logitjudge.requests.RequestPlan` made before the run (used when it holds these settings and the
    judge's tokenizer; else one is made here). Everything is checked here, before any prompt runs. The rails
    (:meth:`execute`) serve every run; a subclass sets what a step computes (:meth:`batches`), how an item's
    record is checkpointed (``codec``) and how the table is made (:meth:`table`).
    """

    label = "scoring"  # the progress bar's
    codec = SCORES  # an item's checkpoint record: (probs, label_mass)
    table_class = ScoreTable

    def __init__(self, lm, items, rubric, option_orders=None, *, criterion_orders=None, template=None,
                 engine: Engine | None = None, out=None, slots: str = "greedy", max_continuations: int = 20000,
                 progress: bool = True, meta: dict | None = None, request_plan: RequestPlan | None = None):
        self.multi = criterion_orders is not None
        self._setup(lm, items, rubric, option_orders, template or default_template(self.multi), engine, out,
                    progress, meta)
        self.request_plan = self._request_plan(request_plan, self.items)
        K = self.option_orders.shape[-2]
        extra = {"mode": "single"}
        if self.multi:
            self.criterion_orders = validate(criterion_orders, rubric.n_criteria)
            if len(self.criterion_orders) != K:
                raise MultiCriteriaError(f"{K} option orders but {len(self.criterion_orders)} criteria orders; they "
                                         "must be aligned row by row (use orderings.cross to combine them)")
            check_slots(slots, rubric.n_options, rubric.n_criteria, max_continuations)
            extra = {"mode": "multi", "slots": slots, "criterion_orders": self.criterion_orders.tolist()}
        else:
            self.criterion_orders = np.tile(np.arange(rubric.n_criteria), (K, 1))
        self.slots = slots
        extra.update(token_budget=self.engine.token_budget, prefix_mode=self.engine.prefix_mode)
        self.fingerprint = run_fingerprint(lm, rubric, self.items, self.option_orders, self.template, extra)

    def _setup(self, lm, items, rubric, option_orders, template, engine, out, progress, meta) -> None:
        """What every run checks and holds: template, rubric, unique items, option orders, the engine."""
        self.template = load_template(template).require("pointwise")  # candidates run as a CandidateRun
        rubric.validate(need_descriptions=shows_descriptions(self.template))
        if not items:
            raise RunError("no items to score")
        ids = [it.id for it in items]
        if len(set(ids)) != len(ids):
            raise RunError("item ids must be unique")
        n = rubric.n_options
        self.option_orders = validate(fixed(n) if option_orders is None else option_orders, n, per_item=True,
                                      n_items=len(items))
        self.lm, self.items, self.rubric = lm, list(items), rubric
        self.engine = engine or NativeEngine(lm)
        self.out, self.progress, self.meta = out, progress, dict(meta or {})

    def _request_plan(self, given: RequestPlan | None, units: list) -> RequestPlan:
        """``given`` when it holds this run's prompts, encoded by the judge's own tokenizer (then held to the
        judge's context), else a plan made here."""
        context = self.lm.max_length_on(self.engine)
        if given is not None and given.tokenizer is self.lm.tokenizer and given.fits(units, self.rubric,
                                                                                     self.option_orders,
                                                                                     self.template):
            given.max_length = context
            return given
        return RequestPlan(self.lm, self.template, self.rubric, units, self.option_orders, max_length=context)

    def check_record(self, item_id: str, record) -> str | None:
        """Why a checkpoint record read back does not fit this run (None: it does): an item the run does not
        have, arrays of other shapes than (criteria, orderings, options) and (criteria, orderings), or
        probabilities a table may not hold."""
        if item_id not in {it.id for it in self.items}:
            return "not an item of this run"
        want = (self.rubric.n_criteria, self.option_orders.shape[-2], self.rubric.n_options)
        if len(record) != 2:
            return f"{len(record)} arrays where a score record has 2 (probs, label_mass)"
        for name, a, shape in (("probs", record[0], want), ("label_mass", record[1], want[:2])):
            if a.shape != shape or not np.issubdtype(a.dtype, np.number):
                return f"{name} of shape {a.shape} ({a.dtype}) where this run's are {shape}"
        why = next((w for bad, w in bad_distributions(record[0]) if bad.any()), None)
        return f"probabilities that {why}" if why else None

    # ---- the plan --------------------------------------------------------------------------------------------
    def batches(self, owned: list[int], done: dict, *, keep: bool = False):
        """The :class:`Batch` es not yet done, in the plan's order: windows of the owned items, batched by length
        within each window (single-criterion) or one item per batch (multi-criteria). ``keep``: leave the prompts
        read in the request plan for the next pass (within its bound); else this pass is their last reader."""
        K, C = self.option_orders.shape[-2], self.rubric.n_criteria
        for w in range(0, len(owned), WINDOW):
            window = owned[w:w + WINDOW]
            if all(self.items[i].id in done for i in window):
                continue
            if self.multi:
                for i in window:
                    if self.items[i].id not in done:
                        yield Batch([i], self._slot_step, K * C, lambda i=i: SLOT_JOBS[self.slots](
                            self.lm, self.template, self.rubric, self.items[i], orders_of(self.option_orders, i),
                            self.criterion_orders, max_length=self.request_plan.max_length))
                continue
            prompts = [self.request_plan.prompts(i, keep=keep) for i in window]
            for batch in plan_batches(prompts, self.engine.token_budget):
                if any(self.items[window[b]].id not in done for b in batch):
                    ps, keys = [prompts[b] for b in batch], self.trie_keys([window[b] for b in batch])
                    yield Batch([window[b] for b in batch],
                                lambda idx, ps=ps, keys=keys: score_batch(self.engine, ps, self.rubric.n_criteria,
                                                                          share=keys),
                                sum(len(p) for p in ps), lambda ps=ps, keys=keys: batch_jobs(ps, keys))

    def item_prompts(self, i: int) -> list:
        """Item ``i``'s prompts (a candidate run: row ``i``'s), criterion-major (c * K + k), from the request
        plan."""
        return self.request_plan.prompts(i)

    def trie_keys(self, idx: list[int]) -> list | None:
        """Which items of a batch run as one token trie (:func:`logitjudge.steps.trie_groups`); None: each item
        its own (the items of a rubric run share nothing but the instructions)."""
        return None

    def plan(self, owned: list[int], ckpt: Checkpoint) -> Plan:
        """What the run still has to do, counted from its batches' prompts without the model (the start line
        and the bar's total). The encoded prompts stay in the request plan for the run (within its bound)."""
        prompts = batches = tokens = 0
        for b in self.batches(owned, ckpt.done, keep=True):
            batches += 1
            prompts += b.prompts
            tokens = None if tokens is None or b.jobs is None else tokens + self.engine.planned_tokens(b.jobs())
        estimate = ("an estimate: the slots after the first follow the judge's answers"
                    if self.multi and self.slots == "greedy" else "")
        return Plan(self.label, len(owned), sum(self.items[i].id in ckpt.done for i in owned), prompts, batches,
                    tokens, estimate, None if ckpt.path is None else str(ckpt.path))

    def _slot_step(self, idx: list[int]) -> list[tuple]:
        fn = SLOT_FUNCTIONS[self.slots]
        return [fn(self.engine, self.lm, self.template, self.rubric, self.items[i], orders_of(self.option_orders, i),
                   self.criterion_orders, max_length=self.request_plan.max_length) for i in idx]

    # ---- the run ---------------------------------------------------------------------------------------------
    def execute(self) -> ScoreTable:
        """Score what is not done yet, save the table at ``out`` (if given) and return it."""
        previous = self._finished_table()
        if previous is not None:
            return previous
        world = distributed.current(self.lm.device)
        ckpt = Checkpoint(self.out, self.fingerprint, tag=f".rank{world.rank}" if world.active else "",
                          codec=self.codec, check=self.check_record)
        try:
            t0 = time.perf_counter()
            done = self.records(ckpt, world)
            table = self.table(done, time.perf_counter() - t0, world.size)
            table.meta = provenance.merge_meta(table.meta, [it.id for it in self.items], self._written_by,
                                               ckpt.earlier, self._me)
            if self.out is not None:
                if world.rank == 0:
                    self._save(table, ckpt)
                world.barrier()
        except KeyboardInterrupt:
            ckpt.close()  # the finished batches stay for a resume; the lock is released
            raise Interrupted(_saved_items(ckpt), len(world.shard(len(self.items))), ckpt.path,
                              self.label) from None
        except BaseException:
            ckpt.close()
            raise
        ckpt.finish()
        return table

    def _save(self, table, ckpt: Checkpoint) -> None:
        try:
            table.save(self.out)
        except OSError as e:
            raise OSError(e.errno, f"{e.strerror}; the finished items are kept in {ckpt.path}: free space and run "
                                   "the same command again to save the table without scoring again") from None

    def records(self, ckpt: Checkpoint, world: distributed.World | None = None) -> dict:
        """Score this rank's batches not yet in ``ckpt`` (each saved as one record); every rank's records."""
        world = world or distributed.World()
        owned = world.shard(len(self.items))
        self._me = provenance.writer(self.lm.device, self.engine.gemm_route)
        show = self.progress and world.rank == 0
        bar = Progress(self.plan(owned, ckpt) if show else None)
        listening = self.engine.on_forward
        if bar.unit == "tokens":
            self.engine.on_forward = bar.advance  # the bar moves per forward call, not per batch
        try:
            for b in self.batches(owned, ckpt.done):
                before = provenance.snapshot(self.engine)
                try:
                    results = b.step(b.idx)
                except NonFiniteError as e:
                    raise EngineError(self._non_finite(e, b.idx)) from None
                ckpt.add_batch({self.items[i].id: rec for i, rec in zip(b.idx, results)},
                               provenance.record_by(self._me, before, provenance.snapshot(self.engine)))
                bar.saved(len(b.idx))
        finally:
            self.engine.on_forward = listening
            bar.close()
        self._written_by = world.gather(ckpt.written_by)  # every rank's rows' writers, for the meta
        return world.gather(ckpt.done)

    def _non_finite(self, e: NonFiniteError, idx: list[int]) -> str:
        """Non-finite logits named by item (and, single-criterion, criterion and ordering): never written."""
        where = f"item {self.items[idx[0] if self.multi else idx[e.job]].id!r}"
        if not self.multi:
            c, k = divmod(e.key[0], self.option_orders.shape[-2])
            where += f", criterion {self.rubric.criteria[c].name!r}, ordering {k}"
        return (f"the model returned non-finite logits ({e.value}) for {where}; nothing was written for it. Check "
                "the model's weights, or run in fp32 (--dtype fp32) if it overflows in half precision")

    def _finished_table(self):
        """The table already at ``out`` when it holds these settings (a rerun reuses it)."""
        if self.out is None or not Path(self.out).exists():
            return None
        try:
            old = self.table_class.load(self.out)
        except TableError:
            old = None
        if old is not None and old.meta.get("fingerprint") == self.fingerprint:
            log.info("%s holds these settings already; reusing it", self.out)
            return old
        log.warning("%s holds a table of other settings (or no readable table); this run replaces it", self.out)
        return None

    def table(self, done: dict, elapsed: float, world_size: int = 1) -> ScoreTable:
        """The ScoreTable of finished records ``{item_id: (probs, label_mass)}``, in the items' order."""
        items, rubric = self.items, self.rubric
        meta = run_meta(self.lm, rubric, self.template, self.engine, elapsed, self.request_plan)
        meta.update(fingerprint=self.fingerprint, world_size=world_size)
        if self.multi:
            meta.update(multi_criteria=True, slots=self.slots)
        meta.update(self.meta)
        return ScoreTable(np.stack([np.asarray(done[it.id][0]) for it in items]),
                          np.stack([np.asarray(done[it.id][1]) for it in items]),
                          self.option_orders, self.criterion_orders, np.array([c.values for c in rubric.criteria]),
                          [it.id for it in items], [c.name for c in rubric.criteria],
                          [it.group for it in items] if any(it.group for it in items) else None, meta)


class GroupedRun(Run):
    """A pointwise run whose items of one ``group`` (else each item alone) run as one token trie: best-of-N
    candidates (or an RL policy's completions) answering one prompt are scored with the prompt (the items'
    ``context``) computed once. The trie merges only identical token prefixes, so every number is the per-item
    run's up to fp32 reassociation (a batch split); the parity test against the plain forward is in
    ``tests/test_reward.py``."""

    def trie_keys(self, idx: list[int]) -> list:
        return [self.items[i].group or f"\0{self.items[i].id}" for i in idx]


def score(lm, items, rubric, option_orders=None, *, template=None, engine: Engine | None = None, out=None,
          progress: bool = True, meta: dict | None = None) -> ScoreTable:
    """Exact option distributions of every (item, criterion, ordering) in one ScoreTable (a :class:`Run`).

    ``option_orders``: (K, n) shared by every item or (I, K, n) per item (default: the canonical order once).
    With ``out``, finished batches are checkpointed and the table is saved there; an interrupted run started
    again with the same ``out`` continues where it stopped.
    """
    return Run(lm, items, rubric, option_orders, template=template, engine=engine, out=out, progress=progress,
               meta=meta).execute()


def score_multi(lm, items, rubric, option_orders, criterion_orders, *, template=None, engine: Engine | None = None,
                out=None, slots: str = "greedy", max_continuations: int = 20000, progress: bool = True,
                meta: dict | None = None) -> ScoreTable:
    """Several criteria in one prompt: per-slot distributions, indexed by the canonical criterion,
    ``probs[item, criterion, ordering, option]`` (a :class:`Run`; the slot algorithms are in
    :mod:`logitjudge.steps`). ``option_orders`` and ``criterion_orders`` are aligned (K rows each); use
    ``orderings.cross`` to combine every option order with every criteria order."""
    return Run(lm, items, rubric, option_orders, criterion_orders=criterion_orders, template=template, engine=engine,
               out=out, slots=slots, max_continuations=max_continuations, progress=progress, meta=meta).execute()


def score_grouped(lm, items, rubric, option_orders=None, *, template=None, engine=None, out=None,
                  progress: bool = True, meta: dict | None = None) -> ScoreTable:
    """:func:`score` with the items of one group on one token trie (:class:`GroupedRun`)."""
    return GroupedRun(lm, items, rubric, option_orders, template=template, engine=engine, out=out,
                      progress=progress, meta=meta).execute()


def planned_tokens(run: Run) -> int:
    """The tokens ``run`` will forward (each trie node's segment once, as its batches plan them), counted from
    the encoded prompts without the model: the exact cost."""
    total = 0
    for batch in run.batches(list(range(len(run.items))), {}):
        total += run.engine.planned_tokens(batch.jobs())
    return total


ENGINE_HEAD = ("prefix_mode", "token_budget", "batch_tokens")  # the engine's meta keys written before the run's own


def run_meta(lm, rubric, template, engine: Engine, elapsed: float, plan: RequestPlan) -> dict:
    """The table's meta: the judge, its tokens (``plan``: the run's prompts, :func:`token_meta`), rubric and
    template, the engine's :meth:`~logitjudge.engines.base.Engine.meta` and the versions, in the order tables have
    always written them."""
    import torch
    import transformers

    from . import __version__

    em = engine.meta()
    return {"model_id": lm.model_id, "revision": lm.revision, "dtype": lm.dtype, "device": lm.device,
            "model_source": dict(lm.info), "rubric": rubric.to_dict(), "template": asdict(template),
            "chat": chat_meta(template, lm.tokenizer), "tokens": token_meta(plan), **{k: em[k] for k in ENGINE_HEAD},
            "torch_threads": torch.get_num_threads(), "kernels": em["kernels"],
            "versions": {"logitjudge": __version__, "torch": torch.__version__,
                         "transformers": transformers.__version__, "numpy": np.__version__},
            "timings": {"score_seconds": elapsed},
            **{k: v for k, v in em.items() if k not in (*ENGINE_HEAD, "kernels")},  # engine_stats, its own
            "dtype_choice": {**lm.info.get("dtype_choice", {"asked": lm.dtype, "chosen": lm.dtype}),
                             "gemm_route": engine.gemm_route}}


def _saved_items(ckpt: Checkpoint) -> int:
    """The items a resume will find in the checkpoint, read back from its file (an interrupt can land between a
    record's write and the run's own count of it)."""
    if ckpt.path is None or not ckpt.path.exists():
        return 0 if ckpt.path is not None else len(ckpt.done)
    try:
        _, good, _, _ = scan(ckpt.path)
    except (CheckpointError, OSError):
        return len(ckpt.done)
    return len({rec_item[0] for rec in good for rec_item in rec.get("items", [])})
