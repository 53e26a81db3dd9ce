"""benchmarks/peers.py's vLLM peers: ``vllm-b16`` / ``vllm-b32`` (``--peers vllm`` names both).

(f) vLLM in the worker's process (``logitjudge.engines.vllm_local.VLLMEngine``: prefix caching on, fp32, eager,
``block_size`` 16 / 32, a KV cache of :data:`KV_CACHE_GIB`), asked through ``engine.prompt_logprobs(groups)``,
the seam a run uses with ``--engine vllm``: one request per distinct context (prompt + label[:t]), the labels'
log-probabilities read from vLLM's fp32 log-softmax. The prefix cache reuses whole blocks, so both block sizes
are measured: a smaller block reuses more of each shared prefix, a larger one runs vLLM's CPU attention faster.

Timing: the engine's start-up (model load, memory profile, KV cache) is not timed but is in the JSON
(``startup_seconds``); vLLM's prefix cache is emptied before every run (warm-up included), so a run computes
what a fresh engine would. Tokens: the tokens vLLM computed (prompt tokens - tokens its prefix cache served);
the JSON also has ``prompt_tokens``, ``cached_tokens``, the contexts' trie tokens and ``requests``. Peak RSS
includes the KV cache (allocated at start-up). On a CPU vLLM binds its OpenMP threads to cores itself: the
worker names the first ``--threads`` cores this process may run on. A GPU build of vLLM runs on the GPU (the
JSON's ``device``), unlike the other peers.

Without vLLM installed the peers are a cell (:data:`NOT_INSTALLED`), never a crash.
"""

from __future__ import annotations

import importlib.util
import os
import time

PEERS = ("vllm-b16", "vllm-b32")
NOT_INSTALLED = "n/a: vLLM not installed (docs/scale.md)"
KV_CACHE_GIB = 1.0  # holds every context of the workloads here (the 1x2000 item's shared prefix once)


def expand(peers: list[str]) -> list[str]:
    """``vllm`` in a ``--peers`` list stands for every block size measured."""
    return [q for p in peers for q in (PEERS if p == "vllm" else (p,))]


def unavailable() -> str | None:
    """The cell of the vLLM peers on this machine, or None when vLLM imports."""
    return None if importlib.util.find_spec("vllm") else NOT_INSTALLED


def worker_env(threads: int) -> dict:
    """The worker's environment: the engine core in its process (its RSS is the peer's) and, unless the caller
    set ``VLLM_CPU_OMP_THREADS_BIND``, vLLM's CPU OpenMP threads bound to ``threads`` of the allowed cores."""
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    if "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, sorted(os.sched_getaffinity(0))[:threads]))
    return env


def notes(name: str, rows: dict) -> list[str]:
    """The lines printed under a workload's table: each vLLM peer's start-up and its prefix cache's share."""
    out = []
    for peer in PEERS:
        r = rows.get(peer, {})
        if "startup_seconds" in r:
            out.append(f"{peer} ({name}): engine start-up {r['startup_seconds']:.1f} s (not timed); "
                       f"{r['prompt_tokens']} prompt tokens, {r['cached_tokens']} served by its prefix cache "
                       f"({r['cached_tokens'] / max(r['prompt_tokens'], 1):.0%}), {r['tokens']} computed "
                       f"(trie {r['trie_tokens']}), {r['requests']} requests")
    return out


def runner(peer: str, wl: dict, model: str):
    """(run, extra) as ``peers.py``'s worker times it: ``run(warm)`` answers the workload (or the warm-up, the
    first text's first two prompts) and returns (per prompt the label log-probs, tokens vLLM computed)."""
    import torch
    import vllm

    from benchmarks import workloads
    from logitjudge.engines.vllm_local import VLLMEngine
    from logitjudge.models import resolve_source

    block = int(peer.rsplit("-b", 1)[1])
    groups = workloads.groups_from_json(wl)
    warm = [groups[0][:2]]
    t0 = time.perf_counter()
    engine = VLLMEngine(resolve_source(model), dtype="fp32", block_size=block, enforce_eager=True,
                        kv_cache_gib=KV_CACHE_GIB)
    extra = {"startup_seconds": time.perf_counter() - t0, "vllm": vllm.__version__, "block_size": block,
             "device": "cuda" if torch.cuda.is_available() else "cpu",
             "kv_cache_gib": KV_CACHE_GIB, "omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
             "engine_args": engine.mode_meta["engine"]["args"]}

    def run(w: bool = False):
        engine.llm.reset_prefix_cache()  # each run starts cold, as the other peers do
        before = dict(engine.stats)
        out = engine.prompt_logprobs(warm if w else groups)
        got = {k: engine.stats[k] - before[k] for k in before}
        extra.update(prompt_tokens=got["prompt_tokens"], cached_tokens=got["cached_tokens"],
                     trie_tokens=got["tokens"], requests=got["requests"])
        return [lp for g in out for lp in g], got["prompt_tokens"] - got["cached_tokens"]

    return run, extra
