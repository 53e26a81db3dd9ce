"""The C full-vocabulary log-sum-exp (logitjudge_kernels/cpu_readout.c) against fp64, its dispatch and its refusals.

Tolerance (fp32): 1e-5 absolute on the log-sum-exp at these scales (|lse| < 20), as the reference's; the C
kernel's exp is a Cephes polynomial and its logits are summed over d in another order. Every parity test runs
the native build and, on x86, the builds for ``-march=x86-64-v3`` (AVX2 tiles, 8 floats) and ``x86-64-v2``
(SSE: the 4-float tiles an ARM NEON build uses), whatever the machine's own ISA.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from conftest import build_target_fixture
from logitjudge_kernels import cpu_readout, label_logprobs, label_logprobs_ref
from logitjudge_kernels.cpu_readout import c_readout_refusal, logsumexp_c

ATOL = 1e-5

needs_c = pytest.mark.skipif(c_readout_refusal(torch.zeros(1, 8), torch.zeros(1, 8)) is not None,
                             reason="C read-out unavailable here")


target = build_target_fixture(cpu_readout._library)


def _inputs(R, V, d, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(R, d, generator=g) * scale, torch.randn(V, d, generator=g) * 0.3


def _truth(h, w):
    return torch.logsumexp(h.double() @ w.double().T, dim=1)


@needs_c
@pytest.mark.parametrize("R,V,d", list(itertools.product([1, 5, 6, 7, 13], [1, 15, 16, 17, 300, 1000],
                                                         [8, 33, 64])))
def test_matches_fp64(R, V, d, target):
    h, w = _inputs(R, V, d, seed=R * 1000 + V + d)
    got = logsumexp_c(h, w, target=target)
    assert got.shape == (R,) and got.dtype == torch.float32
    assert (got.double() - _truth(h, w)).abs().max().item() <= ATOL


@needs_c
def test_large_logits_and_many_blocks(target):
    """Logits in the tens (exp would overflow without the running max) over 40 blocks of 256 rows."""
    h, w = _inputs(9, 10_000, 64, seed=3, scale=8.0)
    got = logsumexp_c(h, w, target=target)
    truth = _truth(h, w)
    assert truth.abs().max() > 30
    assert ((got.double() - truth).abs() / truth.abs()).max().item() <= 1e-6


@needs_c
def test_rows_do_not_depend_on_the_batch():
    h, w = _inputs(12, 777, 32, seed=4)
    whole = logsumexp_c(h, w)
    for r in range(12):
        assert torch.equal(logsumexp_c(h[r:r + 1], w), whole[r:r + 1])


@needs_c
def test_long_calls_are_cut_into_spans_and_row_groups(monkeypatch):
    """The host wrapper cuts a read-out into C calls (vocabulary spans x row groups, so that Ctrl-C is seen
    between them); the spans' partial log-sum-exps combine to the same result, rows independent of the batch."""
    h, w = _inputs(13, 1000, 32, seed=6, scale=3.0)
    whole = logsumexp_c(h, w)
    monkeypatch.setattr(cpu_readout, "VOCAB_SPAN", 256)
    monkeypatch.setattr(cpu_readout, "CALL_MACS", 256 * 32 * 4)  # 4 rows per call
    cut = logsumexp_c(h, w)
    assert (cut.double() - _truth(h, w)).abs().max().item() <= ATOL
    assert (cut - whole).abs().max().item() <= ATOL
    for r in (0, 5, 12):
        assert torch.equal(logsumexp_c(h[r:r + 1], w), cut[r:r + 1])


@needs_c
@pytest.mark.parametrize("setting,impl", [("1", "C"), ("0", "torch")])
def test_environment_forces_the_c_kernel_or_the_reference(setting, impl, monkeypatch):
    from logitjudge_kernels import dispatch

    monkeypatch.setenv("LOGITJUDGE_CPU_KERNELS", setting)
    h, w = _inputs(8, 500, 16, seed=5)
    ids = torch.tensor([3, 7])
    with dispatch.recording() as rec:
        out = label_logprobs(h, w, ids)
    assert rec.ran("readout") == {impl}
    want = logsumexp_c(h, w) if impl == "C" else label_logprobs_ref(h, w, ids).logsumexp
    assert torch.equal(out.logsumexp, want)


@needs_c
def test_auto_runs_one_of_the_measured_candidates(tmp_path, monkeypatch):
    from logitjudge_kernels import dispatch

    monkeypatch.setenv("LOGITJUDGE_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setenv("LOGITJUDGE_CPU_KERNELS", "auto")
    h, w = _inputs(16, 3000, 64, seed=7)
    ids = torch.tensor([1, 2])
    with dispatch.recording() as rec:
        out = label_logprobs(h, w, ids)
    (impl,) = rec.ran("readout")
    choice = next(iter(rec.as_meta()["readout"]["choices"].values()))
    assert choice["choice"] == impl and set(choice["rates"]) == {"C", "torch"}
    want = logsumexp_c(h, w) if impl == "C" else label_logprobs_ref(h, w, ids).logsumexp
    assert torch.equal(out.logsumexp, want)
    torch.testing.assert_close(out.label_logprobs, label_logprobs_ref(h, w, ids).label_logprobs, atol=ATOL, rtol=0)


def test_refusals_and_fallbacks():
    h, w = _inputs(6, 50, 16)
    assert "fp32 CPU only" in c_readout_refusal(h.bfloat16(), w.bfloat16())
    assert "soft-capping" in c_readout_refusal(h, w, softcap=30.0)
    with pytest.raises(ValueError, match=r"logsumexp_c cannot run: .*fp32 CPU only.*backend='ref'"):
        logsumexp_c(h.bfloat16(), w.bfloat16())
    ids = torch.tensor([1, 2])
    with pytest.raises(ValueError, match=r"backend='cpu' cannot run: no soft-capping"):
        label_logprobs(h, w, ids, softcap=5.0, backend="cpu")
    capped = label_logprobs(h, w, ids, softcap=5.0)  # auto: soft-capping goes to the reference
    assert torch.equal(capped.logsumexp, label_logprobs_ref(h, w, ids, softcap=5.0).logsumexp)
