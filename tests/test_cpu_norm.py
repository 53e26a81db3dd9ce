"""The fused C row kernels (logitjudge_kernels/cpu_norm.c) against their PyTorch references, and their fallbacks.

The parity tests run the native build and, on x86, the ``-march=x86-64-v3`` (AVX2) and ``x86-64-v2`` builds."""

from __future__ import annotations

import logitjudge_kernels._cbuild as cb
import logitjudge_kernels.cpu_norm as cn
import pytest
import torch
from conftest import build_target_fixture

target = build_target_fixture(cn._library)

# fp32: the C kernels add the sum of squares in another order than torch (vectorised partial sums)
RTOL, ATOL = 1e-5, 1e-5


@pytest.fixture
def fresh_library(monkeypatch, tmp_path):
    """A kernel library built (or refused) anew, into a private cache; the shared one is restored after."""
    monkeypatch.setenv("LOGITJUDGE_KERNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(cb.DISABLE_ENV, raising=False)  # these tests build; one sets it again itself
    cb.load.cache_clear()
    yield tmp_path
    cb.load.cache_clear()


def _needs_c():
    if cn.cpu_kernels_status() is not None:
        pytest.skip(f"C kernels unavailable here: {cn.cpu_kernels_status()}")


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("rows,d", [(1, 8), (7, 640), (300, 33), (0, 16)])
def test_rms_norm_matches_reference(rows, d, target):
    _needs_c()
    g = torch.Generator().manual_seed(rows + d)
    x = torch.randn(rows, d, generator=g) * 3
    w = 1 + 0.1 * torch.randn(d, generator=g)
    out = cn.rms_norm_c(x, w, 1e-6, target=target)
    assert out.shape == x.shape and out.dtype == torch.float32
    _close(out, cn.rms_norm_ref(x, w, 1e-6))


def test_rms_norm_strided_rows_and_heads(target):
    """Rows at a stride (a column slice of a wider matrix) and a (rows, heads, D) input are read in place."""
    _needs_c()
    g = torch.Generator().manual_seed(3)
    wide = torch.randn(5, 7, 96, generator=g)
    w = 1 + 0.1 * torch.randn(32, generator=g)
    x = wide[:, :, 32:64]  # (5, 7, 32), rows 96 floats apart
    _close(cn.rms_norm_c(x, w, 1e-6, target=target), cn.rms_norm_ref(x, w, 1e-6))
    heads = wide.view(5, 21, 32)
    _close(cn.rms_norm_c(heads, w, 1e-6, target=target), cn.rms_norm_ref(heads, w, 1e-6))
    cols = wide.transpose(0, 1)[..., :32]
    _close(cn.rms_norm_c(cols, w, 1e-6, target=target), cn.rms_norm_ref(cols, w, 1e-6))


def test_residual_rms_norm_matches_reference(target):
    _needs_c()
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(2, 9, 640, generator=g), 5 * torch.randn(2, 9, 640, generator=g)
    w_y, w_next = 1 + 0.2 * torch.randn(640, generator=g), 1 + 0.2 * torch.randn(640, generator=g)
    got = cn.residual_rms_norm_c(x, y, w_y, w_next, 1e-6, target=target)
    want = cn.residual_rms_norm_ref(x, y, w_y, w_next, 1e-6)
    assert got[0].shape == got[1].shape == x.shape
    _close(got[0], want[0])
    _close(got[1], want[1])
    assert not torch.equal(got[0], x)  # a new residual stream, the input untouched


def test_add_rms_norm_matches_reference(target):
    """Llama's residual step: the add, then the next block's norm (w * x with the model's own weight)."""
    _needs_c()
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(2, 9, 896, generator=g), 5 * torch.randn(2, 9, 896, generator=g)
    w_next = 0.2 * torch.randn(896, generator=g)
    got = cn.add_rms_norm_c(x, y, w_next, 1e-6, target=target)
    want = cn.add_rms_norm_ref(x, y, w_next, 1e-6)
    assert torch.equal(got[0], x + y)  # the add is exact
    _close(got[1], want[1])


def test_add_rms_norm_reference_is_llamas_math():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    g = torch.Generator().manual_seed(6)
    norm = LlamaRMSNorm(64, eps=1e-6)
    with torch.no_grad():
        norm.weight.normal_(generator=g)
    x, y = torch.randn(3, 64, generator=g), torch.randn(3, 64, generator=g)
    _, h = cn.add_rms_norm_ref(x, y, norm.weight.detach(), 1e-6)
    _close(h, norm(x + y).detach())


@pytest.mark.parametrize("heads,kv_heads,D", [(14, 2, 64), (4, 1, 256), (0, 1, 16), (3, 3, 96)])
def test_qk_rope_matches_reference_and_llamas_math(heads, kv_heads, D, target):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    _needs_c()
    g = torch.Generator().manual_seed(heads * 10 + D)
    B, S = 2, 5
    qkv = torch.randn(B, S, (heads + 2 * kv_heads) * D, generator=g) * 3
    ang = torch.randn(B, S, D // 2, generator=g)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    got = cn.qk_rope_c(qkv, cos, sin, heads=heads, kv_heads=kv_heads, target=target)
    want = cn.qk_rope_ref(qkv, cos, sin, heads=heads, kv_heads=kv_heads)
    for a, b, h in zip(got, want, (heads, kv_heads, kv_heads)):
        assert a.shape == (B, h, S, D) and a.is_contiguous()
        _close(a, b)
    assert torch.equal(got[2], want[2])
    parts = qkv.view(B, S, heads + 2 * kv_heads, D).transpose(1, 2)
    q_hf, k_hf = apply_rotary_pos_emb(parts[:, :heads], parts[:, heads:heads + kv_heads], cos, sin)
    _close(want[0], q_hf)
    _close(want[1], k_hf)


@pytest.mark.parametrize("heads,kv_heads,D", [(4, 1, 256), (8, 2, 64), (0, 1, 16), (2, 2, 1024)])
def test_qk_norm_rope_matches_reference(heads, kv_heads, D, target):
    _needs_c()
    g = torch.Generator().manual_seed(heads * 100 + D)
    B, S = 3, 5
    qkv = torch.randn(B, S, (heads + 2 * kv_heads) * D, generator=g) * 2
    ang = torch.randn(B, S, D // 2, generator=g)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    q_w, k_w = 1 + 0.1 * torch.randn(D, generator=g), 1 + 0.1 * torch.randn(D, generator=g)
    got = cn.qk_norm_rope_c(qkv, q_w, k_w, cos, sin, heads=heads, kv_heads=kv_heads, eps=1e-6,
                            target=target)
    want = cn.qk_norm_rope_ref(qkv, q_w, k_w, cos, sin, heads=heads, kv_heads=kv_heads, eps=1e-6)
    for a, b, h in zip(got, want, (heads, kv_heads, kv_heads)):
        assert a.shape == (B, h, S, D) and a.is_contiguous()
        _close(a, b)
    assert torch.equal(got[2], want[2])  # v is copied, not computed


def test_qk_norm_rope_reference_is_the_model_math():
    """The reference is Gemma-3's own q/k path: transformers' rotate_half convention, norm before RoPE."""
    from transformers.models.gemma3.modeling_gemma3 import apply_rotary_pos_emb

    g = torch.Generator().manual_seed(9)
    qkv = torch.randn(2, 4, 3 * 16, generator=g)
    ang = torch.randn(2, 4, 8, generator=g)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    w = torch.ones(16)
    q, k, _ = cn.qk_norm_rope_ref(qkv, w, w, cos, sin, heads=1, kv_heads=1, eps=1e-6)
    parts = qkv.view(2, 4, 3, 16).transpose(1, 2)  # (B, 3, S, D)
    normed = cn.rms_norm_ref(parts, w, 1e-6)
    q_hf, k_hf = apply_rotary_pos_emb(normed[:, :1], normed[:, 1:2], cos, sin)
    _close(q, q_hf)
    _close(k, k_hf)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_runs_the_fp32_kernel_and_rounds_once(dtype, target):
    """bf16/fp16: the fp32 kernel on upcast copies, results in the input dtype; within 2 units in the last
    place (at 1.0) of the reference, which rounds after every op."""
    _needs_c()
    ulp = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}[dtype]
    g = torch.Generator().manual_seed(8)
    x, y = torch.randn(6, 64, generator=g).to(dtype), torch.randn(6, 64, generator=g).to(dtype)
    w, w2 = 1 + 0.1 * torch.randn(64, generator=g), 1 + 0.1 * torch.randn(64, generator=g)
    out = cn.rms_norm_c(x, w, 1e-6, target=target)
    assert out.dtype == dtype
    assert torch.equal(out, cn.rms_norm_c(x.float(), w, 1e-6, target=target).to(dtype))
    got = cn.residual_rms_norm_c(x, y, w, w2, 1e-6, target=target)
    for a, b in zip(got, cn.residual_rms_norm_ref(x, y, w, w2, 1e-6)):
        assert a.dtype == dtype
        torch.testing.assert_close(a.float(), b.float(), rtol=2 * ulp, atol=2 * ulp)
    qkv = torch.randn(2, 3, 3 * 32, generator=g).to(dtype)
    ang = torch.randn(2, 3, 16, generator=g)
    cos, sin = torch.cat([ang.cos()] * 2, -1).to(dtype), torch.cat([ang.sin()] * 2, -1).to(dtype)
    got = cn.qk_norm_rope_c(qkv, w[:32], w2[:32], cos, sin, heads=1, kv_heads=1, eps=1e-6, target=target)
    want = cn.qk_norm_rope_ref(qkv, w[:32], w2[:32], cos, sin, heads=1, kv_heads=1, eps=1e-6)
    for a, b in zip(got, want):
        assert a.dtype == dtype
        torch.testing.assert_close(a.float(), b.float(), rtol=2 * ulp, atol=2 * ulp)


@pytest.mark.parametrize("setting", ["auto", "1", "0"])
def test_dispatchers_run_a_candidate_and_record_it(setting, monkeypatch, tmp_path):
    """Each dispatcher runs the C kernel or the reference (auto: whichever measured faster; 1: C; 0: the
    reference), equal to that candidate's own output, and records which."""
    from logitjudge_kernels import dispatch

    _needs_c()
    monkeypatch.setenv("LOGITJUDGE_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setenv(cb.DISABLE_ENV, setting)
    g = torch.Generator().manual_seed(12)
    x, y = torch.randn(2, 9, 64, generator=g), torch.randn(2, 9, 64, generator=g)
    w, w2 = 1 + 0.1 * torch.randn(64, generator=g), 1 + 0.1 * torch.randn(64, generator=g)
    qkv = torch.randn(2, 9, 4 * 16, generator=g)
    ang = torch.randn(2, 9, 8, generator=g)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    calls = {"rms_norm": (cn.rms_norm, cn.rms_norm_c, cn.rms_norm_ref, (x, w, 1e-6), {}),
             "residual_rms_norm": (cn.residual_rms_norm, cn.residual_rms_norm_c, cn.residual_rms_norm_ref,
                                   (x, y, w, w2, 1e-6), {}),
             "qk_norm_rope": (cn.qk_norm_rope, cn.qk_norm_rope_c, cn.qk_norm_rope_ref, (qkv, w[:16], w2[:16], cos, sin),
                              dict(heads=2, kv_heads=1, eps=1e-6)),
             "add_rms_norm": (cn.add_rms_norm, cn.add_rms_norm_c, cn.add_rms_norm_ref, (x, y, w2, 1e-6), {}),
             "qk_rope": (cn.qk_rope, cn.qk_rope_c, cn.qk_rope_ref, (qkv, cos, sin), dict(heads=2, kv_heads=1))}
    for name, (fn, c, ref, args, kw) in calls.items():
        with dispatch.recording() as rec:
            got = fn(*args, **kw)
        (impl,) = rec.ran(name)
        assert impl == {"1": "C", "0": "torch"}.get(setting, impl)
        want = (c if impl == "C" else ref)(*args, **kw)
        for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert torch.equal(a, b)


@pytest.mark.parametrize("act", cn.ACTIVATIONS)
@pytest.mark.parametrize("rows,inter", [(1, 8), (5, 2_048), (37, 4_864), (3, 13), (0, 16)])
def test_act_mul_matches_the_float64_truth(act, rows, inter, target):
    """GELU-tanh and SiLU times up, over rows of a fused gate/up output (strided halves, a tail past the last
    vector): within a few fp32 ulps of the float64 truth, as close as torch's own, also far out on both sides."""
    _needs_c()
    g = torch.Generator().manual_seed(rows + inter)
    gu = torch.randn(rows, 2 * inter, generator=g) * 4
    if rows:
        gu[0, :3] = torch.tensor([-90.0, 60.0, -1e-30])  # exp(-|z|) underflows; a tiny gate
    truth = cn.act_mul_ref(gu.double(), act)
    out = cn.act_mul_c(gu, act, target=target)
    assert out.shape == (rows, inter) and out.dtype == torch.float32
    scale = truth.abs().clamp_min(1.0)
    ours = ((out.double() - truth).abs() / scale).max() if rows else 0.0
    torchs = ((cn.act_mul_ref(gu, act).double() - truth).abs() / scale).max() if rows else 0.0
    assert ours <= max(4 * torchs, 5e-7), (ours, torchs)


def test_act_mul_same_bits_at_any_thread_count():
    _needs_c()
    gu = torch.randn(333, 2 * 2_048, generator=torch.Generator().manual_seed(9)) * 3  # past PARALLEL_MIN
    before = torch.get_num_threads()
    outs = []
    try:
        for threads in (1, 2, 3, 4):
            torch.set_num_threads(threads)
            outs.append(cn.act_mul_c(gu, "gelu_tanh"))
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(o, outs[0]) for o in outs[1:])


def test_non_cpu_and_other_dtypes_take_the_reference():
    x, w = torch.randn(4, 64).double(), torch.ones(64)
    assert torch.equal(cn.rms_norm(x, w, 1e-6), cn.rms_norm_ref(x, w, 1e-6))


def test_shape_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"norm weight has shape \(3,\), expected \(4,\)"):
        cn.rms_norm(torch.ones(2, 4), torch.ones(3), 1e-6)
    with pytest.raises(ValueError, match="differ in shape"):
        cn.residual_rms_norm(torch.ones(2, 4), torch.ones(3, 4), torch.ones(4), torch.ones(4), 1e-6)
    with pytest.raises(ValueError, match=r"qkv width 40 is not \(heads 2 \+ 2 x kv_heads 1\) x head_dim 8"):
        cn.qk_norm_rope(torch.ones(1, 2, 40), torch.ones(8), torch.ones(8), torch.ones(1, 2, 8), torch.ones(1, 2, 8),
                        heads=2, kv_heads=1, eps=1e-6)
    with pytest.raises(ValueError, match="activation 'relu' is not one of"):
        cn.act_mul(torch.ones(2, 8), "relu")
    with pytest.raises(ValueError, match="even width, not 7"):
        cn.act_mul(torch.ones(2, 7), "silu")
    with pytest.raises(ValueError, match="cos, sin"):
        cn.qk_norm_rope(torch.ones(1, 2, 32), torch.ones(8), torch.ones(8), torch.ones(1, 3, 8), torch.ones(1, 3, 8),
                        heads=2, kv_heads=1, eps=1e-6)


def test_disabled_by_environment_uses_references(fresh_library, monkeypatch):
    monkeypatch.setenv("LOGITJUDGE_CPU_KERNELS", "0")
    cb.load.cache_clear()
    assert cn.cpu_kernels_status() == "disabled by LOGITJUDGE_CPU_KERNELS=0"
    x, w = torch.randn(3, 16), torch.ones(16)
    assert torch.equal(cn.rms_norm(x, w, 1e-6), cn.rms_norm_ref(x, w, 1e-6))


def test_no_compiler_is_reported(fresh_library, monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(cb.shutil, "which", lambda name: None)
    assert "no C compiler found" in cn.cpu_kernels_status()


def test_build_failure_is_reported_not_raised(fresh_library, monkeypatch):
    if cb.compiler() is None:
        pytest.skip("no C compiler here")
    broken = fresh_library / "broken.c"
    broken.write_text("this is not C;\n")
    monkeypatch.setattr(cn, "SOURCE", broken)
    status = cn.cpu_kernels_status()
    assert status.startswith(f"{cb.compiler()} failed to build broken.c")
    x, w = torch.randn(3, 16), torch.ones(16)
    assert torch.equal(cn.rms_norm(x, w, 1e-6), cn.rms_norm_ref(x, w, 1e-6))  # the reference, not an error


def test_build_is_cached_by_source(fresh_library):
    if cb.compiler() is None:
        pytest.skip("no C compiler here")
    assert cn.cpu_kernels_status() is None
    built = list((fresh_library / "cache").glob("cpu_norm-*.so"))
    assert len(built) == 1
    stamp = built[0].stat().st_mtime_ns
    cb.load.cache_clear()
    assert cn.cpu_kernels_status() is None  # loaded from the cache, not rebuilt
    assert built[0].stat().st_mtime_ns == stamp
    assert list((fresh_library / "cache").glob("*")) == built  # no temporary files left behind
