"""Tests of logitjudge_kernels: shared-prefix attention and the fused label read-out.

Three layers:
* PyTorch references vs plain ground truths (always run, CPU).
* Triton kernels on CPU through the Triton interpreter. ``TRITON_INTERPRET=1`` only takes effect if set
  before triton is imported, so ``test_triton_kernels_on_cpu_interpreter`` re-runs this module's
  ``test_interp_*`` tests in a subprocess with the variable set (they skip in the parent process).
* ``@pytest.mark.gpu`` tests on bigger shapes, skipped without CUDA.

Tolerance rule for fp16/bf16: max abs error vs an fp32 ground truth (computed from the same rounded
inputs) must be at most ``PLAIN_ERR_FACTOR`` x the error of PyTorch's own plain computation in that
dtype (Hugging Face "eager" attention / bf16 logits + fp32 log-softmax) plus ``LOWP_ATOL[dtype]``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from logitjudge_kernels import (
    HAS_TRITON,
    LabelReadout,
    attention_ref,
    interpreter_active,
    label_logprobs,
    label_logprobs_plain,
    label_logprobs_ref,
    merge_attention_states,
    shared_prefix_attention,
    shared_prefix_attention_cpu,
    shared_prefix_attention_ref,
)
from logitjudge_kernels.cpu_readout import c_readout_refusal, logsumexp_c

FP32_ATOL = 1e-5  # attention outputs and label log-probs in fp32
GPU_FP32_ATOL = 5e-5  # fp32 on the big GPU shapes: reductions over thousands of keys / 262k vocab entries
PLAIN_ERR_FACTOR = 2.0
LOWP_ATOL = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}  # one unit in the last place at 1.0
READOUT_LOWP_ATOL = 1e-4  # label log-probs from fp16/bf16 inputs (the kernels accumulate in fp32)

IN_INTERPRETER = interpreter_active()
CUDA = torch.cuda.is_available() and HAS_TRITON
interp_only = pytest.mark.skipif(
    not IN_INTERPRETER,
    reason="runs in the TRITON_INTERPRET=1 subprocess of test_triton_kernels_on_cpu_interpreter",
)
gpu = pytest.mark.skipif(not CUDA, reason="needs CUDA and triton")

HEADS = [(4, 1), (2, 2)]  # (Hq, Hkv): GQA as in Gemma-3-270M, and plain multi-head
WINDOWS = [None, 4, 9, 64]  # L + S = 20: windows smaller than S, than L + S, and larger


# ------------------------------------------------------------------------------------------------ helpers
def _attn_inputs(B, Hq, Hkv, S, L, D, dtype, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)

    def mk(*shape):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    return mk(B, Hq, S, D), mk(Hkv, L, D), mk(Hkv, L, D), mk(B, Hkv, S, D), mk(B, Hkv, S, D)


def _concat_kv(kp, vp, ks, vs):
    B = ks.shape[0]
    k = torch.cat([kp.unsqueeze(0).expand(B, -1, -1, -1), ks], dim=2)
    v = torch.cat([vp.unsqueeze(0).expand(B, -1, -1, -1), vs], dim=2)
    return k, v


def _plain_lowp_attention(q, k, v, *, scale, causal_offset, sliding_window, softcap):
    """Hugging Face eager attention in q's dtype: matmuls in dtype, softmax in fp32 cast back."""
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    qpos = torch.arange(causal_offset, causal_offset + q.shape[2])[:, None]
    diff = qpos - torch.arange(k.shape[2])[None, :]
    vis = (diff >= 0) if sliding_window is None else (diff >= 0) & (diff < sliding_window)
    p = torch.softmax(s.masked_fill(~vis.to(q.device), float("-inf")), dim=-1, dtype=torch.float32)
    return torch.matmul(p.to(q.dtype), v)


