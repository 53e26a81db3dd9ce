"""The engines behind one seam: what computes the judge's label log-probabilities for a run.

* ``native``: logitjudge's own engine (:class:`logitjudge.engine.Engine`): the token trie over its backends,
  probing, the kernels (:mod:`~logitjudge.engines.native`);
* ``vllm``: vLLM in this process (:class:`~logitjudge.engines.vllm_local.VLLMEngine`), for GPUs and tensor /
  pipeline parallel judges;
* ``http://HOST:PORT`` or ``vllm+http://HOST:PORT`` (https too): a running ``vllm serve``
  (:class:`~logitjudge.engines.http.HTTPEngine`), one GPU or a cluster. A server's address names its protocol
  before ``+``; a plain ``http://`` address is a vLLM server.

The run stays logitjudge's whatever the engine: the request plan (every prompt rendered and tokenized once, by
the judge's tokenizer), the trie's reads, the checkpoint, the table, the audit and the provenance. An engine takes
token ids and returns every label's exact log-probability; the run calls it through
:class:`~logitjudge.engines.base.Engine` only. Each engine is one file with its config dataclass
(:class:`~logitjudge.engines.base.EngineConfig`) and one line in :data:`ENGINES`.
"""

from __future__ import annotations

from collections.abc import Callable

from ..engine import EngineError
from ..models import ModelError, check_attn_implementation, check_device
from .base import Engine, EngineConfig
from .http import HTTPConfig
from .native import NativeConfig
from .vllm_local import VLLMConfig

__all__ = ["ENGINES", "SERVERS", "Engine", "EngineConfig", "check_model", "engine_config", "engine_kind"]

# --engine NAME -> its config (each checks itself, loads its judge and makes its engine)
ENGINES: dict[str, type] = {"native": NativeConfig, "vllm": VLLMConfig, "http": HTTPConfig}
# a server's protocol, as its address names it (PROTOCOL+http://HOST:PORT) -> the engine of ENGINES that speaks it
SERVERS: dict[str, str] = {"vllm": "http"}
DEFAULT_SERVER = "vllm"  # what a plain http:// or https:// address serves, as before addresses named it


def engine_kind(value: str) -> str:
    """The name in :data:`ENGINES` of an ``--engine`` value: a registered name, or a server address
    (``PROTOCOL+http://HOST:PORT``; plain ``http://`` is :data:`DEFAULT_SERVER`); anything else refused in one
    line."""
    v = str(value).strip()
    if v in ENGINES:
        return v
    scheme = v.split("://", 1)[0] if "://" in v else ""
    protocol, _, transport = scheme.rpartition("+")
    if transport in ("http", "https"):
        protocol = protocol or DEFAULT_SERVER
        if protocol not in SERVERS:
            raise EngineError(f"--engine {value!r} names a server protocol {protocol!r} logitjudge does not speak; "
                              f"use {' or '.join(f'{p}+http://HOST:PORT' for p in SERVERS)}")
        return SERVERS[protocol]
    names = ", ".join(n for n in ENGINES if n not in SERVERS.values())
    raise EngineError(f"unknown engine {value!r}; use {names} or http://HOST:PORT (a running vllm serve)")


def engine_config(model_spec) -> EngineConfig:
    """The config of the engine a spec's [model] section names, made from its settings (an address that is not one
    refused here)."""
    return ENGINES[engine_kind(model_spec.engine)].from_spec(model_spec)


def check_model(model_spec, *, probing: bool, where: Callable[[str], str], error: type | None = None) -> EngineConfig:
    """Every [model] setting that needs no model, checked before anything loads: the device, the attention
    implementation, then the engine (:func:`engine_config`: installed, and no setting it does not run; ``probing``:
    the run probes). Each refusal is one line that ``where(key)`` names (the flag, TOML key or keyword), raised as
    ``error`` (None: the check's own error type)."""
    for key, check in (("device", check_device), ("attn_implementation", check_attn_implementation)):
        try:
            check(getattr(model_spec, key))
        except ModelError as e:
            raise (error or type(e))(f"{where(key)}: {e}") from None
    try:
        config = engine_config(model_spec)
        config.check(probing=probing)
    except EngineError as e:
        raise (error or type(e))(f"{where('engine')}: {e}") from None
    return config
