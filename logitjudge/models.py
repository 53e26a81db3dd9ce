"""Loading judge models: any Hugging Face causal LM by id (``ORG/NAME[@REVISION]``) or folder, any GGUF file
transformers can load (``FILE.gguf``), a model of the local Ollama store (``ollama:NAME[:TAG]``) and the built-in
judges (:mod:`logitjudge.judges`: gemma-3-270m, qwen2.5-coder-0.5b-instruct, qwen2.5-coder-1.5b-instruct). What a
value names is decided, and a mistaken one refused, by :mod:`logitjudge.model_ref`; GGUF judges are converted
once into the cache (:mod:`logitjudge.gguf`); :func:`resolve_source` says which folder loads."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

import torch

from .gguf import GGUFError, cache_dir, gguf_checkpoint
from .judges import BUILTINS, builtin_checkpoint
from .model_ref import ModelError, check_available, classify
from .ollama import ollama_checkpoint
from .tokens import check_pieces, read_record

BUILTIN_ALIASES = {alias: b.origin for alias, b in BUILTINS.items()}  # the --model names of the built-ins
DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
          "fp16": torch.float16, "float16": torch.float16}
__all__ = ["Judge", "read_judge", "cache_dir", "builtin_checkpoint", "resolve_source", "load_model", "load_tokenizer",
           "load_config"]


@dataclass(frozen=True)
class Judge:
    """A judge as loaded, frozen: nothing is set on it afterwards.

    ``tokenizer`` and ``config`` always; ``model``: the weights in this process, or None where a serving engine
    holds them (``--engine vllm`` / ``http://``: :func:`read_judge`). ``source``: the folder or id transformers
    loads; ``info``: how it was loaded (its source, GGUF, attention, the dtype choice), read-only; ``settings``:
    the [model] settings (:class:`~logitjudge.spec.ModelSpec`) it was loaded with, which ``lj.score`` runs on
    (None: a judge built by hand, which runs on the native engine). A serving engine's own shorter context is the
    engine's (:meth:`max_length_on`), never written here."""

    tokenizer: object
    config: object
    model_id: str
    source: str = ""
    revision: str = ""
    dtype: str = "fp32"
    device: str = "cpu"
    info: Mapping = field(default_factory=dict)
    model: torch.nn.Module | None = None
    settings: object = None

    def __post_init__(self):
        object.__setattr__(self, "info", MappingProxyType(dict(self.info)))

    @classmethod
    def of(cls, model: torch.nn.Module, tokenizer, model_id: str, **kw) -> Judge:
        """The judge of weights already in this process (its config is the model's)."""
        return cls(tokenizer, model.config, model_id, model=model, **kw)

    def with_info(self, **more) -> Judge:
        """The same judge with ``more`` added to its info (a new judge: this one is frozen)."""
        return replace(self, info={**self.info, **more})

    @property
    def max_length(self) -> int:
        """The judge's context in tokens (:func:`context_length`)."""
        return context_length(self.config, self.tokenizer)

    @property
    def n_layers(self) -> int | None:
        """The language model's layer count, from its config (:func:`config_layers`; None where it does not say)."""
        return config_layers(self.config)

    def max_length_on(self, engine) -> int:
        """The longest prompt and label ``engine`` may be sent: the judge's context, or the engine's own
        (``engine.context``: e.g. ``vllm serve --max-model-len``) where that is shorter."""
        bound = engine.context if engine is not None else None
        return min(self.max_length, bound) if bound else self.max_length

    def forward_model(self):
        """A transformers model of this judge in this process: its own weights, or (a serving engine's judge,
        whose weights are in the server) the fp32 reference loaded here."""
        return self.model if self.model is not None else self.reference()

    def reference(self, device: str = "cpu"):
        """The transformers model of the same weights, fp32 (the plain forward the exactness audit compares
        against): loaded again, also where this judge holds weights in another dtype."""
        return load_model(self.model_id, dtype="fp32", device=device, revision=self.revision or None).model


def read_judge(model_id: str, *, dtype: str = "fp32", revision: str | None = None, device: str = "cpu",
               settings=None, info: Mapping | None = None) -> Judge:
    """The judge of a serving engine: ``model_id`` resolved as :func:`load_model` resolves it (a GGUF or
    built-in converted to its folder, which the engine loads), its tokenizer and config read, no weights.
    ``device``: where the engine runs the weights (``server``: a server's own); ``info``: added to its info;
    ``settings``: the [model] settings it is loaded with."""
    if dtype not in DTYPES:
        raise ModelError(f"unknown dtype {dtype!r}; use one of fp32, bf16, fp16")
    source, revision = source_and_revision(model_id, revision)
    tok, config = load_tokenizer(model_id, revision=revision), load_config(model_id, revision=revision)
    how = {"source": source, "gguf": getattr(config, "logitjudge_source", None), **(info or {})}
    return Judge(tok, config, model_id, source, revision or "", dtype, device, how, settings=settings)


def context_length(config, tokenizer=None) -> int:
    """The model's context in tokens, from its config (a multimodal checkpoint's text config), else the
    tokenizer's ``model_max_length``: the same number before the model loads (:func:`load_config`) and after."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for cfg in (config, text):
        if getattr(cfg, "max_position_embeddings", None):
            return int(cfg.max_position_embeddings)
    return int(getattr(tokenizer, "model_max_length", None) or 2048)


def config_layers(config) -> int | None:
    """The language model's layer count from its config (None where the config does not say)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    n = getattr(text, "num_hidden_layers", None)
    return int(n) if n else None


def resolve_source(model_id: str) -> str:
    """The folder or id transformers loads for ``model_id`` (classified by :func:`classify`): a built-in's, an
    Ollama model's or a GGUF's converted folder (converted on first use), a folder, or a hub id without its
    ``@REVISION`` (:func:`source_and_revision` gives both)."""
    return source_and_revision(model_id)[0]


def source_and_revision(model_id: str, revision: str | None = None) -> tuple[str, str | None]:
    """What transformers loads for ``model_id`` and at which revision: ``revision`` or the id's own
    ``@REVISION``; the two differing is refused."""
    ref = classify(model_id)
    if ref.revision and revision and ref.revision != revision:
        raise ModelError(f"model {model_id!r} names revision {ref.revision!r} but revision={revision!r} was "
                         "passed too; give the revision once")
    try:
        if ref.kind == "builtin":
            return str(builtin_checkpoint(ref.name)), None
        if ref.kind == "ollama":
            return str(ollama_checkpoint(ref.name)), None
        if ref.kind == "gguf":
            return str(gguf_checkpoint(ref.name)), None
    except GGUFError as e:
        raise ModelError(str(e)) from None
    return ref.name, ref.revision or revision


def offered_devices() -> list[str]:
    """The devices this machine offers torch: cpu, auto, and cuda / cuda:N / mps where present."""
    out = ["cpu", "auto"]
    if torch.cuda.is_available():
        out += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        out.append("mps")
    return out


def check_device(device: str) -> None:
    """Refuse, before any model loads, a device torch does not know or this machine does not have."""
    if device == "auto":
        return
    offer = f"this machine offers {', '.join(offered_devices())}"
    try:
        d = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise ModelError(f"{device!r} is not a device torch knows; {offer}") from None
    if d.type == "cpu":
        return
    if d.type == "cuda":
        if not torch.cuda.is_available():
            raise ModelError(f"device {device!r} was asked for but CUDA is not available; {offer}")
        if d.index is not None and d.index >= torch.cuda.device_count():
            raise ModelError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s); "
                             f"{offer}")
        return
    backend = getattr(torch.backends, d.type, None) or getattr(torch, d.type, None)
    available = getattr(backend, "is_available", None)
    if available is None or not available():
        raise ModelError(f"device {device!r}: torch has no {d.type} device on this machine; {offer}")


