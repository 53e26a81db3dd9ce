"""Experiments: one TOML spec -> scores (resumable), analysis and a report folder.

Spec (every section but ``name`` and a data source is optional; defaults shown)::

    name = "hanna-small"
    out = "reports/hanna-small"        # report folder; relative to the working directory
    [model]
    id = "gemma-3-270m"                # built-in alias, HF id or local folder (relative to the spec file)
    dtype = "fp32"                     # fp32 | bf16 | fp16
    device = "cpu"                     # cpu | cuda | cuda:N | auto
    token_budget = 4096
    prefix_mode = "auto"               # auto | native | shared | copy | plain
    # attn_implementation = "eager"    # transformers attention (default: SDPA, else the model's eager)
    # verify = 3                       # exactness audit: N prompts against the plain forward (default:
    #                                  # 3 for untested architectures, else 0)
    # threads = 2                      # torch CPU threads (default: $OMP_NUM_THREADS, else the usable CPUs)
    # quantize = "4bit"                # 4bit | 8bit (CUDA only)
    [data]
    name = "hanna"                     # a data set (hanna, summeval, mt_bench, vicuna_bench) ...
    # texts = "my_texts.jsonl"         # ... or a JSONL of items (id, text, context, group, human)
    # rubric = "default"               # rubric name or file (default: the data set's; "default" for texts)
    limit = 22                         # whole groups up to this many items
    # groups = 2                       # a number of groups drawn with the seed, or a list of group ids
    # per_group = 5                    # keep the first N items of each chosen group (smoke runs)
    seed = 0
    # criteria = ["Coherence", "Empathy"]
    # options = { models = ["gpt-4", "llama-13b"] }   # loader options
    [prompts]
    template = "text-first"            # built-in name or .toml file ("multi-criteria" when multi_criteria)
    multi_criteria = false
    slots = "greedy"                   # greedy | marginal (multi-criteria only)
    max_continuations = 20000
    paradigm = "pointwise"             # pointwise | pairwise | listwise (the items of a group compared in one
                                       # prompt; template default: "pairwise" / "listwise")
    # pairs = 10                       # pairwise: K random pairs per group (default: every pair)
    [orderings]
    options = "balanced"               # balanced | all | random:K | balanced+random:R | shared-random:K | fixed:K
    criteria = "balanced"              # criterion orders (multi-criteria only; every option order is
                                       # crossed with every criterion order)
    seed = 0
    [analysis]
    n_boot = 1000
    method = "pearson"                 # pearson | spearman | kendall
    seed = 0
    n_draws = 100
    reading = "expected"               # greedy (the study's judges) | sampled | expected
    [probe]                            # off unless probes is set: see `logitjudge probe`
    # probes = ["lens", "attention"]   # lens | attention | patch | linear
    # criterion = "Coherence"          # default: the rubric's first
    # pairs = "reverse"                # reverse | canonical | all (patching)
    # sites = ["resid", "attn"]        # resid | attn | mlp | head (patching; default: all)
    # layers = [4, 8]                  # layers the linear probes read (default: all)
    # limit = 8                        # probe the first N scored items only

The report folder holds ``table.npz`` (a rerun with the same settings reuses it; an interrupted run
continues from ``table.npz.partial.jsonl``), ``results.json``, ``report.md``, ``report.html``, ``plots/``,
``scores.csv`` (one row per item and criterion: :mod:`logitjudge.sections.scores`) and ``spec.toml`` (the
normalised spec, to run again with ``logitjudge run``); with ``[probe]``, ``probe.npz`` (resumable) and the
probe page in ``probe/``. The settings, their defaults, help and checks are the fields of
:mod:`logitjudge.spec`; ``logitjudge score`` and ``logitjudge probe`` run the same pipeline on a spec built from
their flags (the table, or the probe table, at ``--out``).
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

from .items import Item
from .orderings import OrderingError, check_memory
from .preflight import preflight
from .rubric import Rubric
from .selection import load_items, plan_orders
from .spec import Experiment, Spec, SpecError, from_dict, model_source, relative
from .table import ScoreTable
from .tomlfile import read_toml

__all__ = ["Experiment", "OpenExperiment", "SpecError", "load_spec", "open_experiment", "prepare", "run_experiment",
           "score_experiment"]


def load_spec(spec) -> Spec:
    """A validated spec with every default filled in (``spec``: a TOML file path, a dict or a :class:`Spec`)."""
    if isinstance(spec, Spec):
        return spec
    if isinstance(spec, (str, Path)):
        p = Path(spec)
        raw = read_toml(p, what="experiment spec", error=SpecError, hint="see experiments/*.toml for examples")
        return from_dict(raw, base=str(p.resolve().parent))
    if isinstance(spec, dict):
        return from_dict(spec)
    raise SpecError(f"an experiment spec is a .toml path, a dict or a Spec, got {type(spec).__name__}")


# ---- the pipeline ------------------------------------------------------------------------------------------
class OpenExperiment:
    """A spec prepared and preflighted (:func:`open_experiment`): :meth:`score` and :meth:`probe` load the judge
    (once, unless one was given), make and audit its engine (once) and run."""

    def __init__(self, exp: Experiment, lm=None, plan=None):
        self.exp, self.lm, self.plan, self._engine = exp, lm, plan, None

    def judge(self):
        """The judge: the one given, else the spec's, loaded on the first call."""
        if self.lm is None:
            self.lm = load_judge(self.exp.spec)
        return self.lm

    def engine(self):
        """The judge's engine after the exactness audit (:func:`judge_engine`), made on the first call."""
        if self._engine is None:
            lm = self.judge()
            if self.plan is not None:  # the preflight's plan, for the judge's tokenizer and context
                self.plan = run_plan(self.exp, lm, self.plan)
            self._engine = judge_engine(self.exp, lm, plan=self.plan)
        return self._engine

    def score(self, *, progress: bool = True) -> ScoreTable:
        """The experiment's score table (:func:`score_experiment`)."""
        return score_experiment(self.exp, self.judge(), engine=self.engine(), progress=progress, plan=self.plan)

    def probe(self, *, progress: bool = True):
        """The probe table and page (:func:`probe_experiment`), on the scores' engine after :meth:`score`; alone
        (the probe command), on an engine audited there and with the probed prompts' dump."""
        return probe_experiment(self.exp, self.judge(), engine=self._engine, progress=progress, plan=self.plan)


