"""promptfoo's assertion (issue 54 item 4): the real promptfoo CLI (``npx promptfoo@PINNED eval``, its built-in
echo provider, telemetry and updates off) calls logitjudge/integrations/promptfoo_assert.py, which calls a
``logitjudge serve`` on 127.0.0.1; the scores promptfoo records equal lj.score's on the same texts. Skipped, with
the reason, where npx is absent or the pinned promptfoo cannot be fetched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_serve import Server

import logitjudge as lj
from logitjudge.integrations import promptfoo_assert
from logitjudge.serve.app import Limits, create_app

PROMPTFOO = "promptfoo@0.121.20"  # the last release that runs on Node 20 (0.122 needs Node >= 22.22)
ASSERT = Path(promptfoo_assert.__file__).resolve()
QUESTION = "What is the capital of France?"
ANSWERS = ["Paris is the capital of France.", "The capital is Berlin, I think."]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def judge(tiny_lm):
    return tiny_lm  # the session's tiny random-weight Gemma-3 (nothing here changes it)


def expected_scores(judge) -> list[float]:
    """lj.score on the texts promptfoo's echo provider returns: the order-averaged expected score, rescaled."""
    rows = [{"id": str(i), "text": a, "context": QUESTION} for i, a in enumerate(ANSWERS)]
    t = lj.score(judge, rows, orderings="balanced", progress=False).table
    e = t.expected_score()[:, 0].mean(axis=1)
    low, high = t.values[0].min(), t.values[0].max()
    return list((e - low) / (high - low))


def test_get_assert_reports_a_refusal_in_one_line():
    res = promptfoo_assert.get_assert("x", {"config": {"url": "http://127.0.0.1:9"}, "vars": {}})
    assert res["pass"] is False and res["score"] == 0 and "could not be reached" in res["reason"]


def test_promptfoo_eval_scores_equal_lj_score(judge, tmp_path):
    npx = shutil.which("npx")
    if npx is None:
        pytest.skip("npx (Node.js) is not on this machine: promptfoo's CLI cannot run")
    config = {
        "description": "logitjudge assertion", "prompts": ["{{answer}}"], "providers": ["echo"],
        "tests": [{"vars": {"question": QUESTION, "answer": a},
                   "assert": [{"type": "python", "value": f"file://{ASSERT}",
                               "config": {"orderings": "balanced", "threshold": 0.0}}]} for a in ANSWERS]}
    (tmp_path / "promptfooconfig.json").write_text(json.dumps(config))
    env = {**os.environ, "PROMPTFOO_DISABLE_TELEMETRY": "1", "PROMPTFOO_DISABLE_UPDATE": "1",
           "PROMPTFOO_DISABLE_SHARING": "1", "PROMPTFOO_CONFIG_DIR": str(tmp_path / "pf-home"),
           "PROMPTFOO_PYTHON": sys.executable, "npm_config_prefer_offline": "true", "npm_config_yes": "true"}
    with Server(create_app(judge, Limits(window_s=0.01))) as url:
        env["LOGITJUDGE_URL"] = url
        run = subprocess.run([npx, "-y", PROMPTFOO, "eval", "-c", str(tmp_path / "promptfooconfig.json"),
                              "-o", str(tmp_path / "out.json"), "--no-cache", "--no-progress-bar"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    if not (tmp_path / "out.json").exists() and any(s in run.stderr + run.stdout for s in
                                                    ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT")):
        pytest.skip(f"{PROMPTFOO} could not be fetched from the npm registry: {run.stderr.strip()[-300:]}")
    assert (tmp_path / "out.json").exists(), run.stdout[-2000:] + run.stderr[-2000:]
    results = json.loads((tmp_path / "out.json").read_text())["results"]["results"]
    got = {r["vars"]["answer"]: r["gradingResult"]["componentResults"][0] for r in results}
    for answer, want in zip(ANSWERS, expected_scores(judge)):
        g = got[answer]
        # promptfoo sends one item per request (merged or not): fp32 rounding of other batch shapes only
        assert g["pass"] is True and g["score"] == pytest.approx(want, abs=1e-6), g
        assert g["namedScores"].keys() >= {"Quality_expected", "Quality_hold", "Quality_debiased"}
        assert "order-averaged over 10 balanced orders" in g["reason"]