def _assert_attention_close(out, inputs, atol32=FP32_ATOL, **kw):
    q, kp, vp, ks, vs = inputs
    k, v = _concat_kv(kp, vp, ks, vs)
    L = kp.shape[1]
    assert out.shape == q.shape and out.dtype == q.dtype
    truth = attention_ref(q.float(), k.float(), v.float(), causal_offset=L, **kw)
    err = (out.float() - truth).abs().max().item()
    if q.dtype == torch.float32:
        assert err <= atol32, f"fp32 max abs error {err:.3g} > {atol32}"
        return
    plain = _plain_lowp_attention(q, k, v, causal_offset=L, **kw)
    plain_err = (plain.float() - truth).abs().max().item()
    bound = PLAIN_ERR_FACTOR * plain_err + LOWP_ATOL[q.dtype]
    assert err <= bound, f"{q.dtype}: error {err:.3g} > {PLAIN_ERR_FACTOR} x plain {plain_err:.3g} + atol"


def _readout_inputs(R, V, d, M, dtype, device="cpu", seed=0, shared_ids=False):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(R, d, generator=g).to(device=device, dtype=dtype)
    weight = (torch.randn(V, d, generator=g) * 0.5).to(device=device, dtype=dtype)
    shape = (M,) if shared_ids else (R, M)
    return hidden, weight, torch.randint(0, V, shape, generator=g).to(device)


def _assert_readout_close(res, hidden, weight, label_ids, softcap, atol32=FP32_ATOL):
    assert isinstance(res, LabelReadout)
    R = hidden.shape[0]
    ids = label_ids if label_ids.dim() == 2 else label_ids.expand(R, -1)
    logits = hidden.float() @ weight.float().T
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    truth = torch.log_softmax(logits, dim=-1).gather(1, ids)
    assert res.logsumexp.shape == (R,) and res.logsumexp.dtype == torch.float32
    assert res.label_logits.shape == ids.shape and res.label_logits.dtype == torch.float32
    err = (res.label_logprobs - truth).abs().max().item()
    if hidden.dtype == torch.float32:
        assert err <= atol32, f"fp32 label log-prob error {err:.3g} > {atol32}"
        return
    plain_logits = (hidden @ weight.T).float()  # logits in the model dtype, then fp32 log-softmax
    if softcap is not None:
        plain_logits = softcap * torch.tanh(plain_logits / softcap)
    plain_err = (torch.log_softmax(plain_logits, dim=-1).gather(1, ids) - truth).abs().max().item()
    bound = PLAIN_ERR_FACTOR * plain_err + READOUT_LOWP_ATOL
    assert err <= bound, f"{hidden.dtype}: error {err:.3g} > {PLAIN_ERR_FACTOR} x plain {plain_err:.3g} + tol"


def _attention_cases(dtypes, windows=WINDOWS):
    return [
        pytest.param(dtype, L, D, Hq, Hkv, w, cap, id=f"{str(dtype)[6:]}-L{L}-D{D}-h{Hq}/{Hkv}-w{w}-cap{cap}")
        for dtype in dtypes for L in (13, 0) for D in (64, 256) for Hq, Hkv in HEADS
        for w in windows for cap in (None, 20.0)
    ]


# ------------------------------------------------------------------------------------ attention reference
@pytest.mark.parametrize("dtype,L,D,Hq,Hkv,window,softcap", _attention_cases([torch.float32]))
def test_attention_ref_fp32(dtype, L, D, Hq, Hkv, window, softcap):
    inputs = _attn_inputs(3, Hq, Hkv, 7, L, D, dtype)
    out = shared_prefix_attention_ref(*inputs, scale=D**-0.5, sliding_window=window, softcap=softcap)
    _assert_attention_close(out, inputs, scale=D**-0.5, sliding_window=window, softcap=softcap)


@pytest.mark.parametrize("dtype,L,D,Hq,Hkv,window,softcap",
                         _attention_cases([torch.float16, torch.bfloat16], windows=[None, 4, 64]))
def test_attention_ref_low_precision(dtype, L, D, Hq, Hkv, window, softcap):
    inputs = _attn_inputs(3, Hq, Hkv, 7, L, D, dtype, seed=1)
    out = shared_prefix_attention_ref(*inputs, scale=D**-0.5, sliding_window=window, softcap=softcap)
    _assert_attention_close(out, inputs, scale=D**-0.5, sliding_window=window, softcap=softcap)


