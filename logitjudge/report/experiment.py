"""An experiment's report folder: results.json, report.md, report.html, plots/, scores.csv and spec.toml (the
normalised spec, to run again with ``logitjudge run``)."""

from __future__ import annotations

from pathlib import Path

import tomli_w

from ..spec import Experiment, Spec, model_source
from ..table import ScoreTable
from .render import write_report

__all__ = ["public_spec", "write_experiment_report"]


def public_spec(spec: Spec) -> dict:
    """The spec as written to results.json and spec.toml (unset values left out)."""
    return spec.to_dict()


def write_experiment_report(exp: Experiment, table: ScoreTable, results: dict) -> Path:
    """results.json, report.md, report.html, plots/, scores.csv and spec.toml in the experiment's folder."""
    from ..sections.scores import item_scores, write_item_scores

    spec = public_spec(exp.spec)
    exp.out.mkdir(parents=True, exist_ok=True)
    spec_file = dict(spec, out=str(exp.out.resolve()))
    spec_file["model"] = dict(spec_file["model"], id=model_source(exp.spec))
    if spec_file["data"].get("texts"):
        spec_file["data"] = dict(spec_file["data"], texts=str(Path(exp.data_info["path"]).resolve()))
    (exp.out / "spec.toml").write_text(tomli_w.dumps(spec_file), encoding="utf-8")
    write_report(exp.out, results, spec=spec, table_meta=table.meta, data_info=exp.data_info, title=exp.spec.name)
    write_item_scores(item_scores(table, reading=exp.spec.analysis.reading, human=exp.human), exp.out / "scores.csv")
    return exp.out
