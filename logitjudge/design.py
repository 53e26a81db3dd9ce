"""A run's design: everything a spec resolves to, and every check that needs no judge, before any model is read.

:func:`prepare` is the first step of the pipeline (:mod:`logitjudge.experiment`): the spec loaded and its files
resolved once (:class:`~logitjudge.spec.Paths`); its [model] settings checked (the device, the attention and the
engine: :func:`logitjudge.engines.check_model`); the template; what the spec selects
(:func:`logitjudge.selection.make_selection`: items, rubric, orders or candidate rows, and the checks on them); and
the outputs, with the checkpoints a run would resume. The result is an :class:`~logitjudge.spec.Experiment`; the
judge's tokenizer and config are read next, by :func:`logitjudge.preflight.preflight`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from .engines import check_model
from .errors import LogitJudgeError
from .items import Item
from .outputs import OutputError, check_outputs, spec_inputs, spec_outputs
from .probing.settings import probe_settings
from .prompts import PromptError, Template, choose_template
from .rubric import Rubric
from .selection import make_selection
from .spec import Experiment, SpecError, load_spec, resolve_paths

__all__ = ["prepare"]


def prepare(spec, *, data_dir=None, out=None, force: bool = False, spec_file=None, items: list[Item] | None = None,
            rubric: Rubric | None = None, template: Template | None = None, orders=None) -> Experiment:
    """Validate a spec and resolve its data, rubric, template, orderings, engine and outputs (no model yet).

    A spec from ``score`` (``probe``) flags writes its table (probe table) at ``out``; an experiment writes a
    report folder there, with the table at ``out/table.npz`` and the probe table at ``out/probe.npz``. No output
    may be an input of the run, and an existing file that is not of the kind written there is refused unless
    ``force`` (:mod:`logitjudge.outputs`); ``spec_file``: the spec's file (an input too; default: ``spec`` when
    it is a path). The Python API's objects, in place of the spec's: ``items``/``rubric`` (its data and Rubric),
    ``template`` (a :class:`~logitjudge.prompts.Template`) and ``orders`` (an option-order array, checked against
    the rubric). A spec from flags without ``out`` writes nothing (the table is returned only).
    """
    if isinstance(spec, (str, Path)):
        spec_file = spec_file or spec
    spec = load_spec(spec)
    paths = resolve_paths(spec)
    check_model(spec.model, probing=bool(spec.probe.probes), where=lambda key: spec.where("model", key),
                error=SpecError)
    try:
        template = choose_template(spec.prompts, paths.template, given=template)
    except PromptError as e:
        if template is not None:
            raise LogitJudgeError(f"lj.score(template=...): {e}") from None
        raise SpecError(f"{spec.where('prompts', 'template')}: {e}") from None
    sel = make_selection(spec, paths, template, data_dir, items=items, rubric=rubric, orders=orders)
    if orders is not None:  # the table's meta names the array's orders, not the spec's design
        given = f"given:{sel.option_orders.shape[-2]}" + (" per item" if sel.option_orders.ndim == 3 else "")
        spec = replace(spec, orderings=replace(spec.orderings, options=given))
    out = out if out is not None else spec.out
    out_path = None if out is None and spec.from_flags else Path(out).expanduser()
    spec = replace(spec, out=None if out_path is None else str(out_path))
    table_path = out_path if spec.from_flags else out_path / "table.npz"
    probe_path = out_path if spec.from_flags else out_path / "probe.npz"
    exp = Experiment(spec, out_path, table_path, probe_path, sel.items, sel.rubric, template, sel.option_orders,
                     sel.criterion_orders, sel.human, sel.systems, sel.info, sel.rows, paths)
    probing = probe_settings(exp) is not None  # the [probe] section too is checked before any model loads
    try:
        check_outputs(spec_outputs(spec, table_path, probe_path, probing),
                      spec_inputs(spec, paths, sel.info, spec_file), force=force)
    except OutputError as e:
        raise SpecError(str(e)) from None
    return exp
