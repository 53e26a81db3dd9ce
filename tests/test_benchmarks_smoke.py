"""Smoke test of the benchmarks package (``python -m benchmarks.NAME``) on the tiny model: the workload builders'
documented token counts, prompt shapes and the token accounting the peers benchmark relies on, the timing helper,
the floor, and a peer that crashes or hangs becoming a cell. No timing asserted."""

from __future__ import annotations

import gc
import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import (
    breakdown,
    floor,
    judge_model,
    mlp_rows,
    peers,
    probe,
    shared_path,
    spare_thread,
    timing,
    workloads,
)
from logitjudge.engine import Engine

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["1x350", "8x350", "1x2000", "mtbench"])
def test_workload_counts(tiny_lm, name):
    spec = workloads.SPECS[name]
    # the tiny model's context (2,048) is too short for 1x2000: the builder needs only a tokenizer and a length
    lm = SimpleNamespace(tokenizer=tiny_lm.tokenizer, max_length=8192)
    wl = workloads.build(name, lm)
    k = 2 * wl.rubric.n_options
    assert len(wl.items) == spec.n_texts == len(wl.groups) == len(wl.text_tokens)
    assert len(wl.orderings) == k and all(len(g) == k for g in wl.groups)
    assert len({it.text for it in wl.items}) == len(wl.items)  # the texts differ
    for it, n in zip(wl.items, wl.text_tokens):
        assert n == len(tiny_lm.tokenizer(it.text, add_special_tokens=False)["input_ids"])
        assert spec.text_tokens * (1 - workloads.TOKEN_TOLERANCE) <= n <= spec.text_tokens
    assert wl.single_token == (name != "mtbench")
    assert all(len(p.prompt_ids) > n for g, n in zip(wl.groups, wl.text_tokens) for p in g)
    assert wl.trie_tokens < wl.plain_tokens
    if wl.single_token:
        assert wl.plain_tokens == sum(len(p.prompt_ids) for p in wl.prompts) <= wl.padded_tokens(16)
        assert wl.n_reads == len(wl.prompts) * wl.rubric.n_options
    assert wl.trie_context(1) == wl.trie_tokens < wl.trie_context(64) <= wl.trie_context(None)
    assert wl.attention_flops(2, 8, [None, 64, None]) == 4 * 2 * 8 * (2 * wl.trie_context(None) +
                                                                       wl.trie_context(64))
    s = wl.summary()
    assert s["prompts"] == len(wl.prompts) and s["trie_tokens"] == wl.trie_tokens
    back = workloads.groups_from_json(wl.to_json())
    assert back == wl.groups


def test_engine_token_accounting(tiny_lm):
    wl = workloads.build("1x350", tiny_lm)
    kw = {"min_shared": 0} if "min_shared" in inspect.signature(Engine).parameters else {}
    eng = Engine(tiny_lm, **kw)
    eng.prompt_logprobs(wl.groups)
    if kw:
        assert eng.stats["tokens"] == wl.trie_tokens
    assert wl.trie_tokens <= eng.stats["tokens"] < wl.plain_tokens
    assert eng.stats["reads"] == wl.n_reads


def test_trim_to_tokens(tiny_lm):
    tok = tiny_lm.tokenizer
    text = "the cat sat on the mat and the dog barked at the moon " * 20
    for target in (5, 40, 100):
        cut = workloads.trim_to_tokens(tok, text, target)
        n = len(tok(cut, add_special_tokens=False)["input_ids"])
        assert n <= target and text.startswith(cut) and n > 0
    assert workloads.trim_to_tokens(tok, "short", 100) == "short"


def test_fma_peak_is_measured_or_explained():
    """benchmarks/peers.py's FMA peak: a positive rate from the C build, or the reason it is missing."""
    got = floor.fma_peak(1)
    if got["flops_per_s"] is None:
        assert got["why"]
    else:
        assert 1e9 < got["flops_per_s"] < 1e14 and got["threads"] == 1


def test_matmul_rate_has_a_sustained_rate_beside_the_best_repetition():
    """peers.py's matmul rate: the best repetition per path, and the fastest path repeated back to back for
    ``sustain_s`` seconds (0: not measured)."""
    got = floor.matmul_rate(1, rows=8, reps=3, shapes=[(16, 32), (32, 16)], sustain_s=0.05)
    assert got["layer_flops_per_s"] == max(got["layer_flops_per_s_by_path"].values()) > 0
    assert got["sustained_flops_per_s"] > 0 and got["sustain_s"] == 0.05
    assert floor.matmul_rate(1, rows=8, reps=1, shapes=[(16, 16)], sustain_s=0)["sustained_flops_per_s"] is None


