"""Judges from the local Ollama store: ``ollama:NAME[:TAG]`` names the GGUF blob of a pulled model.

No Ollama process is needed: the store is read as Ollama lays it out. ``$OLLAMA_MODELS`` (default
``~/.ollama/models``) holds ``manifests/<host>/<namespace>/<name>/<tag>`` (JSON; the host defaults to
``registry.ollama.ai``, the namespace to ``library``, the tag to ``latest``) and ``blobs/sha256-<hex>``; the
manifest's layer of media type ``application/vnd.ollama.image.model`` is the model's GGUF. The blob then takes the
GGUF route (:mod:`logitjudge.gguf`), its sha256 checked against the manifest's digest.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from .gguf import GGUFError, gguf_checkpoint

PREFIX = "ollama:"
HOST, NAMESPACE, TAG = "registry.ollama.ai", "library", "latest"
MODEL_LAYER = "application/vnd.ollama.image.model"


def is_ollama(model_id: str) -> bool:
    return isinstance(model_id, str) and model_id.startswith(PREFIX)


def store() -> Path:
    return Path(os.environ.get("OLLAMA_MODELS") or Path.home() / ".ollama" / "models").expanduser()


def parse(model_id: str) -> tuple[str, str, str, str]:
    """(host, namespace, name, tag) of ``ollama:[host/][namespace/]name[:tag]``."""
    ref = model_id[len(PREFIX):].strip()
    path, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "")
    parts = path.split("/")
    if not ref or not all(parts) or len(parts) > 3 or (":" in ref and not tag) or \
            not all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", x) for x in [*parts, tag or TAG]):
        raise GGUFError(f"{model_id!r} is not an Ollama model name; write ollama:NAME or ollama:NAME:TAG "
                        "(e.g. ollama:gemma3:270m, ollama:library/qwen2.5:0.5b)")
    host, namespace = (HOST, NAMESPACE)
    if len(parts) == 3:
        host, namespace = parts[0], parts[1]
    elif len(parts) == 2:
        namespace = parts[0]
    return host, namespace, parts[-1], tag or TAG


def listed(root: Path) -> list[str]:
    """The models a store holds, as ``ollama run`` names them."""
    out = []
    for m in sorted((root / "manifests").glob("*/*/*/*")):
        if m.is_file():
            host, ns, name, tag = m.parts[-4:]
            short = name if (host, ns) == (HOST, NAMESPACE) else f"{ns}/{name}" if host == HOST else \
                f"{host}/{ns}/{name}"
            out.append(f"{short}:{tag}")
    return out


def blob(model_id: str) -> tuple[Path, str]:
    """The model's GGUF blob in the store and its sha256 (from the manifest); one line for every way it is not
    there."""
    host, ns, name, tag = parse(model_id)
    root = store()
    if not (root / "manifests").is_dir():
        raise GGUFError(f"no Ollama model store at {root} (no manifests folder); set OLLAMA_MODELS to the store "
                        "(ollama pull the model first) or pass the GGUF file itself")
    manifest = root / "manifests" / host / ns / name / tag
    if not manifest.is_file():
        have = listed(root)
        raise GGUFError(f"the Ollama store {root} has no model {name}:{tag} (no {manifest.relative_to(root)}); it "
                        f"has {', '.join(have) if have else 'no models'}: ollama pull it first or name one of those")
    try:
        layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers")
        model = [x for x in layers if isinstance(x, dict) and x.get("mediaType") == MODEL_LAYER]
    except (OSError, ValueError, AttributeError, TypeError) as e:
        raise GGUFError(f"the Ollama manifest {manifest} is not a valid manifest ({str(e)[:80]}); pull the model "
                        "again") from None
    if not model:
        raise GGUFError(f"the Ollama manifest {manifest} has no model layer ({MODEL_LAYER}); it is not a model "
                        "Ollama can run: pull the model again")
    digest = str(model[0].get("digest", ""))
    m = re.fullmatch(r"sha256[:-]([0-9a-f]{64})", digest)
    if not m:
        raise GGUFError(f"the Ollama manifest {manifest}: its model layer's digest {digest[:80]!r} is not a sha256 "
                        "digest; pull the model again")
    path = root / "blobs" / f"sha256-{m.group(1)}"
    if not path.is_file():
        raise GGUFError(f"the Ollama store {root} lacks the blob {path.name} of {name}:{tag} named by its manifest; "
                        f"pull the model again (ollama pull {name}:{tag})")
    return path, m.group(1)


def check(model_id: str) -> None:
    """Before anything loads: the manifest, its model layer and the blob are there (the GGUF header is read by
    the caller)."""
    blob(model_id)


def ollama_checkpoint(model_id: str) -> Path:
    """The converted transformers folder of an Ollama model (the blob's digest checked before conversion)."""
    path, sha = blob(model_id)
    host, ns, name, tag = parse(model_id)
    return gguf_checkpoint(path, expected_sha256=sha, what=f"ollama:{name}:{tag}",
                           source_note=f"ollama {host}/{ns}/{name}:{tag} (blob sha256 {sha})")
