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

import logging
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from .items import Item, read_items
from .orderings import OrderingError, cross, parse
from .rubric import Rubric, RubricError, load_rubric
from .spec import Spec, SpecError, from_dict, relative
from .table import ScoreTable
from .tomlfile import read_toml

log = logging.getLogger("logitjudge")

__all__ = ["Experiment", "SpecError", "load_spec", "prepare", "run_experiment", "score_experiment"]


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
@dataclass
class Experiment:
    """Everything a spec resolves to before the model is loaded."""

    spec: Spec
    out: Path
    table_path: Path
    probe_path: Path
    items: list[Item]
    rubric: Rubric
    template: object
    option_orders: np.ndarray
    criterion_orders: np.ndarray | None
    human: dict | None
    systems: dict | None
    data_info: dict


def _load_items(spec: Spec, data_dir) -> tuple[list[Item], Rubric, dict]:
    from .data import DataError, load_dataset, subset_items

    d, base = spec.data, spec.base
    data_dir = data_dir if data_dir is not None else d.dir
    data_where = spec.where("data", "texts") if spec.from_flags else "spec [data]"
    try:
        if d.name is not None:
            ds = load_dataset(d.name, data_dir, limit=d.limit, groups=d.groups, seed=d.seed, **d.options)
            items, rubric = list(ds.items), ds.rubric
            info = {"name": ds.name, "description": ds.description, "source": ds.source, "path": ds.path,
                    "options": ds.options}
        else:
            if d.options:
                raise SpecError("spec [data] options: loader options apply to data sets (name = ...), not to "
                                "a texts file; remove them")
            path = relative(d.texts, base)
            items = subset_items(read_items(path), limit=d.limit, groups=d.groups, seed=d.seed)
            rubric = load_rubric("default")
            info = {"name": f"texts:{Path(path).name}", "description": "", "source": path, "path": path,
                    "options": {"limit": d.limit, "groups": d.groups, "seed": d.seed}}
    except (DataError, OSError) as e:
        raise SpecError(f"{data_where}: {e}") from None
    except ValueError as e:
        if isinstance(e, SpecError):
            raise
        raise SpecError(f"{spec.where('data', 'texts')}: {e}") from None
    try:
        if d.rubric is not None:
            rubric = load_rubric(relative(d.rubric, base))
        if d.criteria is not None:
            rubric = rubric.subset(d.criteria)
    except RubricError as e:
        key = "criteria" if d.criteria is not None and "no criterion named" in str(e) else "rubric"
        raise SpecError(f"{spec.where('data', key)}: {e}") from None
    if d.per_group is not None:
        seen: dict[str, int] = {}
        kept = []
        for it in items:
            key = it.group or f"\0{it.id}"
            seen[key] = seen.get(key, 0) + 1
            if seen[key] <= d.per_group:
                kept.append(it)
        items = kept
        info["options"] = dict(info["options"], per_group=d.per_group)
    if not items:
        raise SpecError("spec [data]: no items selected; raise limit or check groups")
    info.update(n_items=len(items), n_groups=len({it.group for it in items if it.group}),
                criteria=[c.name for c in rubric.criteria], rubric=rubric.name)
    return items, rubric, info


