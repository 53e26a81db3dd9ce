"""One vocabulary (issue 53 step 4): each setting of the spec's dataclasses has one name and one default on every
surface that has it: the command line's flag, the TOML key and the keyword of ``lj.*``. The dataclasses are the
source; the deliberate exceptions are listed here with their reasons, and an exception that no longer differs
fails too (so the list stays true)."""

from __future__ import annotations

import argparse
import inspect
from dataclasses import MISSING, fields

import pytest

import logitjudge as lj
from logitjudge import api
from logitjudge.cli import build_parser
from logitjudge.spec import SECTIONS, AnalysisSpec, ModelSpec, Spec, flag_of, from_dict

# (section, field) -> why its Python keyword is not its flag's name
KEYWORD_NOT_FLAG = {
    ("data", "texts"): "lj.score(data=...) takes a DataFrame, a list of dicts or a file, not only a JSONL path",
}
# (section, field) -> why logitjudge score requires the flag where the spec and lj.score have a default
REQUIRED_ON_CLI = {
    ("", "out"): "logitjudge score must write its table somewhere; a call returns it, saved only with out=",
}
# (section, field) of score's flags that lj.score does not take, and where they are instead
NOT_IN_SCORE = {f.name: "lj.load_judge: the judge is loaded once, then scored many times"
                for f in fields(ModelSpec) if f.name not in ("token_budget", "prefix_mode", "verify")}
# the TOML key differs from the flag (and keyword): the TOML key is the field's name inside its [section]
TOML_NOT_FLAG = {("model", "id"): "model", ("data", "name"): "dataset", ("data", "dir"): "data_dir",
                 ("orderings", "options"): "orderings",
                 ("orderings", "criteria"): "criterion_orderings"}


def spec_default(f):
    return f.default_factory() if f.default is MISSING else f.default


def flag_name(f) -> str:
    return flag_of(f).lstrip("-").replace("-", "_")