def open_experiment(spec, *, lm=None, data_dir=None, out=None, force: bool = False, spec_file=None,
                    items: list[Item] | None = None, rubric: Rubric | None = None) -> OpenExperiment:
    """The one way into a run: :func:`prepare` (everything but the model checked) then :func:`preflight` (the
    tokenizer and config: ``lm``'s when a judge is given, else the spec's, read without the weights); the
    judge is loaded when the returned :class:`OpenExperiment` scores or probes. Its prompts are the preflight's
    :class:`~logitjudge.requests.RequestPlan`: each encoded once. Arguments: :func:`prepare`'s."""
    exp = prepare(spec, data_dir=data_dir, out=out, force=force, spec_file=spec_file, items=items, rubric=rubric)
    plan = preflight(exp, lm)  # a preloaded judge: its own tokenizer and config, checked before any item is scored
    return OpenExperiment(exp, lm, plan)


def _outputs(spec: Spec, table_path: Path, probe_path: Path, probing: bool) -> list:
    """Every path the spec's command writes (:mod:`logitjudge.outputs`): ``score`` its table, ``probe`` its probe
    table and page folder, ``run`` its report folder; and the prompt dump."""
    from .outputs import Output, probe_folder, report_folder

    def side(p: Path) -> tuple:  # the run's checkpoint and lock beside a table
        return (Path(f"{p}.partial.jsonl"), Path(f"{p}.lock"))

    out = spec.where("", "out")
    if table_path is None:  # nothing written but the prompt dump
        outs = []
    elif not spec.from_flags:
        outs = [Output(Path(spec.out), out, files=report_folder(probe=probing),
                       side=side(table_path) + (side(probe_path) if probing else ()))]
    elif probing:
        outs = [Output(probe_path, out, kind="probe-table", side=side(probe_path))]
        if spec.probe.report:
            outs.append(Output(Path(spec.probe.report), spec.where("probe", "report"), files=probe_folder()))
    else:
        outs = [Output(table_path, out, kind="table", side=side(table_path))]
    if spec.dump_prompts:
        outs.append(Output(Path(spec.dump_prompts), spec.where("", "dump_prompts"), kind="prompt-dump"))
    return outs