def _orders(spec: Spec, rubric: Rubric, n_items: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The option orders ((K, n) shared, or (I, K, n) per item for random:K / all-per-item designs) and
    (multi-criteria) the aligned criteria orders, shared by every item: every option order crossed with every
    criteria order, the criteria orders drawn with seed + 1 so that they are not the option orders' draws."""
    od = spec.orderings
    try:
        option_orders = parse(od.options, rubric.n_options, seed=od.seed, n_items=n_items)
    except OrderingError as e:
        raise SpecError(f"{spec.where('orderings', 'options')}: {e}") from None
    if not spec.prompts.multi_criteria:
        return option_orders, None
    try:
        criterion_orders = parse(od.criteria, rubric.n_criteria, seed=od.seed + 1)
    except OrderingError as e:
        raise SpecError(f"{spec.where('orderings', 'criteria')}: {e} (criteria orders are shared by every "
                        "item: balanced, all, shared-random:K or fixed:K)") from None
    return cross(option_orders, criterion_orders)


def _check_writable(path: Path, where: str) -> None:
    """``path`` (a file or folder to be written) can be created: its nearest existing folder is writable."""
    if path.is_dir() and path.suffix == ".npz":
        raise SpecError(f"{where}: {path} is a folder; give the table's file name, e.g. {path / 'table.npz'}")
    probe = path if path.is_dir() else path.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK) or \
            (path.exists() and not os.access(path, os.W_OK)):
        raise SpecError(f"{where}: cannot write {path} ({probe} is not a writable folder); choose another output")


def prepare(spec, *, data_dir=None, out=None) -> Experiment:
    """Validate a spec and resolve its data, rubric, template, orderings and output (no model yet).

    A spec from ``score`` (``probe``) flags writes its table (probe table) at ``out``; an experiment writes a
    report folder there, with the table at ``out/table.npz`` and the probe table at ``out/probe.npz``.
    """
    from .prompts import PromptError, load_template
    from .requests import default_template
    from .steps import check_slots

    spec = load_spec(spec)
    items, rubric, info = _load_items(spec, data_dir)
    pr = spec.prompts
    if pr.multi_criteria and rubric.n_criteria < 2:
        raise SpecError(f"{spec.where('prompts', 'multi_criteria')}: the rubric has a single criterion "
                        f"({rubric.criteria[0].name!r}); set multi_criteria = false or choose 2+ criteria")
    try:
        name = pr.template or default_template(pr.multi_criteria)
        template = load_template(relative(name, spec.base) if name.endswith(".toml") else name)
    except PromptError as e:
        raise SpecError(f"{spec.where('prompts', 'template')}: {e}") from None
    option_orders, criterion_orders = _orders(spec, rubric, len(items))
    if pr.multi_criteria:
        check_slots(pr.slots, rubric.n_options, rubric.n_criteria, pr.max_continuations)
    human = {it.id: dict(it.human) for it in items if it.human} or None
    systems = None
    if human:
        for key in ("model", "model_id", "system"):
            if all(key in it.meta for it in items):
                systems = {it.id: str(it.meta[key]) for it in items}
                break
    out_path = Path(out if out is not None else spec.out).expanduser()
    spec = replace(spec, out=str(out_path))
    table_path = out_path if spec.from_flags else out_path / "table.npz"
    probe_path = out_path if spec.from_flags else out_path / "probe.npz"
    _check_writable(table_path, spec.where("", "out"))
    exp = Experiment(spec, out_path, table_path, probe_path, items, rubric, template, option_orders,
                     criterion_orders, human, systems, info)
    probe_settings(exp)  # the [probe] section too is checked before any model loads
    return exp


def _model_source(spec: Spec) -> str:
    model_id = spec.model.id
    if spec.base is not None and not Path(model_id).is_absolute() and (Path(spec.base) / model_id).is_dir():
        return str(Path(spec.base) / model_id)
    return model_id


def check_labels(exp: Experiment) -> None:
    """The label checks that need the tokenizer (labels that are token prefixes of each other, labels the
    tokenizer cannot produce), run on the tokenizer alone before the model loads."""
    from .models import load_tokenizer
    from .requests import encode, first_requests, orders_of, slot_request

    probe = _TokenizerOnly(load_tokenizer(_model_source(exp.spec)))
    item, orders = exp.items[0], orders_of(np.asarray(exp.option_orders), 0)
    if exp.criterion_orders is None:
        requests = first_requests(exp.rubric, item, orders[:1])  # one per criterion
    else:  # every slot of the first ordering, the earlier slots holding their first label
        co = exp.criterion_orders[0]
        answers = [exp.rubric.criteria[c].options[0].label for c in co]
        requests = [slot_request(item, orders[0], co, answers[:j]) for j in range(len(co))]
    for req in requests:
        encode(probe, exp.template, exp.rubric, req)