def test_floors_use_the_fastest_rate_of_the_whole_run(monkeypatch, capsys):
    """peers.py measures the matmul rate once more after the last workload and puts every workload's floors at
    the fastest rate of the run: a first measurement that other load slowed down (here 200 against 400 GFLOP/s)
    must not lower the bar of the workload printed with it."""
    monkeypatch.setattr(floor, "matmul_rate", lambda threads, shapes=None: {"layer_flops_per_s": 400e9,
                                                                             "sustained_flops_per_s": 360e9})
    monkeypatch.setattr(floor, "fma_peak", lambda threads: {"flops_per_s": 450e9})

    def rows(rate: float) -> dict:
        return {"floor": {"seconds": 2e12 / rate, "flops": 2e12}, "floor+attn": {"seconds": 3e12 / rate, "flops": 3e12},
                "bound": {"seconds": 3e12 / 440e9, "flops": 3e12}, "logitjudge-fp32": {"seconds": 9.0}}

    report = {"matmul": {"layer_flops_per_s": 300e9, "measured_gflops": [200.0, 300.0],
                         "sustained_flops_per_s": 250e9, "measured_sustained_gflops": [180.0, 250.0],
                         "sustain_s": 5.0, "fma_peak": {"flops_per_s": 440e9}},
              "workloads": {"8x350": {"peers": rows(200e9)}, "1x2000": {"peers": rows(300e9)}}}
    peers.final_floors(report, 2, {"layer_shapes": [(8, 8)]})
    assert report["matmul"]["measured_gflops"] == [200.0, 300.0, 400.0]
    for w in report["workloads"].values():
        p = w["peers"]
        assert p["floor"]["seconds"] == pytest.approx(5.0) and p["floor+attn"]["seconds"] == pytest.approx(7.5)
        assert p["bound"]["seconds"] == pytest.approx(3e12 / 450e9)
        assert p["floor+attn"]["seconds_at_sustained_rate"] == pytest.approx(3e12 / 360e9)  # informational only
    assert report["matmul"]["measured_sustained_gflops"] == [180.0, 250.0, 360.0]
    out = capsys.readouterr().out
    assert "200.0, 300.0, 400.0 GFLOP/s; the floors use 400.0" in out
    assert "8x350: floor incl. attention 15.000 s -> 7.500 s (logitjudge fp32 1.20x of it)" in out
    assert ("8x350: the layer's matmuls sustained back to back over 5 s: 360.0 GFLOP/s (90% of the best "
            "repetition's rate; each the fastest measured so far); floor incl. attention at that rate 8.333 s, "
            "logitjudge fp32 1.08x of it") in out


def test_breakdown_times_the_parts_and_unwraps(tiny_lm):
    """benchmarks/breakdown.py's timed run: every part of the native step function seen, GEMM FLOPs counted,
    and the wrapped functions restored afterwards."""

    before = {key: getattr(*key) for key in breakdown.PARTS}
    wl = workloads.build("1x350", tiny_lm)
    engine = Engine(tiny_lm)
    assert engine.prefix_mode == "native"
    engine.on_forward = lambda tokens: gc.collect()  # a full collection inside the run, as one comes due
    callbacks = list(gc.callbacks)
    total, seconds, flops = breakdown.timed_run(engine, wl.groups[:1])
    assert {key: getattr(*key) for key in breakdown.PARTS} == before
    assert gc.callbacks == callbacks  # the collector's timer is removed again
    full = breakdown.timed_run.gc["2"]
    assert full["collections"] >= 1 and 0 < full["seconds"] < total
    step = seconds["step function, total"]
    assert 0 < step <= total
    for label in ("GEMMs: q/k/v, output, down projections", "GEMMs: gate/up with activation x up epilogues",
                  "q/k norm + RoPE (row kernel)", "residual + norms (row kernel)"):
        assert 0 < seconds[label] < step
    cfg = tiny_lm.model.config
    gate_up = flops["GEMMs: gate/up with activation x up epilogues"]
    assert gate_up % (2 * 2 * cfg.hidden_size * cfg.intermediate_size) == 0


