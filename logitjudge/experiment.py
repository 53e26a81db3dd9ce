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
    # threads = 2                      # torch CPU threads (default: the CPUs this process may run on)
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
    options = "balanced"               # balanced | random:K | fixed:K
    criteria = "balanced"              # criterion orders (multi-criteria only; every option order is
                                       # crossed with every criterion order)
    seed = 0
    [analysis]
    n_boot = 1000
    method = "pearson"                 # pearson | spearman | kendall
    seed = 0
    n_draws = 100

The report folder holds ``table.npz`` (a rerun with the same settings reuses it; an interrupted run
continues from ``table.npz.partial.jsonl``), ``results.json``, ``report.md``, ``report.html``, ``plots/``
and ``spec.toml`` (the normalised spec, to run again with ``logitjudge run``).
"""

from __future__ import annotations

import copy
import difflib
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .items import Item, read_items
from .orderings import OrderingError, cross, parse
from .rubric import Rubric, RubricError, load_rubric
from .table import ScoreTable, TableError
from .tomlfile import read_toml


class SpecError(ValueError):
    """An experiment spec that cannot be run; the message names the key and the fix."""


# section -> key -> (kind, default, example). kind: str, int, bool, strs (list of str), groups, table,
# "a|b|c" (one of the choices).
SCHEMA: dict[str, dict[str, tuple]] = {
    "": {"name": ("str", None, '"hanna-small"'), "out": ("str", None, '"reports/hanna-small"'),
         "description": ("str", "", '"what this run is for"')},
    "model": {"id": ("str", "gemma-3-270m", '"gemma-3-270m"'), "dtype": ("fp32|bf16|fp16", "fp32", '"fp32"'),
              "device": ("str", "cpu", '"cpu"'), "token_budget": ("int", 4096, "4096"),
              "threads": ("int", None, "2"),
              "prefix_mode": ("auto|native|shared|copy|plain", "auto", '"auto"'),
              "attn_implementation": ("str", None, '"eager"'), "verify": ("int", None, "3"),
              "quantize": ("4bit|8bit", None, '"4bit"')},
    "data": {"name": ("str", None, '"hanna"'), "texts": ("str", None, '"texts.jsonl"'),
             "rubric": ("str", None, '"default"'), "limit": ("int", None, "22"),
             "groups": ("groups", None, '2 or ["0", "1"]'), "per_group": ("int", None, "5"),
             "seed": ("int", 0, "0"),
             "criteria": ("strs", None, '["Coherence", "Empathy"]'),
             "options": ("table", {}, '{ models = ["gpt-4"] }')},
    "prompts": {"template": ("str", None, '"text-first"'), "multi_criteria": ("bool", False, "false"),
                "slots": ("greedy|marginal", "greedy", '"greedy"'),
                "max_continuations": ("int", 20000, "20000")},
    "orderings": {"options": ("str", "balanced", '"balanced"'), "criteria": ("str", "balanced", '"balanced"'),
                  "seed": ("int", 0, "0")},
    "analysis": {"n_boot": ("int", 1000, "1000"), "method": ("pearson|spearman|kendall", "pearson", '"pearson"'),
                 "seed": ("int", 0, "0"), "n_draws": ("int", 100, "100")},
}
MINIMUM = {("model", "token_budget"): 1, ("model", "verify"): 0, ("data", "limit"): 1, ("data", "per_group"): 1,
           ("prompts", "max_continuations"): 1, ("analysis", "n_boot"): 0, ("analysis", "n_draws"): 1}


def _where(section: str, key: str) -> str:
    return f"[{section}] {key}" if section else key


def _suggest(key: str, known) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_value(section: str, key: str, value):
    kind, _, example = SCHEMA[section][key]
    where = _where(section, key)
    fix = f"write e.g. {key} = {example}"

    def bad(what: str):
        return SpecError(f"spec {where}: expected {what}, got {value!r} ({type(value).__name__}); {fix}")

    if kind == "str":
        if not isinstance(value, str) or not value.strip():
            raise bad("a non-empty string")
    elif kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        low = MINIMUM.get((section, key))
        if low is not None and value < low:
            raise SpecError(f"spec {where}: must be at least {low}, got {value}; {fix}")
    elif kind == "bool":
        if not isinstance(value, bool):
            raise bad("true or false")
    elif kind == "strs":
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise bad("a non-empty list of strings")
    elif kind == "groups":
        if isinstance(value, bool) or not (
                (isinstance(value, int) and value >= 1)
                or (isinstance(value, list) and value and all(isinstance(v, (str, int)) for v in value))):
            raise bad("a positive number of groups or a list of group ids")
        if isinstance(value, list):
            value = [str(v) for v in value]
    elif kind == "table":
        if not isinstance(value, dict):
            raise bad("a table")
    else:  # one of the choices
        choices = kind.split("|")
        if value not in choices:
            raise SpecError(f"spec {where}: {value!r} is not one of {choices}; {fix}")
    return value


def load_spec(spec) -> dict:
    """A validated spec with every default filled in (``spec``: a TOML file path or a dict).

    The result has the sections of :data:`SCHEMA` plus ``_base`` (the spec file's folder, or None).
    """
    base = None
    if isinstance(spec, (str, Path)):
        p = Path(spec)
        raw = read_toml(p, what="experiment spec", error=SpecError, hint="see experiments/*.toml for examples")
        base = str(p.resolve().parent)
    elif isinstance(spec, dict):
        raw = spec
    else:
        raise SpecError(f"an experiment spec is a .toml path or a dict, got {type(spec).__name__}")
    sections = [s for s in SCHEMA if s]
    out: dict = {"_base": raw.get("_base", base)}
    for key, value in raw.items():
        if key == "_base":
            continue
        if key in sections:
            if not isinstance(value, dict):
                raise SpecError(f"spec [{key}] must be a table (a [{key}] section), got {value!r}")
            continue
        if key not in SCHEMA[""]:
            raise SpecError(f"spec: unknown key {key!r}{_suggest(key, list(SCHEMA['']) + sections)}; top-level "
                            f"keys are {list(SCHEMA[''])} and the sections are {sections}")
    for section in SCHEMA:
        given = raw if not section else raw.get(section, {})
        unknown = [k for k in given if k not in SCHEMA[section]] if section else []
        if unknown:
            k = unknown[0]
            raise SpecError(f"spec [{section}]: unknown key {k!r}{_suggest(k, SCHEMA[section])}; known keys: "
                            f"{list(SCHEMA[section])}")
        dest = out if not section else out.setdefault(section, {})
        for key, (_, default, _) in SCHEMA[section].items():
            value = given.get(key)
            dest[key] = copy.deepcopy(default if value is None else _check_value(section, key, value))
    if not out["name"]:
        raise SpecError('spec: missing key name; write e.g. name = "hanna-small" at the top of the spec')
    data = out["data"]
    if (data["name"] is None) == (data["texts"] is None):
        raise SpecError("spec [data]: give exactly one of name (a data set: hanna, summeval, mt_bench, "
                        'vicuna_bench) or texts (a JSONL file of items), e.g. name = "hanna"')
    if out["out"] is None:
        out["out"] = f"reports/{out['name']}"
    return out


def _path(value: str, base: str | None) -> str:
    """A path relative to the spec file's folder when it exists there, else as given."""
    p = Path(value).expanduser()
    if not p.is_absolute() and base is not None and (Path(base) / p).exists():
        return str(Path(base) / p)
    return str(p)


# ---- the pipeline ------------------------------------------------------------------------------------------
@dataclass
class Experiment:
    """Everything a spec resolves to before the model is loaded."""

    spec: dict
    out: Path
    items: list[Item]
    rubric: Rubric
    template: object
    option_orders: np.ndarray
    criterion_orders: np.ndarray | None
    human: dict | None
    systems: dict | None
    data_info: dict

    @property
    def table_path(self) -> Path:
        return self.out / "table.npz"


def _load_items(spec: dict, data_dir) -> tuple[list[Item], Rubric, dict]:
    from .data import DataError, load_dataset, subset_items

    d, base = spec["data"], spec["_base"]
    try:
        if d["name"] is not None:
            ds = load_dataset(d["name"], data_dir, limit=d["limit"], groups=d["groups"], seed=d["seed"],
                              **d["options"])
            items, rubric = list(ds.items), ds.rubric
            info = {"name": ds.name, "description": ds.description, "source": ds.source, "path": ds.path,
                    "options": ds.options}
        else:
            if d["options"]:
                raise SpecError("spec [data] options: loader options apply to data sets (name = ...), not to "
                                "a texts file; remove them")
            path = _path(d["texts"], base)
            items = subset_items(read_items(path), limit=d["limit"], groups=d["groups"], seed=d["seed"])
            rubric = load_rubric("default")
            info = {"name": f"texts:{Path(path).name}", "description": "", "source": path, "path": path,
                    "options": {"limit": d["limit"], "groups": d["groups"], "seed": d["seed"]}}
    except (DataError, OSError) as e:
        raise SpecError(f"spec [data]: {e}") from None
    except ValueError as e:
        if isinstance(e, SpecError):
            raise
        raise SpecError(f"spec [data] texts: {e}") from None
    try:
        if d["rubric"] is not None:
            rubric = load_rubric(_path(d["rubric"], base))
        if d["criteria"] is not None:
            rubric = rubric.subset(d["criteria"])
    except RubricError as e:
        key = "criteria" if d["criteria"] is not None and "no criterion named" in str(e) else "rubric"
        raise SpecError(f"spec [data] {key}: {e}") from None
    if d["per_group"] is not None:
        seen: dict[str, int] = {}
        kept = []
        for it in items:
            key = it.group or f"\0{it.id}"
            seen[key] = seen.get(key, 0) + 1
            if seen[key] <= d["per_group"]:
                kept.append(it)
        items = kept
        info["options"] = dict(info["options"], per_group=d["per_group"])
    if not items:
        raise SpecError("spec [data]: no items selected; raise limit or check groups")
    info.update(n_items=len(items), n_groups=len({it.group for it in items if it.group}),
                criteria=[c.name for c in rubric.criteria], rubric=rubric.name)
    return items, rubric, info


def prepare(spec, *, data_dir=None, out=None) -> Experiment:
    """Validate a spec and resolve its data, rubric, template and orderings (no model yet)."""
    from .prompts import PromptError, load_template

    spec = load_spec(spec)
    items, rubric, info = _load_items(spec, data_dir)
    pr, od = spec["prompts"], spec["orderings"]
    if pr["multi_criteria"] and rubric.n_criteria < 2:
        raise SpecError(f"spec [prompts] multi_criteria: the rubric has a single criterion "
                        f"({rubric.criteria[0].name!r}); set multi_criteria = false or choose 2+ criteria")
    try:
        name = pr["template"] or ("multi-criteria" if pr["multi_criteria"] else "text-first")
        template = load_template(_path(name, spec["_base"]) if name.endswith(".toml") else name)
    except PromptError as e:
        raise SpecError(f"spec [prompts] template: {e}") from None
    try:
        option_orders = parse(od["options"], rubric.n_options, seed=od["seed"])
    except OrderingError as e:
        raise SpecError(f"spec [orderings] options: {e}") from None
    criterion_orders = None
    if pr["multi_criteria"]:
        try:
            criterion_orders = parse(od["criteria"], rubric.n_criteria, seed=od["seed"] + 1)
        except OrderingError as e:
            raise SpecError(f"spec [orderings] criteria: {e}") from None
        option_orders, criterion_orders = cross(option_orders, criterion_orders)  # every pair, aligned rows
    human = {it.id: dict(it.human) for it in items if it.human} or None
    systems = None
    if human:
        for key in ("model", "model_id", "system"):
            if all(key in it.meta for it in items):
                systems = {it.id: str(it.meta[key]) for it in items}
                break
    out_dir = Path(out if out is not None else spec["out"]).expanduser()
    spec["out"] = str(out_dir)
    return Experiment(spec, out_dir, items, rubric, template, option_orders, criterion_orders, human, systems,
                      info)


def load_judge(spec: dict):
    """The judge model of a (validated) spec."""
    from .models import load_model, set_threads

    m = spec["model"]
    set_threads(m["threads"])
    model_id = m["id"]
    if spec["_base"] is not None and not Path(model_id).is_absolute() and (Path(spec["_base"]) / model_id).is_dir():
        model_id = str(Path(spec["_base"]) / model_id)
    return load_model(model_id, dtype=m["dtype"], device=m["device"], quantize=m["quantize"],
                      attn_implementation=m["attn_implementation"])


def fingerprint(exp: Experiment, lm) -> str:
    """Identifies the scores: model, rubric, template, orderings, items and multi-criteria settings."""
    from .scoring import run_fingerprint

    pr = exp.spec["prompts"]
    extra = {"multi": pr["multi_criteria"]}
    if pr["multi_criteria"]:
        extra.update(criterion_orders=exp.criterion_orders.tolist(), slots=pr["slots"],
                     max_continuations=pr["max_continuations"])
    return run_fingerprint(lm, exp.rubric, exp.items, exp.option_orders, exp.template, extra)


def score_experiment(exp: Experiment, lm, *, progress: bool = True) -> ScoreTable:
    """The experiment's score table: reused from ``<out>/table.npz`` when it holds these settings, else
    scored (continuing an interrupted run) and saved there."""
    from .engine import Engine

    fp = fingerprint(exp, lm)
    if exp.table_path.exists():
        try:
            old = ScoreTable.load(exp.table_path)
        except TableError:
            old = None
        if old is not None and old.meta.get("experiment", {}).get("fingerprint") == fp:
            return old
        print(f"logitjudge: {exp.table_path} holds other settings; scoring again", file=sys.stderr)
    od, pr = exp.spec["orderings"], exp.spec["prompts"]
    meta = {"experiment": {"name": exp.spec["name"], "fingerprint": fp, "orderings": od["options"],
                           "criterion_orderings": od["criteria"] if pr["multi_criteria"] else None,
                           "seed": od["seed"]}}
    m = exp.spec["model"]
    engine = Engine(lm, token_budget=m["token_budget"], prefix_mode=m["prefix_mode"])
    from .verify import audit_run

    # multi-criteria runs are audited on the same items' single-criterion prompts (same model, same mode)
    audit_run(engine, exp.items, exp.rubric, exp.option_orders, None if pr["multi_criteria"] else exp.template,
              m["verify"], rng=od["seed"])
    exp.out.mkdir(parents=True, exist_ok=True)
    if pr["multi_criteria"]:
        from .multi import score_multi

        return score_multi(lm, exp.items, exp.rubric, exp.option_orders, exp.criterion_orders,
                           template=exp.template, engine=engine, out=exp.table_path, slots=pr["slots"],
                           max_continuations=pr["max_continuations"], progress=progress, meta=meta)
    from .scoring import score

    return score(lm, exp.items, exp.rubric, exp.option_orders, template=exp.template, engine=engine,
                 out=exp.table_path, progress=progress, meta=meta)


def analyze_experiment(exp: Experiment, table: ScoreTable) -> dict:
    """The analysis of the table: human scores and systems from the data, groups from the items."""
    from .analysis import analyze

    a = exp.spec["analysis"]
    return analyze(table, human=exp.human, systems=exp.systems, rng=a["seed"], n_boot=a["n_boot"],
                   method=a["method"], n_draws=a["n_draws"])


def public_spec(spec: dict) -> dict:
    """The spec without internal keys and unset values (as written to results.json and spec.toml)."""
    out = {}
    for key, value in spec.items():
        if key.startswith("_") or value is None:
            continue
        if isinstance(value, dict) and key in SCHEMA:
            value = {k: v for k, v in value.items() if v is not None and v != {}}
        out[key] = value
    return out


def write_experiment_report(exp: Experiment, table: ScoreTable, results: dict) -> Path:
    """results.json, report.md, report.html, plots/ and spec.toml in the experiment's folder."""
    import tomli_w

    from .report import write_report

    spec = public_spec(exp.spec)
    exp.out.mkdir(parents=True, exist_ok=True)
    spec_file = dict(spec, out=str(exp.out.resolve()))
    model = dict(spec_file["model"])
    if not Path(model["id"]).is_absolute() and exp.spec["_base"] and (Path(exp.spec["_base"]) / model["id"]).is_dir():
        model["id"] = str(Path(exp.spec["_base"]) / model["id"])
    spec_file["model"] = model
    if spec_file["data"].get("texts"):
        spec_file["data"] = dict(spec_file["data"], texts=str(Path(exp.data_info["path"]).resolve()))
    (exp.out / "spec.toml").write_text(tomli_w.dumps(spec_file), encoding="utf-8")
    write_report(exp.out, results, spec=spec, table_meta=table.meta, data_info=exp.data_info,
                 title=exp.spec["name"])
    return exp.out


def run_experiment(spec_path_or_dict, *, data_dir=None, out=None, lm=None, progress: bool = True) -> dict:
    """Run an experiment spec end to end: score (resumable), analyse, write the report folder.

    ``out`` overrides the spec's report folder; ``lm`` is a preloaded model (the spec's [model] id is then
    not loaded). Returns ``{"verdict", "report" (the folder), "results" (the analysis dict)}``.
    """
    exp = prepare(spec_path_or_dict, data_dir=data_dir, out=out)
    lm = lm if lm is not None else load_judge(exp.spec)
    table = score_experiment(exp, lm, progress=progress)
    results = analyze_experiment(exp, table)
    folder = write_experiment_report(exp, table, results)
    return {"verdict": results["verdict"], "report": str(folder), "results": results}
