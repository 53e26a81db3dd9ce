"""A run: one resumable table made on one set of rails: fingerprint, checkpoint and its lock, rank sharding,
progress, meta, table assembly and the atomic save.

:class:`Run` is the rails; what differs between runs is its mode (:mod:`logitjudge.modes`), which forms the
batches, computes a step and builds the table: single-criterion scores (a step per batch of items,
:func:`logitjudge.steps.score_batch`), several criteria in one prompt (a step per item, the slot modes of
:mod:`logitjudge.steps`), candidate rows (:class:`~logitjudge.paradigm_run.CandidateRun`) and the judge's internals
(:class:`~logitjudge.probing.run.ProbeRun`, a step per item, :func:`logitjudge.probing.steps.probe_item`). The
batch plan is fixed from this rank's whole item list in fixed windows, whatever is already done, and each batch is
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
from dataclasses import asdict
from pathlib import Path

import numpy as np

from . import distributed, provenance
from .checkpoint import Checkpoint, CheckpointError, scan
from .engine import Engine as NativeEngine
from .engine import EngineError, NonFiniteError
from .engines.base import Engine
from .modes import Batch, GroupedSteps, RunError, Steps, score_steps  # noqa: F401  (Batch, RunError: still runs')
from .orderings import fixed, validate
from .progress import Interrupted, Plan, Progress
from .prompts import chat_meta
from .requests import RequestPlan, token_meta
from .table import ScoreTable, TableError

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


class Run:
    """One resumable table: ``items`` scored (or probed) in the mode ``steps`` (:mod:`logitjudge.modes`) on the
    rails every mode shares. Without ``steps``, a rubric run: single-criterion, or with ``criterion_orders``
    (aligned with the option orders, K rows each) all criteria in one prompt, read slot by slot (``slots``: greedy
    | marginal, within ``max_continuations``; :func:`logitjudge.modes.score_steps`).

    ``option_orders``: (K, n) shared by every item, or (I, K, n) per item. ``request_plan``: the prompts'
    :class:`~logitjudge.requests.RequestPlan` made before the run (used when it holds these settings and the
    judge's tokenizer; else one is made here). Everything is checked here, before any prompt runs.
    """

    def __init__(self, lm, items, rubric, option_orders=None, *, criterion_orders=None, template=None,
                 engine: Engine | None = None, out=None, slots: str = "greedy", max_continuations: int = 20000,
                 progress: bool = True, meta: dict | None = None, request_plan: RequestPlan | None = None,
                 steps: Steps | None = None):
        if steps is not None and criterion_orders is not None:  # they would be dropped without a word
            raise RunError("criterion_orders choose a rubric run's mode: give them or steps, not both")
        self.steps = steps or score_steps(criterion_orders, slots, max_continuations)
        self.lm, self.rubric = lm, rubric
        self.template = self.steps.template(template, rubric)
        self.items = self.steps.items(items)
        n = self.steps.n_options(rubric, self.template)
        self.option_orders = validate(fixed(n) if option_orders is None else option_orders, n, per_item=True,
                                      n_items=len(self.items))
        self.engine = engine or NativeEngine(lm)
        self.out, self.progress, self.meta = out, progress, dict(meta or {})
        self.steps.attach(self, request_plan)
        extra = dict(self.steps.settings(), token_budget=self.engine.token_budget,
                     prefix_mode=self.engine.prefix_mode)
        self.fingerprint = run_fingerprint(lm, rubric, self.steps.fingerprinted_items(), self.option_orders,
                                           self.template, extra)

    def batches(self, owned: list[int], done: dict, *, keep: bool = False):
        """The :class:`Batch` es of ``owned`` not yet in ``done``, in the plan's order (the mode forms them)."""
        return self.steps.batches(owned, done, keep=keep)

    def plan(self, owned: list[int], ckpt: Checkpoint) -> Plan:
        """What the run still has to do, counted from its batches' prompts without the model (the start line
        and the bar's total). The encoded prompts stay in the request plan for the run (within its bound)."""
        prompts = batches = tokens = 0
        for b in self.batches(owned, ckpt.done, keep=True):
            batches += 1
            prompts += b.prompts
            tokens = None if tokens is None or b.jobs is None else tokens + self.engine.planned_tokens(b.jobs())
        return Plan(self.steps.label, len(owned), sum(self.items[i].id in ckpt.done for i in owned), prompts,
                    batches, tokens, self.steps.estimate, None if ckpt.path is None else str(ckpt.path))

    # ---- the run ---------------------------------------------------------------------------------------------
    def execute(self):
        """Compute what is not done yet, save the table at ``out`` (if given) and return it."""
        previous = self._finished_table()
        if previous is not None:
            return previous
        world = distributed.current(self.lm.device)
        ckpt = Checkpoint(self.out, self.fingerprint, tag=f".rank{world.rank}" if world.active else "",
                          codec=self.steps.codec, check=self.steps.check_record)
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
                              self.steps.label) from None
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
        """Run this rank's batches not yet in ``ckpt`` (each saved as one record); every rank's records."""
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
        """Non-finite logits named where the mode can place them: never written."""
        return (f"the model returned non-finite logits ({e.value}) for {self.steps.where(e, idx)}; nothing was "
                "written for it. Check the model's weights, or run in fp32 (--dtype fp32) if it overflows in half "
                "precision")

    def _finished_table(self):
        """The table already at ``out`` when it holds these settings (a rerun reuses it)."""
        if self.out is None or not Path(self.out).exists():
            return None
        try:
            old = self.steps.table_class.load(self.out)
        except TableError:
            old = None
        if old is not None and old.meta.get("fingerprint") == self.fingerprint:
            log.info("%s holds these settings already; reusing it", self.out)
            return old
        log.warning("%s holds a table of other settings (or no readable table); this run replaces it", self.out)
        return None

    def table(self, done: dict, elapsed: float, world_size: int = 1):
        """The table of finished records ``{item_id: record}``, in the items' order: the meta every table opens
        with (the judge, its tokens, the engine, the fingerprint), the mode's own keys, then the caller's."""
        meta = run_meta(self.lm, self.rubric, self.template, self.engine, elapsed, self.steps.token_plan())
        meta.update(fingerprint=self.fingerprint, world_size=world_size)
        meta.update(self.steps.table_meta(elapsed))
        meta.update(self.meta)
        return self.steps.table(done, meta)


class GroupedRun(Run):
    """A pointwise run whose items of one ``group`` (else each item alone) run as one token trie
    (:class:`~logitjudge.modes.GroupedSteps`)."""

    def __init__(self, lm, items, rubric, option_orders=None, **settings):
        super().__init__(lm, items, rubric, option_orders, steps=GroupedSteps(), **settings)


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
