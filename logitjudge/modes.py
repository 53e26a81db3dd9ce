"""A run's mode: how it forms its batches, what a step computes and how its table is made. The rails (fingerprint,
checkpoint, sharding, progress, meta, the save) are :class:`logitjudge.runs.Run`'s; a Run holds one mode and asks it
at each of the few points where modes differ, so the rails read as one straight line.

* :class:`PointwiseSteps`: single-criterion, a step per batch of items (:func:`logitjudge.steps.score_batch`);
  :class:`GroupedSteps`: the same, the items of one group on one token trie.
* :class:`SlotSteps`: several criteria in one prompt, a step per item (the slot modes of :mod:`logitjudge.steps`).
* :class:`~logitjudge.paradigm_run.CandidateSteps`: pairwise and listwise rows; and
  :class:`~logitjudge.probing.run.ProbeSteps`: the judge's internals.

Batches are planned from this rank's whole item list in fixed windows, whatever is already done, so a resumed run
forms exactly the batches of an uninterrupted one and its table is equal bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .checkpoint import SCORES
from .engine import Job, NonFiniteError
from .errors import LogitJudgeError
from .orderings import validate
from .prompts import default_template, load_template
from .requests import RequestPlan, orders_of
from .slots import MultiCriteriaError, check_slots
from .steps import SLOT_STEPS, WINDOW, SlotItem, batch_jobs, plan_batches, score_batch
from .table import ScoreTable, bad_distributions


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


class Steps:
    """What every mode answers. The defaults are a rubric run's (pointwise prompts of a run's items); the Run
    that holds the mode (one run per mode) is :attr:`run` from :meth:`attach` on, once the shared settings are
    checked."""

    label = "scoring"  # the progress bar's
    codec = SCORES  # an item's checkpoint record
    table_class = ScoreTable
    estimate = ""  # why the plan's token count is only an estimate ("": it is exact)
    run = None

    def template(self, given, rubric):
        """The run's template, loaded and checked (a rubric run's prompts show the rubric: check it against them)."""
        template = load_template(given or default_template(False)).require("pointwise")
        rubric.validate(need_descriptions=template.shows_descriptions)
        return template

    def items(self, given: list) -> list:
        """The items on the rails (checkpoint keys, sharding, progress), checked: some, and each id once."""
        if not given:
            raise RunError("no items to score")
        ids = [it.id for it in given]
        if len(set(ids)) != len(ids):
            raise RunError("item ids must be unique")
        return list(given)

    def n_options(self, rubric, template) -> int:
        return rubric.n_options

    def attach(self, run, request_plan: RequestPlan | None) -> None:
        """Hold ``run`` (its shared settings checked) and make and check what this mode needs of it."""
        self.run = run

    def settings(self) -> dict:
        """What identifies this mode's numbers beyond the shared settings (the fingerprint's extra)."""
        return {}

    def fingerprinted_items(self) -> list:
        """The texts the fingerprint holds (a candidate run: its candidates, not its rows)."""
        return self.run.items

    def batches(self, owned: list[int], done: dict, *, keep: bool = False):
        """The :class:`Batch` es of ``owned`` not yet in ``done``, in the plan's order. ``keep``: leave the
        prompts read in the request plan for the next pass (within its bound)."""
        raise NotImplementedError

    def check_record(self, item_id: str, record) -> str | None:
        """Why a checkpoint record read back does not fit this run (None: it does)."""
        raise NotImplementedError

    def where(self, e: NonFiniteError, idx: list[int]) -> str:
        """Where a step's non-finite logits came from: the item (of a batch, the engine job's), its criterion and
        ordering (the job's prompt: criterion-major, c * K + k)."""
        run = self.run
        c, k = divmod(e.key[0], run.option_orders.shape[-2])
        return f"item {run.items[idx[e.job]].id!r}, criterion {run.rubric.criteria[c].name!r}, ordering {k}"

    def token_plan(self) -> RequestPlan:
        """The prompts whose tokens the table's meta describes."""
        return self.run.request_plan

    def table_meta(self, elapsed: float) -> dict:
        """This mode's keys of the table's meta, after the shared ones."""
        return {}

    def table(self, done: dict, meta: dict):
        """The table of the finished records ``done`` (by item id), in the items' order, with ``meta``."""
        raise NotImplementedError


class ScoreSteps(Steps):
    """A mode whose records are scores, (probs[C, K, n], label_mass[C, K]) per item, and whose table is a
    :class:`~logitjudge.table.ScoreTable`; its prompts are a :class:`~logitjudge.requests.RequestPlan`."""

    def attach(self, run, request_plan: RequestPlan | None) -> None:
        super().attach(run, request_plan)
        run.request_plan = self.request_plan(request_plan)
        self.criterion_orders = np.tile(np.arange(run.rubric.n_criteria), (run.option_orders.shape[-2], 1))

    def units(self) -> list:
        """What the request plan makes prompts of: the items (a candidate run: its rows)."""
        return self.run.items

    def request_plan(self, given: RequestPlan | None) -> RequestPlan:
        """``given`` when it holds this run's prompts, encoded by the judge's own tokenizer (then held to the
        judge's context), else a plan made here."""
        run, units = self.run, self.units()
        context = run.lm.max_length_on(run.engine)
        if given is not None and given.tokenizer is run.lm.tokenizer and given.fits(units, run.rubric,
                                                                                    run.option_orders, run.template):
            given.max_length = context
            return given
        return RequestPlan(run.lm, run.template, run.rubric, units, run.option_orders, max_length=context)

    def check_record(self, item_id: str, record) -> str | None:
        """Not fitting: an item the run does not have, arrays of other shapes than (criteria, orderings, options)
        and (criteria, orderings), or probabilities a table may not hold."""
        run = self.run
        if item_id not in {it.id for it in run.items}:
            return "not an item of this run"
        # options: the orders' (a candidate row shows its candidates and a tie, not the rubric's options)
        want = (run.rubric.n_criteria, *run.option_orders.shape[-2:])
        if len(record) != 2:
            return f"{len(record)} arrays where a score record has 2 (probs, label_mass)"
        for name, a, shape in (("probs", record[0], want), ("label_mass", record[1], want[:2])):
            if a.shape != shape or not np.issubdtype(a.dtype, np.number):
                return f"{name} of shape {a.shape} ({a.dtype}) where this run's are {shape}"
        why = next((w for bad, w in bad_distributions(record[0]) if bad.any()), None)
        return f"probabilities that {why}" if why else None

    def values(self) -> np.ndarray:
        """Each criterion's option values (C, n): what a score's expected value is made of."""
        return np.array([c.values for c in self.run.rubric.criteria])

    def groups(self) -> list | None:
        items = self.run.items
        return [it.group for it in items] if any(it.group for it in items) else None

    def table(self, done: dict, meta: dict) -> ScoreTable:
        run = self.run
        return ScoreTable(np.stack([np.asarray(done[it.id][0]) for it in run.items]),
                          np.stack([np.asarray(done[it.id][1]) for it in run.items]),
                          run.option_orders, self.criterion_orders, self.values(), [it.id for it in run.items],
                          [c.name for c in run.rubric.criteria], self.groups(), meta)


class PointwiseSteps(ScoreSteps):
    """Single-criterion: every (criterion, ordering) of an item is one prompt, an item's prompts one token trie;
    a step scores one batch of items, formed within fixed windows of the item list from the prompts' lengths
    alone (so a resumed run forms the batches an uninterrupted one does)."""

    def settings(self) -> dict:
        return {"mode": "single"}

    def trie_keys(self, idx: list[int]) -> list | None:
        """Which items of a batch run as one token trie (:func:`logitjudge.steps.trie_groups`); None: each item
        its own (the items of a rubric run share nothing but the instructions)."""
        return None

    def batches(self, owned: list[int], done: dict, *, keep: bool = False):
        run = self.run
        for w in range(0, len(owned), WINDOW):
            window = owned[w:w + WINDOW]
            if all(run.items[i].id in done for i in window):
                continue  # its prompts are not even encoded
            prompts = [run.request_plan.prompts(i, keep=keep) for i in window]
            for batch in plan_batches(prompts, run.engine.token_budget):
                if any(run.items[window[b]].id not in done for b in batch):
                    yield self._batch([window[b] for b in batch], [prompts[b] for b in batch])

    def _batch(self, idx: list[int], prompts: list) -> Batch:
        keys, run = self.trie_keys(idx), self.run
        return Batch(idx, lambda _: score_batch(run.engine, prompts, run.rubric.n_criteria, share=keys),
                     sum(len(p) for p in prompts), lambda: batch_jobs(prompts, keys))


class GroupedSteps(PointwiseSteps):
    """Pointwise, the items of one ``group`` (else each item alone) on one token trie: best-of-N candidates (or an
    RL policy's completions) answering one prompt are scored with the prompt (the items' ``context``) computed
    once. The trie merges only identical token prefixes, so every number is the per-item run's up to fp32
    reassociation (a batch split); the parity test against the plain forward is in ``tests/test_reward.py``."""

    def trie_keys(self, idx: list[int]) -> list:
        return [self.run.items[i].group or f"\0{self.run.items[i].id}" for i in idx]


class SlotSteps(ScoreSteps):
    """Several criteria in one prompt, read slot by slot (``slots``: a name of :data:`logitjudge.steps.SLOT_STEPS`,
    greedy | marginal) under ``criterion_orders`` (K rows, aligned with the option orders); a step scores one
    item."""

    def __init__(self, criterion_orders, slots: str = "greedy", max_continuations: int = 20000):
        self.given_orders, self.slots, self.max_continuations = criterion_orders, slots, max_continuations

    def template(self, given, rubric):
        return super().template(given or default_template(True), rubric)

    def attach(self, run, request_plan: RequestPlan | None) -> None:
        super().attach(run, request_plan)
        K, rubric = run.option_orders.shape[-2], run.rubric
        self.criterion_orders = validate(self.given_orders, rubric.n_criteria)
        if len(self.criterion_orders) != K:
            raise MultiCriteriaError(f"{K} option orders but {len(self.criterion_orders)} criteria orders; they "
                                     "must be aligned row by row (use orderings.cross to combine them)")
        check_slots(self.slots, rubric.n_options, rubric.n_criteria, self.max_continuations)
        self.mode = SLOT_STEPS[self.slots]
        self.estimate = self.mode.estimate

    def settings(self) -> dict:
        return {"mode": "multi", "slots": self.slots, "criterion_orders": self.criterion_orders.tolist()}

    def slot_item(self, i: int) -> SlotItem:
        run = self.run
        return SlotItem(run.lm, run.template, run.rubric, run.items[i], orders_of(run.option_orders, i),
                        self.criterion_orders, max_length=run.request_plan.max_length)

    def batches(self, owned: list[int], done: dict, *, keep: bool = False):
        """One item per batch (its slots depend on one another), in the owned order; the prompts are made in the
        step, so there is nothing to keep."""
        run = self.run
        prompts = run.option_orders.shape[-2] * run.rubric.n_criteria
        for i in owned:
            if run.items[i].id not in done:
                yield Batch([i], lambda _, i=i: [self.mode.score(run.engine, self.slot_item(i))], prompts,
                            lambda i=i: self.mode.jobs(self.slot_item(i)))

    def where(self, e: NonFiniteError, idx: list[int]) -> str:
        return f"item {self.run.items[idx[0]].id!r}"  # a slot's prompt follows the answers: the item says enough

    def table_meta(self, elapsed: float) -> dict:
        return {"multi_criteria": True, "slots": self.slots}


def score_steps(criterion_orders=None, slots: str = "greedy", max_continuations: int = 20000) -> ScoreSteps:
    """The mode of a rubric run: single-criterion, or with ``criterion_orders`` every criterion in one prompt."""
    if criterion_orders is None:
        return PointwiseSteps()
    return SlotSteps(criterion_orders, slots, max_continuations)
