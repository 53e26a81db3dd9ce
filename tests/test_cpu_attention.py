"""The C shared-prefix attention kernel (logitjudge_kernels/cpu_attention.c) against plain fp64 attention, its layout,
its invariance to batching and threads, and its refusals.

Tolerance (fp32): 5e-6 absolute on outputs (values ~N(0, 1)); the C kernel's exp is a Cephes polynomial and
its sums run in other orders than the reference's. The parity tests run the native build and, on x86, the builds
for ``-march=x86-64-v3`` (AVX2 tiles) and ``x86-64-v2`` (4-float tiles, the width of an ARM NEON build).
"""

from __future__ import annotations

import itertools

import pytest
import torch
from conftest import build_target_fixture
from logitjudge_kernels import attention_ref, cpu_attention, shared_prefix_attention, shared_prefix_attention_ref
from logitjudge_kernels.cpu_attention import (
    c_attention_refusal,
    cpu_attention_status,
    shared_prefix_attention_c,
)

ATOL = 5e-6


target = build_target_fixture(cpu_attention._library)

needs_c = pytest.mark.skipif(cpu_attention_status() is not None,
                             reason=f"C attention kernel unavailable: {cpu_attention_status()}")


def _inputs(B, Hq, Hkv, S, L, D, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)

    def mk(*shape):
        return torch.randn(*shape, generator=g).to(dtype)

    return mk(B, Hq, S, D), mk(Hkv, L, D), mk(Hkv, L, D), mk(B, Hkv, S, D), mk(B, Hkv, S, D)


def _truth(q, kp, vp, ks, vs, scale, window):
    B = q.shape[0]
    k = torch.cat([kp.unsqueeze(0).expand(B, -1, -1, -1), ks], dim=2).double()
    v = torch.cat([vp.unsqueeze(0).expand(B, -1, -1, -1), vs], dim=2).double()
    return attention_ref(q.double(), k, v, scale=scale, causal_offset=kp.shape[1], sliding_window=window)


# lengths around the kernel's tiles: 6 query rows, 16-key panels, pairs of panels
CASES = [(B, Hq, Hkv, S, L, D, w)
         for (B, S, L), (Hq, Hkv), D, w in itertools.product(
             [(1, 1, 0), (1, 1, 1), (2, 5, 16), (3, 17, 33), (1, 40, 0), (2, 7, 100)],
             [(4, 1), (8, 2), (2, 2), (1, 1)], [32, 256], [None, 1, 4, 16, 50])]


@needs_c
@pytest.mark.parametrize("B,Hq,Hkv,S,L,D,window", [c for i, c in enumerate(CASES) if i % 3 == 0])
def test_matches_fp64_attention(B, Hq, Hkv, S, L, D, window, target):
    inputs = _inputs(B, Hq, Hkv, S, L, D, seed=S * 7 + L)
    out = shared_prefix_attention_c(*inputs, scale=D**-0.5, sliding_window=window, target=target)
    assert out.shape == (B, Hq, S, D) and out.dtype == torch.float32
    err = (out.double() - _truth(*inputs, D**-0.5, window)).abs().max().item()
    assert err <= ATOL, f"max abs error {err:.3g}"


@needs_c
def test_long_rows_and_large_scores(target):
    """Long prefix and suffix with a window, and scores large enough that exp() would overflow without the max.
    At scale 2 (scores in the tens) the fp32 reference itself is off by ~1e-5: the kernel's error is bounded by
    ATOL or by the reference's own error (the x86-64-v2 build, without FMA, rounds each product: 9.7e-6 there)."""
    q, kp, vp, ks, vs = _inputs(2, 4, 1, 130, 700, 64, seed=3)
    for scale, window in ((0.125, None), (0.125, 512), (2.0, 64)):
        out = shared_prefix_attention_c(q, kp, vp, ks, vs, scale=scale, sliding_window=window, target=target)
        assert torch.isfinite(out).all()
        truth = _truth(q, kp, vp, ks, vs, scale, window)
        ref_err = (shared_prefix_attention_ref(q, kp, vp, ks, vs, scale=scale, sliding_window=window).double()
                   - truth).abs().max().item()
        assert (out.double() - truth).abs().max().item() <= max(ATOL, 1.5 * ref_err)


@needs_c
def test_output_is_the_projection_layout():
    inputs = _inputs(2, 4, 1, 9, 5, 32)
    out = shared_prefix_attention_c(*inputs, scale=0.2)
    assert out.transpose(1, 2).is_contiguous()  # (B, S, Hq, D) memory: reshape to (B, S, Hq * D) is free


