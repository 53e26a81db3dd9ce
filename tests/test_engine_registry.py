"""Adding an engine is one file and one registry line (issue 53, step 1): a toy engine defined in this file (the
native engine behind a wrapper that counts the jobs it evaluates), registered in ``logitjudge.engines.ENGINES``,
runs through the command line (``logitjudge score --engine toy``) and the Python API (``lj.load_judge(engine=
"toy")``, ``lj.score``) and gives the native engine's numbers. And the registry's words: ``vllm+http://`` names a
vLLM server, as a plain ``http://`` address does; a protocol logitjudge does not speak is refused in one line."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

import logitjudge as lj
from logitjudge import engines
from logitjudge.cli import main
from logitjudge.engine import Engine as NativeEngine
from logitjudge.engine import EngineError
from logitjudge.engines.base import Engine
from logitjudge.engines.native import NativeConfig
from logitjudge.models import Judge
from logitjudge.table import ScoreTable

sys.path.insert(0, str(Path(__file__).parent))
from conftest import fresh_tiny_lm  # noqa: E402
from test_cli import write_texts  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


# ---- the toy engine: what a new engine's file holds -------------------------------------------------------------
class ToyEngine:
    """Every member of :class:`logitjudge.engines.base.Engine`, each handed to the native engine it wraps; it
    counts the jobs it evaluates and says so in the meta."""

    name = "toy"
    prefix_mode = "toy"  # the table's fingerprint: a toy table is never resumed as a native one
    context = None  # no context of its own: the judge's bounds the prompts

    def __init__(self, native: NativeEngine):
        self.native, self.jobs = native, 0

    token_budget = property(lambda self: self.native.token_budget)
    stats = property(lambda self: self.native.stats)
    gemm_route = property(lambda self: self.native.gemm_route)

    @property
    def on_forward(self):
        return self.native.on_forward

    @on_forward.setter
    def on_forward(self, listener):
        self.native.on_forward = listener

    def evaluate(self, jobs):
        self.jobs += len(jobs)
        return self.native.evaluate(jobs)

    def prompt_logprobs(self, groups):
        self.jobs += len(groups)
        return self.native.prompt_logprobs(groups)

    def planned_tokens(self, jobs):
        return self.native.planned_tokens(jobs)

    def kernels(self):
        return self.native.kernels()

    def meta(self):
        return {**self.native.meta(), "prefix_mode": self.prefix_mode, "engine": {"name": self.name,
                                                                                   "jobs": self.jobs}}

    def reference(self):
        return self.native.reference()

    def audit_defaults(self):
        return self.native.audit_defaults()

    def record_audit(self, result):
        self.native.record_audit(result)

    def internals(self):
        return None  # the toy does not let the probe in


@dataclass(frozen=True)
class ToyConfig:
    """The toy's settings: the native engine's, taken from the spec as it takes them."""

    name: ClassVar[str] = "toy"
    native: NativeConfig

    @classmethod
    def from_spec(cls, model_spec) -> ToyConfig:
        return cls(NativeConfig.from_spec(model_spec))

    def check(self, *, probing: bool) -> None:
        if probing:
            raise EngineError("the toy engine does not probe; probe with --engine native")

    def load_judge(self, source: str, model_spec) -> Judge:
        return self.native.load_judge(source, model_spec)  # it carries model_spec: lj.score runs on the toy

    def make(self, lm, *, texts: Callable[[], list[str]], seed: int = 0) -> ToyEngine:
        return ToyEngine(self.native.make(lm, texts=texts, seed=seed))


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(engines.ENGINES, "toy", ToyConfig)  # the one registry line


def _score(model_dir, texts, out, *extra) -> ScoreTable:
    assert main(["score", "--model", str(model_dir), "--texts", str(texts), "--orderings", "random:2", "--quiet",
                 "--out", str(out), *extra]) == 0
    return ScoreTable.load(out)


# ---- the tests --------------------------------------------------------------------------------------------------
def test_the_engines_are_the_protocols(tiny_lm):
    assert isinstance(NativeEngine(tiny_lm), Engine) and isinstance(ToyEngine(NativeEngine(tiny_lm)), Engine)
    assert set(engines.ENGINES) == {"native", "vllm", "http"}  # the toy only where a test registers it


def test_a_registered_engine_runs_through_the_cli(toy, model_dir, tmp_path, capsys):
    texts = write_texts(tmp_path / "texts.jsonl", 4)
    native = _score(model_dir, texts, tmp_path / "native.npz")
    table = _score(model_dir, texts, tmp_path / "toy.npz", "--engine", "toy")
    assert np.array_equal(table.probs, native.probs) and np.array_equal(table.label_mass, native.label_mass)
    assert table.meta["engine"]["name"] == "toy" and table.meta["engine"]["jobs"] > 0
    assert table.meta["prefix_mode"] == "toy" and native.meta["prefix_mode"] == "native"
    assert table.meta["fingerprint"] != native.meta["fingerprint"]
    # its own check, before anything loads
    assert main(["probe", "--model", str(model_dir), "--texts", str(texts), "--engine", "toy", "--quiet",
                 "--out", str(tmp_path / "p.npz")]) == 2
    assert "the toy engine does not probe" in capsys.readouterr().err.strip().splitlines()[-1]


def test_a_registered_engine_runs_through_the_python_api(toy, model_dir, tmp_path):
    texts = write_texts(tmp_path / "texts.jsonl", 4)
    native = _score(model_dir, texts, tmp_path / "native.npz")
    judge = lj.load_judge(str(model_dir), engine="toy")
    assert isinstance(judge, Judge) and judge.settings.engine == "toy"
    res = lj.score(judge, texts, orderings="random:2", progress=False)
    assert np.array_equal(res.table.probs, native.probs) and res.table.meta["engine"]["name"] == "toy"


def test_an_unknown_engine_names_the_registered_ones(toy):
    with pytest.raises(EngineError, match=r"unknown engine 'sglang'; use native, vllm, toy or http://HOST:PORT"):
        engines.engine_kind("sglang")


def test_a_server_address_names_its_protocol():
    for address in ("http://h:8000", "https://h", "vllm+http://h:8000", "vllm+https://h"):
        assert engines.engine_kind(address) == "http"
    with pytest.raises(EngineError, match="server protocol 'sglang' logitjudge does not speak; use vllm"):
        engines.engine_kind("sglang+http://h:8000")
    from logitjudge.engines.http import normalise_url

    assert normalise_url("vllm+http://h:8000/v1/") == "http://h:8000"


def test_a_vllm_http_address_scores_as_the_plain_one(tmp_path):
    """``--engine vllm+http://HOST:PORT`` against the stand-in server: the table of the plain address."""
    from stub_vllm import StubServer

    lm = fresh_tiny_lm()
    folder = tmp_path / "tiny"
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    texts = write_texts(tmp_path / "texts.jsonl", 2)
    stub = StubServer(lm.model, lm.tokenizer, str(folder))
    try:
        plain = _score(folder, texts, tmp_path / "plain.npz", "--engine", stub.url)
        named = _score(folder, texts, tmp_path / "named.npz", "--engine", stub.url.replace("http", "vllm+http", 1))
    finally:
        stub.close()
    assert np.array_equal(named.probs, plain.probs)
    assert named.meta["engine"] == plain.meta["engine"] and named.meta["fingerprint"] == plain.meta["fingerprint"]


def test_a_judge_is_frozen_and_an_engine_bounds_its_context():
    """One judge form (issue 53, step 2): nothing is set on a loaded judge, its info is read-only, and a serving
    engine's own shorter context bounds the prompts through the engine, not by writing it on the judge."""
    from dataclasses import FrozenInstanceError
    from types import SimpleNamespace

    judge = fresh_tiny_lm()
    with pytest.raises(FrozenInstanceError):
        judge.tokenizer = None
    with pytest.raises(TypeError):
        judge.info["dtype_choice"] = {}
    own = judge.max_length
    assert judge.max_length_on(SimpleNamespace(context=40)) == 40
    assert judge.max_length_on(SimpleNamespace(context=None)) == own == judge.max_length_on(None)
    assert judge.max_length_on(SimpleNamespace(context=own + 1)) == own
    assert judge.with_info(note="x").info["note"] == "x" and "note" not in judge.info