@pytest.fixture(params=["c", "aten"])
def cpu_attention_path(request, monkeypatch):
    """The CPU path through the C kernel (fp32, where built) and through ATen's flash kernel (forced)."""
    import logitjudge_kernels.prefix_attention as pa

    if request.param == "aten":
        monkeypatch.setattr(pa, "c_attention_refusal", lambda q, softcap=None: "forced off by the test")
    return request.param


@pytest.mark.parametrize("dtype,L,D,Hq,Hkv,window,softcap",
                         [c for c in _attention_cases([torch.float32, torch.bfloat16]) if c.values[-1] is None])
def test_attention_cpu_fused(dtype, L, D, Hq, Hkv, window, softcap, cpu_attention_path):
    """The CPU paths; window 4 < S leaves queries that see no prefix key (ATen: their LSE must be -inf)."""
    inputs = _attn_inputs(3, Hq, Hkv, 7, L, D, dtype, seed=5)
    out = shared_prefix_attention_cpu(*inputs, scale=D**-0.5, sliding_window=window)
    _assert_attention_close(out, inputs, scale=D**-0.5, sliding_window=window, softcap=None)
    assert torch.equal(shared_prefix_attention(*inputs, scale=D**-0.5, sliding_window=window, backend="cpu"), out)


def _sink_truth(inputs, scale, window, sinks):
    """GPT-OSS attention as transformers defines it (its eager_attention_forward: the sink logit appended to each
    row's masked scores, softmax, sink column dropped), on [prefix ; suffix] keys, in fp64."""
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    q, kp, vp, ks, vs = (t.double() for t in inputs)
    k, v = _concat_kv(kp, vp, ks, vs)
    L, S = kp.shape[1], q.shape[2]
    diff = torch.arange(L, L + S)[:, None] - torch.arange(L + S)[None, :]
    vis = (diff >= 0) if window is None else (diff >= 0) & (diff < window)
    mask = torch.zeros(vis.shape, dtype=torch.float64).masked_fill(~vis, float("-inf"))[None, None].to(q.device)
    module = torch.nn.Module()
    module.sinks, module.num_key_value_groups = sinks.double().to(q.device), q.shape[1] // k.shape[1]
    out, _ = eager_attention_forward(module, q, k, v, mask, scaling=scale)
    return out.transpose(1, 2)  # (B, Hq, S, D)


SINK_PATHS = ["ref", "c", "aten"]


@pytest.mark.parametrize("path", SINK_PATHS)
@pytest.mark.parametrize("L,window", [(13, None), (13, 4), (0, None), (40, 9)])
def test_attention_sinks_enter_the_denominator_once(path, L, window, monkeypatch):
    """Sinks (GPT-OSS): the shared-prefix paths equal transformers' definition on the concatenated keys; the
    sink is counted once across the prefix and suffix parts of the merge (counting it per part would not be)."""
    import logitjudge_kernels.prefix_attention as pa

    inputs = _attn_inputs(3, 4, 2, 7, L, 32, torch.float32, seed=11)
    sinks = torch.tensor([2.0, -1.0, 0.5, 4.0])
    truth = _sink_truth(inputs, 32**-0.5, window, sinks)
    if path == "ref":
        out = shared_prefix_attention_ref(*inputs, scale=32**-0.5, sliding_window=window, sinks=sinks)
    else:
        if path == "aten":
            monkeypatch.setattr(pa, "c_attention_refusal", lambda q, softcap=None: "forced off by the test")
        out = shared_prefix_attention_cpu(*inputs, scale=32**-0.5, sliding_window=window, sinks=sinks)
    assert (out.double() - truth).abs().max().item() <= FP32_ATOL
    no_sink = attention_ref(inputs[0], *_concat_kv(*inputs[1:]), scale=32**-0.5, causal_offset=L,
                            sliding_window=window)
    assert (no_sink.double() - truth).abs().max().item() > 1e-2  # the sinks matter at these values


