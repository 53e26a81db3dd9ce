"""What a ``--model`` value (spec: ``[model] id``, Python: ``lj.load_judge(model)``) names, decided in one place
before anything loads: a built-in judge, ``ollama:NAME[:TAG]``, a GGUF file, a saved model folder or a Hugging Face
id (``ORG/NAME``, a revision as ``ORG/NAME@REVISION``). Any other value is refused in one line naming the form
most likely meant: an Ollama name without its prefix, a data, rubric or spec file given as the model, a file of a
saved model instead of its folder. :func:`classify` reads only the file system (no network, no weights);
:func:`check_available` then checks, still before any load, that what the value names is there."""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import LogitJudgeError
from .gguf import GGUFError, check_architecture, read_header
from .judges import BUILTINS, check_builtin
from .ollama import PREFIX, blob, is_ollama
from .ollama import parse as parse_ollama
from .tomlfile import read_toml

KINDS = ("builtin", "ollama", "gguf", "folder", "hub")
FORMS = (f"--model takes a built-in ({', '.join(BUILTINS)}), a .gguf file, a folder written by save_pretrained, "
         "ollama:NAME[:TAG] or a Hugging Face id (ORG/NAME[@REVISION])")
WEIGHTS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf", "*.safetensors.index.json", "*.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json", "spiece.model")
MODEL_FILES = ("config.json", "generation_config.json", "special_tokens_map.json", "merges.txt", *TOKENIZER_FILES)
DATA_SUFFIXES = (".jsonl", ".ndjson", ".csv", ".tsv", ".parquet", ".txt")
PEEK = 1 << 20  # a .json/.toml file is read to tell a rubric from a spec only up to this size
SPEC_SECTIONS = {"model", "data", "prompts", "orderings", "analysis", "probe"}


class ModelError(LogitJudgeError, RuntimeError):
    pass


@dataclass(frozen=True)
class ModelRef:
    """A classified ``--model`` value. ``kind``: one of :data:`KINDS`; ``name``: what loads (the built-in's alias,
    the ``ollama:`` name, the file or folder with ``~`` expanded, the hub repo id); ``revision``: a hub id's
    ``@REVISION`` (None: the default branch)."""

    kind: str
    name: str
    revision: str | None = None


def classify(value) -> ModelRef:
    """The kind of model ``value`` names, from its form and the file system alone; anything else is refused
    (:class:`ModelError`, one line naming the closest intended form)."""
    if not isinstance(value, str) or not value.strip():
        raise ModelError(f"--model {_shown(value)} names no model; {FORMS}")
    if value in BUILTINS:
        return ModelRef("builtin", value)
    if is_ollama(value):
        try:
            parse_ollama(value)
        except GGUFError as e:
            raise ModelError(str(e)) from None
        return ModelRef("ollama", value)
    path = os.path.expanduser(value)
    if os.path.isdir(path):  # os.path, not pathlib: a name too long for the file system is no path, not an error
        return _folder(value, Path(path))
    if os.path.isfile(path):
        return _file(value, Path(path))
    return _name(value, path)


def _folder(value: str, folder: Path) -> ModelRef:
    """A folder is a saved model (its contents are checked by :func:`check_model_folder`); one holding GGUF files
    but no config.json is refused naming them (a GGUF loads by its file)."""
    if not (folder / "config.json").is_file():
        ggufs = sorted(p for p in folder.glob("*") if p.suffix.lower() == ".gguf" and p.is_file())
        if ggufs:
            files = " or ".join(f"--model {p}" for p in ggufs[:3]) + (" ..." if len(ggufs) > 3 else "")
            raise ModelError(f"model folder {value} holds GGUF files but no saved model (no config.json): pass the "
                             f"GGUF file itself, {files}")
    return ModelRef("folder", str(folder))


