"""The native step's GEMM routes (logitjudge/judge/backends/native_gemms.py): packed oneDNN GEMMs or plain
``F.linear`` per bucket of row counts and weight shape, chosen by the kernels' dispatcher on the step's own calls.

With one route forced slow the other is chosen and the step computes what that route computes; every route is as
exact as plain fp32 against the float64 truth (the dispatcher's like-for-like rule); the MLP's whole-or-blocks
decision is measured on settled GEMM routes; the table's meta carries each decision's measured rates. Parity of
each route with the plain forward on tiny Gemma-3 and Llama-style judges: tests/test_families.py.
"""

from __future__ import annotations

import json
import time

import pytest
import torch
from conftest import fresh_tiny_lm
from logitjudge_kernels import dispatch, exactness, mkl_gemm
from logitjudge_kernels.dispatch import Candidate, Kernel

from logitjudge.judge.backends import native_gemms as ng
from logitjudge.judge.backends.native_gemma3 import NativeGemma3
from logitjudge.judge.prefix import PrefixKV

PACKED = {"linear": "packed", "gate_up": "packed epilogues"}
needs_packing = pytest.mark.skipif(not ng.packing_available(), reason="no oneDNN packing here")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny GEMMs: two spinning threads on a loaded host only add noise


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A private decision file (the compiled C kernels stay where they are: not built again), the switch at auto,
    and no in-process decisions of the GEMM kernels."""
    monkeypatch.setattr(dispatch, "_table_path", lambda kid: tmp_path / f"dispatch-{kid}.json")
    monkeypatch.setattr(dispatch, "_TABLES", {})
    monkeypatch.delenv(dispatch.MODE_ENV, raising=False)
    # final decisions: one measured while another xdist worker loaded the CPU would be provisional, measured again
    # (every route run, its packed copies made) by a later step once the load average fell
    monkeypatch.setattr(dispatch, "busy", lambda: False)
    for k in (ng.LINEAR, ng.GATE_UP, ng.MLP_DOWN):
        monkeypatch.setattr(k, "_memo", {})
    return tmp_path


def _slowed(monkeypatch, kernel: Kernel, name: str, seconds: float = 0.02) -> None:
    """``kernel``'s candidate ``name`` sleeps before each run: far slower than any tiny GEMM, same output."""
    def slow(fn):
        def run(*a, **k):
            time.sleep(seconds)
            return fn(*a, **k)
        return run

    monkeypatch.setattr(kernel, "candidates", [Candidate(c.name, slow(c.fn), c.refusal, c.native)
                                               if c.name == name else c for c in kernel.candidates])


def _step_outputs(step, ids):
    """Every position's final hidden state, and the pruned last layer's at a few selected positions."""
    full, _ = step(ids, PrefixKV.empty(len(step.layers)), capture=False)
    sel = (torch.tensor([0, 0, 0]), torch.tensor([3, 17, ids.shape[1] - 1]))
    picked, _ = step(ids, PrefixKV.empty(len(step.layers)), capture=False, select=sel)
    return full, picked


def _routes() -> list[str]:
    """The GEMM routes of this machine: oneDNN's packed GEMM, plain F.linear and, where torch has MKL, MKL's."""
    return ["packed", "plain"] + (["mkl packed"] if mkl_gemm.available() else [])


def _route_name(kernel: Kernel, route: str) -> str:
    return PACKED[kernel.name] if route == "packed" else route


def _only_fast(monkeypatch, fast: str) -> None:
    """Every GEMM route but ``fast`` forced slow, in LINEAR and GATE_UP."""
    for kernel in (ng.LINEAR, ng.GATE_UP):
        for route in _routes():
            if route != fast:
                _slowed(monkeypatch, kernel, _route_name(kernel, route))