def test_attention_cpu_fused_bands_long_suffix(monkeypatch, cpu_attention_path):
    """A window shorter than the suffix (ATen: query blocks of 3 rows, each against the keys its window
    reaches; C: blocks of 6 query rows, each against the keys its rows can see)."""
    import logitjudge_kernels.prefix_attention as pa

    monkeypatch.setattr(pa, "SUFFIX_BAND_ROWS", 3)
    for L, window in ((0, 4), (5, 4), (6, 9)):
        inputs = _attn_inputs(2, 4, 2, 11, L, 32, torch.float32, seed=7)
        out = shared_prefix_attention_cpu(*inputs, scale=0.2, sliding_window=window)
        _assert_attention_close(out, inputs, scale=0.2, sliding_window=window, softcap=None)


def test_attention_ref_chunks_long_prefix(monkeypatch):
    import logitjudge_kernels.prefix_attention as pa

    monkeypatch.setattr(pa, "_REF_MAX_SCORE_ELEMS", 200)  # forces prefix chunks of 2 keys
    inputs = _attn_inputs(2, 4, 1, 5, 37, 64, torch.float32, seed=2)
    for window in (None, 11):
        out = shared_prefix_attention_ref(*inputs, scale=0.125, sliding_window=window, softcap=None)
        _assert_attention_close(out, inputs, scale=0.125, sliding_window=window, softcap=None)


def test_sliding_window_matches_transformers_convention():
    masking_utils = pytest.importorskip("transformers.masking_utils")
    L, S, w = 10, 6, 5
    inputs = _attn_inputs(2, 4, 1, S, L, 32, torch.float32, seed=12)
    k, v = _concat_kv(*inputs[1:])
    mask_fn = masking_utils.sliding_window_causal_mask_function(w)
    zero = torch.tensor(0)
    mask = mask_fn(zero, zero, torch.arange(L, L + S)[:, None], torch.arange(L + S)[None, :])
    assert mask.shape == (S, L + S) and not mask.all() and mask.any(dim=1).all()
    expected = torch.nn.functional.scaled_dot_product_attention(
        inputs[0], k.repeat_interleave(4, dim=1), v.repeat_interleave(4, dim=1), attn_mask=mask, scale=0.2)
    out = shared_prefix_attention(*inputs, scale=0.2, sliding_window=w, backend="ref")
    assert (out - expected).abs().max().item() <= FP32_ATOL


def test_dispatch_auto_on_cpu_uses_reference():
    inputs = _attn_inputs(2, 4, 1, 5, 9, 64, torch.float32, seed=3)
    kw = dict(scale=0.125, sliding_window=6, softcap=30.0)
    if not IN_INTERPRETER:
        assert torch.equal(shared_prefix_attention(*inputs, **kw), shared_prefix_attention_ref(*inputs, **kw))
    ref = shared_prefix_attention_ref(*inputs, **kw)
    assert torch.equal(shared_prefix_attention(*inputs, **kw, backend="ref"), ref)


def test_merge_attention_states_matches_joint_softmax():
    g = torch.Generator().manual_seed(4)
    s1, s2 = torch.randn(3, 5, generator=g), torch.randn(3, 4, generator=g)
    s2[0] = float("-inf")  # a row where the second part sees no key
    v1, v2 = torch.randn(5, 8, generator=g), torch.randn(4, 8, generator=g)
    lse1, lse2 = torch.logsumexp(s1, -1), torch.logsumexp(s2, -1)
    o1 = torch.softmax(s1, -1) @ v1
    o2 = torch.softmax(s2, -1).nan_to_num(0.0) @ v2
    o, lse = merge_attention_states(o1, lse1, o2, lse2)
    joint = torch.cat([s1, s2], -1)
    assert torch.allclose(lse, torch.logsumexp(joint, -1), atol=1e-6)
    assert torch.allclose(o, torch.softmax(joint, -1) @ torch.cat([v1, v2]), atol=1e-6)
    empty = torch.full((3,), float("-inf"))
    o, lse = merge_attention_states(torch.zeros(3, 8), empty, torch.zeros(3, 8), empty)
    assert torch.isneginf(lse).all() and torch.equal(o, torch.zeros(3, 8))