@needs_c
def test_rows_do_not_depend_on_the_batch_or_threads():
    """Each row is computed alone, in the same order, whatever else is in the call: bitwise equal."""
    q, kp, vp, ks, vs = _inputs(5, 4, 1, 23, 31, 64, seed=4)
    whole = shared_prefix_attention_c(q, kp, vp, ks, vs, scale=0.125, sliding_window=20)
    for b in range(5):
        alone = shared_prefix_attention_c(q[b:b + 1], kp, vp, ks[b:b + 1], vs[b:b + 1], scale=0.125,
                                          sliding_window=20)
        assert torch.equal(alone, whole[b:b + 1])
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = shared_prefix_attention_c(q, kp, vp, ks, vs, scale=0.125, sliding_window=20)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, whole)


@needs_c
def test_long_calls_are_cut_into_pieces_with_the_same_result(monkeypatch):
    """The host wrapper cuts a long call into C calls over query positions and batch rows (Ctrl-C is seen
    between them); every query's result is bitwise the same as in one call."""
    q, kp, vp, ks, vs = _inputs(3, 4, 1, 90, 40, 32, seed=8)
    whole = shared_prefix_attention_c(q, kp, vp, ks, vs, scale=0.2, sliding_window=50)
    pieces = []
    monkeypatch.setattr(cpu_attention, "_calls", lambda *a, _f=cpu_attention._calls: pieces.extend(_f(*a)) or pieces)
    monkeypatch.setattr(cpu_attention, "CALL_FLOPS", 4 * 4 * (40 + 90) * 32 * 20)  # ~20 positions of one row
    cut = shared_prefix_attention_c(q, kp, vp, ks, vs, scale=0.2, sliding_window=50)
    assert len(pieces) > 3 and {(b1 - b0) for b0, b1, _, _ in pieces} == {1}
    assert torch.equal(cut, whole)


@needs_c
@pytest.mark.parametrize("setting,impl", [("1", "C"), ("0", "aten")])
def test_environment_forces_the_c_kernel_or_aten(setting, impl, monkeypatch):
    from logitjudge_kernels import dispatch, shared_prefix_attention_aten

    monkeypatch.setenv("LOGITJUDGE_CPU_KERNELS", setting)
    inputs = _inputs(2, 4, 1, 6, 8, 64)
    with dispatch.recording() as rec:
        out = shared_prefix_attention(*inputs, scale=0.125)
    assert rec.ran("attention") == {impl}
    fn = shared_prefix_attention_c if impl == "C" else shared_prefix_attention_aten
    assert torch.equal(out, fn(*inputs, scale=0.125))


def test_refusals_name_the_reason():
    q = torch.zeros(1, 4, 3, 64)
    assert "CPU fp32/bf16/fp16 only" in c_attention_refusal(q.double())
    assert "CPU fp32/bf16/fp16 only" in c_attention_refusal(torch.zeros(1, 4, 3, 64, device="meta"))
    assert "head_dim 48 is not a multiple of 32" in c_attention_refusal(torch.zeros(1, 4, 3, 48))
    assert "soft-capping" in c_attention_refusal(q, softcap=30.0)
    with pytest.raises(ValueError, match=r"cannot run: head_dim 48 .*backend='ref'"):
        shared_prefix_attention_c(*_inputs(1, 4, 1, 3, 2, 48), scale=0.125)


@needs_c
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_is_computed_in_fp32(dtype, target):
    """bf16/fp16 inputs: the fp32 kernel on upcast copies, the output rounded once to the input dtype."""
    inputs = _inputs(2, 4, 1, 9, 20, 64, seed=6, dtype=dtype)
    out = shared_prefix_attention_c(*inputs, scale=0.125, sliding_window=12, target=target)
    assert out.dtype == dtype and out.transpose(1, 2).is_contiguous()
    fp32 = shared_prefix_attention_c(*(t.float() for t in inputs), scale=0.125, sliding_window=12, target=target)
    assert torch.equal(out, fp32.to(dtype))


def test_head_dim_not_multiple_of_32_falls_back_to_aten_and_still_matches():
    """head_dim 48 goes through ATen's flash path (fp32 with the C kernel forced off: test_kernels.py)."""
    inputs = _inputs(2, 4, 1, 6, 8, 48)
    out = shared_prefix_attention(*inputs, scale=48**-0.5, sliding_window=5)
    assert (out.double() - _truth(*inputs, 48**-0.5, 5)).abs().max().item() <= 1e-5
