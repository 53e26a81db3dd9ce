"""One spec: frozen dataclasses that describe a run; the TOML spec, the CLI flags and the Python API are built
from them.

Each setting is one dataclass field whose metadata holds its help text, its choices or kind, its minimum and
(optionally) its command-line flag: :func:`from_dict` checks a TOML table against the fields (unknown keys with a
suggestion, types, choices, minimums: one line naming the key and the fix); :func:`logitjudge.flags.add_flags`
adds the flags of a section to an argparse parser with the same choices, defaults and help, and
:func:`logitjudge.flags.from_flags` builds a spec from parsed flags. Adding a setting is adding one field here
(``opt(default, help, choices=..., minimum=...)``); a new section is a frozen dataclass of such fields, an entry
in :data:`SECTIONS` and a field of :class:`Spec`, and its flags come with
``add_flags(parser, TheSection, dest_prefix="section.")`` in ``cli.py``.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import LogitJudgeError

if TYPE_CHECKING:
    import numpy as np

    from .items import Item
    from .rubric import Rubric


class SpecError(LogitJudgeError, ValueError):
    """A spec that cannot be run; the message names the key (or flag) and the fix."""


def opt(default, help: str, *, kind: str | None = None, choices=None, minimum=None, example=None,
        flag: str | None = None, cli: bool = True):
    """A spec field. ``kind``: str, int, bool, strs (list of str), ints (list of int), groups, table (default:
    from the default's type); ``flag``: the command-line flag (default ``--field-name``); ``cli``: whether it has
    a flag at all."""
    if kind is None:
        kind = "choice" if choices else {bool: "bool", int: "int", str: "str", dict: "table"}[type(default)]
    meta = {"help": help, "kind": "choice" if choices else kind, "choices": tuple(choices or ()), "minimum": minimum,
            "example": example, "flag": flag, "cli": cli}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class ModelSpec:
    id: str = opt("gemma-3-270m", "HF model id (ORG/NAME[@REVISION]), local folder, FILE.gguf, ollama:NAME[:TAG], "
                  "or a built-in: "
                  "gemma-3-270m, qwen2.5-coder-0.5b-instruct, qwen2.5-coder-1.5b-instruct", flag="--model")
    dtype: str = opt("fp32", "weights and activations (the read-out is always fp32); fp32 is exact; auto: bf16 where "
                     "its GEMMs measured >= 1.2x faster on this machine (stated tolerance 0.05 on option "
                     "probabilities), else fp32", choices=("fp32", "bf16", "fp16", "auto"))
    device: str = opt("cpu", "cpu, cuda, cuda:N or auto (accelerate device_map)")
    token_budget: int = opt(4096, "rows x padded tokens per forward batch", minimum=1)
    prefix_mode: str = opt("auto", "auto: the fastest mode that computes this model exactly (native, shared, copy, "
                           "plain), said on stderr and in the table meta when it falls back",
                           choices=("auto", "native", "shared", "copy", "plain"))
    attn_implementation: str | None = opt(None, "transformers attention implementation (sdpa, eager, ...); unset: "
                                          "SDPA where the model supports it, else its own eager attention",
                                          kind="str", example='"eager"')
    verify: int | None = opt(None, "exactness audit: recompute N random prompts with the plain forward first and "
                             "stop if any probability differs by more than 1e-5 (fp32; bf16/fp16: 0.05); unset: 3 "
                             "for untested architectures, else 0", kind="int", minimum=0, example="3")
    threads: int | None = opt(None, "torch CPU threads; unset: $OMP_NUM_THREADS if set, else the CPUs this "
                              "process may run on", kind="int", minimum=1,
                              example="2")
    quantize: str | None = opt(None, "bitsandbytes quantization, CUDA only", choices=("4bit", "8bit"),
                               example='"4bit"')
    engine: str = opt("native", "what computes the judge: native (logitjudge's own engine), vllm (vLLM in this "
                      "process: pip install 'logitjudge[vllm]') or http://HOST:PORT (a running vllm serve; "
                      "vllm+http://HOST:PORT says so); docs/scale.md says which to choose", example='"vllm"')
    block_size: int | None = opt(None, "vllm: the prefix cache's block in tokens (a prefix is reused in whole "
                                 "blocks); unset: 32 on a CPU, vLLM's default on a GPU", kind="int", minimum=1,
                                 example="32")
    tensor_parallel: int = opt(1, "vllm: GPUs one copy of the model is split over (tensor_parallel_size)",
                               minimum=1)
    pipeline_parallel: int = opt(1, "vllm: pipeline stages, e.g. one per node (pipeline_parallel_size)",
                                 minimum=1)
    vllm_compile: str = opt("auto", "vllm: torch.compile and CUDA graphs (on) or eager (off); auto: off on a "
                            "CPU, where compiling takes minutes, on on a GPU", choices=("auto", "on", "off"))
    kv_cache_gib: int | None = opt(None, "vllm: GiB of memory for the KV cache; unset: vLLM's default share of "
                                   "free memory", kind="int", minimum=1, example="4")
    concurrency: int = opt(8, "http: requests in flight at once", minimum=1)
    request_timeout: int = opt(300, "http: seconds a request may stall before it is sent again", minimum=1)


@dataclass(frozen=True)
class DataSpec:
    name: str | None = opt(None, "a data set: hanna, summeval, mt_bench, vicuna_bench (or --texts)", kind="str",
                           example='"hanna"', flag="--dataset")
    texts: str | None = opt(None, "JSONL with id, text and optional context, group (or --dataset)", kind="str",
                              example='"texts.jsonl"')
    dir: str | None = opt(None, "the data sets folder (unset: $LOGITJUDGE_DATA)", kind="str", example='"data"',
                          flag="--data-dir")
    rubric: str | None = opt(None, "rubric .toml/.json file or built-in name; unset: the data set's, else "
                             "'default'", kind="str", example='"default"')
    limit: int | None = opt(None, "whole groups up to this many items", kind="int", minimum=1, example="22")
    groups: object = opt(None, "a number of groups drawn with the seed, or a list of group ids", kind="groups",
                         example='2 or ["0", "1"]', cli=False)
    per_group: int | None = opt(None, "keep the first N items of each chosen group", kind="int", minimum=1,
                                example="5", cli=False)
    seed: int = opt(0, "seed of the group draw", minimum=0, cli=False)
    criteria: list | None = opt(None, "comma-separated subset of the rubric's criteria", kind="strs",
                                example='["Coherence", "Empathy"]')
    options: dict = opt({}, "data set loader options", example='{ models = ["gpt-4"] }', cli=False)


@dataclass(frozen=True)
class PromptSpec:
    template: str | None = opt(None, "built-in template name or .toml file; unset: text-first, or multi-criteria "
                               "with --multi-criteria", kind="str", example='"text-first"')
    multi_criteria: bool = opt(False, "all criteria in one prompt, answered slot by slot")
    slots: str = opt("greedy", "multi-criteria: earlier slots hold their most probable label (greedy) or are "
                     "summed over exactly (marginal)", choices=("greedy", "marginal"))
    max_continuations: int = opt(20000, "marginal-mode budget of label continuations per prompt", minimum=1)
    paradigm: str = opt("pointwise", "pointwise: each text scored on the rubric | pairwise: two items of a group "
                        "per prompt, both orders, labels A/B | listwise: a group's items (2-26, equal-size "
                        "groups) in one prompt, labels A..Z, candidate orders from --orderings",
                        choices=("pointwise", "pairwise", "listwise"))
    pairs: int | None = opt(None, "pairwise: K random pairs per group (seeded with --seed); unset: every pair",
                            kind="int", minimum=1, example="10")
    chat: object = opt(None, 'the judge\'s chat template: "auto" (where its tokenizer has one: instruct judges), '
                       "true (--chat) or false (--no-chat: plain text, as a base model reads); unset: the "
                       'template\'s own (built-ins: "auto")', kind="chat", example='"auto"')


@dataclass(frozen=True)
class OrderingSpec:
    options: str = opt("balanced", "option orders: balanced (the 2n rotations) | all (every n! order, n <= 7) | "
                       "random:K (K uniform orders drawn per item: the study's RANDOM) | balanced+random:R (per "
                       "item: the 2n rotations, then R random) | shared-random:K (one random set for every item; "
                       "confounds content and position) | fixed:K", flag="--orderings")
    criteria: str = opt("balanced", "criteria orders (multi-criteria; crossed with every option order; shared by "
                        "every item): balanced | all | shared-random:K | fixed:K", flag="--criterion-orderings")
    seed: int = opt(0, "seed of random orders (criteria orders use seed + 1)", minimum=0, flag="--seed")


@dataclass(frozen=True)
class AnalysisSpec:
    n_boot: int = opt(1000, "bootstrap resamples for confidence intervals", minimum=0)
    method: str = opt("pearson", "correlation with human scores", choices=("pearson", "spearman", "kendall"))
    seed: int = opt(0, "seed of the bootstrap and of sampled readings", minimum=0, flag="--seed")
    n_draws: int = opt(100, "Monte-Carlo draws (RANDOM budget points, best-of-N) at least; RANDOM figures stop "
                       "at a standard error of 0.005", minimum=2)
    reading: str = opt("expected", "how a prompt's exact label distribution becomes a score: greedy (the most "
                       "probable label: a judge answering one label, as the study's; a reproduction of the study "
                       "uses greedy) | sampled (the mean answer of a judge sampling at T=1) | expected "
                       "(probability-weighted, as in G-Eval)", choices=("greedy", "sampled", "expected"))


@dataclass(frozen=True)
class ProbeSpec:
    """Probing the judge's internals (:mod:`logitjudge.probing`): ``logitjudge probe``, or after scoring in a run
    spec, where it is off unless ``probes`` is set."""

    probes: list | None = opt(None, "probes on the scored prompts: lens, attention, patch, linear (logitjudge probe: "
                              "all unless set; a run spec: none unless set)", kind="strs",
                              example='["lens", "attention"]')
    criterion: str | None = opt(None, "the criterion probed (unset: the rubric's first)", kind="str",
                                example='"Coherence"')
    pairs: str = opt("reverse", "order-swap pairs patched: each ordering with its reverse, with the canonical "
                     "order, or all pairs", choices=("reverse", "canonical", "all"))
    sites: list | None = opt(None, "patch sites: resid, attn, mlp, head (unset: all)", kind="strs",
                             example='["resid", "attn"]')
    layers: list | None = opt(None, "layers whose residual stream the linear probes read (unset: all)", kind="ints",
                              example="[4, 8]")
    limit: int | None = opt(None, "probe the first N scored items only (probing costs far more than scoring)",
                            kind="int", minimum=1, example="8", cli=False)
    report: str | None = opt(None, "also write the probe page into this folder (a run spec: always <out>/probe)",
                             kind="str", example='"probe_report"')


SECTIONS = {"model": ModelSpec, "data": DataSpec, "prompts": PromptSpec, "orderings": OrderingSpec,
            "analysis": AnalysisSpec, "probe": ProbeSpec}


@dataclass(frozen=True)
class Spec:
    """A whole run: what to score and how (sections) and where the result goes (``out``: a report folder for
    ``logitjudge run``, the table for ``logitjudge score``)."""

    name: str | None = opt(None, "name of the run", kind="str", example='"hanna-small"', cli=False)
    out: str | None = opt(None, "output: report folder (run) or table .npz (score)", kind="str",
                          example='"reports/hanna-small"')
    description: str = opt("", "what this run is for", cli=False)
    dump_prompts: str | None = opt(None, "write every prompt and continuation to this JSONL", kind="str")
    model: ModelSpec = field(default_factory=ModelSpec)
    data: DataSpec = field(default_factory=DataSpec)
    prompts: PromptSpec = field(default_factory=PromptSpec)
    orderings: OrderingSpec = field(default_factory=OrderingSpec)
    analysis: AnalysisSpec = field(default_factory=AnalysisSpec)
    probe: ProbeSpec = field(default_factory=ProbeSpec)
    base: str | None = None  # the spec file's folder: relative paths in the spec are looked up there first
    from_flags: bool = False  # built from command-line flags: errors name the flag, not the TOML key

    def where(self, section: str, key: str) -> str:
        """How an error names a setting: its flag (from flags) or its TOML key."""
        if self.from_flags:
            f = _field(SECTIONS[section] if section else Spec, key)
            return flag_of(f)
        return f"spec [{section}] {key}" if section else f"spec {key}"

    def to_dict(self) -> dict:
        """The TOML form: sections as tables, unset values left out."""
        out = {}
        for f in fields(self):
            if f.name in ("base", "from_flags"):
                continue
            v = getattr(self, f.name)
            if f.name in SECTIONS:
                v = {k: x for k, x in asdict(v).items() if x is not None and x != {}}
            if v is not None:
                out[f.name] = v
        return out


def _field(cls, name: str):
    return next(f for f in fields(cls) if f.name == name)


def flag_of(f) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _suggest(key: str, known) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_value(f, value, where: str, *, flag: bool = False):
    """``value`` checked against the field's kind, choices and minimum (one line naming ``where`` and the fix)."""
    m = f.metadata
    kind, example = m["kind"], m["example"]
    if example is None:
        example = str(f.default).lower() if isinstance(f.default, bool) else repr(f.default).replace("'", '"')
    fix = f"use e.g. {flag_of(f)} {example.strip(chr(34))}" if flag else f"write e.g. {f.name} = {example}"

    def bad(what: str):
        return SpecError(f"{where}: expected {what}, got {value!r} ({type(value).__name__}); {fix}")

    if kind == "str":
        if not isinstance(value, str) or not value.strip():
            raise bad("a non-empty string")
    elif kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        if m["minimum"] is not None and value < m["minimum"]:
            raise SpecError(f"{where}: must be at least {m['minimum']}, got {value}; {fix}")
    elif kind == "bool":
        if not isinstance(value, bool):
            raise bad("true or false")
    elif kind == "strs":
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise bad("a non-empty list of strings")
    elif kind == "ints":
        if not isinstance(value, list) or not value or not all(isinstance(v, int) and not isinstance(v, bool)
                                                             for v in value):
            raise bad("a non-empty list of integers")
    elif kind == "groups":
        if isinstance(value, bool) or not (
                (isinstance(value, int) and value >= 1)
                or (isinstance(value, list) and value and all(isinstance(v, (str, int)) for v in value))):
            raise bad("a positive number of groups or a list of group ids")
        if isinstance(value, list):
            value = [str(v) for v in value]
    elif kind == "chat":
        if value not in ("auto", True, False) or value in (0, 1) and not isinstance(value, bool):
            raise bad('"auto", true or false')
    elif kind == "table":
        if not isinstance(value, dict):
            raise bad("a table")
    elif value not in m["choices"]:
        raise SpecError(f"{where}: {value!r} is not one of {list(m['choices'])}; {fix}")
    return value


def _section(cls, given: dict, section: str):
    known = [f.name for f in fields(cls)]
    for key in given:
        if key not in known:
            raise SpecError(f"spec [{section}]: unknown key {key!r}{_suggest(key, known)}; known keys: {known}")
    return cls(**{f.name: check_value(f, given[f.name], f"spec [{section}] {f.name}") for f in fields(cls)
                  if given.get(f.name) is not None})


def from_dict(raw: dict, *, base: str | None = None) -> Spec:
    """A validated spec from a TOML table (every default filled in)."""
    top = [f.name for f in fields(Spec) if f.name not in SECTIONS and f.name not in ("base", "from_flags")]
    kwargs: dict = {}
    for key, value in raw.items():
        if key == "_base":
            base = value
        elif key in SECTIONS:
            if not isinstance(value, dict):
                raise SpecError(f"spec [{key}] must be a table (a [{key}] section), got {value!r}")
            kwargs[key] = _section(SECTIONS[key], value, key)
        elif key in top:
            if value is not None:
                kwargs[key] = check_value(_field(Spec, key), value, f"spec {key}")
        else:
            raise SpecError(f"spec: unknown key {key!r}{_suggest(key, top + list(SECTIONS))}; top-level keys are "
                            f"{top} and the sections are {list(SECTIONS)}")
    spec = Spec(**kwargs, base=base)
    if not spec.name:
        raise SpecError('spec: missing key name; write e.g. name = "hanna-small" at the top of the spec')
    if (spec.data.name is None) == (spec.data.texts is None):
        raise SpecError("spec [data]: give exactly one of name (a data set: hanna, summeval, mt_bench, "
                        'vicuna_bench) or texts (a JSONL file of items), e.g. name = "hanna"')
    if spec.out is None:
        spec = replace(spec, out=f"reports/{spec.name}")
    return spec


def load_spec(spec) -> Spec:
    """A validated spec with every default filled in (``spec``: a TOML file path, a dict or a :class:`Spec`)."""
    if isinstance(spec, Spec):
        return spec
    if isinstance(spec, (str, Path)):
        p = Path(spec)
        from .tomlfile import read_toml

        raw = read_toml(p, what="experiment spec", error=SpecError, hint="see experiments/*.toml for examples")
        return from_dict(raw, base=str(p.resolve().parent))
    if isinstance(spec, dict):
        return from_dict(spec)
    raise SpecError(f"an experiment spec is a .toml path, a dict or a Spec, got {type(spec).__name__}")


def with_overrides(spec: Spec, overrides: dict | None) -> Spec:
    """``spec`` with ``{section: {key: value}}`` (section "" for top-level keys) set; None values are skipped."""
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


def relative(value: str, base: str | None) -> str:
    """A path relative to the spec file's folder when it exists there, else as given."""
    p = Path(value).expanduser()
    if not p.is_absolute() and base is not None and (Path(base) / p).exists():
        return str(Path(base) / p)
    return str(p)


def model_source(spec: Spec) -> str:
    """The judge the spec names: a model folder or GGUF file next to the spec file, else its id as given."""
    model_id = spec.model.id
    if spec.base is not None and not Path(model_id).is_absolute() and (Path(spec.base) / model_id).exists():
        return str(Path(spec.base) / model_id)
    return model_id


@dataclass(frozen=True)
class Paths:
    """The files a spec names, resolved once against its folder (:func:`relative`, :func:`model_source`): the
    texts, the rubric and the template file (None where it names none: a data set, the data set's rubric, a
    built-in template) and the judge (a folder or GGUF beside the spec, else its id as given)."""

    texts: str | None
    rubric: str | None
    template: str | None
    model: str


def resolve_paths(spec: Spec) -> Paths:
    """The spec's :class:`Paths`."""
    d, template = spec.data, spec.prompts.template or ""
    return Paths(relative(d.texts, spec.base) if d.texts is not None else None,
                 relative(d.rubric, spec.base) if d.rubric is not None else None,
                 relative(template, spec.base) if template.endswith(".toml") else None, model_source(spec))


@dataclass
class Experiment:
    """Everything a spec resolves to before the model is loaded (:func:`logitjudge.design.prepare`)."""

    spec: Spec
    out: Path | None  # None: nothing written (the Python API's score without out=)
    table_path: Path | None
    probe_path: Path | None
    items: list[Item]
    rubric: Rubric
    template: object
    option_orders: np.ndarray
    criterion_orders: np.ndarray | None
    human: dict | None
    systems: dict | None
    data_info: dict
    rows: list | None = None  # pairwise / listwise: the candidate rows (logitjudge.candidates); None: pointwise
    paths: Paths | None = None  # the spec's files, resolved once (None: an Experiment made by hand)