# ----------------------------------------------------------------------------------- read-out reference
@pytest.mark.parametrize("chunk", [1000, 300, 64, 8192])
@pytest.mark.parametrize("softcap", [None, 30.0])
@pytest.mark.parametrize("shared_ids", [False, True])
def test_readout_ref_fp32(chunk, softcap, shared_ids):
    hidden, weight, ids = _readout_inputs(5, 1000, 64, 3, torch.float32, shared_ids=shared_ids)
    res = label_logprobs_ref(hidden, weight, ids, softcap=softcap, chunk=chunk)
    _assert_readout_close(res, hidden, weight, ids, softcap)
    plain = label_logprobs_plain(hidden, weight, ids, softcap=softcap)
    _assert_readout_close(plain, hidden, weight, ids, softcap)
    if not IN_INTERPRETER:  # auto on CPU: the reference or the C kernel (fp32, no soft-cap), as measured
        from logitjudge_kernels import dispatch

        with dispatch.recording() as rec:
            auto = label_logprobs(hidden, weight, ids, softcap=softcap, chunk=chunk)
        (impl,) = rec.ran("readout")
        if impl == "C":
            assert softcap is None and c_readout_refusal(hidden, weight) is None
            assert torch.equal(auto.logsumexp, logsumexp_c(hidden, weight))
            _assert_readout_close(auto, hidden, weight, ids, softcap)
        else:
            assert impl == "torch" and torch.equal(auto.logsumexp, res.logsumexp)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("softcap", [None, 30.0])
def test_readout_ref_low_precision(dtype, softcap):
    hidden, weight, ids = _readout_inputs(6, 1000, 64, 4, dtype, seed=5)
    res = label_logprobs(hidden, weight, ids, softcap=softcap, chunk=333, backend="ref")
    _assert_readout_close(res, hidden, weight, ids, softcap)


# ---------------------------------------------------------------------------------------- input checks
def _good_attn():
    return list(_attn_inputs(2, 4, 2, 3, 5, 16, torch.float32))


@pytest.mark.parametrize("fn", [shared_prefix_attention, shared_prefix_attention_ref])
@pytest.mark.parametrize("mutate,message", [
    (lambda a: a.__setitem__(0, a[0][0]), "q must have rank 4"),
    (lambda a: a.__setitem__(1, a[1][None]), "k_prefix must have rank 3"),
    (lambda a: a.__setitem__(3, a[3][0]), "k_suffix must have rank 4"),
    (lambda a: a.__setitem__(0, torch.zeros(2, 3, 3, 16)), "multiple of KV heads"),
    (lambda a: a.__setitem__(0, torch.zeros(2, 4, 3, 32)), "head dim mismatch"),
    (lambda a: a.__setitem__(2, torch.zeros(2, 6, 16)), "v_prefix shape"),
    (lambda a: a.__setitem__(slice(3, 5), [torch.zeros(2, 2, 4, 16)] * 2), "k_suffix shape"),
    (lambda a: a.__setitem__(4, a[4].double()), "dtype"),
    (lambda a: a.__setitem__(1, a[1].to("meta")), "device"),
    (lambda a: [a.__setitem__(i, t.long()) for i, t in enumerate(list(a))], "supported"),
])
def test_attention_input_validation(fn, mutate, message):
    args = _good_attn()
    mutate(args)
    with pytest.raises(ValueError, match=message):
        fn(*args, scale=0.25)


@pytest.mark.parametrize("kw,message", [
    (dict(scale=-1.0), "scale"), (dict(scale=float("nan")), "scale"),
    (dict(scale=0.25, sliding_window=0), "sliding_window"),
    (dict(scale=0.25, sliding_window=2.5), "sliding_window"),
    (dict(scale=0.25, softcap=-3.0), "softcap"), (dict(scale=0.25, backend="cuda"), "backend"),
    (dict(scale=0.25, softcap=20.0, backend="cpu"), "no soft-cap; use backend='ref'"),
])
def test_attention_option_validation(kw, message):
    with pytest.raises(ValueError, match=message):
        shared_prefix_attention(*_good_attn(), **kw)


