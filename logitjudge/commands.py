"""The ``run``, ``probe`` and ``compare`` commands as Python functions (``lj.run``, ``lj.probe``, ``lj.compare``):
the same settings under the flags' names (``--token-budget`` is ``token_budget=``), the same defaults; ``cli.py``
only prints what they return. ``lj.score`` and ``lj.analyze`` (:mod:`logitjudge.api`) are the ``score`` and
``analyze`` commands."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .spec import AnalysisSpec, DataSpec, OrderingSpec, ProbeSpec, PromptSpec, Spec

__all__ = ["ProbeResult", "RunResult", "compare", "probe", "run"]

_SPEC = Spec()  # the spec's defaults: the one source of every keyword default here


@dataclass(frozen=True)
class RunResult:
    """What ``lj.run`` made: the analysis ``verdict`` (one line), the ``report`` folder, the analysis ``results``
    (as results.json holds them) and, where the spec probes, the probe page (``probe_report``: probe/probe.html)."""

    verdict: str
    report: Path
    results: dict
    probe_report: Path | None = None


def run(spec, *, out=None, judge=None, threads: int | None = None, token_budget: int | None = None,
        data_dir=None, limit: int | None = None, dump_prompts=None, paradigm: str | None = None,
        pairs: int | None = None, chat: bool | None = None, force: bool = False,
        progress: bool = True) -> RunResult:
    """Run an experiment spec (a .toml path, a dict or a :class:`~logitjudge.spec.Spec`) end to end, as
    ``logitjudge run SPEC`` does: score (resumable), analyse, write the report folder, probe where the spec has a
    [probe] section. ``out``: the report folder over the spec's; ``judge``: a judge from ``lj.load_judge`` (the
    spec's [model] id is then not loaded). The other keywords are the flags ``run`` shares with ``score``, set over
    the spec's own values (None: the spec's)."""
    from .experiment import run_experiment

    over = {"model": {"threads": threads, "token_budget": token_budget},
            "data": {"dir": None if data_dir is None else str(data_dir), "limit": limit},
            "": {"dump_prompts": None if dump_prompts is None else str(dump_prompts)},
            "prompts": {"paradigm": paradigm, "pairs": pairs, "chat": chat}}
    res = run_experiment(spec, out=out, lm=judge, overrides=over, progress=progress, force=force)
    probe = res.get("probe_report")
    return RunResult(res["verdict"], Path(res["report"]), res["results"], None if probe is None else Path(probe))


@dataclass(frozen=True)
class ProbeResult:
    """What ``lj.probe`` made: the :class:`~logitjudge.probing.table.ProbeTable` (``table``), where it was saved
    (``path``; None: not saved) and the probe page (``page``: probe.html in the ``report`` folder; None: not
    written)."""

    table: object
    path: Path | None = None
    page: Path | None = None


def probe(judge, data=None, *, text: str = "text", context: str | None = "context", id: str | None = "id",
          group: str | None = "group", dataset: str | None = _SPEC.data.name, data_dir=_SPEC.data.dir,
          limit: int | None = _SPEC.data.limit, rubric=_SPEC.data.rubric, criteria: list | None = _SPEC.data.criteria,
          orderings: str = _SPEC.orderings.options, seed: int = _SPEC.orderings.seed,
          template=_SPEC.prompts.template, chat: bool | None = _SPEC.prompts.chat,
          probes=("lens", "attention", "patch", "linear"), criterion: str | None = _SPEC.probe.criterion,
          pairs: str = _SPEC.probe.pairs, sites=_SPEC.probe.sites, layers=_SPEC.probe.layers,
          report=_SPEC.probe.report, n_boot: int = _SPEC.analysis.n_boot, out=_SPEC.out, force: bool = False,
          token_budget: int = _SPEC.model.token_budget, prefix_mode: str = _SPEC.model.prefix_mode,
          verify: int | None = _SPEC.model.verify, dump_prompts=_SPEC.dump_prompts,
          progress: bool = True) -> ProbeResult:
    """Where the judge's position bias comes from: ``logitjudge probe`` (logit lens, attention to the option lines,
    order-swap patching, linear probes; docs/probing.md) on the prompts :func:`~logitjudge.api.score` would score.
    ``data``/``dataset`` and the prompt and ordering keywords: as ``lj.score`` takes them (a rubric by name or
    file; a design name for ``orderings``). ``probes``, ``criterion``, ``pairs``, ``sites``, ``layers``,
    ``report`` (the page's folder) and ``n_boot``: the flags of the same names. ``out``: also save the probe
    table there (.npz), resumable. Returns a :class:`ProbeResult`."""
    from .api import _call_items, _CallSpec, _judge_model, _open, _section

    items, path = _call_items("probe", judge, data, dataset, text=text, id=id, context=context, group=group)
    given = {"probes": None if probes is None else list(probes), "criterion": criterion, "pairs": pairs,
             "sites": None if sites is None else list(sites), "layers": None if layers is None else list(layers),
             "report": None if report is None else str(report)}
    spec = _CallSpec(
        name="probe", out=None if out is None else str(out),
        dump_prompts=None if dump_prompts is None else str(dump_prompts),
        model=_judge_model(judge, token_budget=token_budget, prefix_mode=prefix_mode, verify=verify),
        data=_section(DataSpec, {"texts": path, "name": dataset, "dir": None if data_dir is None else str(data_dir),
                                 "limit": limit, "rubric": None if rubric is None else str(rubric),
                                 "criteria": criteria}, "probe", "data"),
        prompts=_section(PromptSpec, {"template": None if template is None else str(template), "chat": chat},
                         "probe", "prompts"),
        orderings=_section(OrderingSpec, {"options": orderings, "seed": seed}, "probe", "orderings"),
        probe=_section(ProbeSpec, given, "probe", "probe"),
        analysis=_section(AnalysisSpec, {"n_boot": n_boot}, "probe", "analysis"), from_flags=True)
    run = _open(spec, judge, force=force, items=items, rubric=None, template=None, orders=None)
    table, page = run.probe(progress=progress)
    return ProbeResult(table, run.exp.probe_path, page)


def compare(tables, *, human=None, dataset: str | None = None, data_dir=None, criteria=None,
            reading: str = AnalysisSpec.reading, n_boot: int = 1000, seed: int = 0) -> dict:
    """``{criterion: ParadigmComparison}`` of score tables of the same items under different paradigms, as
    ``logitjudge compare`` prints them (:func:`logitjudge.sections.paradigms.compare_tables`). ``tables``: paths
    or :class:`~logitjudge.table.ScoreTable`; the human scores from ``human`` (a JSONL path as ``analyze`` reads
    it, or ``{item_id: {criterion: score}}``) or the data set ``dataset``; ``criteria``: names or a
    comma-separated string (None: every one the tables share); ``reading`` as ``analyze`` reads (expected: a
    choice between candidates read as sampled)."""
    from .analysis import read_human_scores
    from .errors import LogitJudgeError
    from .sections.paradigms import compare_tables
    from .table import ScoreTable

    if (human is None) == (dataset is None):
        raise LogitJudgeError("lj.compare: give exactly one of human= (a JSONL file or a dict) or dataset= (hanna, "
                              "summeval, mt_bench, vicuna_bench)")
    tables = [t if isinstance(t, ScoreTable) else ScoreTable.load(t) for t in tables]
    if isinstance(human, (str, Path)):
        human, _ = read_human_scores(human)
    elif dataset is not None:
        from .data import load_dataset

        human = {it.id: dict(it.human) for it in load_dataset(dataset, data_dir).items if it.human}
    if isinstance(criteria, str):
        criteria = [x.strip() for x in criteria.split(",") if x.strip()]
    return compare_tables(tables, human, criteria=criteria or None, reading=reading, n_boot=n_boot, rng=seed)
