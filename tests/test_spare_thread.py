"""The spare thread (logitjudge_kernels/spare_thread.py): when it is taken, how a raised step runs, and that it
gives the same bits as without (the C read-out, norms and attention at any thread count; MKL's packed GEMM on the
judges' shapes; a route whose bits would move kept at the base count), up to a real judge's probabilities and a
Qwen2-shaped model whose SiLU and biased projections are where the bits would move."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_tokenizer
from logitjudge_kernels import cpu_attention, cpu_norm, cpu_readout, mkl_gemm, spare_thread
from logitjudge_kernels._cbuild import ptr

from logitjudge import orderings
from logitjudge.engine import Engine
from logitjudge.items import Item
from logitjudge.models import Judge
from logitjudge.prompts import Template
from logitjudge.requests import item_prompts
from logitjudge.rubric import Rubric, likert


@pytest.fixture
def spare(monkeypatch):
    """Set LOGITJUDGE_SPARE_THREAD for the test: ``spare("1")``."""
    return lambda value: monkeypatch.setenv(spare_thread.ENV, value)


def test_others_cores_is_the_machines_cpu_time_less_this_process():
    # 2 s of wall time; the CPUs were busy 3.0 s, 2.2 of them this process: others took 0.4 of a core
    assert spare_thread.others_cores((10.0, 100.0, 50.0), (12.0, 103.0, 52.2)) == pytest.approx(0.4)
    assert spare_thread.others_cores((10.0, 100.0, 50.0), (12.0, 101.0, 51.5)) == 0.0  # counters' 10 ms steps
    assert spare_thread.others_cores((10.0, 100.0, 50.0), (10.0, 101.0, 50.0)) == 0.0


def test_the_spare_is_taken_at_on_cores_and_given_back_under_off_cores():
    assert not spare_thread.next_held(False, 0.3)  # between the two lines: a quiet run stays without it
    assert spare_thread.next_held(False, spare_thread.ON_CORES)
    assert spare_thread.next_held(True, 0.3)  # ... and a busy run keeps it (one process beside 3 threads: ~0.5)
    assert not spare_thread.next_held(True, spare_thread.OFF_CORES - 0.01)


def test_modes_raise_the_step_and_pause_lowers_it(spare):
    base = torch.get_num_threads()
    spare("1")
    assert spare_thread.take(base)
    with spare_thread.raised():
        assert torch.get_num_threads() == base + 1 and spare_thread.base_threads() == base
        assert spare_thread.is_raised()
        with spare_thread.raised():  # nested: unchanged
            assert torch.get_num_threads() == base + 1
        with spare_thread.paused():
            assert torch.get_num_threads() == base and not spare_thread.is_raised()
            with spare_thread.paused():
                assert torch.get_num_threads() == base
            assert torch.get_num_threads() == base
        assert torch.get_num_threads() == base + 1
    assert torch.get_num_threads() == base and not spare_thread.is_raised()
    spare("0")
    assert not spare_thread.take(base)
    with spare_thread.raised():
        assert torch.get_num_threads() == base
    spare("sometimes")
    with pytest.raises(ValueError, match="use auto, 0 or 1"):
        spare_thread.take(base)


def test_a_bad_setting_is_refused_before_the_model_loads(spare):
    from logitjudge.engine import EngineError
    from logitjudge.engines.native import NativeConfig

    spare("2")
    with pytest.raises(EngineError, match="LOGITJUDGE_SPARE_THREAD='2': use auto, 0 or 1"):
        NativeConfig().check(probing=False)


def test_auto_takes_no_spare_where_a_cpu_is_left_free(spare, monkeypatch):
    spare("auto")
    monkeypatch.setattr(spare_thread, "_cpus", lambda: {0, 1, 2, 3})
    monkeypatch.setattr(spare_thread, "_last", None)
    assert spare_thread._read(2, 0.0) is None  # 2 threads on 4 CPUs
    assert not spare_thread.take(2)


def _readout_lse(h: torch.Tensor, w: torch.Tensor, threads: int) -> torch.Tensor:
    fn = cpu_readout._library()[0].logsumexp_f32
    out = torch.empty(h.shape[0])
    assert fn(ptr(h), ptr(w), ptr(out), h.shape[0], w.shape[0], h.shape[1], threads) == 0
    return out


def test_readout_same_bits_at_any_thread_count():
    if cpu_readout._library()[1]:
        pytest.skip(cpu_readout._library()[1][:200])
    g = torch.Generator().manual_seed(0)
    h, w = torch.randn(13, 64, generator=g), torch.randn(9_000, 64, generator=g)  # 36 blocks: 3 per lane
    one = _readout_lse(h, w, 1)
    for threads in (2, 3, 4, 5):
        assert torch.equal(_readout_lse(h, w, threads), one), threads
    truth = torch.logsumexp(h.double() @ w.double().T, dim=1)
    assert (one.double() - truth).abs().max() < 1e-5


def test_norms_and_attention_same_bits_at_2_and_3_threads():
    why = cpu_norm.cpu_kernels_status() or cpu_attention.cpu_attention_status()
    if why:
        pytest.skip(why[:200])
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4_096, 1_024, generator=g), torch.randn(4_096, 1_024, generator=g)  # past PARALLEL_MIN
    w_y, w_next = torch.randn(1_024, generator=g), torch.randn(1_024, generator=g)
    q = torch.randn(2, 8, 96, 64, generator=g)
    kv = [torch.randn(2, 300, 64, generator=g) for _ in range(2)] + [torch.randn(2, 2, 96, 64, generator=g)
                                                                     for _ in range(2)]

    def run():
        return (cpu_norm.rms_norm_c(x, w_y, 1e-6), *cpu_norm.residual_rms_norm_c(x, y, w_y, w_next, 1e-6),
                cpu_attention.shared_prefix_attention_c(q, *kv, scale=0.125, sliding_window=64))

    base = run()
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        for a, b in zip(base, run()):
            assert torch.equal(a, b)
    finally:
        torch.set_num_threads(threads)


# (out, in) of gemma-3-270m's and Qwen2.5-Coder-0.5B's projections: fused q/k/v, o, fused gate/up, down
JUDGE_SHAPES = [(1_536, 640), (640, 1_024), (4_096, 640), (640, 2_048),
                (1_152, 896), (896, 896), (9_728, 896), (896, 4_864)]
ROWS = (1, 7, 32, 95, 160, 256, 333, 512, 700, 1_024)


@pytest.mark.skipif(not mkl_gemm.available(), reason="torch here has no MKL")
def test_mkl_packed_same_bits_at_1_to_4_threads_on_the_judges_shapes():
    """MKL's packed GEMM gives the same bits at 1 to 4 threads, whether its copy was packed at 1 thread or at the
    count it runs on (mkl_gemm.Packed makes the copy again for the call's count)."""
    g = torch.Generator().manual_seed(2)
    for out, d in JUDGE_SHAPES:
        w = torch.randn(out, d, generator=g) / d ** 0.5
        packed = {t: _at(t, mkl_gemm.pack, w) for t in (1, 2, 3, 4)}
        for m in ROWS:
            x = torch.randn(m, d, generator=g)
            base = _at(1, mkl_gemm._compute, x, packed[1], out, None)
            for threads in (2, 3, 4):
                for at in (1, threads):
                    got = _at(threads, mkl_gemm._compute, x, packed[at], out, None)
                    assert torch.equal(got, base), (out, d, m, threads, at)


@pytest.mark.skipif(not mkl_gemm.available(), reason="torch here has no MKL")
def test_mkl_packed_copy_follows_the_thread_count_and_keeps_one(spare):
    """Packed.buffer(): the copy packed at torch's current count, reused while the count stays, made again (and
    the old one let go) when it changes; a raised step's calls and a quiet step's give the same values."""
    g = torch.Generator().manual_seed(3)
    w, x = torch.randn(640, 256, generator=g), torch.randn(95, 256, generator=g)
    packed = mkl_gemm.Packed(w)
    base = torch.get_num_threads()
    first = packed.buffer()
    assert packed.buffer() is first and packed._copy[0] == base
    raised = _at(base + 1, packed.buffer)
    assert raised is not first and packed._copy == (base + 1, raised)
    again = packed.buffer()
    assert again is not raised and packed._copy[0] == base
    quiet = mkl_gemm.linear(x, packed, 640)
    spare("1")
    with spare_thread.raised():
        held = mkl_gemm.linear(x, packed, 640)
        assert packed._copy[0] == base + 1
    assert torch.equal(quiet, held)


def _at(threads: int, fn, *args):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fn(*args)
    finally:
        torch.set_num_threads(before)


def test_a_route_whose_bits_move_keeps_the_base_count(spare, monkeypatch, caplog):
    monkeypatch.setattr(spare_thread, "_SAME_BITS", {})
    spare("1")
    seen = []

    def moves():  # a result that follows the thread count, as ATen's GELU on some shapes
        seen.append(torch.get_num_threads())
        return torch.full((3,), float(torch.get_num_threads()))

    def holds():
        seen.append(torch.get_num_threads())
        return torch.ones(3)

    base = torch.get_num_threads()
    with spare_thread.raised(), caplog.at_level(logging.INFO, logger="logitjudge"):
        first = spare_thread.checked(("moves", 1), moves)
        assert "other bits at" in caplog.text and torch.equal(first, torch.full((3,), float(base)))
        assert torch.equal(spare_thread.checked(("moves", 1), moves), first)  # checked once, then the base count
        assert seen == [base, base + 1, base]
        seen.clear()
        spare_thread.checked(("holds", 1), holds)
        spare_thread.checked(("holds", 1), holds)
        assert seen == [base, base + 1, base + 1]
    assert spare_thread._SAME_BITS == {("moves", 1, base): False, ("holds", 1, base): True}
    seen.clear()
    spare_thread.checked(("moves", 1), moves)  # outside a raised step: as it is
    assert seen == [base]


@pytest.mark.parametrize("route", ["C", "torch"])
def test_ops_whose_bits_follow_the_count_keep_the_base_count_in_a_raised_step(route, spare, monkeypatch):
    """The MLP's activation (by the C kernel, the same bits at any count; by torch, paused) and ``F.linear``
    (checked) inside a raised step give their base-count bits, on shapes where ATen's own would move at the
    raised count (the judges' MLP widths; 10 rows of a biased 896 x 896 projection, Qwen2's)."""
    from logitjudge.judge.backends.native_gemms import f_linear

    if route == "C" and cpu_norm.cpu_kernels_status():
        pytest.skip(cpu_norm.cpu_kernels_status()[:200])
    monkeypatch.setattr(cpu_norm.ACT_MUL, "candidates", [cpu_norm.ACT_MUL.candidate(route)])
    monkeypatch.setattr(spare_thread, "_SAME_BITS", {})
    g = torch.Generator().manual_seed(4)
    gate_up = torch.randn(101, 8_192, generator=g)
    gate = gate_up.chunk(2, dim=-1)[0]
    x, w, bias = torch.randn(10, 896, generator=g), torch.randn(896, 896, generator=g) / 30, torch.randn(896)

    def ours():
        return cpu_norm.act_mul(gate_up, "gelu_tanh"), cpu_norm.act_mul(gate_up, "silu"), f_linear(x, w, bias)

    base = ours()
    spare("1")
    with spare_thread.raised():
        atens = (F.gelu(gate, approximate="tanh"), F.silu(gate), F.linear(x, w, bias))
        for _ in range(2):  # the call that checks F.linear, then one that reads the check
            for a, b in zip(base, ours()):
                assert torch.equal(a, b)
    if all(torch.equal(a, b) for a, b in zip(atens, (F.gelu(gate, approximate="tanh"), F.silu(gate),
                                                     F.linear(x, w, bias)))):
        pytest.skip("ATen's GELU, SiLU and F.linear give the same bits at both counts on these shapes here")


def _groups(lm, text: str):
    rub = Rubric((likert("Quality", "overall", ["bad", "poor", "fair", "good", "great"]),), "Rate the story.")
    return [item_prompts(lm, rub, Item("s", text), orderings.balanced(5), Template())]


def _held_against_not(lm, groups, spare, monkeypatch) -> int:
    """The engine's probabilities with no spare, then with every step raised: the same bits. Returns how many
    GEMM routes ran on the raised count."""
    spare("0")
    quiet = Engine(lm).prompt_logprobs(groups)[0]
    spare("1")
    raised = []
    real = spare_thread.checked
    monkeypatch.setattr(spare_thread, "checked", lambda key, run: real(key, lambda: (
        raised.append(spare_thread.is_raised()), run())[1]))
    busy = Engine(lm).prompt_logprobs(groups)[0]
    assert len(quiet) == len(busy) == 10
    for a, b in zip(quiet, busy):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    return sum(raised)


def test_a_qwen2_shaped_judge_same_bits_with_the_spare(spare, monkeypatch):
    """Qwen2's biased projections (``F.linear``, whose bits move at some row counts) and a SiLU wide enough for
    ATen to split it over the threads (rows x 4,096), each kept at the base count where it would move: the plain
    routes, where both run (on the judges' routes, measured per machine, they may not)."""
    from logitjudge.judge.backends import native_gemms

    for kernel in (native_gemms.LINEAR, native_gemms.GATE_UP):
        monkeypatch.setattr(kernel, "candidates", [kernel.candidate("plain")])
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = tiny_tokenizer()
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=4_096, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4_096,
                      tie_word_embeddings=True)
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("proj.bias"):
                p.normal_(0.0, 0.5)
    lm = Judge.of(model, tok, "tiny-wide-qwen2", dtype="fp32")
    groups = _groups(lm, "once upon a time a cat sat on the mat and the dog barked at the moon " * 8)
    assert _held_against_not(lm, groups, spare, monkeypatch) > 10


@pytest.mark.slow
def test_a_judges_probabilities_same_bits_with_the_spare(gemma_lm, spare, monkeypatch):
    """The real Gemma-3-270M through the engine, quiet (no spare) then with every step raised: the routes were
    decided once (at the base count), and every value is the same bits."""
    groups = _groups(gemma_lm, "Once upon a time a cat sat on the mat and the dog barked at the moon. " * 6)
    assert _held_against_not(gemma_lm, groups, spare, monkeypatch) > 50