def command(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def options(parser) -> dict:
    """dest -> action of every flag (a pair of switches, --chat/--no-chat: the first, with both flags)."""
    out: dict = {}
    for a in parser._actions:
        if a.option_strings:
            first = out.setdefault(a.dest, argparse.Namespace(option_strings=[], default=a.default,
                                                              required=a.required))
            first.option_strings += a.option_strings
    return out


def settings(sections=tuple(SECTIONS)):
    """(section, field) of every setting: the top-level ones ("" section) and each section's."""
    out = [("", f) for f in fields(Spec) if f.name not in SECTIONS and f.name not in ("base", "from_flags")]
    return out + [(s, f) for s in sections for f in fields(SECTIONS[s])]


SCORE = [(s, f) for s, f in settings(("model", "data", "prompts", "orderings")) if f.metadata.get("cli")]


@pytest.mark.parametrize("section,f", SCORE, ids=lambda x: x if isinstance(x, str) else x.name)
def test_score_flag_keyword_and_toml_key_name_one_setting(section, f):
    flags = options(command("score"))
    dest = f"{section}.{f.name}" if section else f.name
    assert dest in flags, f"logitjudge score has no flag for {section} {f.name}"
    action = flags[dest]
    assert flag_of(f) in action.option_strings
    assert action.required == ((section, f.name) in REQUIRED_ON_CLI), flag_of(f)
    if not action.required:
        assert action.default == spec_default(f), f"{flag_of(f)} defaults to {action.default!r}"
    if section == "model" and f.name in NOT_IN_SCORE:  # at load_judge: as a keyword or an engine option
        params = inspect.signature(lj.load_judge).parameters
        assert flag_name(f) in params or f.name in api.ENGINE_OPTIONS, f.name
        if flag_name(f) in params:
            assert params[flag_name(f)].default == spec_default(f), f.name
            assert f.name not in api.ENGINE_OPTIONS
        return
    keyword = api.KEYWORDS[(section, f.name)]
    assert (keyword != flag_name(f)) == ((section, f.name) in KEYWORD_NOT_FLAG), (keyword, flag_of(f))
    params = inspect.signature(lj.score).parameters
    assert keyword in params, f"lj.score has no keyword {keyword}"
    assert params[keyword].default == spec_default(f), (keyword, params[keyword].default)
    assert (f.name != flag_name(f)) == ((section, f.name) in TOML_NOT_FLAG), (f.name, flag_of(f))
    if (section, f.name) in TOML_NOT_FLAG:
        assert TOML_NOT_FLAG[(section, f.name)] == flag_name(f)


def test_toml_keys_are_the_fields_and_fill_the_defaults(tmp_path):
    spec = from_dict({"name": "x", "data": {"texts": "t.jsonl"}})
    for section, f in settings():
        if section and not (section == "data" and f.name == "texts"):
            assert getattr(getattr(spec, section), f.name) == spec_default(f), (section, f.name)
    for (section, key), keyword in TOML_NOT_FLAG.items():  # the TOML key is the field; the flag and keyword not
        assert key in {f.name for f in fields(SECTIONS[section])}
        assert api.KEYWORDS[(section, key)] == keyword or section == "model"  # model: load_judge(model=...)


def test_every_exception_names_a_real_setting():
    known = {(s, f.name) for s, f in settings()}
    assert set(KEYWORD_NOT_FLAG) | set(REQUIRED_ON_CLI) | set(TOML_NOT_FLAG) <= known
    assert set(NOT_IN_SCORE) <= {f.name for f in fields(ModelSpec)}


def test_score_takes_no_keyword_outside_the_vocabulary():
    """Every lj.score keyword is a spec setting's, or one of the call's own (columns, force, progress)."""
    own = {"judge", "data", "text", "context", "id", "group", "force", "progress"}
    spec_keywords = {kw for (s, k), kw in api.KEYWORDS.items() if s != "analysis"}
    assert set(inspect.signature(lj.score).parameters) - own <= spec_keywords


@pytest.mark.parametrize("f", fields(AnalysisSpec), ids=lambda f: f.name)
def test_analysis_settings_agree_on_analyze_compare_and_lj_analyze(f):
    flags = options(command("analyze"))
    assert flags[f"analysis.{f.name}"].default == spec_default(f) and flag_of(f) in flags[
        f"analysis.{f.name}"].option_strings
    param = inspect.signature(lj.analyze).parameters[api.KEYWORDS[("analysis", f.name)]]
    assert param.default == spec_default(f)
    compare = {a.option_strings[0]: a for a in command("compare")._actions if a.option_strings}
    if flag_of(f) in compare:  # compare shares --reading, --n-boot and --seed with analyze
        assert compare[flag_of(f)].default == spec_default(f), flag_of(f)


def test_compare_reads_as_analyze_reads_by_default():
    """compare defaulted to greedy, analyze to expected; both now take the spec's default (expected: the
    statistics chapter's default reading, which a choice between candidates reads as sampled)."""
    compare = {a.option_strings[0]: a for a in command("compare")._actions if a.option_strings}
    assert compare["--reading"].default == AnalysisSpec().reading == "expected"
    assert set(compare["--reading"].choices) == set(next(f for f in fields(AnalysisSpec)
                                                         if f.name == "reading").metadata["choices"])
    import inspect

    from logitjudge.sections.paradigms import compare_tables

    assert inspect.signature(compare_tables).parameters["reading"].default == AnalysisSpec().reading


COMMON = {"debug", "verbose"}  # every command's own: a traceback for the one-line error; the log on stderr


def _default(value):
    """A flag's default as a keyword holds it: a comma-separated list (``--probes``) as its items."""
    return [x.strip() for x in value.split(",")] if isinstance(value, str) and "," in value else value


@pytest.mark.parametrize("name,printed", [("run", {"spec", "quiet"}), ("probe", {"quiet"}),
                                          ("compare", {"tables", "plot", "json"})])
def test_run_probe_and_compare_are_python_functions_with_their_flags_names(name, printed):
    """``lj.run``, ``lj.probe`` and ``lj.compare`` take every flag of their command under the flag's name (a
    section's flag under its own, ``--token-budget`` as ``token_budget``) with the flag's default; the command only
    prints (``--quiet`` is ``progress=False``; ``--plot`` and ``--json`` are what compare prints to). lj.probe, like
    lj.score, takes a judge from lj.load_judge (whose keywords the other [model] flags are) and ``data`` for
    ``--texts``."""
    params = inspect.signature(getattr(lj, name)).parameters
    for dest, action in options(command(name)).items():
        if dest == "help" or (dest.startswith("model.") and dest[6:] in NOT_IN_SCORE):
            continue
        keyword = "data" if dest == "data.texts" else action.option_strings[0].lstrip("-").replace("-", "_")
        if keyword in printed | COMMON:
            continue
        assert keyword in params, f"lj.{name} has no keyword for {action.option_strings[0]}"
        default = params[keyword].default
        default = list(default) if isinstance(default, tuple) else default
        assert default == _default(action.default) or (default is False and action.default is None), keyword
    assert ("progress" in params) == (name != "compare")


def test_every_engine_defaults_to_the_specs_token_budget():
    """``token_budget`` defaulted to 4096 in the spec and 16384 in the served engines; each engine's config and
    constructor now default to the spec's."""
    from logitjudge.engine import Engine
    from logitjudge.engines import ENGINES
    from logitjudge.engines.http import HTTPEngine
    from logitjudge.engines.vllm_local import VLLMEngine

    want = ModelSpec().token_budget
    for name, config in ENGINES.items():
        assert next(f.default for f in fields(config) if f.name == "token_budget") == want, name
    for cls in (Engine, HTTPEngine, VLLMEngine):
        assert inspect.signature(cls).parameters["token_budget"].default == want, cls.__name__


def test_no_submodule_shadows_a_top_level_name():
    """Importing ``logitjudge.X`` sets ``X`` on the package, so a submodule named as a top-level function would
    replace it (``lj.run`` was the module run.py once anything had scored; now runs.py, and probe/ is probing/)."""
    from pathlib import Path

    package = Path(lj.__file__).parent
    clashes = [name for name in lj.__all__ if (package / f"{name}.py").exists() or (package / name).is_dir()]
    assert not clashes
    import logitjudge.experiment  # noqa: F401  (imports runs, probing, report)

    assert all(callable(getattr(lj, name)) for name in ("run", "probe", "compare", "score", "analyze", "rank"))