def _inputs(spec: Spec, info: dict, spec_file) -> list:
    """The files the run reads, as (label, path): none of them may be written."""
    d, template = spec.data, spec.prompts.template or ""
    ins = [(spec.where("data", "texts") if d.texts else "data set", info.get("path")),
           (spec.where("data", "rubric"), relative(d.rubric, spec.base) if d.rubric else None),
           (spec.where("prompts", "template"), relative(template, spec.base) if template.endswith(".toml") else None),
           ("experiment spec", spec_file)]
    model = Path(model_source(spec)).expanduser()
    if model.is_dir():
        ins += [(spec.where("model", "id"), f) for f in model.iterdir()]
    elif model.is_file():  # a GGUF judge
        ins.append((spec.where("model", "id"), model))
    return ins


def prepare(spec, *, data_dir=None, out=None, force: bool = False, spec_file=None, items: list[Item] | None = None,
            rubric: Rubric | None = None) -> Experiment:
    """Validate a spec and resolve its data, rubric, template, orderings, devices and outputs (no model yet).

    A spec from ``score`` (``probe``) flags writes its table (probe table) at ``out``; an experiment writes a
    report folder there, with the table at ``out/table.npz`` and the probe table at ``out/probe.npz``. No output
    may be an input of the run, and an existing file that is not of the kind written there is refused unless
    ``force`` (:mod:`logitjudge.outputs`); ``spec_file``: the spec's file (an input too; default: ``spec`` when
    it is a path). ``items``/``rubric``: already made (the Python API's data), in place of the spec's texts file
    and rubric (:func:`logitjudge.selection.load_items`). A spec from flags without ``out`` writes nothing (the
    table is returned only).
    """
    from .engine import EngineError
    from .engines import check_engine
    from .models import ModelError, check_attn_implementation, check_device
    from .outputs import OutputError, check_outputs
    from .prompts import PromptError, default_template, load_template
    from .steps import check_slots

    if isinstance(spec, (str, Path)):
        spec_file = spec_file or spec
    spec = load_spec(spec)
    items, rubric, info = load_items(spec, data_dir, items=items, rubric=rubric)
    pr = spec.prompts
    if pr.multi_criteria and rubric.n_criteria < 2:
        raise SpecError(f"{spec.where('prompts', 'multi_criteria')}: the rubric has a single criterion "
                        f"({rubric.criteria[0].name!r}); set multi_criteria = false or choose 2+ criteria")
    try:
        name = pr.template or default_template(pr.multi_criteria, pr.paradigm)
        template = load_template(relative(name, spec.base) if name.endswith(".toml") else name).require(pr.paradigm)
        if pr.chat is not None:  # --chat / --no-chat, a spec's chat: over the template's own setting
            template = replace(template, chat=pr.chat)
    except PromptError as e:
        raise SpecError(f"{spec.where('prompts', 'template')}: {e}") from None
    rows, option_orders, criterion_orders = plan_orders(spec, items, rubric, template)
    units = len(items) if rows is None else len(rows)
    k, n = option_orders.shape[-2], option_orders.shape[-1]
    try:  # the scores table (and its label mass) the orders make, before a batch is scored
        check_memory(f"{spec.where('orderings', 'options')}: a table of {units:,} items x "
                     f"{rubric.n_criteria} criteria x {k:,} orderings x {n} options would",
                     units * rubric.n_criteria * k * (n + 1) * 8, "use fewer orderings or items")
    except OrderingError as e:
        raise SpecError(str(e)) from None
    if pr.multi_criteria:
        check_slots(pr.slots, rubric.n_options, rubric.n_criteria, pr.max_continuations)
    human = {it.id: dict(it.human) for it in items if it.human} or None
    systems = None
    if human:
        for key in ("model", "model_id", "system"):
            if all(key in it.meta for it in items):
                systems = {it.id: str(it.meta[key]) for it in items}
                break
    out = out if out is not None else spec.out
    out_path = None if out is None and spec.from_flags else Path(out).expanduser()
    spec = replace(spec, out=None if out_path is None else str(out_path))
    table_path = out_path if spec.from_flags else out_path / "table.npz"
    probe_path = out_path if spec.from_flags else out_path / "probe.npz"
    for key, check in (("device", check_device), ("attn_implementation", check_attn_implementation)):
        try:
            check(getattr(spec.model, key))
        except ModelError as e:
            raise SpecError(f"{spec.where('model', key)}: {e}") from None
    exp = Experiment(spec, out_path, table_path, probe_path, items, rubric, template, option_orders,
                     criterion_orders, human, systems, info, rows)
    probing = probe_settings(exp) is not None  # the [probe] section too is checked before any model loads
    try:  # the engine: installed, and no setting it does not run
        check_engine(spec.model, probing=probing)
    except EngineError as e:
        raise SpecError(f"{spec.where('model', 'engine')}: {e}") from None
    try:
        check_outputs(_outputs(spec, table_path, probe_path, probing), _inputs(spec, info, spec_file), force=force)
    except OutputError as e:
        raise SpecError(str(e)) from None
    return exp