@pytest.mark.skipif(IN_INTERPRETER or CUDA, reason="the Triton backend is usable here")
def test_triton_backend_on_cpu_without_interpreter_is_refused():
    with pytest.raises(RuntimeError, match="triton"):
        shared_prefix_attention(*_good_attn(), scale=0.25, backend="triton")
    with pytest.raises(RuntimeError, match="triton"):
        label_logprobs(*_readout_inputs(2, 50, 16, 2, torch.float32), backend="triton")


@pytest.mark.parametrize("fn", [label_logprobs, label_logprobs_ref, label_logprobs_plain])
@pytest.mark.parametrize("mutate,message", [
    (lambda a: a.__setitem__(0, a[0][None]), "hidden must have rank 2"),
    (lambda a: a.__setitem__(1, a[1][0]), "weight must have rank 2"),
    (lambda a: a.__setitem__(1, torch.zeros(50, 8)), "hidden size mismatch"),
    (lambda a: a.__setitem__(1, a[1].half()), "dtype"),
    (lambda a: a.__setitem__(1, a[1].to("meta")), "device"),
    (lambda a: a.__setitem__(2, a[2].float()), "integer token ids"),
    (lambda a: a.__setitem__(2, a[2] + 50), r"must lie in \[0, 50\)"),
    (lambda a: a.__setitem__(2, a[2][:1]), "must be \\(R, M\\)"),
    (lambda a: a.__setitem__(2, a[2][None]), "must be \\(R, M\\)"),
])
def test_readout_input_validation(fn, mutate, message):
    args = list(_readout_inputs(3, 50, 16, 2, torch.float32))
    mutate(args)
    with pytest.raises(ValueError, match=message):
        fn(*args)


@pytest.mark.parametrize("kw,message", [(dict(chunk=0), "chunk"), (dict(softcap=0.0), "softcap"),
                                        (dict(backend="fast"), "backend")])
def test_readout_option_validation(kw, message):
    with pytest.raises(ValueError, match=message):
        label_logprobs(*_readout_inputs(3, 50, 16, 2, torch.float32), **kw)


# ------------------------------------------------------------------------ Triton through the interpreter
@pytest.mark.skipif(IN_INTERPRETER or not HAS_TRITON, reason="already in the interpreter / triton missing")
def test_triton_kernels_on_cpu_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest",
           "-k", "test_interp_", __file__]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parents[1])
    tail = (proc.stdout[-6000:] + proc.stderr[-3000:])
    assert proc.returncode == 0, tail
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert passed and int(passed.group(1)) >= 20, tail
    assert "skipped" not in proc.stdout.splitlines()[-1], tail


def _interp_attention_cases():
    """Fewer cases than the reference tests (the interpreter is slow): both head layouts, windows and caps."""
    variants = {torch.float32: [(None, None), (4, 20.0), (64, None), (None, 20.0)],
                torch.float16: [(None, None), (9, 20.0)], torch.bfloat16: [(None, None), (9, 20.0)]}
    return [
        pytest.param(dtype, L, D, Hq, Hkv, w, cap, id=f"{str(dtype)[6:]}-L{L}-D{D}-h{Hq}/{Hkv}-w{w}-cap{cap}")
        for dtype, wc in variants.items() for L in (13, 0) for D, Hq, Hkv in ((256, 4, 1), (64, 2, 2))
        for w, cap in wc
    ]


@interp_only
@pytest.mark.parametrize("dtype,L,D,Hq,Hkv,window,softcap", _interp_attention_cases())
def test_interp_attention(dtype, L, D, Hq, Hkv, window, softcap):
    inputs = _attn_inputs(3, Hq, Hkv, 7, L, D, dtype, seed=6)
    kw = dict(scale=D**-0.5, sliding_window=window, softcap=softcap)
    out = shared_prefix_attention(*inputs, **kw, backend="triton")
    _assert_attention_close(out, inputs, scale=D**-0.5, sliding_window=window, softcap=softcap)