def test_breakdown_sets_the_parts_against_the_floor(capsys, tiny_lm):
    """breakdown.py's floor gap (hand-checked): parts with FLOPs at the rate and above it, parts without FLOPs all
    above it, the floor's GEMM work the step skipped as pruned; run - floor = sum(above) - pruned; printed with
    the untimed runs beside the timed one, at a rate measured on the judge's own layer shapes."""
    table = [("GEMMs: a", 2.0), ("GEMMs: b", 1.5), ("attention (shared prefix + suffix)", 0.6), ("other", 0.3)]
    flops = {"GEMMs: a": 1.8e12, "GEMMs: b": 1.2e12, "attention (shared prefix + suffix)": 0.4e12}
    gap = breakdown.floor_gap(table, flops, rate=1e12, floor_gemm_flops=3.2e12, attention_flops=0.4e12)
    assert gap["floor_s"] == pytest.approx(3.6) and gap["run_s"] == pytest.approx(4.4)
    assert gap["pruned_s"] == pytest.approx(0.2)
    assert [r["at_rate"] for r in gap["parts"]] == [pytest.approx(1.8), pytest.approx(1.2), pytest.approx(0.4), None]
    assert [r["above"] for r in gap["parts"]] == [pytest.approx(x) for x in (0.2, 0.3, 0.2, 0.3)]
    above = sum(r["above"] for r in gap["parts"])
    assert gap["run_s"] - gap["floor_s"] == pytest.approx(above - gap["pruned_s"])
    breakdown.print_gap(gap, [0.9e12, 1e12], [4.5, 4.6])
    out = capsys.readouterr().out
    assert ("1000.0 GFLOP/s (best repetition, the fastest of 2 measurements: 900.0, 1000.0), floor 3.60 s; timed "
            "run 4.40 s = 1.222x of it, the untimed runs 4.50-4.60 s = 1.250-1.278x") in out
    assert "| GEMMs: b | 1.50 | 1.20 | +0.30 |" in out and "| other | 0.30 |  | +0.30 |" in out
    assert out.rstrip().endswith("| | | -0.20 |")
    facts = judge_model.floor_facts(tiny_lm.model.config.to_dict())
    assert breakdown.layer_rate(facts, 1) > 0
    # peers.py's floor work, which breakdown.py reuses: the config's count of attention work is the engine's own
    wl = workloads.build("1x350", tiny_lm)
    step = Engine(tiny_lm).backend.step
    gemm, attention = floor.floor_flops(facts, wl)
    assert gemm == 2 * facts["matmul_params"] * wl.trie_tokens > 0
    assert attention == wl.attention_flops(step.heads, step.head_dim, [lw.window for lw in step.layers]) > 0


def test_probe_benchmark_samples_the_plain_way_and_estimates_its_time():
    """benchmarks/probe.py: the plain way's patches drawn evenly over the texts, and its time over every patch
    estimated from them with the SE of the mean (hand-checked); every patch timed: no estimate, SE 0."""
    masks = probe.plain_sample("10", 3, 2, 3, seed=0)
    assert [int(m.sum()) for m in masks] == [4, 3, 3] and all(m.shape == (2, 3) for m in masks)
    assert all((a == b).all() for a, b in zip(masks, probe.plain_sample("10", 3, 2, 3, seed=0)))
    assert all(m.all() for m in probe.plain_sample("all", 3, 2, 3, seed=0))
    texts = [{"fixed_s": 1.0, "patch_s": [1.0, 2.0, 3.0]}, {"fixed_s": 2.0, "patch_s": [2.0]}]
    secs, se, n = probe.plain_estimate(texts, 8)
    # 3 s of fixed forwards + 8 x the mean 2 s; SE = 8 x sd (sqrt(2/3)) / sqrt(4) x sqrt(1 - 4/8)
    assert n == 4 and secs == pytest.approx(19.0) and se == pytest.approx(8 * (2 / 3) ** 0.5 / 2 * 0.5 ** 0.5)
    assert probe.plain_estimate(texts, 4) == (11.0, 0.0, 4)


@pytest.mark.parametrize("name", ["1x350", "mtbench"])
def test_prefix_cache_peer_equals_plain(tiny_lm, name):
    """The transformers-prefix-cache peer (benchmarks/peers.py's ``hf-prefix-cache``): every option's probability
    within 1e-5 of the plain forward, single- and multi-token labels; the prefix runs once per item."""
    import numpy as np

    from logitjudge.engine import plain_prompt_logprobs
    from logitjudge.judge.baselines import prefix_cache_prompt_logprobs

    lm = SimpleNamespace(tokenizer=tiny_lm.tokenizer, max_length=8192)
    wl = workloads.build(name, lm)
    groups = [g[:3] for g in wl.groups]
    stats = {}
    got = prefix_cache_prompt_logprobs(tiny_lm.model, groups, batch_size=4, stats=stats)
    for g, gg in zip(groups, got):
        for ref, lp in zip(plain_prompt_logprobs(tiny_lm.model, g), gg):
            assert np.abs(np.exp(ref) - np.exp(lp)).max() < 1e-5
    contexts = {(i, tuple(p.prompt_ids) + tuple(c[:t])) for i, g in enumerate(groups) for p in g
                for c in p.continuation_ids for t in range(len(c))}
    assert stats["tokens"] < sum(len(c) for _, c in contexts)  # the prefix ran once per item, not once per row