def load_judge(spec: Spec):
    """The judge model of a (validated) spec, as its engine needs it (:meth:`EngineConfig.load_judge
    <logitjudge.engines.base.EngineConfig.load_judge>`: the weights, or the tokenizer and config where the engine
    loads them); an unreachable id fails in one line before any loading."""
    from .engines import engine_config
    from .model_ref import check_available
    from .models import set_threads

    set_threads(spec.model.threads)
    source = model_source(spec)
    check_available(source)
    return engine_config(spec.model).load_judge(source, spec.model)


def judge_engine(exp: Experiment, lm, *, plan=None):
    """The engine of the spec's [model] settings (the native engine's backend computes the model exactly or is
    refused; a served engine is checked against the judge on a prompt and its labels, as the run will send them),
    after the exactness audit on the run's prompts (``plan``: its :class:`~logitjudge.requests.RequestPlan`, read
    and left there for the run; multi-criteria runs are audited on the same items' single-criterion prompts)."""
    from .engines import engine_config
    from .prompts import load_template
    from .requests import RequestPlan
    from .verify import audit_plan, audit_run

    od, pr, m = exp.spec.orderings, exp.spec.prompts, exp.spec.model

    def texts() -> list[str]:  # the first prompt and its labels, for an engine that checks how it reads them
        first = (run_plan(exp, lm, plan) if not pr.multi_criteria else
                 RequestPlan(lm, load_template(None), exp.rubric, exp.items, exp.option_orders)).prompt(0, 0)
        return [first.prompt_text, *first.continuations]

    engine = engine_config(m).make(lm, texts=texts, seed=od.seed)
    if pr.multi_criteria:
        audit_run(engine, lm, exp.items, exp.rubric, exp.option_orders, None, m.verify, rng=od.seed)
    else:
        audit_plan(engine, run_plan(exp, lm, plan, engine=engine), m.verify, rng=od.seed)
    return engine


def run_plan(exp: Experiment, lm, plan=None, *, engine=None):
    """The request plan of a rubric or candidate run: ``plan`` (the preflight's) when it was encoded by the
    judge's own tokenizer, else a new one; held to the context of the judge on ``engine`` (None: not made yet)."""
    from .requests import RequestPlan

    units, context = exp.items if exp.rows is None else exp.rows, lm.max_length_on(engine)
    if plan is not None and plan.tokenizer is lm.tokenizer:
        plan.max_length = context
        return plan
    return RequestPlan(lm, exp.template, exp.rubric, units, exp.option_orders, max_length=context)


def score_experiment(exp: Experiment, lm, *, engine=None, progress: bool = True, plan=None) -> ScoreTable:
    """The experiment's score table: reused from its table path when that holds these settings, else scored
    (continuing an interrupted run) and saved there. Writes the ``dump_prompts`` JSONL first when asked.
    ``engine``: one made by :func:`judge_engine` (default: made here); ``plan``: the preflight's request plan."""
    from .paradigm_run import CandidateRun
    from .requests import RequestPlan, dump_prompts, first_requests, orders_of
    from .run import Run

    od, pr = exp.spec.orderings, exp.spec.prompts
    meta = {"run": exp.spec.name, "orderings": od.options, "seed": od.seed,
            "criterion_orderings": od.criteria if pr.multi_criteria else None}
    plan = None if pr.multi_criteria else run_plan(exp, lm, plan)
    engine = engine or judge_engine(exp, lm, plan=plan)
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


def analyze_experiment(exp: Experiment, table: ScoreTable) -> dict:
    """The analysis of the table: human scores and systems from the data, groups from the items."""
    from .analysis import analyze

    a = exp.spec.analysis
    systems = exp.systems if exp.rows is None else None  # a candidate table ranks within groups
    return analyze(table, human=exp.human, systems=systems, rng=a.seed, n_boot=a.n_boot, method=a.method,
                   n_draws=a.n_draws, reading=a.reading)


def public_spec(spec: Spec) -> dict:
    """The spec as written to results.json and spec.toml (unset values left out)."""
    return spec.to_dict()


