"""The spare thread (logitjudge_kernels/spare_thread.py): when it is taken, and that the kernels that take it give
the same bits with it as without (the C read-out, norms and attention at any thread count; MKL's packed GEMM on
the judges' shapes, and kept at torch's count where it would not), up to a real judge's probabilities."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from logitjudge_kernels import cpu_attention, cpu_norm, cpu_readout, mkl_gemm, spare_thread
from logitjudge_kernels._cbuild import ptr

from logitjudge import orderings
from logitjudge.engine import Engine
from logitjudge.items import Item
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


def test_modes_and_pause(spare):
    spare("1")
    assert spare_thread.threads(2) == 3
    with spare_thread.paused():
        assert spare_thread.threads(2) == 2
    spare("0")
    assert spare_thread.threads(2) == 2
    spare("sometimes")
    with pytest.raises(ValueError, match="use auto, 0 or 1"):
        spare_thread.threads(2)


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
    assert spare_thread.threads(2) == 2


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


def test_norms_and_attention_same_bits_with_the_spare(spare):
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

    spare("0")
    base = run()
    spare("1")
    for a, b in zip(base, run()):
        assert torch.equal(a, b)


# (out, in) of gemma-3-270m's and Qwen2.5-Coder-0.5B's projections: fused q/k/v, o, fused gate/up, down
JUDGE_SHAPES = [(1_536, 640), (640, 1_024), (4_096, 640), (640, 2_048),
                (1_152, 896), (896, 896), (9_728, 896), (896, 4_864)]
ROWS = (1, 7, 32, 95, 160, 256, 333, 512, 700, 1_024)


@pytest.mark.skipif(not mkl_gemm.available(), reason="torch here has no MKL")
def test_mkl_packed_same_bits_at_1_to_4_threads_on_the_judges_shapes():
    g = torch.Generator().manual_seed(2)
    for out, d in JUDGE_SHAPES:
        w = torch.randn(out, d, generator=g) / d ** 0.5
        packed = mkl_gemm.pack(w)
        for m in ROWS:
            x = torch.randn(m, d, generator=g)
            base = mkl_gemm._compute(x, packed, out, None, 1)
            for threads in (2, 3, 4):
                assert torch.equal(mkl_gemm._compute(x, packed, out, None, threads), base), (out, d, m, threads)


@pytest.mark.skipif(not mkl_gemm.available(), reason="torch here has no MKL")
def test_mkl_keeps_torchs_threads_for_a_shape_whose_bits_would_move(spare, monkeypatch, caplog):
    real = mkl_gemm._compute
    calls = []

    def moved(x, packed, n, bias, threads=None):  # an MKL that splits the sum at the spare thread's count
        calls.append(threads)
        y = real(x, packed, n, bias, threads)
        return y + 1e-3 if threads else y

    monkeypatch.setattr(mkl_gemm, "_compute", moved)
    monkeypatch.setattr(mkl_gemm, "_SAME_BITS", {})
    spare("1")
    w, x = torch.randn(96, 64), torch.randn(10, 64)
    packed = mkl_gemm.pack(w)
    with caplog.at_level(logging.INFO, logger="logitjudge"):
        first = mkl_gemm.linear(x, packed, 96)
    assert "other bits at" in caplog.text
    assert torch.equal(first, real(x, packed, 96, None))
    assert torch.equal(mkl_gemm.linear(x, packed, 96), first)  # checked once: torch's count from then on
    assert calls[2:] == [None]


@pytest.mark.slow
def test_a_judges_probabilities_same_bits_with_the_spare(gemma_lm, spare, monkeypatch):
    """The real Gemma-3-270M through the engine, quiet (no spare) then with the spare thread on every kernel that
    takes it: the routes were decided once (with no spare), and every value is the same bits."""
    rub = Rubric((likert("Quality", "overall", ["bad", "poor", "fair", "good", "great"]),), "Rate the story.")
    item = Item("s", "Once upon a time a cat sat on the mat and the dog barked at the moon. " * 6)
    groups = [item_prompts(gemma_lm, rub, item, orderings.balanced(5), Template())]
    spare("0")
    quiet = Engine(gemma_lm).prompt_logprobs(groups)[0]
    spare("1")
    taken = []
    real = spare_thread.threads
    monkeypatch.setattr(spare_thread, "threads", lambda base: taken.append(base) or real(base))
    busy = Engine(gemma_lm).prompt_logprobs(groups)[0]
    assert len(taken) > 100  # the kernels asked (norms, attention, read-out, GEMMs): each was given one more
    assert len(quiet) == len(busy) == 10
    for a, b in zip(quiet, busy):
        assert np.array_equal(np.asarray(a), np.asarray(b))