def _file(value: str, path: Path) -> ModelRef:
    """A file is a model only as a GGUF (by its name, the name it links to, or its first bytes); any other file
    is refused saying what it is and where it goes."""
    if ".gguf" in (path.suffix.lower(), path.resolve().suffix.lower()) or _starts_with(path, b"GGUF"):
        return ModelRef("gguf", str(path))
    suffix, name = path.suffix.lower(), path.name
    if (name in MODEL_FILES or suffix in (".safetensors", ".bin", ".pt", ".pth")) and \
            (path.parent / "config.json").is_file():
        what = f"is one file of the saved model in {path.parent}: pass the folder, --model {path.parent}"
    elif suffix in DATA_SUFFIXES:
        what = "is a data file, not a model: pass it as --texts"
    elif suffix == ".json":
        what = _json_file(path)
    elif suffix == ".toml":
        what = _toml_file(path)
    elif suffix == ".npz":
        what = f"is a score table, not a model: read it with logitjudge analyze {value}"
    else:
        what = f"is a file but not a model; {FORMS}"
    raise ModelError(f"--model {value} {what}")


def _starts_with(path: Path, magic: bytes) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(len(magic)) == magic
    except OSError:
        return False


def _json_file(path: Path) -> str:
    """What a .json file given as the model is: a model's config.json away from its weights, else a rubric (one
    JSON object), else texts (JSON lines)."""
    try:
        d = json.loads(path.read_bytes()) if path.stat().st_size <= PEEK else None
    except (OSError, ValueError):
        d = None
    if isinstance(d, dict) and ("model_type" in d or "architectures" in d):
        return ("is a model's config alone: pass the folder holding it with its tokenizer and weights (written by "
                "save_pretrained)")
    if isinstance(d, dict):
        return "is a rubric file, not a model: pass it as --rubric"
    return "is a data file, not a model: pass it as --texts (a rubric .json as --rubric)"


def _toml_file(path: Path) -> str:
    """What a .toml file given as the model is: an experiment spec, a prompt template or a rubric."""
    try:
        d = read_toml(path, what="file") if path.stat().st_size <= PEEK else {}
    except (OSError, ValueError):
        d = {}
    if SPEC_SECTIONS & set(d):
        return f"is an experiment spec, not a model: run it with logitjudge run {path}"
    if {"body", "base", "option_line", "answer_prefix"} & set(d):
        return "is a prompt template, not a model: pass it as --template"
    return "is a rubric file, not a model: pass it as --rubric"


def _name(value: str, path: str) -> ModelRef:
    """A value that is no file or folder here: a missing .gguf (refused by :func:`check_available`, which says the
    file does not exist), a hub id with an optional revision, or refused naming what it looks like."""
    if os.path.islink(path):
        raise ModelError(f"--model {value} is a link to {os.readlink(path)}, which does not exist; point it at a "
                         "model file or folder")
    suffix = Path(path).suffix.lower()
    if suffix == ".gguf":
        return ModelRef("gguf", path)
    if suffix in (*DATA_SUFFIXES, ".json", ".toml", ".npz"):
        raise ModelError(f"--model {value}: there is no such file, and a {suffix} file is not a model; {FORMS}")
    if ":" in value and "://" not in value:
        _not_ollama(value)
    repo, at, revision = value.partition("@")
    if _repo_id(repo) and (not at or (re.fullmatch(r"[\w./-]+", revision) and ".." not in revision)):
        return ModelRef("hub", repo, revision or None)
    if at and _repo_id(repo):
        raise ModelError(f"--model {value}: {revision!r} is not a revision (a branch, tag or commit hash); write "
                         "ORG/NAME@REVISION, e.g. Qwen/Qwen2.5-0.5B-Instruct@main")
    if value.startswith(("/", "./", "../", "~")) or value.count("/") > 1 or os.sep in value.strip("/"):
        raise ModelError(f"--model {value}: there is no such file or folder; {FORMS}")
    near = difflib.get_close_matches(value, BUILTINS, n=1)
    hint = f"did you mean the built-in {near[0]}? " if near else ""
    raise ModelError(f"--model {_shown(value)} is not a model name: {hint}{FORMS}")