def attn_implementations() -> list[str]:
    """The attention implementations transformers offers by name (kernels-hub repos come on top)."""
    try:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        return ["eager", *ALL_ATTENTION_FUNCTIONS.valid_keys()]
    except ImportError:  # pragma: no cover - an older transformers
        return ["eager", "sdpa"]


def check_attn_implementation(name: str | None) -> None:
    """Refuse, before any model loads, an attention implementation transformers does not offer: a registered
    name (:func:`attn_implementations`) or a kernels-hub repo id (``org/repo[@rev][:kernel]``), as transformers'
    own check accepts them."""
    if name is None:
        return
    try:
        from transformers.integrations.hub_kernels import is_kernel
    except ImportError:  # pragma: no cover
        def is_kernel(x):
            return re.search(r"^[^/:]+/[^/:]+(?:@[^/:]+)?(?::[^/:]+)?$", x) is not None
    known = attn_implementations()
    if name in known or name.removeprefix("paged|") in known or is_kernel(name):
        return
    import transformers

    raise ModelError(f"attention implementation {name!r} is not one transformers {transformers.__version__} offers: "
                     f"{', '.join(known)}, or a kernels-hub repo such as kernels-community/flash-attn; unset it for "
                     "SDPA (else the model's eager attention)")


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


_LAST_TOKENIZER: dict = {}  # {key: tokenizer}, the one read last


