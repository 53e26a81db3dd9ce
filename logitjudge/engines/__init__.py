"""The engines behind one seam: what computes the judge's label log-probabilities for a run.

* ``native``: logitjudge's own engine (:class:`logitjudge.engine.Engine`): the token trie over its backends,
  probing, the kernels;
* ``vllm``: vLLM in this process (:class:`~logitjudge.engines.vllm_local.VLLMEngine`), for GPUs and tensor /
  pipeline parallel judges;
* ``http://HOST:PORT``: a running ``vllm serve`` (:class:`~logitjudge.engines.http.HTTPEngine`), one GPU or a
  cluster.

The run stays logitjudge's whatever the engine: the request plan (every prompt rendered and tokenized once, by
the judge's tokenizer), the trie's reads, the checkpoint, the table, the audit and the provenance. An engine takes
token ids and returns every label's exact log-probability (:mod:`logitjudge.engines.reads`).
"""

from __future__ import annotations

import os

from ..engine import EngineError

KINDS = ("native", "vllm", "http")


def engine_kind(value: str) -> str:
    """``native``, ``vllm`` or ``http`` (an ``http://`` / ``https://`` address); anything else refused in one line."""
    v = str(value).strip()
    if v in ("native", "vllm"):
        return v
    if v.startswith(("http://", "https://")):
        from .http import normalise_url

        normalise_url(v)
        return "http"
    raise EngineError(f"unknown engine {value!r}; use native, vllm or http://HOST:PORT (a running vllm serve)")


def check_engine(model_spec, *, probing: bool) -> str:
    """The engine kind of a spec's [model] section, checked before anything loads: vLLM installed for ``vllm``,
    and no setting a serving engine does not run (a prefix mode, quantization, probing). Returns the kind."""
    kind = engine_kind(model_spec.engine)
    if kind == "native":
        return kind
    what = f"--engine {model_spec.engine}"
    if kind == "vllm":
        from .vllm_local import check_installed

        check_installed()
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise EngineError(f"{what} under torchrun would start one vLLM per rank; run one process and let vLLM "
                              "split the model (--tensor-parallel N), or serve it and point each rank at the "
                              "server (--engine http://HOST:PORT)")
    if model_spec.prefix_mode not in ("auto",):
        raise EngineError(f"{what} computes the prompts itself; --prefix-mode {model_spec.prefix_mode} is the native "
                          "engine's: drop it or use --engine native")
    if model_spec.quantize:
        raise EngineError(f"{what} loads the weights itself; --quantize is the native engine's (serve a quantized "
                          "checkpoint instead) or use --engine native")
    if probing:
        raise EngineError(f"probing reads the judge's internals, which {what} does not expose; probe with "
                          "--engine native")
    return kind


def served_engine(model_spec, lm, *, texts: list[str], seed: int = 0):
    """The serving engine a spec's [model] section names, on ``lm`` (a :class:`~logitjudge.models.ServedJudge`),
    checked against the judge before anything is scored: ``texts`` (a prompt, the label continuations) must
    tokenize alike on both sides and every label token must be in the served vocabulary."""
    kind, m = engine_kind(model_spec.engine), model_spec

    def reference():
        return lm.reference("cuda" if m.device.startswith("cuda") else "cpu")

    if kind == "vllm":
        from .vllm_local import VLLMEngine

        compile_ = {"auto": None, "on": False, "off": True}[m.vllm_compile]
        engine = VLLMEngine(lm.source, revision=lm.revision or None, dtype=lm.dtype, token_budget=m.token_budget,
                            block_size=m.block_size, tensor_parallel=m.tensor_parallel,
                            pipeline_parallel=m.pipeline_parallel, enforce_eager=compile_,
                            kv_cache_gib=m.kv_cache_gib, seed=seed, reference=reference)
        engine.check(lm.tokenizer, texts)
        lm.served_context = engine.max_model_len  # a prompt past it is refused when the run plans it
        return engine
    if kind == "http":
        from .http import HTTPEngine

        engine = HTTPEngine(m.engine, dtype=lm.dtype, token_budget=m.token_budget, concurrency=m.concurrency,
                            timeout=float(m.request_timeout), reference=reference)
        engine.check({lm.model_id, lm.source, str(lm.source).rstrip("/").rsplit("/", 1)[-1]}, lm.tokenizer, texts)
        lm.served_context = engine.max_model_len
        return engine
    raise EngineError(f"--engine {m.engine} is logitjudge's own engine, not a serving one")
