"""The Python API: a judge, a DataFrame in, one object out.

::

    import logitjudge as lj

    judge = lj.load_judge("gemma-3-270m")
    result = lj.score(judge, df, text="response", context="question", orderings="random:5")
    result.to_pandas()                  # one row per item, criterion, ordering and option
    report = lj.analyze(result, human=human_df)
    print(report.verdict); report.scores; report.save("report/")

These are the command line's functions, not a second pipeline: :func:`score` builds the spec ``logitjudge score``
builds from its flags and runs it through :func:`logitjudge.experiment.open_experiment` (the same checks, orders,
engine, exactness audit, checkpoint);
:func:`analyze` is what ``logitjudge analyze`` prints and writes (``--scores``); rows become items through
:func:`logitjudge.items.items_from_data`, the checks of a texts file. The submodules stay the long form.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cached_property
from pathlib import Path

from .errors import LogitJudgeError
from .rubric import Rubric
from .spec import AnalysisSpec, DataSpec, ModelSpec, OrderingSpec, PromptSpec, Spec, check_value
from .table import ScoreTable

__all__ = ["Report", "Result", "analyze", "load_judge", "score"]

# the keyword of each spec setting the functions take: errors name the keyword (lj.score(orderings=...))
KEYWORDS = {("model", "id"): "model", ("model", "dtype"): "dtype", ("model", "device"): "device",
            ("model", "threads"): "threads", ("model", "quantize"): "quantize",
            ("model", "attn_implementation"): "attn_implementation", ("model", "token_budget"): "token_budget",
            ("model", "prefix_mode"): "prefix_mode", ("model", "verify"): "verify", ("model", "engine"): "engine",
            ("data", "texts"): "data", ("data", "name"): "dataset", ("data", "dir"): "data_dir",
            ("data", "limit"): "limit", ("data", "rubric"): "rubric", ("data", "criteria"): "criteria",
            ("prompts", "template"): "template", ("prompts", "multi_criteria"): "multi_criteria",
            ("prompts", "slots"): "slots", ("prompts", "max_continuations"): "max_continuations",
            ("prompts", "paradigm"): "paradigm", ("prompts", "pairs"): "pairs", ("prompts", "chat"): "chat",
            ("orderings", "options"): "orderings", ("orderings", "criteria"): "criterion_orderings",
            ("orderings", "seed"): "seed", ("", "out"): "out", ("", "dump_prompts"): "dump_prompts",
            ("analysis", "n_boot"): "n_boot", ("analysis", "method"): "method", ("analysis", "seed"): "seed",
            ("analysis", "n_draws"): "n_draws", ("analysis", "reading"): "reading",
            **{("probe", key): key for key in ("probes", "criterion", "pairs", "sites", "layers", "report")}}


# lj.load_judge(engine_options=...): the [model] settings of the serving engines
ENGINE_OPTIONS = ("block_size", "tensor_parallel", "pipeline_parallel", "vllm_compile", "kv_cache_gib", "concurrency",
                  "request_timeout")


@dataclass(frozen=True)
class _CallSpec(Spec):
    """The spec of a call (``name``: the function): a table at ``out`` as from ``score``'s flags, and errors
    naming the keyword, e.g. ``lj.score(orderings=...)``."""

    def where(self, section: str, key: str) -> str:
        kw = KEYWORDS.get((section, key))
        if (section, key) == ("data", "texts") and self.data.name is not None:  # the data set's error
            kw = "dataset"
        return f"lj.{self.name}({kw}=...)" if kw else f"lj.{self.name}: [{section}] {key}"


# the spec's defaults: the one source of every keyword default here
_SPEC = Spec()


def _section(cls, given: dict, name: str, section: str):
    """A spec section from keyword values, each checked as the spec checks it (kind, choices, minimum); None:
    the default."""
    spec = _CallSpec(name=name)
    return cls(**{f.name: check_value(f, given[f.name], spec.where(section, f.name)) for f in fields(cls)
                  if given.get(f.name) is not None})


def load_judge(model: str = _SPEC.model.id, *, dtype: str = _SPEC.model.dtype,
               device: str = _SPEC.model.device, threads: int | None = _SPEC.model.threads,
               quantize: str | None = _SPEC.model.quantize,
               attn_implementation: str | None = _SPEC.model.attn_implementation,
               engine: str = _SPEC.model.engine, engine_options: dict | None = None):
    """The judge a run of ``logitjudge score --model MODEL`` loads (:func:`logitjudge.experiment.load_judge`):
    a built-in alias (gemma-3-270m), ``ollama:NAME[:TAG]``, a GGUF file, a local folder or a Hugging Face id
    (``ORG/NAME[@REVISION]``); any other value is refused in one line before anything loads. ``dtype``: fp32
    (exact), bf16, fp16 or auto; ``device``: cpu, cuda, cuda:N or auto; ``threads``: torch CPU threads (None:
    $OMP_NUM_THREADS, else the usable CPUs). ``engine``: native, vllm, http://HOST:PORT (``vllm+http://`` too) or
    another name registered in :data:`logitjudge.engines.ENGINES` (``--engine``);
    ``engine_options``: the engine's other [model] settings by name (block_size, tensor_parallel,
    pipeline_parallel, vllm_compile, kv_cache_gib, concurrency, request_timeout). Returns a frozen
    :class:`logitjudge.models.Judge`: its weights, or for a serving engine its tokenizer and config only (the
    engine loads the weights when :func:`score` first runs); an unreachable id fails in one line before any
    loading."""
    from .engines import check_model
    from .experiment import load_judge as load

    options = dict(engine_options or {})
    unknown = sorted(set(options) - set(ENGINE_OPTIONS))
    if unknown:
        raise LogitJudgeError(f"lj.load_judge(engine_options=...): unknown option {unknown[0]!r}; the options are "
                              f"{list(ENGINE_OPTIONS)}")
    m = _section(ModelSpec, {"id": model, "dtype": dtype, "device": device, "threads": threads,
                             "quantize": quantize, "attn_implementation": attn_implementation, "engine": engine,
                             **options}, "load_judge", "model")
    check_model(m, probing=False, where=lambda key: f"lj.load_judge({key}=...)")
    return load(_CallSpec(name="load_judge", model=m))


@dataclass(frozen=True, eq=False)
class Result:
    """What :func:`score` returns: the :class:`~logitjudge.table.ScoreTable` (``table``: exact option
    probabilities of every item, criterion and ordering) and ``path``, where it was saved (None: not saved)."""

    table: ScoreTable
    path: Path | None = None

    def to_pandas(self):
        """One row per item, criterion, ordering and option: the long DataFrame ``logitjudge analyze --export``
        writes (:meth:`logitjudge.table.ScoreTable.to_dataframe`)."""
        return self.table.to_dataframe()

    def save(self, path, *, force: bool = False) -> Path:
        """The table as ``.npz`` (``logitjudge analyze`` reads it). A file at ``path`` that is not a score table
        is refused unless ``force``."""
        from .outputs import Output, check_outputs

        path = Path(path)
        check_outputs([Output(path, "Result.save", kind="table")], [], force=force)
        return self.table.save(path)

    def __repr__(self) -> str:
        t, (i, c, k, n) = self.table, self.table.shape
        mean = t.expected_score().mean(axis=(0, 2))  # over items and orderings
        crit = ", ".join(f"{name} {m:.3g}" for name, m in zip(t.criteria[:4], mean))
        more = f", ... ({c} criteria)" if c > 4 else ""
        judge = " ".join(str(t.meta.get(key) or "") for key in ("model_id", "dtype")).strip()
        saved = f", saved at {self.path}" if self.path else ""
        return (f"<logitjudge Result: {i} items x {c} {'criterion' if c == 1 else 'criteria'} x {k} orderings x {n} "
                f"options; judge {judge or '?'}; "
                f"mean expected score {crit}{more}{saved}>")


def score(judge, data=None, *, text: str = "text", context: str | None = "context", id: str | None = "id",
          group: str | None = "group", dataset: str | None = _SPEC.data.name,
          data_dir: str | None = _SPEC.data.dir, limit: int | None = _SPEC.data.limit,
          rubric: str | Path | Rubric | None = _SPEC.data.rubric,
          criteria: list | None = _SPEC.data.criteria, orderings=_SPEC.orderings.options,
          seed: int = _SPEC.orderings.seed, template=_SPEC.prompts.template,
          multi_criteria: bool = _SPEC.prompts.multi_criteria, slots: str = _SPEC.prompts.slots,
          max_continuations: int = _SPEC.prompts.max_continuations,
          criterion_orderings: str = _SPEC.orderings.criteria,
          paradigm: str = _SPEC.prompts.paradigm, pairs: int | None = _SPEC.prompts.pairs,
          chat: bool | str | None = _SPEC.prompts.chat, out=_SPEC.out, force: bool = False,
          token_budget: int = _SPEC.model.token_budget, prefix_mode: str = _SPEC.model.prefix_mode,
          verify: int | None = _SPEC.model.verify, dump_prompts=_SPEC.dump_prompts,
          progress: bool = True) -> Result:
    """Exact option distributions of every row of ``data`` under permuted rubrics: ``logitjudge score``.

    ``data``: a pandas DataFrame, a list of dicts (one per row) or the path of a ``.jsonl``, ``.csv`` or
    ``.parquet`` file; or, in its place, ``dataset``: a data set by name (hanna, summeval, mt_bench,
    vicuna_bench; ``data_dir``: its folder, unset: $LOGITJUDGE_DATA). ``text`` names the column of the texts;
    ``context`` (the question, the source article), ``group`` (items ranked together: a prompt's responses) and
    ``id`` are read from their columns when present, any other name must be a column, and None leaves the field
    out. Without an id column the rows are numbered: ids "0", "1", ... (the row's position, as ``data.iloc``). A
    missing column, a duplicate id, a text or id that is missing (None, NaN) or not a string is refused in one
    line naming the row and the fix, before any prompt runs. ``limit``: whole groups up to this many items.

    ``rubric``: a built-in name, a rubric .toml/.json file or a :class:`~logitjudge.rubric.Rubric` (unset: the
    data set's, else "default"; ``criteria``: a subset of its criteria). ``orderings``: what ``--orderings``
    takes (balanced, all, random:K, balanced+random:R, shared-random:K, fixed:K), drawn with ``seed``, or the
    orders themselves (pointwise): a (K, n) array of 0-based option orders as :func:`logitjudge.balanced`
    returns, or one set per item, (I, K, n). ``template``: a built-in name, a .toml file or a
    :class:`~logitjudge.prompts.Template`. ``multi_criteria``, ``slots``, ``max_continuations``,
    ``criterion_orderings``, ``paradigm``, ``pairs``, ``chat`` (True: --chat, False: --no-chat), ``token_budget``,
    ``prefix_mode``, ``verify`` and ``dump_prompts``: the flags of the same names. ``out``: also save the table
    there (.npz), checkpointed as it is scored so that the same call again continues an interrupted run
    (``force``: replace a file there that is not a score table). Returns a :class:`Result`.
    """
    from .prompts import Template

    items, path = _call_items("score", judge, data, dataset, text=text, id=id, context=context, group=group)
    if not isinstance(rubric, (str, Path, Rubric, type(None))):
        raise LogitJudgeError(f"lj.score(rubric=...): expected a built-in name, a rubric file or a Rubric, got "
                              f"{type(rubric).__name__}")
    if not isinstance(template, (str, Path, Template, type(None))):
        raise LogitJudgeError(f"lj.score(template=...): expected a built-in name, a template .toml file or a "
                              f"Template, got {type(template).__name__}")
    given_orders = None if isinstance(orderings, str) else _order_array(orderings, paradigm)
    named = None if rubric is None or isinstance(rubric, Rubric) else str(rubric)
    spec = _CallSpec(
        name="score", out=None if out is None else str(out),
        dump_prompts=None if dump_prompts is None else str(dump_prompts),
        model=_judge_model(judge, token_budget=token_budget, prefix_mode=prefix_mode, verify=verify),
        data=_section(DataSpec, {"texts": path, "name": dataset, "dir": None if data_dir is None else str(data_dir),
                                 "limit": limit, "rubric": named, "criteria": criteria}, "score", "data"),
        prompts=_section(PromptSpec, {"template": None if template is None or isinstance(template, Template)
                                      else str(template), "multi_criteria": multi_criteria, "slots": slots,
                                      "max_continuations": max_continuations, "paradigm": paradigm,
                                      "pairs": pairs, "chat": chat}, "score", "prompts"),
        orderings=_section(OrderingSpec, {"options": orderings if given_orders is None
                                          else f"fixed:{given_orders.shape[-2]}",  # the array replaces these
                                          "criteria": criterion_orderings, "seed": seed}, "score", "orderings"),
        from_flags=True)
    run = _open(spec, judge, force=force, items=items, rubric=rubric if isinstance(rubric, Rubric) else None,
                template=template if isinstance(template, Template) else None, orders=given_orders)
    return Result(run.score(progress=progress), run.exp.table_path)


def _call_items(call: str, judge, data, dataset, **columns) -> tuple:
    """The items of ``lj.<call>(judge, data, ...)`` (:func:`logitjudge.items.items_from_data`; (None, None) for a
    data set), after the checks every call on a judge makes: a loaded judge, not its name; data or a data set."""
    from .items import items_from_data

    if isinstance(judge, (str, Path)):
        raise LogitJudgeError(f"lj.{call}: the judge is a loaded model, not its name {str(judge)!r}; load it once "
                              f"with judge = lj.load_judge({str(judge)!r}) and pass judge")
    if (data is None) == (dataset is None):
        raise LogitJudgeError(f"lj.{call}: give exactly one of data (a DataFrame, a list of dicts or a "
                              ".jsonl/.csv/.parquet file) or dataset=NAME (hanna, summeval, mt_bench, vicuna_bench)")
    return items_from_data(data, **columns) if data is not None else (None, None)


def _order_array(orderings, paradigm):
    """``orderings`` given as orders: an int array (K, n) or (I, K, n), checked for its shape here and for its
    permutations once the rubric is known (:func:`_open`)."""
    import numpy as np

    try:
        a = np.asarray(orderings)
    except (TypeError, ValueError):
        a = None
    if a is None or a.ndim not in (2, 3) or a.size == 0 or not np.issubdtype(a.dtype, np.integer):
        shape = "" if a is None else f" of shape {a.shape} ({a.dtype})"
        raise LogitJudgeError(f"lj.score(orderings=...): expected a design name (balanced, random:K, ...) or an "
                              f"integer array of 0-based option orders, (K, n) or per item (I, K, n), as "
                              f"lj.balanced(n) returns; got {type(orderings).__name__}{shape}")
    if paradigm != "pointwise":
        raise LogitJudgeError(f"lj.score(orderings=...): an array of option orders applies to pointwise prompts; "
                              f"{paradigm} candidate orders are drawn per group: give a design name (balanced, "
                              f"random:K, ...)")
    return a


def _open(spec, judge, *, force, items, rubric, template, orders):
    """:func:`logitjudge.experiment.open_experiment` on a call's spec and judge, with the Python API's objects (a
    :class:`~logitjudge.prompts.Template`, an order array) in place of the spec's template and orderings: each
    checked as the spec's are, before any item is scored (the run's fingerprint holds them)."""
    from .experiment import open_experiment

    return open_experiment(spec, lm=judge, force=force, items=items, rubric=rubric, template=template,
                           orders=orders)


def _judge_model(judge, **given) -> ModelSpec:
    """The [model] section of a call on ``judge``: its id and, for a serving engine's judge, the engine settings it
    was loaded with; ``given`` (the call's keywords) over them."""

    loaded = judge.settings
    m = _section(ModelSpec, {"id": judge.model_id, **given}, "score", "model")
    if loaded is None:
        return m
    return replace(loaded, **{k: getattr(m, k) for k in given})


def _table_of(result) -> ScoreTable:
    if isinstance(result, Result):
        return result.table
    if isinstance(result, ScoreTable):
        return result
    if isinstance(result, (str, Path)):
        return ScoreTable.load(result)  # refused unless every probability is finite, >= 0 and sums to 1
    raise LogitJudgeError(f"lj.analyze: expected a Result, a ScoreTable or the path of a table (.npz), got "
                          f"{type(result).__name__}")


def read_human(human, *, group_by: str | None = None) -> tuple[dict, dict | None]:
    """Human scores (item id -> criterion -> score, and item id -> group or None) from a DataFrame or list of dicts
    (columns ``id`` and one per criterion, as the flat form of ``--human``; a missing cell is a missing score),
    or a file: JSONL as ``logitjudge analyze --human`` reads it, or a CSV or Parquet table of those columns."""
    from .human import HumanScoresError, human_from_records, read_human_scores
    from .items import ItemError, frame_records, read_records

    if isinstance(human, (str, Path)) and Path(human).suffix.lower() not in (".csv", ".parquet"):
        return read_human_scores(human, group_by=group_by)
    if isinstance(human, (str, Path)):
        try:
            records = read_records(human)[0]
        except ItemError as e:
            raise HumanScoresError(str(e).replace("texts file", "human-score file")) from None
        return human_from_records(records, group_by=group_by, source=str(human), table=True)
    if hasattr(human, "to_dict") and hasattr(human, "columns"):
        return human_from_records(frame_records(human, name="human"), group_by=group_by, source="human",
                                  table=True)
    if isinstance(human, (list, tuple)) and all(isinstance(d, dict) for d in human):
        return human_from_records([(f"human[{i}]", d) for i, d in enumerate(human)], group_by=group_by,
                                  source="human", table=True)
    raise HumanScoresError(f"lj.analyze(human=...): expected a DataFrame (columns id and one per criterion), a "
                           f"list of dicts or a .jsonl/.csv/.parquet file, got {type(human).__name__}")


@dataclass(frozen=True, eq=False)
class Report:
    """What :func:`analyze` returns: ``results`` (the dict ``logitjudge analyze --json`` prints), ``verdict``,
    ``scores`` (one row per item and criterion, as ``--scores`` writes), :meth:`to_markdown` (what ``logitjudge
    analyze`` prints) and :meth:`save` (a report folder)."""

    table: ScoreTable
    results: dict
    human: dict | None = None
    groups: dict | None = None

    @property
    def verdict(self) -> str:
        return self.results["verdict"]

    @cached_property
    def scores(self):
        """One row per item and criterion: fixed, balanced, random and pride scores under the analysis' reading,
        human scores, label mass (:func:`logitjudge.sections.scores.item_scores`)."""
        from .sections.scores import item_scores

        return item_scores(self.table, reading=self.results["settings"]["reading"], human=self.human,
                           groups=self.groups)

    def to_markdown(self) -> str:
        from .analysis import format_markdown

        return format_markdown(self.results)

    def save(self, folder, *, title: str | None = None, force: bool = False) -> Path:
        """The report folder ``logitjudge run`` writes, less its spec.toml: table.npz, results.json, report.md,
        report.html, plots/ and scores.csv (``title``: the report's heading, "TITLE: position-bias report"). A file
        there of another kind is refused unless ``force``."""
        from .outputs import Output, check_outputs, report_folder
        from .report import write_report
        from .sections.scores import write_item_scores

        folder = Path(folder)
        check_outputs([Output(folder, "Report.save", files=report_folder())], [], force=force)
        folder.mkdir(parents=True, exist_ok=True)
        self.table.save(folder / "table.npz")
        write_report(folder, self.results, table_meta=self.table.meta, title=title)
        write_item_scores(self.scores, folder / "scores.csv")
        return folder

    def __repr__(self) -> str:
        t = self.results["table"]
        done = [k for k, v in self.results.items() if k not in ("verdict", "table", "settings", "skipped",
                                                                 "warnings") and v is not None]
        c = t["n_criteria"]
        return (f"<logitjudge Report: {t['n_items']} items x {c} {'criterion' if c == 1 else 'criteria'} x "
                f"{t['n_orderings']} orderings; sections {', '.join(done)}; {len(self.results['skipped'])} skipped; "
                f"verdict: {self.verdict[:160]}{'...' if len(self.verdict) > 160 else ''}>")


def analyze(result, *, human=None, group_by: str | None = None, n_boot: int = _SPEC.analysis.n_boot,
            method: str = _SPEC.analysis.method, seed: int = _SPEC.analysis.seed,
            n_draws: int = _SPEC.analysis.n_draws, reading: str = _SPEC.analysis.reading) -> Report:
    """Every statistic the table supports: ``logitjudge analyze``. ``result``: a :class:`Result`, a
    :class:`~logitjudge.table.ScoreTable` or the path of a table. ``human``: a DataFrame (columns ``id`` and one
    per criterion) or a file, as :func:`read_human`; ``group_by``: its column that groups items (default: the
    table's own groups). ``n_boot``, ``method``, ``seed``, ``n_draws``, ``reading``: the flags of the same names.
    Returns a :class:`Report`."""
    from .analysis import analyze as analyze_table
    from .spec import SpecError

    a = _section(AnalysisSpec, {"n_boot": n_boot, "method": method, "seed": seed, "n_draws": n_draws,
                                "reading": reading}, "analyze", "analysis")
    if group_by is not None and human is None:
        raise SpecError("lj.analyze(group_by=...) names a column of the human scores; give human=... too (without "
                        "them the table's own item groups are used)")
    table = _table_of(result)
    scores, groups = read_human(human, group_by=group_by) if human is not None else (None, None)
    res = analyze_table(table, human=scores, groups=groups or None, rng=a.seed, n_boot=a.n_boot, method=a.method,
                        n_draws=a.n_draws, reading=a.reading)
    return Report(table, res, scores, groups or None)