def _tokenizer(source: str, revision: str | None, model_id: str = ""):
    """``AutoTokenizer.from_pretrained(source)``, read once per process for the same files: the pre-load checks
    (:func:`load_tokenizer`) and :func:`load_model` then share one read (a 262k-token tokenizer.json takes ~4.5 s
    to parse). Keyed by the source, the revision and, for a folder, its tokenizer files' sizes and times, so a
    changed file is read again. A folder converted from a GGUF is checked on every read against the words of the
    GGUF's vocabulary its conversion record holds (:func:`~logitjudge.tokens.check_pieces`, a few ms): the
    installed transformers may read a right tokenizer.json wrongly."""
    from transformers import AutoTokenizer

    folder = Path(source)
    stamp = tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(folder.iterdir())
                  if f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges", "chat_template"))) \
        if folder.is_dir() else None
    key = (str(source), revision, stamp)
    if key not in _LAST_TOKENIZER:
        tok = AutoTokenizer.from_pretrained(source, **({"revision": revision} if revision else {}))
        words = (read_record(source) or {}).get("words") if folder.is_dir() else None
        check_pieces(tok, words or [], what=f"the tokenizer of {model_id or source!r}")
        _LAST_TOKENIZER.clear()
        _LAST_TOKENIZER[key] = tok
    return _LAST_TOKENIZER[key]


def load_tokenizer(model_id: str = "gemma-3-270m", *, revision: str | None = None):
    """The tokenizer of a judge alone (its label checks run before the model loads)."""
    check_available(model_id)
    source, revision = source_and_revision(model_id, revision)
    try:
        return _tokenizer(source, revision, model_id)
    except (OSError, ValueError) as e:
        raise ModelError(f"could not load the tokenizer of {model_id!r}: {str(e).splitlines()[0][:300]}") from None


def load_config(model_id: str = "gemma-3-270m", *, revision: str | None = None):
    """The judge's config alone (no weights): its context and layer count are checked before the model loads."""
    from transformers import AutoConfig

    check_available(model_id)
    source, revision = source_and_revision(model_id, revision)
    try:
        return AutoConfig.from_pretrained(source, **({"revision": revision} if revision else {}))
    except (OSError, ValueError) as e:
        raise ModelError(f"could not read the config of {model_id!r}: {str(e).splitlines()[0][:200]}") from None


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
               attn_implementation: str | None = None, settings=None, info: Mapping | None = None) -> Judge:
    """Load a causal LM and its tokenizer. ``model_id``: any value ``--model`` takes (classified, or refused in one
    line, by :func:`logitjudge.model_ref.classify`); ``revision``: a hub revision, also written ``ORG/NAME@REVISION``.
    ``quantize``: None, "4bit" or "8bit" (bitsandbytes, CUDA only).
    ``attn_implementation``: transformers' name ("sdpa", "eager", "flash_attention_2", a kernels-hub id ...);
    None: SDPA where the architecture supports it, else its eager attention (``info["attn_implementation"]``
    says which and why). Multimodal checkpoints load through their causal-LM class (Gemma-3: the full
    ``Gemma3ForConditionalGeneration``, scored on text; Qwen3.5: the text model only). ``settings``: the
    [model] settings it is loaded with; ``info``: added to the judge's info (e.g. the dtype choice)."""

    if dtype not in DTYPES:
        raise ModelError(f"unknown dtype {dtype!r}; use one of fp32, bf16, fp16")
    source, revision = source_and_revision(model_id, revision)
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
        tok = _tokenizer(source, revision, model_id)
        model, attn, why = _from_pretrained(source, kwargs, attn_implementation)
    except OSError as e:
        raise ModelError(f"could not load model {model_id!r}: {e}. Pass a Hugging Face model id (with network "
                         "access or a filled HF cache) or a local folder with config.json and weights") from None
    if "device_map" not in kwargs:
        model.to(dev)
    model.eval()
    rev = revision or getattr(model.config, "_commit_hash", None) or ""
    how = {"source": source, "gguf": getattr(model.config, "logitjudge_source", None),
           "attn_implementation": attn, "attn_implementation_reason": why, **(info or {})}
    return Judge(tok, model.config, model_id, source, str(rev), dtype, dev, how, model=model, settings=settings)