@pytest.mark.parametrize("mode", ["shared", "native"])
def test_shared_path_times_each_min_shared_against_the_peer(tiny_lm, tmp_path, monkeypatch, mode):
    """benchmarks/shared_path.py on either backend: a row per min_shared (auto = the engine's default) beside the
    transformers-prefix-cache peer, each counting its calls and tokens (0: the pure trie; 1000: every segment below
    the item's prefix once per branch, a level fewer) and within 1e-5 of the peer. No timing asserted."""
    import json

    wl = workloads.build("1x350", tiny_lm)
    monkeypatch.setattr(workloads, "load", lambda *a, **kw: (tiny_lm, {"1x350": wl}))
    out = tmp_path / "sp.json"
    assert shared_path.main(["--workload", "1x350", "--prefix-mode", mode, "--min-shared", "auto,0,1000",
                             "--repeats", "1", "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["prefix_mode"] == mode
    rows = {r["method"]: r for r in got["rows"]}
    auto, pure, whole = (rows[f"{mode}, min_shared {s}"] for s in ("32 (auto)", 0, 1000))
    assert pure["tokens"] == wl.trie_tokens <= auto["tokens"] <= whole["tokens"]
    assert whole["forward_calls"] < pure["forward_calls"]
    assert all(r["max_abs_dp"] < 1e-5 for r in got["rows"]) and "hf-prefix-cache" in rows


def test_spare_thread_benchmark_times_every_setting_and_puts_the_real_step_back(tiny_lm, tmp_path, monkeypatch):
    """benchmarks/spare_thread.py: every setting timed busy (never and auto quiet too) in alternating rounds, the
    pinned team built and run, and afterwards the library's own raised/paused/checked in place. The load is a
    stand-in here (tests/test_benchmarks_smoke.py tests the real one). No timing asserted."""
    import contextlib
    import json

    from logitjudge_kernels import spare_thread as real

    wl = workloads.build("1x350", tiny_lm)
    monkeypatch.setattr(workloads, "load", lambda *a, **kw: (tiny_lm, {"1x350": wl}))
    monkeypatch.setattr(spare_thread.load, "busy", lambda *a: contextlib.nullcontext({"cpu_share": [0.9]}))
    monkeypatch.setenv(real.ENV, "auto")
    before = (real.raised, real.paused, real.checked)
    out = tmp_path / "st.json"
    assert spare_thread.main(["--rounds", "1", "--out", str(out)]) == 0
    got = json.loads(out.read_text())["settings"]
    assert list(got) == list(spare_thread.SETTINGS)
    assert all(len(got[s]["busy_s"]) == len(got[s]["busy_cores"]) == 1 for s in got)
    assert all(c > 0 for s in got for c in got[s]["busy_cores"])  # CPU seconds over wall seconds
    assert [bool(got[s]["quiet_s"]) for s in got] == [True, True, False, False]
    assert (real.raised, real.paused, real.checked) == before


def test_default_judge_resolves_to_its_checkpoint_and_gguf():
    """``peers.py`` without ``--model``: the built-in's converted folder for transformers and logitjudge, and the
    GGUF it was converted from (assembled from its packages, sha256-checked) for llama.cpp; a second judge's
    benchmark results are named after it."""
    import hashlib

    from logitjudge.judges import BUILTINS

    jm = judge_model
    j = jm.resolve(None)
    assert (j.arg, j.load) == ("gemma-3-270m", "gemma-3-270m") and Path(j.checkpoint, "config.json").is_file()
    h = hashlib.sha256()
    with open(j.gguf, "rb") as f:
        for block in iter(lambda: f.read(8 << 20), b""):
            h.update(block)
    assert h.hexdigest() == BUILTINS["gemma-3-270m"].sha256
    assert jm.run_tag("reproduce", None) == jm.run_tag("reproduce", "gemma-3-270m") == "reproduce"
    assert jm.run_tag("paradigms", "qwen2.5-coder-1.5b-instruct") == "paradigms_qwen2.5-coder-1.5b-instruct"
    assert jm.run_tag("reproduce", "/x/My Judge.gguf") == "reproduce_My-Judge"
    assert jm.run_tag("reproduce", "ollama:qwen2.5:1.5b") == "reproduce_ollama-qwen2.5-1.5b"


def test_floor_from_config_hand_checked():
    """benchmarks/judge_model.py: a judge's matmul shapes and FLOP floor inputs from its config, hand-checked."""
    jm = judge_model
    cfg = {"model_type": "llama", "hidden_size": 8, "intermediate_size": 12, "num_attention_heads": 4,
           "num_key_value_heads": 2, "num_hidden_layers": 3, "vocab_size": 100, "max_position_embeddings": 64}
    f = jm.floor_facts(cfg)
    # head_dim 8 / 4 = 2: q 8x8, k 8x4, v 8x4, o 8x8 = 192; gate, up 8x12, down 12x8 = 288; 3 layers
    assert f["layer_shapes"] == [(8, 8), (8, 4), (8, 4), (8, 8), (8, 12), (8, 12), (12, 8)]
    assert f["matmul_params"] == 3 * (192 + 288) == 1440
    assert (f["heads"], f["head_dim"], f["layer_windows"], f["vocab"]) == (4, 2, [None] * 3, 100)
    # a MoE with 4 experts, 2 per token, expert width 6: router 8x4, 2 x (8x6 + 8x6 + 6x8) = 176, + attention 192
    moe = jm.floor_facts({**cfg, "num_local_experts": 4, "num_experts_per_tok": 2, "intermediate_size": 6,
                          "sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"] * 1 +
                          ["sliding_attention"]})
    assert moe["matmul_params"] == 3 * (192 + 32 + 288) and moe["layer_windows"] == [16, None, 16]
    # Qwen2 configs carry a sliding window they do not use
    assert jm.floor_facts({**cfg, "model_type": "qwen2", "sliding_window": 32})["layer_windows"] == [None] * 3


def test_best_of_interleaved_keeps_the_fastest_round_its_spread_and_the_last_value():
    """benchmarks/timing.py, the benchmarks' one timing helper: the names run interleaved, once per round, the order
    reversed every other round; per name the best seconds, the spread (slowest - fastest), every round's seconds and
    the last run's value (a clock that advances by a scripted amount per call, so the numbers are known)."""
    ticks = iter([0.0, 5.0, 5.0, 6.0, 6.0, 18.0, 18.0, 20.0])  # a: 5 then 2 s, b: 1 then 12 s (run before a)
    calls, seen = [], []
    fns = {"a": lambda: calls.append("a") or len(calls), "b": lambda: calls.append("b") or len(calls)}
    got = timing.best_of_interleaved(fns, 2, clock=lambda: next(ticks), on_time=lambda n, t: seen.append((n, t)))
    assert calls == ["a", "b", "b", "a"] and seen == [("a", 5.0), ("b", 1.0), ("b", 12.0), ("a", 2.0)]
    assert (got["a"].best, got["a"].spread, got["a"].times, got["a"].value) == (2.0, 3.0, [5.0, 2.0], 4)
    assert (got["b"].best, got["b"].spread, got["b"].times, got["b"].value) == (1.0, 11.0, [1.0, 12.0], 3)
    assert got["a"].line() == "2.00 s (spread 3.00 s, 2 rounds)"
    # warm-ups run untimed first; a round with a run over stop_after seconds is the last
    ticks, calls[:] = iter([0.0, 1.0, 1.0, 9.0]), []
    got = timing.best_of_interleaved(fns, 5, warmup={"a": lambda: calls.append("warm a")}, clock=lambda: next(ticks),
                                     stop_after=4.0)
    assert calls == ["warm a", "b", "a", "b"]  # b has no warm-up of its own: one untimed run of itself
    assert got["a"].times == [1.0] and got["b"].times == [8.0] and got["a"].line() == "1.00 s (1 round)"


def test_mlp_rows_benchmark_times_every_variant_on_a_judges_shapes(tmp_path, monkeypatch):
    """benchmarks/mlp_rows.py on a judge folder holding only a config: each row count's variants (whole, and the
    block sizes that apply to its bucket), the dispatcher's choice for it, and the JSON. No timing asserted."""
    import json

    monkeypatch.setenv("LOGITJUDGE_KERNEL_CACHE", str(tmp_path / "kernels"))
    judge = tmp_path / "judge"
    judge.mkdir()
    (judge / "config.json").write_text(json.dumps(
        {"model_type": "qwen2", "hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4,
         "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 100, "hidden_act": "silu"}))
    out = tmp_path / "mlp_rows.json"
    assert mlp_rows.main(["--model", str(judge), "--rows", "200,300,600", "--rounds", "2", "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert (got["d"], got["intermediate"], got["activation"]) == (32, 48, "silu")
    seen = [sorted(r["gflops_best"]) for r in got["rows"]]
    assert seen == [["whole"], ["blocks of 256", "whole"], sorted(["whole", "blocks of 512", "blocks of 384",
                                                                   "blocks of 256"])]
    assert all(r["speedup_vs_whole_best"]["whole"] == 1.0 and r["seconds_spread"].keys() == r["gflops_best"].keys()
               for r in got["rows"])
    assert got["rows"][0]["dispatcher_choice"] == "whole"  # one candidate: nothing measured


def test_benchmarks_is_a_package_of_scripts_over_library_modules():
    """benchmarks/ runs as ``python -m benchmarks.NAME``: no module puts a folder on sys.path, no script (a module
    with a ``__main__`` guard) imports another script, and no module's name is one an installed distribution
    provides (benchmarks/kernels.py shadowed Hugging Face's ``kernels`` when benchmarks/ was on sys.path)."""
    import ast
    import importlib.metadata

    modules = {p.stem: p.read_text(encoding="utf-8") for p in (ROOT / "benchmarks").glob("*.py")}
    scripts = {name for name, src in modules.items() if '__name__ == "__main__"' in src}
    assert {"peers", "engine", "breakdown"} <= scripts and {"workloads", "timing", "child"}.isdisjoint(scripts)
    for name, src in modules.items():
        assert "sys.path.insert" not in src, name
        imported = set()
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.ImportFrom) and node.module == "benchmarks":
                imported |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("benchmarks."):
                imported.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                imported |= {a.name.split(".")[1] for a in node.names if a.name.startswith("benchmarks.")}
        assert not imported & scripts, f"{name} imports the script(s) {sorted(imported & scripts)}"
    assert not set(modules) & set(importlib.metadata.packages_distributions())


def test_every_name_a_benchmark_imports_from_the_library_exists():
    """Every ``from logitjudge... import NAME`` / ``from logitjudge_kernels... import NAME`` in benchmarks/, at the
    top of a module or inside a function (imported when the script runs), names something the library has:
    benchmarks/multi.py imported ``marginal_cost`` from ``logitjudge.steps`` after it moved to
    ``logitjudge.slots``, and failed at import."""
    import ast
    import importlib

    missing = []
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in (
                    "logitjudge", "logitjudge_kernels"):
                module = importlib.import_module(node.module)
                missing += [f"{path.name}: {node.module}.{a.name}" for a in node.names
                            if not hasattr(module, a.name) and not _is_submodule(module, a.name)]
    assert not missing, missing


def _is_submodule(module, name: str) -> bool:
    """``name`` is a module inside the package ``module`` (``from logitjudge import orderings``)."""
    import importlib.util

    return hasattr(module, "__path__") and importlib.util.find_spec(f"{module.__name__}.{name}") is not None


def test_a_peer_that_crashes_or_hangs_is_a_cell_and_the_others_stay(tiny_lm, tmp_path, monkeypatch, capsys):
    """peers.py runs every peer in its own process on the prompts the parent planned: a peer forced to crash
    (SIGSEGV, abort) or to hang past the time limit becomes a cell of the table and of the JSON, and the peer that
    ran keeps its row (its log-probs read the same token ids: max |dp| 0 against itself as the reference)."""
    import json

    judge = tmp_path / "judge"
    tiny_lm.model.save_pretrained(judge)
    tiny_lm.tokenizer.save_pretrained(judge)
    wl = workloads.build("1x350", tiny_lm)
    planned = wl.to_json()
    planned["groups"] = [g[:2] for g in planned["groups"]]  # two prompts: the worker's time is not the point
    wl_path = tmp_path / "1x350.json"
    wl_path.write_text(json.dumps(planned))
    monkeypatch.setenv(peers.FAULT_ENV, "batched=segv,logitjudge-fp32=abort,hf-prefix-cache=hang")
    args = SimpleNamespace(repeats=2, threads=1, slow=60.0, prefix_mode="auto", peer_timeout=600, load=0)
    facts = {"gguf": None, "load": str(judge)}
    summary = wl.summary()
    rows = peers.peer_rows(["plain", "batched", "logitjudge-fp32"], wl_path, summary, args, facts, None)
    args.peer_timeout = 2  # the hanging worker never finishes: it is killed at the limit
    rows |= peers.peer_rows(["hf-prefix-cache"], wl_path, summary, args, facts, None)
    assert rows["batched"] == {"peer": "batched", "error": "crashed: SIGSEGV"}
    assert rows["logitjudge-fp32"]["error"] == "crashed: SIGABRT"
    assert rows["hf-prefix-cache"]["error"] == "timed out after 2 s"
    plain = rows["plain"]
    assert len(plain["times"]) == 2 and plain["seconds"] == min(plain["times"]) > 0
    assert plain["spread_seconds"] == max(plain["times"]) - min(plain["times"]) and plain["max_abs_dp"] == 0.0
    assert len(plain["logprobs"]) == 2 and plain["rerun_max_abs_dp_raw"] == 0.0
    text = peers.table("1x350", summary, rows)
    assert "| (b) transformers, batched, no sharing | crashed: SIGSEGV |" in text
    assert "| (d) logitjudge fp32 | crashed: SIGABRT |" in text
    assert "| (e) transformers + its own prefix cache | timed out after 2 s |" in text
    assert "| (a) transformers, 1 forward/prompt | " in text
    entry = json.loads(json.dumps(peers.report_entry(summary, rows)))
    assert entry["peers"]["batched"]["error"] == "crashed: SIGSEGV" and "logprobs" not in entry["peers"]["plain"]
    assert entry["peers"]["plain"]["seconds"] == plain["seconds"]


def test_vllm_peers_are_a_cell_without_vllm(tiny_lm, tmp_path, monkeypatch):
    """peers.py's vLLM peers on a machine without vLLM: ``--peers vllm`` names both block sizes, and each is the
    cell "n/a: vLLM not installed" in the rows, the table and the JSON, no worker started."""
    import importlib.util

    from benchmarks import vllm_peer

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else find_spec(name, *a))
    assert vllm_peer.expand(["plain", "vllm"]) == ["plain", "vllm-b16", "vllm-b32"]
    wl = workloads.build("1x350", tiny_lm)
    args = SimpleNamespace(repeats=1, threads=1, slow=60.0, prefix_mode="auto", peer_timeout=1, load=0)
    rows = peers.peer_rows(list(vllm_peer.PEERS), tmp_path / "unused.json", wl.summary(), args, {}, None)
    assert rows == {p: {"na": "n/a: vLLM not installed (docs/scale.md)"} for p in vllm_peer.PEERS}
    text = peers.table("1x350", wl.summary(), rows)
    assert "| (f) vLLM, prefix caching, block 16 | n/a: vLLM not installed (docs/scale.md) |" in text
    assert vllm_peer.notes("1x350", rows) == []


def test_vllm_peer_reads_the_plain_probabilities(tiny_lm, tmp_path):
    """The ``vllm-b16`` peer (vLLM in its worker's process, prefix caching on, fp32) on the tiny judge's 1x350
    (10 orderings of one text): every option's probability within 1e-4 of the plain forward, its tokens the
    prompt tokens its prefix cache did not serve, and its start-up in the JSON. Skipped without vLLM."""
    import json
    import os

    pytest.importorskip("vllm")
    if not os.environ.get("LOGITJUDGE_VLLM_BENCH"):  # ~50 s; tests/test_vllm.py checks the engine itself in CI
        pytest.skip("the vLLM peer's own run: set LOGITJUDGE_VLLM_BENCH=1 (about 50 s)")
    judge = tmp_path / "judge"
    tiny_lm.model.save_pretrained(judge)
    tiny_lm.tokenizer.save_pretrained(judge)
    wl = workloads.build("1x350", tiny_lm)
    planned = wl.to_json()
    wl_path = tmp_path / "1x350.json"
    wl_path.write_text(json.dumps(planned))
    args = SimpleNamespace(repeats=1, threads=1, slow=60.0, prefix_mode="auto", peer_timeout=300, load=0)
    rows = peers.peer_rows(["plain", "vllm-b16"], wl_path, wl.summary(), args, {"gguf": None, "load": str(judge)},
                           None)
    v = rows["vllm-b16"]
    assert "error" not in v, v.get("error")
    assert v["max_abs_dp"] < 1e-4 and v["block_size"] == 16 and v["startup_seconds"] > 0
    assert v["prompt_tokens"] == sum(len(p["prompt_ids"]) for g in planned["groups"] for p in g)  # 1-token labels
    assert 0 < v["cached_tokens"] < v["prompt_tokens"] and v["tokens"] == v["prompt_tokens"] - v["cached_tokens"]


def test_http_client_benchmark_times_each_client_on_checked_answers(tmp_path, capsys):
    """benchmarks.http_client: urllib (the HTTP engine's own _once) and httpx send the same requests to a local
    uvicorn app; each answer is checked against the body sent, and the table and JSON have every client."""
    pytest.importorskip("uvicorn")
    from benchmarks import http_client

    out = http_client.main(["--requests", "3", "--rounds", "1", "--prompts", "4", "--json", str(tmp_path / "h.json")])
    assert set(out["clients"]) == {"urllib", "httpx", "httpx-new"}
    assert all(c["ms_per_request"] > 0 for c in out["clients"].values())
    assert "urllib" in capsys.readouterr().out and (tmp_path / "h.json").exists()


def test_load_runs_busy_processes_beside_a_peer_and_reports_the_slowdown(monkeypatch):
    """benchmarks.peers --load N: the peer runs again beside N busy processes (benchmarks/load.py), which are at
    work before its run and stopped after, each reporting the units it finished and the share of a core it got;
    the row has busy / quiet and the table the load's share."""
    import time
    from types import SimpleNamespace

    from benchmarks import load, peers

    with load.busy(1, "matmul", 1) as work:
        time.sleep(0.3)
    assert work["processes"] == 1 and work["done"][0] >= 1
    assert 0.0 < work["cpu_share"][0] <= 1.05  # one thread: at most one core, within the clocks' granularity
    assert load.parse_report("ready\ndone 7 cpu_share 0.981\n") == (7, 0.981)
    assert load.parse_report("ready\ndone 7\n") == (7, None) and load.parse_report("") == (None, None)
    monkeypatch.setattr(peers, "run_worker", lambda peer, *a: {"peer": peer, "seconds": 3.0, "times": [3.0, 3.2]})
    b = peers.busy_row("logitjudge-fp32", 2.0, None, SimpleNamespace(load=1, load_kind="matmul", load_threads=1), {})
    assert b["slowdown"] == 1.5 and b["load"] == {"processes": 1, "kind": "matmul", "threads": 1}
    assert len(b["load_done"]) == 1 and len(b["load_cpu_share"]) == 1
    b["load_cpu_share"] = [0.97]
    assert "1.50x  0.97" in peers.busy_table("1x350", {"plain": {"seconds": 9.0}, "logitjudge-fp32": {"seconds": 2.0,
                                                                                                  "busy": b}})
    with pytest.raises(ValueError, match="unknown load kind"):
        with load.busy(1, "sleep"):
            pass


def test_route_stability_tallies_choices_and_verdicts_per_route(tmp_path):
    """benchmarks.route_stability's table: per route the choices and rejections with their counts, and how many
    processes agree with the most common; a fresh cache keeps the build and drops the decisions."""
    from benchmarks import route_stability as rs

    runs = [{"fp32 linear [a]": {"choice": "packed", "not_exact": []}},
            {"fp32 linear [a]": {"choice": "plain", "not_exact": ["packed"]}},
            {"fp32 linear [a]": {"choice": "packed", "not_exact": []}, "bf16 rms_norm [b]": {"choice": "C",
                                                                                          "not_exact": []}}]
    rows = {r["route"]: r for r in rs.tally(runs)}
    assert rows["fp32 linear [a]"]["choices"] == {"packed": 2, "plain": 1}
    assert rows["fp32 linear [a]"]["rejected"] == {"-": 2, "packed": 1}
    assert rows["fp32 linear [a]"]["choice_stable"] == rows["fp32 linear [a]"]["exactness_stable"] == 2
    assert rows["bf16 rms_norm [b]"]["processes"] == 1
    build = tmp_path / "build"
    build.mkdir()
    (build / "kernels.so").write_text("x")
    (build / "dispatch-abc.json").write_text("{}")
    rs._fresh_cache(build, tmp_path / "fresh")
    assert sorted(p.name for p in (tmp_path / "fresh").iterdir()) == ["kernels.so"]


@pytest.mark.parametrize("variant", ["onednn-packed", "mkl-packed", "mkl-chunks-dynamic", "mkl-chunks-static"])
def test_busy_core_variants_compute_the_same_gemm(variant):
    """benchmarks.busy_core: every split of x . W^T computes the GEMM (MKL's packed variants, called through the
    pointers torch's library exports, give F.linear's own values: it is MKL's GEMM too), on a shape whose last
    column chunk is short."""
    from benchmarks import busy_core

    if variant.startswith("mkl") and not busy_core.mkl_available():
        pytest.skip("torch's library here has no MKL packed GEMM (ARM builds)")
    res = busy_core.child(variant, (37, 64, 300), threads=2, calls=3, chunk=128)
    assert res["max_abs_diff"] < 1e-4 and res["gflops"] > 0


def _spin_count(code: str, **env) -> str:
    """The GOMP_SPINCOUNT libgomp settled on in a fresh process running ``code`` (0: PASSIVE, idle threads sleep
    at once; 300,000: libgomp's default without a policy), from OpenMP's own display of what it read."""
    import os
    import re
    import subprocess
    import sys

    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    res = subprocess.run([sys.executable, "-c", code + "; import torch; torch.ones(4).sum()"], cwd=ROOT,
                         env={**base, "OMP_DISPLAY_ENV": "VERBOSE", **env}, capture_output=True, text=True,
                         timeout=120)
    m = re.search(r"GOMP_SPINCOUNT = '(\d+)'", res.stderr)
    if m is None:
        pytest.skip("torch's OpenMP runtime here is not libgomp (no GOMP_SPINCOUNT in its display)")
    return m.group(1)


def test_every_benchmark_runs_under_the_clis_openmp_wait_policy():
    # kernel_speed imports torch at its top, before anything of logitjudge: the package's import comes first
    assert _spin_count("import benchmarks.kernel_speed") == "0"
    assert _spin_count("import logitjudge") == "0"
    assert _spin_count("import torch") == "300000"  # what a script that imported torch first ran under
    assert _spin_count("import benchmarks.kernel_speed", OMP_WAIT_POLICY="ACTIVE") != "0"  # the user's is kept