@interp_only
@pytest.mark.parametrize("L,window", [(13, None), (40, 9), (0, None)])
def test_interp_attention_sinks(L, window):
    inputs = _attn_inputs(3, 4, 2, 7, L, 32, torch.float32, seed=11)
    sinks = torch.tensor([2.0, -1.0, 0.5, 4.0])
    out = shared_prefix_attention(*inputs, scale=32**-0.5, sliding_window=window, sinks=sinks, backend="triton")
    assert (out.double() - _sink_truth(inputs, 32**-0.5, window, sinks)).abs().max().item() <= FP32_ATOL


@interp_only
@pytest.mark.parametrize("window", [None, 17, 45])
def test_interp_attention_multi_tile_strided(window):
    # S and L span several 16-wide tiles, D=80 is padded to 128, q/k/v come in HF's (B, S, H, D) layout.
    B, Hq, Hkv, S, L, D = 2, 4, 2, 37, 50, 80
    q, kp, vp, ks, vs = _attn_inputs(B, Hq, Hkv, S, L, D, torch.float32, seed=7)
    q = q.transpose(1, 2).contiguous().transpose(1, 2)
    ks, vs = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (ks, vs))
    kp = kp.transpose(0, 1).contiguous().transpose(0, 1)
    assert not q.is_contiguous()
    out = shared_prefix_attention(q, kp, vp, ks, vs, scale=0.1, sliding_window=window, backend="triton")
    _assert_attention_close(out, (q, kp, vp, ks, vs), scale=0.1, sliding_window=window, softcap=None)


@interp_only
@pytest.mark.parametrize("dtype,softcap,shared_ids", [
    (torch.float32, None, False), (torch.float32, 30.0, True), (torch.float16, None, True),
    (torch.float16, 30.0, False), (torch.bfloat16, None, False), (torch.bfloat16, 30.0, True),
])
def test_interp_readout(dtype, softcap, shared_ids):
    hidden, weight, ids = _readout_inputs(21, 1000, 64, 3, dtype, seed=8, shared_ids=shared_ids)
    res = label_logprobs(hidden, weight, ids, softcap=softcap, chunk=300, backend="triton")
    _assert_readout_close(res, hidden, weight, ids, softcap)


# ------------------------------------------------------------- ahead-of-time compilation for a CUDA target
def _compile_for_cuda(fn, pointers, constexprs, floats, arch, warps, stages) -> int:
    """Compile ``fn`` for sm_``arch``; returns its shared memory bytes."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    def arg_type(name):
        return "constexpr" if name in constexprs else pointers.get(name, "fp32" if name in floats else "i32")

    sig = {name: arg_type(name) for name in fn.arg_names}
    compiled = triton.compile(ASTSource(fn, sig, constexprs), target=GPUTarget("cuda", arch, 32),
                              options=dict(num_warps=warps, num_stages=stages))
    return compiled.metadata.shared


@pytest.mark.skipif(IN_INTERPRETER or not HAS_TRITON, reason="needs compiled (not interpreted) kernels")
@pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION")
@pytest.mark.parametrize("arch", [90, 80])
def test_triton_kernels_compile_for_cuda(arch):
    """Without a GPU: lower the Gemma-3 configuration (bf16, D=256, window + softcap) to a cubin via
    triton's bundled ptxas, and check the shared memory fits an A100 (164 KiB) / H100 (228 KiB)."""
    pytest.importorskip("triton.backends.nvidia")
    import logitjudge_kernels.prefix_attention as pa
    import logitjudge_kernels.readout as ro

    smem_limit = 163 * 1024
    bm, bn, warps, stages = pa._attention_blocks(256, 2)
    consts = dict(G=4, HQ=4, BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=256, USE_SOFTCAP=True, USE_WINDOW=True,
                  UPCAST=False, IEEE=False)
    ptrs = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "OP": "*fp32", "LSEP": "*fp32", "Out": "*bf16"}
    floats = ("scale", "softcap")
    try:
        shared = [
            _compile_for_cuda(pa._prefix_fwd_kernel, ptrs, consts, floats, arch, warps, stages),
            _compile_for_cuda(pa._suffix_fwd_kernel, dict(ptrs, SINK="*fp32"),
                              dict(consts, HAS_PREFIX=True, USE_SINK=True), floats, arch, warps, stages),  # GPT-OSS
        ]
        br, bv, bk, warps, stages = ro._readout_blocks(64, 2)
        shared.append(_compile_for_cuda(
            ro._lse_partial_kernel, {"H": "*bf16", "W": "*bf16", "PM": "*fp32", "PS": "*fp32"},
            dict(BLOCK_R=br, BLOCK_V=bv, BLOCK_K=bk, TILES=8, USE_SOFTCAP=True, UPCAST=False, IEEE=False),
            ("softcap",), arch, warps, stages))
    except (ImportError, FileNotFoundError) as exc:  # no ptxas / backend in this triton build
        pytest.skip(f"cannot compile for CUDA here: {exc}")
    assert all(0 < s <= smem_limit for s in shared), shared


