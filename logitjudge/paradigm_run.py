"""Pairwise and listwise runs on the rails of :class:`~logitjudge.runs.Run`: the rows of
:mod:`logitjudge.candidates` scored like items.

A row's prompts (one per criterion and ordering, :func:`logitjudge.requests.candidate_requests`) are planned and
scored by the rubric's batches (:class:`CandidateSteps`, :func:`logitjudge.steps.score_batch`); the rows of one group
in a batch run as one token trie, so the instructions and the group's context (a source article, a question)
are computed once for all its pairs. Checkpoint, resume, progress, meta and the atomic save are the Run's; the
table is a :class:`~logitjudge.table.ScoreTable` whose items are rows (layout in :mod:`logitjudge.candidates`).
"""

from __future__ import annotations

import numpy as np

from .candidates import POINTWISE, Row, candidate_ids, check_paradigm
from .engines.base import Engine
from .modes import PointwiseSteps, RunError
from .prompts import default_template, load_template
from .requests import RequestPlan
from .runs import Run


def check_template(template, paradigm: str):
    """The template loaded (None: the built-in of the paradigm's name) and checked against the paradigm."""
    return load_template(template or default_template(False, paradigm)).require(paradigm)


class CandidateSteps(PointwiseSteps):
    """The mode of pairwise and listwise ``rows``: batched and scored like a rubric's items (each row's prompts,
    one per criterion and ordering), the rows of one group on one trie; the items on the rails are the rows'
    (:attr:`~logitjudge.candidates.Row.item`)."""

    def __init__(self, paradigm: str):
        if check_paradigm(paradigm) == POINTWISE:
            raise RunError("a pointwise run scores items: use Run")
        self.paradigm = paradigm

    def template(self, given, rubric):
        return check_template(given, self.paradigm)  # the criterion's name and description show, its options not

    def items(self, given: list[Row]) -> list:
        """The rows (some, each id once, all of one size: a table holds one size), as items on the rails."""
        if not given:
            raise RunError("no candidate rows to score")
        ids = [r.id for r in given]
        if len(set(ids)) != len(ids):
            raise RunError("row ids must be unique")
        sizes = {len(r.candidates) for r in given}
        if len(sizes) != 1:
            raise RunError(f"rows of {sorted(sizes)} candidates: a table holds rows of one size")
        self.rows, self.n_candidates = list(given), sizes.pop()
        return [r.item for r in self.rows]

    def n_options(self, rubric, template) -> int:
        return self.n_candidates + bool(template.tie_label)  # the candidates, and a pairwise tie

    def units(self) -> list:
        return self.rows

    def settings(self) -> dict:
        return {"mode": self.paradigm, "rows": [[r.id, r.group, r.candidate_ids] for r in self.rows]}

    def fingerprinted_items(self) -> list:
        by_id = {c.id: c for r in self.rows for c in r.candidates}
        return [by_id[i] for i in candidate_ids(self.rows)]

    def trie_keys(self, idx: list[int]) -> list:
        """The rows of one group in a batch run as one token trie: the instructions and the group's context once
        for all its pairs."""
        return [self.rows[i].group for i in idx]

    def values(self) -> np.ndarray:
        """A candidate's value is its position in the row (1..m); the tie scores 0."""
        tie = self.run.template.tie_label
        values = np.r_[np.arange(1, self.n_candidates + 1), [0] * bool(tie)].astype(np.float64)
        return np.tile(values, (self.run.rubric.n_criteria, 1))

    def groups(self) -> list:
        return [r.group for r in self.rows]

    def table_meta(self, elapsed: float) -> dict:
        return {"paradigm": self.paradigm, "candidates": [r.candidate_ids for r in self.rows],
                "tie_label": self.run.template.tie_label}


class CandidateRun(Run):
    """Score pairwise or listwise ``rows`` (:mod:`logitjudge.candidates`) under every criterion of ``rubric``
    (the criterion's name and description are shown; its options are not) and ``option_orders`` over each row's
    candidates ((K, n) shared or (rows, K, n); n = m, plus 1 for a pairwise tie label)."""

    def __init__(self, lm, rows: list[Row], rubric, option_orders, *, paradigm: str, template=None,
                 engine: Engine | None = None, out=None, progress: bool = True, meta: dict | None = None,
                 request_plan: RequestPlan | None = None):
        super().__init__(lm, rows, rubric, option_orders, template=template, engine=engine, out=out,
                         progress=progress, meta=meta, request_plan=request_plan, steps=CandidateSteps(paradigm))

    @property
    def rows(self) -> list[Row]:
        return self.steps.rows