def _not_ollama(value: str) -> None:
    """An Ollama-style NAME:TAG without the ``ollama:`` prefix (a Hugging Face id has no colon): refused naming
    the prefixed form, and the built-in where NAME is one (a built-in takes no tag)."""
    try:
        _, _, name, _ = parse_ollama(PREFIX + value)
    except GGUFError:
        return
    if name in BUILTINS and "/" not in value:
        raise ModelError(f"--model {value!r}: a built-in takes no tag and an Ollama model needs the ollama: prefix; "
                         f"did you mean the built-in {name}, or the Ollama model {PREFIX}{value}?")
    hub = " (a Hugging Face id takes a revision as ORG/NAME@REVISION)" if "/" in value else ""
    raise ModelError(f"--model {value!r} names an Ollama model without its prefix: did you mean {PREFIX}{value}?{hub}")


def _shown(value) -> str:
    """The value as a message quotes it: repr, cut to 120 characters (a pasted text is not echoed whole)."""
    text = repr(value)
    return text if len(text) <= 120 else f"{text[:100]}... ({len(str(value)):,} characters)"


def _repo_id(repo: str) -> bool:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo)
    except HFValidationError:
        return False
    return True


def check_model_folder(folder: Path) -> None:
    """A local model folder holds what loading needs (config.json, tokenizer files, weights), else one line
    saying what is missing (transformers' own message for an empty folder is about sentencepiece)."""
    names = {x.name for x in folder.iterdir()} if folder.is_dir() else set()
    missing = []
    if "config.json" not in names:
        missing.append("config.json")
    if not names & set(TOKENIZER_FILES):
        missing.append("tokenizer files (tokenizer.json or tokenizer.model)")
    if not any(next(folder.glob(pattern), None) for pattern in WEIGHTS):
        missing.append("weights (*.safetensors or *.bin)")
    if missing:
        what = "is empty" if not names else f"has no {', no '.join(missing)}"
        raise ModelError(f"model folder {folder} {what}; it is not a saved model: point --model at a folder written "
                         "by save_pretrained (config.json, tokenizer and weights) or at a Hugging Face model id")


def check_available(model_id) -> ModelRef:
    """Classify ``model_id`` (:func:`classify`) and fail fast, in one line, when what it names is not there: a
    built-in's packages, an Ollama model's manifest and blob, a GGUF's header (not a GGUF, truncated, an
    architecture transformers cannot load), a folder's saved model (:func:`check_model_folder`), and a hub id
    neither in the local Hugging Face cache nor reachable (offline mode set, or no connection within a few
    seconds) instead of minutes of download retries. Returns the classification."""
    ref = classify(model_id)
    try:
        if ref.kind == "builtin":
            check_builtin(ref.name)
        elif ref.kind == "ollama":
            check_architecture(read_header(blob(ref.name)[0]))
        elif ref.kind == "gguf":
            check_architecture(read_header(ref.name))
    except GGUFError as e:
        raise ModelError(str(e)) from None
    if ref.kind == "folder":
        check_model_folder(Path(ref.name))
    elif ref.kind == "hub":
        _check_hub(model_id, ref)
    return ref


def _check_hub(model_id: str, ref: ModelRef) -> None:
    from huggingface_hub import constants, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(ref.name, "config.json", revision=ref.revision), str):
        return
    if constants.HF_HUB_OFFLINE:
        why = "HF_HUB_OFFLINE is set"
    else:
        import socket
        from urllib.parse import urlparse

        host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
        try:
            socket.create_connection((host, 443), timeout=3).close()
            return
        except OSError:
            why = f"{host} is unreachable"
    near = difflib.get_close_matches(model_id, BUILTINS, n=1)
    hint = f" (did you mean the built-in {near[0]}?)" if near else ""
    raise ModelError(f"model {model_id!r} is neither a local folder nor in the local Hugging Face cache, and {why}; "
                     f"pass a local folder or download the model once with network access{hint}")