@dataclass(frozen=True)
class _TokenizerOnly:
    tokenizer: object
    max_length: int | None = None


def load_judge(spec: Spec):
    """The judge model of a (validated) spec; an unreachable id fails in one line before any loading. Under
    torchrun each rank loads it on its own GPU (:func:`logitjudge.distributed.rank_device`)."""
    from .autodtype import resolve_dtype
    from .distributed import rank_device
    from .models import check_available, load_model, set_threads

    m = spec.model
    set_threads(m.threads)
    source = _model_source(spec)
    check_available(source)
    device = rank_device(m.device)  # cuda -> cuda:LOCAL_RANK before anything is loaded
    dtype, why = resolve_dtype(m.dtype, device)  # auto: measured once per machine (cached)
    lm = load_model(source, dtype=dtype, device=device, quantize=m.quantize,
                    attn_implementation=m.attn_implementation)
    if device != m.device:
        log.info("rank %s: judge on %s", os.environ.get("RANK", "?"), device)
    lm.info["dtype_choice"] = {"asked": m.dtype, "chosen": dtype, "reason": why}
    return lm


def judge_engine(exp: Experiment, lm):
    """The engine of the spec's [model] settings (its backend computes the model exactly or is refused), after
    the exactness audit (multi-criteria runs are audited on the same items' single-criterion prompts)."""
    from .engine import Engine
    from .verify import audit_run

    od, pr, m = exp.spec.orderings, exp.spec.prompts, exp.spec.model
    engine = Engine(lm, token_budget=m.token_budget, prefix_mode=m.prefix_mode)
    audit_run(engine, lm, exp.items, exp.rubric, exp.option_orders, None if pr.multi_criteria else exp.template,
              m.verify, rng=od.seed)
    return engine


def score_experiment(exp: Experiment, lm, *, engine=None, progress: bool = True) -> ScoreTable:
    """The experiment's score table: reused from its table path when that holds these settings, else scored
    (continuing an interrupted run) and saved there. Writes the ``dump_prompts`` JSONL first when asked.
    ``engine``: one made by :func:`judge_engine` (default: made here)."""
    from .requests import dump_prompts
    from .run import Run

    od, pr = exp.spec.orderings, exp.spec.prompts
    meta = {"run": exp.spec.name, "orderings": od.options, "seed": od.seed,
            "criterion_orderings": od.criteria if pr.multi_criteria else None}
    engine = engine or judge_engine(exp, lm)
    run = Run(lm, exp.items, exp.rubric, exp.option_orders, criterion_orders=exp.criterion_orders,
              template=exp.template, engine=engine, out=exp.table_path, slots=pr.slots,
              max_continuations=pr.max_continuations, progress=progress, meta=meta)
    if exp.spec.dump_prompts:
        dump_prompts(lm, exp.items, exp.rubric, exp.option_orders, run.template, exp.spec.dump_prompts,
                     criterion_orders=exp.criterion_orders)
    return run.execute()


