"""The ``run`` and ``compare`` commands as Python functions (``lj.run``, ``lj.compare``): the same settings under
the flags' names (``--token-budget`` is ``token_budget=``), the same defaults; ``cli.py`` only prints what they
return. ``lj.score`` and ``lj.analyze`` (:mod:`logitjudge.api`) are the ``score`` and ``analyze`` commands."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .spec import AnalysisSpec

__all__ = ["RunResult", "compare", "run"]


@dataclass(frozen=True)
class RunResult:
    """What ``lj.run`` made: the analysis ``verdict`` (one line), the ``report`` folder, the analysis ``results``
    (as results.json holds them) and, where the spec probes, the ``probe_report`` page folder."""

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