# ------------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("Hq,Hkv,D", [(4, 1, 256), (8, 2, 128), (4, 4, 64)])
@pytest.mark.parametrize("window,softcap", [(None, None), (300, 50.0)])
def test_gpu_attention(dtype, Hq, Hkv, D, window, softcap):
    inputs = _attn_inputs(16, Hq, Hkv, 67, 2000, D, dtype, device="cuda", seed=9)
    out = shared_prefix_attention(*inputs, scale=D**-0.5, sliding_window=window, softcap=softcap)
    kw = dict(scale=D**-0.5, sliding_window=window, softcap=softcap)
    _assert_attention_close(out, inputs, atol32=GPU_FP32_ATOL, **kw)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype,atol", [(torch.bfloat16, 2 * LOWP_ATOL[torch.bfloat16]),
                                        (torch.float32, GPU_FP32_ATOL)])
def test_gpu_attention_sinks_gpt_oss_shapes(dtype, atol):
    """GPT-OSS heads (64 query, 8 KV, D 64), sliding window 128 and full, sinks: Triton against transformers'
    definition in fp64."""
    inputs = _attn_inputs(8, 64, 8, 90, 700, 64, dtype, device="cuda", seed=12)
    sinks = torch.randn(64, generator=torch.Generator().manual_seed(3)).mul(2).cuda()
    for window in (128, None):
        out = shared_prefix_attention(*inputs, scale=0.125, sliding_window=window, sinks=sinks, backend="triton")
        err = (out.double() - _sink_truth(inputs, 0.125, window, sinks)).abs().max().item()
        assert err <= atol, (window, err)


@pytest.mark.gpu
@gpu
def test_gpu_attention_empty_prefix_and_single_row():
    for B, L in ((1, 0), (1, 1), (5, 0)):
        inputs = _attn_inputs(B, 4, 1, 33, L, 256, torch.bfloat16, device="cuda", seed=10)
        out = shared_prefix_attention(*inputs, scale=0.0625, backend="triton")
        _assert_attention_close(out, inputs, scale=0.0625, sliding_window=None, softcap=None)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype,R,V", [(torch.bfloat16, 64, 262144), (torch.bfloat16, 10, 262144),
                                       (torch.float16, 200, 50000), (torch.float32, 16, 32768)])
@pytest.mark.parametrize("softcap", [None, 30.0])
def test_gpu_readout(dtype, R, V, softcap):
    hidden, weight, ids = _readout_inputs(R, V, 640, 5, dtype, device="cuda", seed=11)
    res = label_logprobs(hidden, weight, ids, softcap=softcap)
    _assert_readout_close(res, hidden, weight, ids, softcap, atol32=GPU_FP32_ATOL)
