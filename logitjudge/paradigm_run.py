"""Pairwise and listwise runs on the rails of :class:`~logitjudge.runs.Run`: the rows of
:mod:`logitjudge.candidates` scored like items.

A row's prompts (one per criterion and ordering, :func:`logitjudge.requests.candidate_requests`) are planned and
scored by the rubric's batches (:meth:`Run.batches`, :func:`logitjudge.steps.score_batch`); the rows of one group
in a batch run as one token trie, so the instructions and the group's context (a source article, a question)
are computed once for all its pairs. Checkpoint, resume, progress, meta and the atomic save are the Run's; the
table is a :class:`~logitjudge.table.ScoreTable` whose items are rows (layout in :mod:`logitjudge.candidates`).
"""

from __future__ import annotations

import numpy as np

from .candidates import POINTWISE, Row, candidate_ids, check_paradigm
from .engine import Engine as NativeEngine
from .engines.base import Engine
from .orderings import validate
from .prompts import default_template, load_template
from .requests import RequestPlan
from .runs import Run, RunError, run_fingerprint, run_meta
from .table import ScoreTable


def check_template(template, paradigm: str):
    """The template loaded (None: the built-in of the paradigm's name) and checked against the paradigm."""
    return load_template(template or default_template(False, paradigm)).require(paradigm)


class CandidateRun(Run):
    """Score pairwise or listwise ``rows`` (:mod:`logitjudge.candidates`) under every criterion of ``rubric``
    (the criterion's name and description are shown; its options are not) and ``option_orders`` over each row's
    candidates ((K, n) shared or (rows, K, n); n = m, plus 1 for a pairwise tie label)."""

    def __init__(self, lm, rows: list[Row], rubric, option_orders, *, paradigm: str, template=None,
                 engine: Engine | None = None, out=None, progress: bool = True, meta: dict | None = None,
                 request_plan: RequestPlan | None = None):
        if check_paradigm(paradigm) == POINTWISE:
            raise RunError("a pointwise run scores items: use Run")
        if not rows:
            raise RunError("no candidate rows to score")
        ids = [r.id for r in rows]
        if len(set(ids)) != len(ids):
            raise RunError("row ids must be unique")
        sizes = {len(r.candidates) for r in rows}
        if len(sizes) != 1:
            raise RunError(f"rows of {sorted(sizes)} candidates: a table holds rows of one size")
        self.paradigm, self.rows, self.multi, self.slots = paradigm, list(rows), False, "greedy"
        self.template = check_template(template, paradigm)
        self.n_candidates = sizes.pop()
        n = self.n_candidates + bool(self.template.tie_label)
        self.option_orders = validate(option_orders, n, per_item=True, n_items=len(rows))
        self.lm, self.rubric, self.items = lm, rubric, [r.item for r in rows]
        self.engine = engine or NativeEngine(lm)
        self.out, self.progress, self.meta = out, progress, dict(meta or {})
        self.request_plan = self._request_plan(request_plan, self.rows)
        self.criterion_orders = np.tile(np.arange(rubric.n_criteria), (self.option_orders.shape[-2], 1))
        by_id = {c.id: c for r in rows for c in r.candidates}
        extra = {"mode": paradigm, "rows": [[r.id, r.group, r.candidate_ids] for r in rows],
                 "token_budget": self.engine.token_budget, "prefix_mode": self.engine.prefix_mode}
        self.fingerprint = run_fingerprint(lm, rubric, [by_id[i] for i in candidate_ids(rows)], self.option_orders,
                                           self.template, extra)

    def trie_keys(self, idx: list[int]) -> list:
        """The rows of one group in a batch run as one token trie: the instructions and the group's context once
        for all its pairs."""
        return [self.rows[i].group for i in idx]

    def table(self, done: dict, elapsed: float, world_size: int = 1) -> ScoreTable:
        """The candidate table (layout in :mod:`logitjudge.candidates`) of finished rows, in the rows' order."""
        meta = run_meta(self.lm, self.rubric, self.template, self.engine, elapsed, self.request_plan)
        m, tie = self.n_candidates, self.template.tie_label
        meta.update(fingerprint=self.fingerprint, world_size=world_size, paradigm=self.paradigm,
                    candidates=[r.candidate_ids for r in self.rows], tie_label=tie)
        meta.update(self.meta)
        values = np.r_[np.arange(1, m + 1), [0] * bool(tie)].astype(np.float64)
        return ScoreTable(np.stack([np.asarray(done[r.id][0]) for r in self.rows]),
                          np.stack([np.asarray(done[r.id][1]) for r in self.rows]),
                          self.option_orders, self.criterion_orders, np.tile(values, (self.rubric.n_criteria, 1)),
                          [r.id for r in self.rows], [c.name for c in self.rubric.criteria],
                          [r.group for r in self.rows], meta)
