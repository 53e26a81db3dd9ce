"""The exactness gate (logitjudge_kernels.exactness): one rule for every kernel route, fp32 and bf16, decided over
several draws so that one unlucky sample cannot decide, and the same verdict every time."""

from __future__ import annotations

import math

import pytest
import torch
from logitjudge_kernels import exactness
from logitjudge_kernels.dispatch import max_abs, scaled_tolerance, to_float64


def _attn(q, k, v):
    return torch.softmax(q @ k.T, -1) @ v


def _attn_split(q, k, v):
    """Exact to fp32 but summed in another order (two halves of the keys merged)."""
    s = q @ k.T
    m = s.max(-1, keepdim=True).values
    h = k.shape[0] // 2
    e1, e2 = torch.exp(s[:, :h] - m), torch.exp(s[:, h:] - m)
    return (e1 @ v[:h] + e2 @ v[h:]) / (e1.sum(-1, keepdim=True) + e2.sum(-1, keepdim=True))


def _inputs(seed, dtype=torch.float32, big=30.0):
    g = torch.Generator().manual_seed(seed)
    shared = torch.zeros(64)
    shared[0] = big  # large activations: fp32 itself is off by ~1e-4
    q = torch.randn(32, 64, generator=g) * 0.3 + shared
    k = torch.randn(200, 64, generator=g) * 0.3 + shared
    v = torch.randn(200, 64, generator=g)
    return tuple(t.to(dtype) for t in (q, k, v))


def _gate(args, dtype_fn=_attn):
    return exactness.gate(dtype_fn, args, {}, exact=_attn, tolerance=scaled_tolerance(1e-5), to_float64=to_float64)


@pytest.mark.parametrize("seed", range(4))
def test_an_error_at_the_references_level_passes_every_draw_and_20x_fails(seed):
    """A route that sums in another order (its error the fp32 reference's size) passes; one off by 20x the
    reference's own max error fails; on several inputs, so the verdict is not one sample's luck."""
    args = _inputs(seed)
    gate = _gate(args)
    assert len(gate.draws) == exactness.DRAWS
    ok = gate.judge(_attn_split)
    assert ok.exact and ok.why is None, ok
    ref_err = max_abs(_attn(*args), _attn(*to_float64(args)))
    bad = gate.judge(lambda q, k, v: _attn(q, k, v) + 20 * ref_err)
    assert not bad.exact and "float64" in bad.why and "3 draws" in bad.why


def test_the_verdict_is_deterministic():
    """The same call: the same draws, the same bound, the same verdict (a fixed seed, pure functions)."""
    args = _inputs(0)
    a, b = _gate(args), _gate(args)
    assert a.bound == b.bound
    assert a.judge(_attn_split) == b.judge(_attn_split)
    for (x, _), (y, _) in zip(a.draws, b.draws):
        assert all(torch.equal(s, t) for s, t in zip(x, y))
    assert all(not torch.equal(x[0], args[0]) for x, _ in a.draws[1:])  # the copies are perturbed
    with pytest.raises(AttributeError):
        a.bound.max_error = 1.0  # frozen


def test_bf16_is_judged_against_the_references_own_error_plus_one_ulp():
    """bf16 outputs: a route that computes in fp32 and rounds once passes (its error is below the bf16
    reference's, which rounds after each op); one that is 4 ulp worse fails."""
    args = _inputs(1, torch.bfloat16, big=3.0)
    gate = _gate(args)
    assert gate.bound.against == "float64" and "ulp" in gate.bound.rule
    assert gate.judge(lambda q, k, v: _attn(q.float(), k.float(), v.float()).bfloat16()).exact
    ulp = exactness.ulp(torch.bfloat16, float(_attn(*to_float64(args)).abs().max()))
    bad = gate.judge(lambda q, k, v: (_attn(q, k, v).float() + 4 * ulp).bfloat16())
    assert not bad.exact and "ulp" in bad.why


def test_without_a_float64_evaluation_the_stated_tolerance_applies_in_every_draw():
    g = exactness.gate(lambda x: x * 2, (torch.randn(50, 8),), {}, exact=None, tolerance=scaled_tolerance(1e-6),
                       to_float64=to_float64)
    assert g.bound.against == "reference" and math.isinf(g.bound.rms_error)
    assert g.judge(lambda x: x + x).exact
    assert "tolerance" in g.judge(lambda x: x * 2 + 1e-3).why


def test_nan_is_never_exact():
    g = _gate(_inputs(0))
    assert not g.judge(lambda q, k, v: _attn(q, k, v) * math.nan).exact
