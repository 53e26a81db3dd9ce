"""Scoring an experiment: the run its design calls for (rubric items, or candidate rows), on the engine and request
plan :mod:`logitjudge.experiment` made once, with the prompts' dump when the spec asks for one."""

from __future__ import annotations

from .spec import Experiment
from .table import ScoreTable


def score_experiment(exp: Experiment, lm, engine, plan=None, *, progress: bool = True) -> ScoreTable:
    """The experiment's score table: reused from its table path when that holds these settings, else scored
    (continuing an interrupted run) and saved there. Writes the ``dump_prompts`` JSONL first when asked.
    ``engine``: made and audited by :func:`judge_engine` on ``plan`` (:func:`run_plan`)."""
    from .paradigm_run import CandidateRun
    from .requests import RequestPlan, dump_prompts, first_requests, orders_of
    from .runs import Run

    od, pr = exp.spec.orderings, exp.spec.prompts
    meta = {"run": exp.spec.name, "orderings": od.options, "seed": od.seed,
            "criterion_orderings": od.criteria if pr.multi_criteria else None}
    if exp.rows is not None:  # pairwise / listwise: the candidate table
        run = CandidateRun(lm, exp.rows, exp.rubric, exp.option_orders, paradigm=pr.paradigm, template=exp.template,
                           engine=engine, out=exp.table_path, progress=progress, meta=dict(meta, pairs=pr.pairs),
                           request_plan=plan)
    else:
        run = Run(lm, exp.items, exp.rubric, exp.option_orders, criterion_orders=exp.criterion_orders,
                  template=exp.template, engine=engine, out=exp.table_path, slots=pr.slots,
                  max_continuations=pr.max_continuations, progress=progress, meta=meta, request_plan=plan)
    if exp.spec.dump_prompts:
        dump = run.request_plan
        if pr.multi_criteria:  # each ordering's first slot
            orders = run.option_orders
            dump = RequestPlan(lm, run.template, exp.rubric, exp.items, orders, requests=lambda i: first_requests(
                exp.rubric, exp.items[i], orders_of(orders, i), exp.criterion_orders))
        dump_prompts(dump, exp.spec.dump_prompts)
    return run.execute()
