"""Experiments: one spec -> scores (resumable), analysis, a report folder and, with [probe], the probe page.

The pipeline, each step calling only those below it: :func:`~logitjudge.design.prepare` (the spec's data,
rubric, template, orders, engine and outputs, no model) -> :func:`~logitjudge.preflight.preflight` (the judge's
tokenizer and config: the request plan, every prompt checked) -> :class:`OpenExperiment` (the judge loaded once,
its engine made and audited once on that plan) -> :func:`~logitjudge.scorer.score_experiment` /
:func:`~logitjudge.probing.run.probe_experiment` -> analysis ->
:func:`~logitjudge.report.experiment.write_experiment_report`. The spec's settings and an example are in
docs/getting-started.md ("An experiment spec"); their defaults, help and checks are the fields of
:mod:`logitjudge.spec`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .design import prepare
from .items import Item
from .preflight import preflight
from .probing.run import probe_experiment
from .probing.settings import probe_settings
from .prompts import Template
from .report.experiment import write_experiment_report
from .requests import RequestPlan
from .rubric import Rubric
from .scorer import score_experiment
from .spec import Experiment, Spec, SpecError, load_spec, model_source, with_overrides
from .table import ScoreTable

__all__ = ["Experiment", "OpenExperiment", "SpecError", "load_spec", "open_experiment", "run_experiment"]


# ---- the pipeline ------------------------------------------------------------------------------------------
@dataclass
class OpenExperiment:
    """A spec prepared and preflighted (:func:`open_experiment`): the judge is loaded (unless one was given) and its
    engine made and audited once, on the first :meth:`score` or :meth:`probe`; the request plan is the preflight's
    (remade once only where the loaded judge's tokenizer is not the one the preflight read)."""

    exp: Experiment
    lm: object = None
    plan: RequestPlan | None = None
    _engine: object = None

    def judge(self):
        """The judge: the one given, else the spec's, loaded on the first call."""
        if self.lm is None:
            self.lm = load_judge(self.exp.spec)
        return self.lm

    def engine(self):
        """The judge's engine after the exactness audit (:func:`judge_engine`), made on the first call."""
        if self._engine is None:
            lm = self.judge()
            self.plan = run_plan(self.exp, lm, self.plan)
            self._engine = judge_engine(self.exp, lm, self.plan)
        return self._engine

    def score(self, *, progress: bool = True) -> ScoreTable:
        """The experiment's score table (:func:`score_experiment`)."""
        engine = self.engine()
        return score_experiment(self.exp, self.lm, engine, self.plan, progress=progress)

    def probe(self, *, progress: bool = True):
        """The probe table and page (:func:`~logitjudge.probing.run.probe_experiment`), on the scores' engine after
        :meth:`score`; alone (the probe command), on an engine audited here, with the probed prompts' dump."""
        alone = self._engine is None
        engine = self.engine()
        return probe_experiment(self.exp, self.lm, engine, progress=progress, dump=alone)


def open_experiment(spec, *, lm=None, data_dir=None, out=None, force: bool = False, spec_file=None,
                    items: list[Item] | None = None, rubric: Rubric | None = None, template: Template | None = None,
                    orders=None) -> OpenExperiment:
    """The one way into a run: :func:`~logitjudge.design.prepare` (everything but the model checked) then
    :func:`~logitjudge.preflight.preflight` (the tokenizer and config: ``lm``'s when a judge is given, else the
    spec's, read without the weights); the judge is loaded when the returned :class:`OpenExperiment` scores or
    probes. Its prompts are the preflight's :class:`~logitjudge.requests.RequestPlan`: each encoded once.
    Arguments: :func:`~logitjudge.design.prepare`'s."""
    exp = prepare(spec, data_dir=data_dir, out=out, force=force, spec_file=spec_file, items=items, rubric=rubric,
                  template=template, orders=orders)
    plan = preflight(exp, lm)  # a preloaded judge: its own tokenizer and config, checked before any item is scored
    return OpenExperiment(exp, lm, plan)


def load_judge(spec: Spec):
    """The judge model of a (validated) spec, as its engine needs it (:meth:`EngineConfig.load_judge
    <logitjudge.engines.base.EngineConfig.load_judge>`: the weights, or the tokenizer and config where the engine
    loads them); an unreachable id fails in one line before any loading."""
    from .engines import engine_config
    from .model_ref import check_available
    from .models import set_threads

    set_threads(spec.model.threads)
    source = model_source(spec)  # the spec's Paths.model
    check_available(source)
    return engine_config(spec.model).load_judge(source, spec.model)


def judge_engine(exp: Experiment, lm, plan=None):
    """The engine of the spec's [model] settings (the native engine's backend computes the model exactly or is
    refused; a served engine is checked against the judge on a prompt and its labels, as the run will send them),
    after the exactness audit on the run's prompts. ``plan``: the run's :class:`~logitjudge.requests.RequestPlan`
    (None for multi-criteria runs, audited on the same items' single-criterion prompts), held here to the context
    of the judge on this engine and left for the run."""
    from .engines import engine_config
    from .prompts import load_template
    from .requests import RequestPlan
    from .verify import audit_plan, audit_run

    od, m = exp.spec.orderings, exp.spec.model

    def texts() -> list[str]:  # the first prompt and its labels, for an engine that checks how it reads them
        first = (plan if plan is not None else
                 RequestPlan(lm, load_template(None), exp.rubric, exp.items, exp.option_orders)).prompt(0, 0)
        return [first.prompt_text, *first.continuations]

    engine = engine_config(m).make(lm, texts=texts, seed=od.seed)
    if plan is None:
        audit_run(engine, lm, exp.items, exp.rubric, exp.option_orders, None, m.verify, rng=od.seed)
    else:
        plan.max_length = lm.max_length_on(engine)
        audit_plan(engine, plan, m.verify, rng=od.seed)
    return engine


def run_plan(exp: Experiment, lm, plan=None):
    """The request plan of a single-criterion rubric or candidate run (None: multi-criteria, whose slot requests
    the run makes): ``plan`` (the preflight's) when it was encoded by the judge's own tokenizer, else a new one."""
    from .requests import RequestPlan

    if exp.spec.prompts.multi_criteria:
        return None
    if plan is not None and plan.tokenizer is lm.tokenizer:
        return plan
    return RequestPlan(lm, exp.template, exp.rubric, exp.items if exp.rows is None else exp.rows, exp.option_orders)


def analyze_experiment(exp: Experiment, table: ScoreTable) -> dict:
    """The analysis of the table: human scores and systems from the data, groups from the items."""
    from .analysis import analyze

    a = exp.spec.analysis
    systems = exp.systems if exp.rows is None else None  # a candidate table ranks within groups
    return analyze(table, human=exp.human, systems=systems, rng=a.seed, n_boot=a.n_boot, method=a.method,
                   n_draws=a.n_draws, reading=a.reading)


def run_experiment(spec_path_or_dict, *, data_dir=None, out=None, lm=None, progress: bool = True,
                   overrides: dict | None = None, force: bool = False) -> dict:
    """Run an experiment spec end to end: score (resumable), analyse, write the report folder, and probe when
    the spec has a [probe] section.

    ``out`` overrides the spec's report folder; ``lm`` is a preloaded model (the spec's [model] id is then
    not loaded); ``overrides``: ``{section: {key: value}}`` set over the spec's own values (the flags
    ``logitjudge run`` shares with ``score``); ``force``: replace files of other kinds in the report folder
    (:func:`prepare`). Returns ``{"verdict", "report" (the folder), "results" (the
    analysis dict)}`` and, probing, ``"probe_report"``.
    """
    spec_file = spec_path_or_dict if isinstance(spec_path_or_dict, (str, Path)) else None
    run = open_experiment(with_overrides(load_spec(spec_path_or_dict), overrides), lm=lm, data_dir=data_dir,
                          out=out, force=force, spec_file=spec_file)
    exp = run.exp
    table = run.score(progress=progress)
    results = analyze_experiment(exp, table)
    folder = write_experiment_report(exp, table, results)
    out = {"verdict": results["verdict"], "report": str(folder), "results": results}
    if probe_settings(exp) is not None:
        out["probe_report"] = str(run.probe(progress=progress)[1])
    return out