@needs_packing
@pytest.mark.parametrize("fast", ["packed", "plain", "mkl packed"])
@torch.inference_mode()
def test_the_route_forced_slow_is_never_chosen(fresh, monkeypatch, fast):
    """The other routes forced slow: plain F.linear alone runs every GEMM and the step's outputs are bit for bit
    those of the unpacked step; oneDNN's or MKL's packed GEMMs alone run, within fp32 reassociation of the same."""
    if fast not in _routes():
        pytest.skip("torch here has no MKL")
    _only_fast(monkeypatch, fast)
    lm = fresh_tiny_lm(softcap=None)
    ids = torch.randint(4, lm.model.config.vocab_size, (1, 30), generator=torch.Generator().manual_seed(0))
    step = NativeGemma3(lm.model)
    assert step.packed and step.route == "fp32"
    with dispatch.recording() as rec:
        got = _step_outputs(step, ids)
    want = _step_outputs(NativeGemma3(lm.model, pack=False), ids)
    meta = rec.as_meta()
    for kernel in (ng.LINEAR, ng.GATE_UP):
        name = _route_name(kernel, fast)
        assert rec.ran(kernel.name) == {name}, meta[kernel.name]
        for bucket, d in meta[kernel.name]["choices"].items():
            assert d["why"] == "measured fastest", (bucket, d)
            assert all(d["rates"][name] > r for other, r in d["rates"].items() if other != name), (bucket, d)
    for g, w in zip(got, want):
        if fast == "plain":
            assert torch.equal(g, w)
        else:
            assert (g - w).abs().max().item() < 1e-4


@needs_packing
@pytest.mark.parametrize("fast", ["packed", "plain", "mkl packed"])
@torch.inference_mode()
def test_a_packed_copy_is_made_only_where_the_packed_route_runs(fresh, monkeypatch, fast):
    """No packed copy at load: each is made when a call of its weight first runs (or measures) its route. Once
    the machine's decisions are on file (every process after the first), a step whose calls all run plain holds
    none; one whose calls run oneDNN's (MKL's) packed GEMMs holds that copy of every weight and not the other;
    each computes what it computed while measuring."""
    if fast not in _routes():
        pytest.skip("torch here has no MKL")
    _only_fast(monkeypatch, fast)
    lm = fresh_tiny_lm(softcap=None)
    ids = torch.randint(4, lm.model.config.vocab_size, (1, 30), generator=torch.Generator().manual_seed(0))
    first = _step_outputs(NativeGemma3(lm.model), ids)  # measures every bucket and saves the decisions
    for k in (ng.LINEAR, ng.GATE_UP, ng.MLP_DOWN):  # a new process: the decisions are read from the file
        monkeypatch.setattr(k, "_memo", {})
    monkeypatch.setattr(dispatch, "_TABLES", {})
    step = NativeGemma3(lm.model)
    linears = [w for lw in step.layers for w in (lw.w_qkv, lw.w_o, lw.w_down)]
    mlps = [lw.mlp for lw in step.layers]
    assert all(w.packs and w._packed is None and w._mkl is None for w in linears)
    again = _step_outputs(step, ids)
    onednn = [w._packed is not None for w in linears] + [m.gate._packed is not None for m in mlps]
    mkl = [w._mkl is not None for w in linears + mlps]
    assert all(onednn) if fast == "packed" else not any(onednn)
    assert all(mkl) if fast == "mkl packed" else not any(mkl)
    for a, b in zip(first, again):
        assert torch.equal(a, b)