def write_experiment_report(exp: Experiment, table: ScoreTable, results: dict) -> Path:
    """results.json, report.md, report.html, plots/, scores.csv and spec.toml in the experiment's folder."""
    import tomli_w

    from .report import write_report
    from .sections.scores import item_scores, write_item_scores

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


def with_overrides(spec: Spec, overrides: dict | None) -> Spec:
    """``spec`` with ``{section: {key: value}}`` (section "" for top-level keys) set; None values are skipped."""
    from .spec import SECTIONS, check_value, flag_of

    for section, values in (overrides or {}).items():
        values = {k: v for k, v in values.items() if v is not None}
        if not values:
            continue
        if not section:
            spec = replace(spec, **values)
            continue
        cls = SECTIONS[section]
        checked = {f.name: check_value(f, values[f.name], flag_of(f), flag=True) for f in fields(cls)
                   if f.name in values}
        spec = replace(spec, **{section: replace(getattr(spec, section), **checked)})
    return spec


def probe_settings(exp: Experiment) -> dict | None:
    """The keyword arguments of :class:`logitjudge.run.ProbeRun` for the spec's [probe] section (None: off),
    checked without the model: probe names, sites, pairs, layers, the criterion and a design that moves the
    options."""
    p = exp.spec.probe
    if not p.probes:
        return None
    from .errors import ProbeError
    from .probe.patching import KINDS
    from .probe.steps import check_probe_args

    names = [c.name for c in exp.rubric.criteria]
    if p.criterion is not None and p.criterion not in names:
        raise SpecError(f"{exp.spec.where('probe', 'criterion')}: {p.criterion!r} is not one of the rubric's "
                        f"criteria {names}")
    if exp.criterion_orders is not None:
        raise SpecError("spec [probe]: probing reads one criterion per prompt; run it without multi_criteria")
    if exp.rows is not None:
        raise SpecError(f"spec [probe]: probing reads rubric prompts; run it with paradigm = \"pointwise\" (this "
                        f"spec is {exp.spec.prompts.paradigm})")
    kinds = tuple(p.sites or KINDS)
    try:
        probes = check_probe_args(p.probes, exp.option_orders, pairs=p.pairs, kinds=kinds)
    except ProbeError as e:
        raise SpecError(f"{'' if exp.spec.from_flags else 'spec [probe]: '}{e}") from None
    return {"probes": probes, "criterion": names.index(p.criterion) if p.criterion else 0, "pairs": p.pairs,
            "kinds": kinds, "hidden_layers": p.layers}


def probe_experiment(exp: Experiment, lm, *, engine=None, progress: bool = True, plan=None):
    """Probe the spec's items (a run spec: the first ``[probe] limit`` scored items) into the probe table
    (resumable, :class:`logitjudge.run.ProbeRun`) and write the probe page (a run spec: ``<out>/probe/``; the
    probe command: ``--report``). Returns (ProbeTable, the page or None). Without ``engine`` (the probe command)
    the engine is made and audited here (on ``plan``, the preflight's request plan) and the ``dump_prompts``
    JSONL of the probed prompts is written."""
    from .report.probe import write_probe_report
    from .requests import RequestPlan, dump_prompts
    from .rubric import Rubric
    from .run import ProbeRun

    settings = probe_settings(exp)
    if settings is None:
        raise SpecError("nothing to probe: set [probe] probes (e.g. probes = [\"lens\", \"patch\"])")
    limit = exp.spec.probe.limit
    items, orders = exp.items[:limit], exp.option_orders[:limit] if exp.option_orders.ndim == 3 else exp.option_orders
    if engine is None:
        engine = judge_engine(exp, lm, plan=plan)
        if exp.spec.dump_prompts:
            crit = exp.rubric.criteria[settings["criterion"]]
            one = Rubric((crit,), exp.rubric.instructions, exp.rubric.name)
            dump_prompts(RequestPlan(lm, exp.template, one, items, orders), exp.spec.dump_prompts)
    od = exp.spec.orderings
    meta = {"run": exp.spec.name, "orderings": od.options, "seed": od.seed}
    table = ProbeRun(lm, items, exp.rubric, orders, template=exp.template, engine=engine, out=exp.probe_path,
                     progress=progress, meta=meta, **settings).execute()
    folder = exp.spec.probe.report if exp.spec.from_flags else exp.out / "probe"
    if folder is None:
        return table, None
    a = exp.spec.analysis
    return table, write_probe_report(table, folder, n_boot=a.n_boot, rng=a.seed)
