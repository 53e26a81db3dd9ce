"""The side-by-side readings of docs/integrations.md (logitjudge.integrations.readings): G-Eval's weighting on
planted top-20 log-probabilities against a hand computation, and the one-order plain forward pass against the
engine's exact order-1 distribution (tests/test_deepeval.py holds the weighting to DeepEval's own function where
DeepEval is installed)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import logitjudge as lj
from logitjudge.integrations.readings import first_order_readings, geval_score

pytestmark = pytest.mark.usefixtures("one_thread")


def test_geval_weighting_by_hand():
    lp = math.log
    top = [("4", lp(0.40)), ("3", lp(0.20)), ("Four", lp(0.15)), ("7", lp(0.10)), (" 2", lp(0.05)),
           ("4", lp(0.02)), ("1", lp(0.009))]  # "Four", " 2": not decimal; "1": under 1%; "4" twice: summed
    want = (4 * 0.42 + 3 * 0.20 + 7 * 0.10) / (0.42 + 0.20 + 0.10)
    assert geval_score(top, 4) == pytest.approx(want, rel=1e-12)
    assert geval_score([("x", lp(0.9)), ("2", lp(0.001))], 3) == 3  # nothing kept: the raw score


def test_first_order_reads_the_engines_order_one(tiny_lm, tmp_path):
    rows = [{"id": "a", "text": "The text is clear, well written and correct.", "context": "Rate this."}]
    t = lj.score(tiny_lm, rows, orderings="balanced", dump_prompts=tmp_path / "p.jsonl", progress=False).table
    rec = json.loads((tmp_path / "p.jsonl").read_text().splitlines()[0])
    vocab = len(tiny_lm.tokenizer)
    r = first_order_readings(tiny_lm, rec, top=vocab)  # the whole vocabulary: every label is in it
    probs = {tok: math.exp(v) for tok, v in r["top_logprobs"]}
    labels = np.array([probs[c] for c in rec["continuations"]])  # each label's token (" 1": the space goes with it)
    assert rec["option_order"] == list(range(5))  # the balanced design's first order is the canonical one
    np.testing.assert_allclose(labels / labels.sum(), t.probs[0, 0, 0], atol=1e-5, rtol=0)
    assert r["greedy"] == r["top_logprobs"][0][0] and (r["grade"] is None) == (r["greedy"] not in
                                                                              rec["continuations"])


def test_a_judge_without_weights_here_reads_through_its_fp32_reference(model_dir):
    from logitjudge.models import read_judge

    served = read_judge(str(model_dir))  # tokenizer and config only: a serving engine's judge
    here = lj.load_judge(str(model_dir))
    rec = {"prompt": "Rate this text from 1 to 5: clear and correct. Score:", "add_special_tokens": True,
           "continuations": [" 1", " 2"], "labels": ["1", "2"], "option_order": [0, 1]}
    a, b = first_order_readings(served, rec, top=20), first_order_readings(here, rec, top=20)
    assert [t for t, _ in a["top_logprobs"]] == [t for t, _ in b["top_logprobs"]]
    np.testing.assert_allclose([v for _, v in a["top_logprobs"]], [v for _, v in b["top_logprobs"]], atol=1e-6)
