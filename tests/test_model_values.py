"""Issue 45 item 1: every ``--model`` value a user may type is classified before anything loads (built-in,
``ollama:``, GGUF file, model folder, hub id with an optional ``@REVISION``) or refused in one line naming the
closest intended form. One table: each value's classification (:func:`logitjudge.model_ref.classify`) and what
the pre-load check (:func:`~logitjudge.model_ref.check_available`) makes of it; then every refusal through
``logitjudge score``: exit 2, one line, never "internal error", the model never loaded. No model loads here: the
GGUF files are tiny headers, the folders hold empty files named as a saved model's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import logitjudge as lj
from logitjudge import gguf as lj_gguf
from logitjudge import models
from logitjudge.cli import main
from logitjudge.model_ref import FORMS, ModelError, ModelRef, check_available, classify

sys.path.insert(0, str(Path(__file__).parent))
from test_cli import write_texts  # noqa: E402
from test_hostile_judges import _write_gguf  # noqa: E402

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def place(tmp_path, monkeypatch):
    """The files and folders the table names, under ``tmp_path`` (the working folder); an offline hub whose cache
    holds one model at its main branch; no Ollama store; no model may load and no conversion start."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LOGITJUDGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "no-store"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    hub = tmp_path / "hub"
    snapshot = hub / "models--some-org--cached-model" / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (hub / "models--some-org--cached-model" / "refs").mkdir()
    (hub / "models--some-org--cached-model" / "refs" / "main").write_text(COMMIT)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(hub))

    def fail(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(models, "load_model", fail)
    monkeypatch.setattr(lj_gguf, "_write", fail)

    spaced = tmp_path / "my models"
    spaced.mkdir()
    _write_gguf(spaced / "tiny llama.gguf", "llama")
    saved = spaced / "saved model"
    saved.mkdir()
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        (saved / name).write_text("{}")
    (tmp_path / "linked").symlink_to(spaced / "tiny llama.gguf")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone.gguf")
    (tmp_path / "ggufs").mkdir()
    _write_gguf(tmp_path / "ggufs" / "a.gguf", "llama")
    (tmp_path / "empty").mkdir()
    write_texts(tmp_path / "texts.jsonl", 2)
    (tmp_path / "data.csv").write_text("id,text\na,hello\n")
    (tmp_path / "rubric.json").write_text(json.dumps({"options": [{"value": 1}, {"value": 2}]}))
    (tmp_path / "rubric.toml").write_text('[[criteria]]\nname = "q"\noptions = [{value = 1}, {value = 2}]\n')
    (tmp_path / "spec.toml").write_text('[model]\nid = "gemma-3-270m"\n[data]\ntexts = "texts.jsonl"\n')
    (tmp_path / "chat.toml").write_text('base = "text-first"\nchat = true\n')
    (tmp_path / "notes.md").write_text("# notes\n")
    return tmp_path


# value -> the classification (a ModelRef, "{tmp}" standing for the folder) and what check_available makes of it:
# None (there, nothing loads), or the exact refusal (classify's own when the classification is a str).
CASES = {
    # an Ollama-style name without its prefix (a Hugging Face id has no colon)
    "qwen2.5:1.5b": ("--model 'qwen2.5:1.5b' names an Ollama model without its prefix: did you mean "
                     "ollama:qwen2.5:1.5b?", None),
    "gemma-3-270m:q8": ("--model 'gemma-3-270m:q8': a built-in takes no tag and an Ollama model needs the ollama: "
                        "prefix; did you mean the built-in gemma-3-270m, or the Ollama model ollama:gemma-3-270m:q8?",
                        None),
    "Qwen/Qwen2.5-0.5B:main": ("--model 'Qwen/Qwen2.5-0.5B:main' names an Ollama model without its prefix: did you "
                               "mean ollama:Qwen/Qwen2.5-0.5B:main? (a Hugging Face id takes a revision as "
                               "ORG/NAME@REVISION)", None),
    # files that are not models: what each is and where it goes
    "texts.jsonl": ("--model texts.jsonl is a data file, not a model: pass it as --texts", None),
    "data.csv": ("--model data.csv is a data file, not a model: pass it as --texts", None),
    "rubric.json": ("--model rubric.json is a rubric file, not a model: pass it as --rubric", None),
    "rubric.toml": ("--model rubric.toml is a rubric file, not a model: pass it as --rubric", None),
    "spec.toml": ("--model spec.toml is an experiment spec, not a model: run it with logitjudge run spec.toml",
                  None),
    "chat.toml": ("--model chat.toml is a prompt template, not a model: pass it as --template", None),
    "my models/saved model/config.json": ("--model my models/saved model/config.json is one file of the saved model "
                                          "in my models/saved model: pass the folder, --model my models/saved "
                                          "model", None),
    "notes.md": (f"--model notes.md is a file but not a model; {FORMS}", None),
    "missing.jsonl": (f"--model missing.jsonl: there is no such file, and a .jsonl file is not a model; {FORMS}",
                      None),
    # paths: spaces, a symlink without the suffix, a folder holding a GGUF, an empty folder, missing ones
    "my models/tiny llama.gguf": (ModelRef("gguf", "my models/tiny llama.gguf"), None),
    "{tmp}/my models/saved model": (ModelRef("folder", "{tmp}/my models/saved model"), None),
    "linked": (ModelRef("gguf", "linked"), None),
    "dangling": ("--model dangling is a link to {tmp}/gone.gguf, which does not exist; point it at a model file or "
                 "folder", None),
    "ggufs": ("model folder ggufs holds GGUF files but no saved model (no config.json): pass the GGUF file itself, "
              "--model ggufs/a.gguf", None),
    "empty": (ModelRef("folder", "empty"), "model folder empty is empty; it is not a saved model: point --model at a "
              "folder written by save_pretrained (config.json, tokenizer and weights) or at a Hugging Face model id"),
    "gone.gguf": (ModelRef("gguf", "gone.gguf"), "GGUF file gone.gguf does not exist; pass the path of a .gguf file"),
    "./no-such-folder": (f"--model ./no-such-folder: there is no such file or folder; {FORMS}", None),
    # hub ids: a revision, a cached one, an unknown one offline, a near miss of a built-in, a bad one
    "some-org/cached-model": (ModelRef("hub", "some-org/cached-model"), None),
    "some-org/cached-model@main": (ModelRef("hub", "some-org/cached-model", "main"), None),
    f"some-org/cached-model@{COMMIT}": (ModelRef("hub", "some-org/cached-model", COMMIT), None),
    "some-org/cached-model@v2.0": (ModelRef("hub", "some-org/cached-model", "v2.0"),
                                   "model 'some-org/cached-model@v2.0' is neither a local folder nor in the local "
                                   "Hugging Face cache, and HF_HUB_OFFLINE is set; pass a local folder or download "
                                   "the model once with network access"),
    "some-org/cached-model@": ("--model some-org/cached-model@: '' is not a revision (a branch, tag or commit hash); "
                               "write ORG/NAME@REVISION, e.g. Qwen/Qwen2.5-0.5B-Instruct@main", None),
    "no-org/no-such-model": (ModelRef("hub", "no-org/no-such-model"),
                             "model 'no-org/no-such-model' is neither a local folder nor in the local Hugging Face "
                             "cache, and HF_HUB_OFFLINE is set; pass a local folder or download the model once "
                             "with network access"),
    "gemma-3-27m": (ModelRef("hub", "gemma-3-27m"),
                    "model 'gemma-3-27m' is neither a local folder nor in the local Hugging Face cache, and "
                    "HF_HUB_OFFLINE is set; pass a local folder or download the model once with network access "
                    "(did you mean the built-in gemma-3-270m?)"),
    "a judge please": (f"--model 'a judge please' is not a model name: {FORMS}", None),
    "": (f"--model '' names no model; {FORMS}", None),
    # ollama: with no store, and a name Ollama cannot have
    "ollama:gemma3:270m": (ModelRef("ollama", "ollama:gemma3:270m"),
                           "no Ollama model store at {tmp}/no-store (no manifests folder); set OLLAMA_MODELS to the "
                           "store (ollama pull the model first) or pass the GGUF file itself"),
    "ollama:": ("'ollama:' is not an Ollama model name; write ollama:NAME or ollama:NAME:TAG (e.g. ollama:gemma3:270m, "
                "ollama:library/qwen2.5:0.5b)", None),
}

# where the command line refuses a value before the classification (the spec's own check of a string setting)
CLI_FIRST = {"": "--model: expected a non-empty string, got '' (str); use e.g. --model gemma-3-270m"}


def _filled(x, tmp: Path):
    if isinstance(x, ModelRef):
        return ModelRef(x.kind, x.name.replace("{tmp}", str(tmp)), x.revision)
    return x.replace("{tmp}", str(tmp)) if isinstance(x, str) else x


@pytest.mark.parametrize("value", CASES)
def test_each_value_is_classified_or_refused_in_one_line(place, value):
    kind, available = (_filled(x, place) for x in CASES[value])
    value = _filled(value, place)
    if isinstance(kind, str):  # refused by its form, before any check of what it names
        with pytest.raises(ModelError) as e:
            classify(value)
        assert str(e.value) == kind
        return
    assert classify(value) == kind
    if available is None:
        assert check_available(value) == kind
    else:
        with pytest.raises(ModelError) as e:
            check_available(value)
        assert str(e.value) == available


@pytest.mark.parametrize("value", [v for v, (kind, available) in CASES.items() if available or isinstance(kind, str)])
def test_refusals_through_the_cli(place, capsys, value):
    """``logitjudge score --model VALUE``: exit 2, the refusal as its one line, nothing written."""
    kind, available = (_filled(x, place) for x in CASES[value])
    capsys.readouterr()
    rc = main(["score", "--model", _filled(value, place), "--texts", str(place / "texts.jsonl"), "--out",
               str(place / "t.npz"), "--quiet"])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "internal error" not in err, (rc, err)
    assert lines[0].endswith(CLI_FIRST.get(value) or available or kind), lines[0]
    assert not list(place.glob("t.npz*"))


def test_python_api_refuses_the_same_way(place):
    """``lj.load_judge`` goes through the same classification: the same line as the command line's."""
    with pytest.raises(ModelError, match="did you mean ollama:qwen2.5:1.5b"):
        lj.load_judge("qwen2.5:1.5b")
    with pytest.raises(ModelError, match="is a data file, not a model: pass it as --texts"):
        lj.load_judge("texts.jsonl")


def test_revision_given_twice_must_agree(place):
    """The ``@REVISION`` of a hub id is the revision loaded; a ``revision=`` argument that differs is refused."""
    assert models.source_and_revision("some-org/cached-model@main") == ("some-org/cached-model", "main")
    assert models.source_and_revision("some-org/cached-model", "main") == ("some-org/cached-model", "main")
    with pytest.raises(ModelError, match="names revision 'main' but revision='v2' was passed too"):
        models.source_and_revision("some-org/cached-model@main", "v2")
