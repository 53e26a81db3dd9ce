"""One scoring run: fingerprint, checkpoint, rank sharding, progress, meta, table assembly and the atomic save.

The same run drives single-criterion scoring (a step per batch of items, :func:`logitjudge.steps.score_batch`)
and multi-criteria scoring (a step per item, the slot algorithms of :mod:`logitjudge.steps`). The batch plan is fixed
from this rank's whole item list in fixed windows, whatever is already done, and each batch is checkpointed as
one record, so a resumed run forms exactly the batches of an uninterrupted one and its table is equal bit for
bit. Under torchrun every rank scores its share with its own checkpoint; rank 0 writes the gathered table.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from . import distributed
from .checkpoint import Checkpoint
from .engine import Engine, EngineError, NonFiniteError
from .orderings import fixed, validate
from .prompts import load_template
from .requests import check_orders, default_template, item_prompts, orders_of
from .steps import SLOT_FUNCTIONS, WINDOW, MultiCriteriaError, check_slots, plan_batches, score_batch
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
    """Score ``items`` under ``rubric``: single-criterion, or with ``criterion_orders`` (aligned with the option
    orders, K rows each) all criteria in one prompt, read slot by slot (``slots``: greedy | marginal).

    ``option_orders``: (K, n) shared by every item, or (I, K, n) per item. Everything is checked here, before
    any prompt runs.
    """

    def __init__(self, lm, items, rubric, option_orders=None, *, criterion_orders=None, template=None,
                 engine: Engine | None = None, out=None, slots: str = "greedy", max_continuations: int = 20000,
                 progress: bool = True, meta: dict | None = None):
        self.multi = criterion_orders is not None
        self.template = load_template(template or default_template(self.multi))
        rubric.validate(need_descriptions=self.template.needs_descriptions
                        and "{description}" in self.template.option_line)
        if not items:
            raise ValueError("no items to score")
        ids = [it.id for it in items]
        if len(set(ids)) != len(ids):
            raise ValueError("item ids must be unique")
        n = rubric.n_options
        self.option_orders = check_orders(fixed(n) if option_orders is None else option_orders, n, len(items))
        K = self.option_orders.shape[-2]
        extra = {"mode": "single"}
        if self.multi:
            self.criterion_orders = validate(criterion_orders, rubric.n_criteria)
            if len(self.criterion_orders) != K:
                raise MultiCriteriaError(f"{K} option orders but {len(self.criterion_orders)} criteria orders; they "
                                         "must be aligned row by row (use orderings.cross to combine them)")
            check_slots(slots, n, rubric.n_criteria, max_continuations)
            extra = {"mode": "multi", "slots": slots, "criterion_orders": self.criterion_orders.tolist()}
        else:
            self.criterion_orders = np.tile(np.arange(rubric.n_criteria), (K, 1))
        self.lm, self.items, self.rubric, self.slots = lm, list(items), rubric, slots
        self.engine = engine or Engine(lm)
        self.out, self.progress, self.meta = out, progress, dict(meta or {})
        extra.update(token_budget=self.engine.token_budget, prefix_mode=self.engine.prefix_mode)
        self.fingerprint = run_fingerprint(lm, rubric, self.items, self.option_orders, self.template, extra)

    # ---- the plan --------------------------------------------------------------------------------------------
    def batches(self, owned: list[int], done: dict):
        """(item indices, step) per batch not yet done, in the plan's order: windows of the owned items, batched
        by length within each window (single-criterion) or one item per batch (multi-criteria)."""
        for w in range(0, len(owned), WINDOW):
            window = owned[w:w + WINDOW]
            if all(self.items[i].id in done for i in window):
                continue
            if self.multi:
                for i in window:
                    if self.items[i].id not in done:
                        yield [i], self._slot_step
                continue
            prompts = [item_prompts(self.lm, self.rubric, self.items[i], orders_of(self.option_orders, i),
                                    self.template) for i in window]
            for batch in plan_batches(prompts, self.engine.token_budget):
                if any(self.items[window[b]].id not in done for b in batch):
                    yield [window[b] for b in batch], (lambda idx, ps=[prompts[b] for b in batch]:
                                                       score_batch(self.engine, ps, self.rubric.n_criteria))

    def _slot_step(self, idx: list[int]) -> list[tuple]:
        fn = SLOT_FUNCTIONS[self.slots]
        return [fn(self.engine, self.lm, self.template, self.rubric, self.items[i], orders_of(self.option_orders, i),
                   self.criterion_orders) for i in idx]

    # ---- the run ---------------------------------------------------------------------------------------------
    def execute(self) -> ScoreTable:
        """Score what is not done yet, save the table at ``out`` (if given) and return it."""
        previous = self._finished_table()
        if previous is not None:
            return previous
        world = distributed.current(self.lm.device)
        ckpt = Checkpoint(self.out, self.fingerprint, tag=f".rank{world.rank}" if world.active else "")
        try:
            t0 = time.perf_counter()
            from logitjudge_kernels.dispatch import recording

            with recording() as self.kernel_record:  # what the kernels' dispatcher ran: meta["kernels"]
                done = self.records(ckpt, world)
            table = self.table(done, time.perf_counter() - t0, world.size)
            if self.out is not None:
                if world.rank == 0:
                    self._save(table, ckpt)
                world.barrier()
        except BaseException:
            ckpt.close()  # the finished batches stay for a resume; the lock is released
            raise
        ckpt.finish()
        return table

    def _save(self, table: ScoreTable, ckpt: Checkpoint) -> None:
        try:
            table.save(self.out)
        except OSError as e:
            raise OSError(e.errno, f"{e.strerror}; the finished items are kept in {ckpt.path}: free space and run "
                                   "the same command again to save the table without scoring again") from None

    def records(self, ckpt: Checkpoint, world: distributed.World | None = None) -> dict:
        """Score this rank's batches not yet in ``ckpt`` (each saved as one record); every rank's records."""
        world = world or distributed.World()
        owned = world.shard(len(self.items))
        bar = _progress(len(owned), sum(self.items[i].id in ckpt.done for i in owned),
                        self.progress and world.rank == 0)
        for idx, step in self.batches(owned, ckpt.done):
            try:
                results = step(idx)
            except NonFiniteError as e:
                raise EngineError(self._non_finite(e, idx)) from None
            ckpt.add_batch({self.items[i].id: rec for i, rec in zip(idx, results)})
            bar.update(len(idx))
        bar.close()
        return world.gather(ckpt.done)

    def _non_finite(self, e: NonFiniteError, idx: list[int]) -> str:
        """Non-finite logits named by item (and, single-criterion, criterion and ordering): never written."""
        where = f"item {self.items[idx[0] if self.multi else idx[e.job]].id!r}"
        if not self.multi:
            c, k = divmod(e.key[0], self.option_orders.shape[-2])
            where += f", criterion {self.rubric.criteria[c].name!r}, ordering {k}"
        return (f"the model returned non-finite logits ({e.value}) for {where}; nothing was written for it. Check "
                "the model's weights, or run in fp32 (--dtype fp32) if it overflows in half precision")

    def _finished_table(self) -> ScoreTable | None:
        """The table already at ``out`` when it holds these settings (a rerun reuses it)."""
        if self.out is None or not Path(self.out).exists():
            return None
        try:
            old = ScoreTable.load(self.out)
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
        meta = run_meta(self.lm, rubric, self.template, self.engine, elapsed, getattr(self, "kernel_record", None))
        meta.update(fingerprint=self.fingerprint, world_size=world_size)
        if self.multi:
            meta.update(multi_criteria=True, slots=self.slots)
        meta.update(self.meta)
        return ScoreTable(np.stack([np.asarray(done[it.id][0]) for it in items]),
                          np.stack([np.asarray(done[it.id][1]) for it in items]),
                          self.option_orders, self.criterion_orders, np.array([c.values for c in rubric.criteria]),
                          [it.id for it in items], [c.name for c in rubric.criteria],
                          [it.group for it in items] if any(it.group for it in items) else None, meta)


def run_meta(lm, rubric, template, engine, elapsed: float, kernel_record=None) -> dict:
    import torch
    import transformers

    from . import __version__

    return {"model_id": lm.model_id, "revision": lm.revision, "dtype": lm.dtype, "device": lm.device,
            "model_source": lm.info, "rubric": rubric.to_dict(), "template": asdict(template),
            "prefix_mode": engine.prefix_mode, "token_budget": engine.token_budget,
            "torch_threads": torch.get_num_threads(), "kernels": kernel_backends(kernel_record),
            "versions": {"logitjudge": __version__, "torch": torch.__version__,
                         "transformers": transformers.__version__, "numpy": np.__version__},
            "timings": {"score_seconds": elapsed}, "engine_stats": dict(engine.stats), **engine.mode_meta,
            "dtype_choice": {**lm.info.get("dtype_choice", {"asked": lm.dtype, "chosen": lm.dtype}),
                             "gemm_route": engine.gemm_route}}


def kernel_backends(kernel_record) -> dict:
    """What ran, as the kernels' dispatcher recorded it during the scoring (``logitjudge_kernels.dispatch``): per
    kernel (attention, readout, rms_norm, residual_rms_norm, qk_norm_rope) the implementations that ran (C, aten,
    torch, triton) with their shape buckets and call counts, and the choice behind each bucket (measured rates,
    or why it was forced). A kernel that did not run (e.g. attention inside transformers' own modules) is absent;
    nothing is re-derived. Empty when nothing was scored in this process (a resumed run's finished batches)."""
    return {} if kernel_record is None else kernel_record.as_meta()


def _progress(total: int, done: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, disable=not enabled, unit="item", desc="scoring")