def analyze_experiment(exp: Experiment, table: ScoreTable) -> dict:
    """The analysis of the table: human scores and systems from the data, groups from the items."""
    from .analysis import analyze

    a = exp.spec.analysis
    return analyze(table, human=exp.human, systems=exp.systems, rng=a.seed, n_boot=a.n_boot, method=a.method,
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
    spec_file["model"] = dict(spec_file["model"], id=_model_source(exp.spec))
    if spec_file["data"].get("texts"):
        spec_file["data"] = dict(spec_file["data"], texts=str(Path(exp.data_info["path"]).resolve()))
    (exp.out / "spec.toml").write_text(tomli_w.dumps(spec_file), encoding="utf-8")
    write_report(exp.out, results, spec=spec, table_meta=table.meta, data_info=exp.data_info, title=exp.spec.name)
    write_item_scores(item_scores(table, reading=exp.spec.analysis.reading, human=exp.human), exp.out / "scores.csv")
    return exp.out


def run_experiment(spec_path_or_dict, *, data_dir=None, out=None, lm=None, progress: bool = True,
                   overrides: dict | None = None) -> dict:
    """Run an experiment spec end to end: score (resumable), analyse, write the report folder, and probe when
    the spec has a [probe] section.

    ``out`` overrides the spec's report folder; ``lm`` is a preloaded model (the spec's [model] id is then
    not loaded); ``overrides``: ``{section: {key: value}}`` set over the spec's own values (the flags
    ``logitjudge run`` shares with ``score``). Returns ``{"verdict", "report" (the folder), "results" (the
    analysis dict)}`` and, probing, ``"probe_report"``.
    """
    exp = prepare(with_overrides(load_spec(spec_path_or_dict), overrides), data_dir=data_dir, out=out)
    probing = probe_settings(exp) is not None
    if lm is None:
        check_labels(exp)
        lm = load_judge(exp.spec)
    engine = judge_engine(exp, lm)
    table = score_experiment(exp, lm, engine=engine, progress=progress)
    results = analyze_experiment(exp, table)
    folder = write_experiment_report(exp, table, results)
    out = {"verdict": results["verdict"], "report": str(folder), "results": results}
    if probing:
        out["probe_report"] = str(probe_experiment(exp, lm, engine=engine, progress=progress)[1])
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
    kinds = tuple(p.sites or KINDS)
    try:
        probes = check_probe_args(p.probes, exp.option_orders, pairs=p.pairs, kinds=kinds)
    except ProbeError as e:
        raise SpecError(f"{'' if exp.spec.from_flags else 'spec [probe]: '}{e}") from None
    return {"probes": probes, "criterion": names.index(p.criterion) if p.criterion else 0, "pairs": p.pairs,
            "kinds": kinds, "hidden_layers": p.layers}


def probe_experiment(exp: Experiment, lm, *, engine=None, progress: bool = True):
    """Probe the spec's items (a run spec: the first ``[probe] limit`` scored items) into the probe table
    (resumable, :class:`logitjudge.run.ProbeRun`) and write the probe page (a run spec: ``<out>/probe/``; the
    probe command: ``--report``). Returns (ProbeTable, the page or None). Without ``engine`` (the probe command)
    the engine is made and audited here and the ``dump_prompts`` JSONL of the probed prompts is written."""
    from .report.probe import write_probe_report
    from .requests import dump_prompts
    from .rubric import Rubric
    from .run import ProbeRun

    settings = probe_settings(exp)
    if settings is None:
        raise SpecError("nothing to probe: set [probe] probes (e.g. probes = [\"lens\", \"patch\"])")
    limit = exp.spec.probe.limit
    items, orders = exp.items[:limit], exp.option_orders[:limit] if exp.option_orders.ndim == 3 else exp.option_orders
    if engine is None:
        engine = judge_engine(exp, lm)
        if exp.spec.dump_prompts:
            crit = exp.rubric.criteria[settings["criterion"]]
            dump_prompts(lm, items, Rubric((crit,), exp.rubric.instructions, exp.rubric.name), orders, exp.template,
                         exp.spec.dump_prompts)
    od = exp.spec.orderings
    meta = {"run": exp.spec.name, "orderings": od.options, "seed": od.seed}
    table = ProbeRun(lm, items, exp.rubric, orders, template=exp.template, engine=engine, out=exp.probe_path,
                     progress=progress, meta=meta, **settings).execute()
    folder = exp.spec.probe.report if exp.spec.from_flags else exp.out / "probe"
    if folder is None:
        return table, None
    a = exp.spec.analysis
    return table, write_probe_report(table, folder, n_boot=a.n_boot, rng=a.seed)