@pytest.mark.skipif(not mkl_gemm.available(), reason="torch here has no MKL")
@pytest.mark.parametrize("bias", [False, True])
def test_one_mkl_packed_copy_serves_every_row_count(bias):
    """MKL's packed buffer is packed once for a hint of PACK_ROWS rows and then serves calls of any row count:
    1 to 2,000 rows against the float64 truth, each within 4x F.linear's own error (+ the fp32 unit's floor) on
    the same call; the bias is added once and left as it was."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(384, 160, generator=g) / 160 ** 0.5
    b = torch.randn(384, generator=g) if bias else None
    kept = None if b is None else b.clone()
    packed = mkl_gemm.Packed(w)
    for m in (1, 2, 3, 17, 255, 256, 257, 1000, 2000):
        x = torch.randn(m, 160, generator=g)
        truth = torch.nn.functional.linear(x.double(), w.double(), None if b is None else b.double())
        got = mkl_gemm.linear(x, packed, 384, b)
        ref_err = (torch.nn.functional.linear(x, w, b).double() - truth).abs().max().item()
        err = (got.double() - truth).abs().max().item()
        assert got.shape == (m, 384) and err <= 4 * ref_err + 1e-6, (m, err, ref_err)
    if b is not None:
        assert torch.equal(b, kept)


def _weights(dtype: torch.dtype, pack: bool, upcast: bool, bias: bool, act: str):
    g = torch.Generator().manual_seed(0)
    d, inter, out = 48, 80, 96
    w = (torch.randn(out, d, generator=g) / d ** 0.5).to(dtype)
    b = torch.randn(out, generator=g).to(dtype) if bias else None
    mlp = ng.GatedMLP((torch.randn(2 * inter, d, generator=g) / d ** 0.5).to(dtype), pack, upcast, act)
    return ng.Weight(w, pack, upcast, b), mlp


@pytest.mark.parametrize("route", ["fp32 packed", "fp32 unpacked", "bf16_upcast"])
@pytest.mark.parametrize("bias,act", [(True, "silu"), (False, "gelu_tanh")])
@torch.inference_mode()
def test_every_gemm_route_is_as_exact_as_plain_fp32(route, bias, act):
    """Each candidate of LINEAR and GATE_UP passes the exactness gate against the float64 truth (the rule the
    dispatcher applies before it times a candidate, logitjudge_kernels.exactness), on a bias (Qwen2's
    q/k/v) and both activations; bf16 weights on fp32 FMAs (``upcast``) as their fp32 values."""
    pack = route != "fp32 unpacked"
    if pack and not ng.packing_available():
        pytest.skip("no oneDNN packing here")
    dtype = torch.bfloat16 if route == "bf16_upcast" else torch.float32
    w, mlp = _weights(dtype, pack, route == "bf16_upcast", bias, act)
    x = torch.randn(300, 48, generator=torch.Generator().manual_seed(1)) * 3
    for kernel, obj in ((ng.LINEAR, w), (ng.GATE_UP, mlp)):
        gate = exactness.gate(kernel.candidate("plain").fn, (obj, x), {}, exact=kernel.exact,
                              tolerance=kernel.tolerance, to_float64=dispatch.to_float64)
        ref = kernel.candidate("plain").fn(obj, x)
        usable = [c for c in kernel.candidates if c.refusal(obj, x) is None]
        mkl = ["mkl packed"] if pack and dtype == torch.float32 and mkl_gemm.available() else []
        assert [c.name for c in usable] == ([PACKED[kernel.name]] if pack else []) + ["plain"] + mkl
        for c in usable:
            got = c.fn(obj, x)
            assert got.dtype == torch.float32 and got.shape == ref.shape
            verdict = gate.judge(c.fn)
            assert verdict.exact, (kernel.name, c.name, verdict)
        assert kernel.candidate("plain").refusal(obj, x) is None  # plain applies everywhere
    # the Weight and GatedMLP calls go through the kernels, any leading shape
    assert torch.equal(w(x.view(3, 100, 48)).view(300, -1), ng.LINEAR(w, x))
    assert torch.equal(mlp(x.view(3, 100, 48)).view(300, -1), ng.GATE_UP(mlp, x))


@pytest.mark.skipif(not ng._bf16_gemms_available(), reason="no native bf16 GEMMs in oneDNN on this CPU")
@torch.inference_mode()
def test_packed_bf16_gemms_are_within_the_bf16_tolerance_of_plain():
    """bf16 outputs have no float64 rule in the dispatcher: the packed bf16 GEMMs against plain bf16 F.linear,
    within the kernels' stated bf16 tolerance (1e-2 of the output's scale)."""
    w, mlp = _weights(torch.bfloat16, True, False, True, "gelu_tanh")
    x = torch.randn(300, 48, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    for kernel, obj in ((ng.LINEAR, w), (ng.GATE_UP, mlp)):
        ref = kernel.candidate("plain").fn(obj, x)
        got = kernel.candidate(PACKED[kernel.name]).fn(obj, x)
        assert got.dtype == torch.bfloat16 and dispatch.max_abs(got, ref) <= kernel.tolerance(ref)


@needs_packing
@torch.inference_mode()
def test_the_mlp_measures_whole_or_blocks_on_settled_gemm_routes(fresh, monkeypatch):
    """MLP_DOWN's candidates call GATE_UP and LINEAR: every inner bucket is measured during the reference's and
    the candidates' first (untimed) runs, before MLP_DOWN's first timed round; nothing run while measuring is
    recorded; after it, one call records each kernel once with its decisions."""
    events = []
    measure = Kernel.measure

    def logged_measure(self, usable, args, kw):
        events.append(("measure", self.name))
        return measure(self, usable, args, kw)

    def logged(c):
        def run(*a, **k):
            events.append(("run", c.name))
            return c.fn(*a, **k)
        return Candidate(c.name, run, c.refusal, c.native, c.spare)

    monkeypatch.setattr(Kernel, "measure", logged_measure)
    monkeypatch.setattr(ng.MLP_DOWN, "candidates", [logged(c) for c in ng.MLP_DOWN.candidates])
    w, mlp = _weights(torch.float32, True, False, False, "silu")
    down = ng.Weight(torch.randn(48, 80) / 80 ** 0.5, True)
    h = torch.randn(600, 48)  # bucket 513-640: whole and blocks of 512, 384, 256
    with dispatch.recording() as rec:
        out = ng.mlp_down(mlp, down, h)
    usable = [c for c in ng.MLP_DOWN.candidates if c.refusal(mlp, down, h) is None]
    assert len(usable) == 4
    runs = [i for i, e in enumerate(events) if e[0] == "run"]
    inner = [i for i, e in enumerate(events) if e in (("measure", "linear"), ("measure", "gate_up"))]
    assert events[0] == ("measure", "mlp_rows") and inner
    # the reference's and each other candidate's exactness runs (one per draw) come first
    first_timed = runs[len(usable) * exactness.DRAWS]
    assert max(inner) < first_timed, events[:first_timed + 1]
    # rows per GEMM call: 600 (whole), 300 (blocks of 512 or 384: two), 200 (256: three) -> 3 row buckets
    assert sorted(e for e in events if e[0] == "measure" and e[1] == "linear") == [("measure", "linear")] * 3
    meta = rec.as_meta()
    unfused = set(meta["gate_up"]["ran"]) - {"packed epilogues"}  # the activation as a kernel of its own
    assert set(meta) == {"mlp_rows", "gate_up", "linear"} | ({"act_mul"} if unfused else set())
    pick = meta["mlp_rows"]["ran"]
    assert sum(r["calls"] for r in pick.values()) == 1
    n_blocks = {"whole": 1, "blocks of 512": 2, "blocks of 384": 2, "blocks of 256": 3}[next(iter(pick))]
    assert sum(r["calls"] for r in meta["linear"]["ran"].values()) == n_blocks
    assert (out - ng.mlp_exact(mlp, down, h.double())).abs().max().item() < 1e-4


def test_a_tables_meta_carries_each_gemm_decision_with_its_rates(tiny_lm, fresh):
    """Scored through the native step on a fresh cache: meta["kernels"] holds the GEMM kernels' decisions per
    bucket, each with every candidate's measured GFLOP/s and seconds on the call's own shapes (packed and plain
    where packing is on), JSON-ready."""
    from logitjudge.engine import Engine
    from logitjudge.items import Item
    from logitjudge.rubric import builtin_rubric
    from logitjudge.runs import score

    items = [Item("t0", "Once upon a time a cat sat on the mat and the dog barked.")]
    table = score(tiny_lm, items, builtin_rubric("default"), engine=Engine(tiny_lm, prefix_mode="native"),
                  progress=False)
    kernels = json.loads(json.dumps(table.meta["kernels"]))
    mkl = {"mkl packed"} if mkl_gemm.available() else set()
    for name, packed in PACKED.items():
        choices = kernels[name]["choices"]
        assert choices and set(kernels[name]["ran"]) <= {packed, "plain"} | mkl
        for bucket, d in choices.items():
            want = {packed, "plain"} | mkl if ng.packing_available() else {"plain"}
            if not ng.packing_available():
                assert d["why"] == "the only one that applies" and bucket.endswith(", plain")
                continue
            assert d["why"].startswith("measured") and set(d["rates"]) == want, (bucket, d)
            assert d["unit"] == "GFLOP/s" and all(r > 0 for r in d["rates"].values())
            assert set(d["seconds"]) == want and d["shapes"][0][0] >= 1
            fastest = min(d["seconds"], key=d["seconds"].get)  # or plain, the reference, kept within SPEEDUP of it
            assert d["choice"] == fastest or (d["choice"] == "plain"
                                              and d["seconds"]["plain"] <= dispatch.SPEEDUP * d["seconds"][fastest])
