"""The command line on a tiny random-weight model saved to a folder: score, dump prompts, resume, analyze."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from logitjudge.cli import main
from logitjudge.table import ScoreTable

SENTENCES = ["The cat sat on the mat.", "A dog barked at the moon while the sun rose slowly.",
             "The economy grew by three percent, the article says.", "Once upon a time a cat sat on the mat."]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import fresh_tiny_lm

    lm = fresh_tiny_lm()
    d = tmp_path_factory.mktemp("tiny-model")
    lm.model.save_pretrained(d)
    lm.tokenizer.save_pretrained(d)
    return d


def write_texts(path: Path, n: int) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            text = " ".join(SENTENCES[(i + j) % 4] for j in range(1 + i % 3))
            f.write(json.dumps({"id": f"t{i}", "text": text, "group": f"g{i // 4}"}) + "\n")
    return path


def test_score_dump_and_analyze(tmp_path, model_dir, capsys):
    texts = write_texts(tmp_path / "texts.jsonl", 8)
    out = tmp_path / "table.npz"
    dump = tmp_path / "prompts.jsonl"
    rc = main(["score", "--model", str(model_dir), "--texts", str(texts), "--orderings", "balanced",
               "--out", str(out), "--dump-prompts", str(dump), "--threads", "2", "--quiet"])
    assert rc == 0
    t = ScoreTable.load(out)
    assert t.shape == (8, 1, 10, 5)
    assert t.meta["torch_threads"] == 2 and t.meta["prefix_mode"] == "native"
    from logitjudge_kernels.cpu_norm import cpu_kernels_status

    assert t.meta["row_kernels"] == ("C" if cpu_kernels_status() is None else
                                     f"PyTorch reference ({cpu_kernels_status()})")
    lines = [json.loads(x) for x in dump.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 8 * 10
    first = lines[0]
    assert first["continuations"] and first["prompt"].endswith("score:")
    # the dumped strings reproduce the engine's numbers with a plain forward pass
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    lps = []
    for cont in first["continuations"]:
        ids = tok(first["prompt"] + cont).input_ids
        with torch.inference_mode():
            logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
        n = first["prompt_tokens"]
        lps.append(sum(float(logp[i - 1, ids[i]]) for i in range(n, len(ids))))
    p = np.exp(np.array(lps) - max(lps))
    assert np.abs(p / p.sum() - t.probs[0, 0, 0]).max() < 1e-5
    capsys.readouterr()
    assert main(["analyze", str(out), "--json", "--n-boot", "20"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert "verdict" in res and res["position"]
    assert main(["analyze", str(out), "--markdown", "--n-boot", "20"]) == 0
    md = capsys.readouterr().out
    assert res["verdict"] in md.splitlines()[0]


def test_clear_errors(tmp_path, model_dir, capsys):
    texts = write_texts(tmp_path / "texts.jsonl", 2)
    rc = main(["score", "--model", str(model_dir), "--texts", str(texts), "--orderings", "sideways",
               "--out", str(tmp_path / "x.npz"), "--quiet"])
    assert rc == 2 and "unknown ordering spec" in capsys.readouterr().err
    rc = main(["score", "--model", str(model_dir), "--texts", str(tmp_path / "nope.jsonl"), "--out",
               str(tmp_path / "x.npz"), "--quiet"])
    assert rc == 2 and "does not exist" in capsys.readouterr().err
    rc = main(["score", "--model", str(model_dir), "--texts", str(texts), "--quantize", "4bit", "--out",
               str(tmp_path / "x.npz"), "--quiet"])
    assert rc == 2 and "CUDA" in capsys.readouterr().err
    rc = main(["score", "--model", str(model_dir), "--texts", str(texts), "--threads", "0", "--out",
               str(tmp_path / "x.npz"), "--quiet"])
    assert rc == 2 and "threads must be a positive integer" in capsys.readouterr().err


CHILD = r"""
import sys, time
from logitjudge import engine
orig = engine.Engine.prompt_logprobs
def slow(self, groups):
    time.sleep(0.4)  # slow the run down so that the parent can kill it half-way
    return orig(self, groups)
engine.Engine.prompt_logprobs = slow
from logitjudge.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_resume_after_kill(tmp_path, model_dir):
    texts = write_texts(tmp_path / "texts.jsonl", 12)
    args = ["score", "--model", str(model_dir), "--texts", str(texts), "--orderings", "shared-random:3",
            "--token-budget", "64", "--quiet"]
    ref = tmp_path / "ref.npz"
    assert main(args + ["--out", str(ref)]) == 0
    out = tmp_path / "killed.npz"
    partial = Path(str(out) + ".partial.jsonl")
    child = subprocess.Popen([sys.executable, "-c", CHILD, *args, "--out", str(out)],
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.time() + 120
    while time.time() < deadline:
        if partial.exists() and len(partial.read_text().splitlines()) >= 4:  # header + 3 items
            break
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert not out.exists(), "the child finished before it was killed; the test proves nothing"
    done = len(partial.read_text().splitlines()) - 1
    assert 3 <= done < 12
    assert main(args + ["--out", str(out)]) == 0
    assert not partial.exists()
    a, b = ScoreTable.load(ref), ScoreTable.load(out)
    assert list(a.item_ids) == list(b.item_ids)
    assert np.abs(a.probs - b.probs).max() <= 1e-6


def test_data_parallel_torchrun(tmp_path, model_dir):
    """Two ranks (gloo on CPU) each score half of the items; the gathered table equals a one-process run."""
    texts = write_texts(tmp_path / "texts.jsonl", 6)
    args = ["score", "--model", str(model_dir), "--texts", str(texts), "--orderings", "balanced", "--quiet"]
    single = tmp_path / "single.npz"
    assert main(args + ["--out", str(single)]) == 0
    multi = tmp_path / "multi.npz"
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          "-m", "logitjudge.cli", *args, "--out", str(multi)],
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    a, b = ScoreTable.load(single), ScoreTable.load(multi)
    assert b.meta["world_size"] == 2
    assert list(a.item_ids) == list(b.item_ids)
    assert np.abs(a.probs - b.probs).max() <= 1e-6
    assert not list(tmp_path.glob("*.partial.jsonl"))
