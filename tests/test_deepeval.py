"""DeepEval's metric (issue 54 item 3): ``deepeval.evaluate`` on two test cases, offline and with telemetry off,
scores them with :class:`RubricMetric` and gemma-3-270m as the judge; the scores equal ``lj.score``'s order-averaged
expected scores rescaled to [0, 1], and ``measure``'s breakdown equals ``lj.score`` and ``lj.analyze``'s numbers.
Runs in .venv-integrations (``make test-integrations``); skipped, with the reason, where DeepEval is not
installed."""

from __future__ import annotations

import os

# before DeepEval is imported: no telemetry, no update check, no .env read from the working folder
for _k, _v in {"DEEPEVAL_TELEMETRY_OPT_OUT": "YES", "DEEPEVAL_UPDATE_WARNING_OPT_IN": "NO",
               "DEEPEVAL_DISABLE_DOTENV": "1", "ERROR_REPORTING": "NO"}.items():
    os.environ.setdefault(_k, _v)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("deepeval", reason="DeepEval is not installed here: `make test-integrations` runs this file in "
                                       ".venv-integrations (requirements/deepeval.txt says how it installs)")

import logitjudge as lj  # noqa: E402
from logitjudge.errors import LogitJudgeError  # noqa: E402
from logitjudge.integrations import _judging  # noqa: E402

JUDGE = "gemma-3-270m"
CASES = [("What is 2 + 2?", "2 + 2 = 4."), ("Name the capital of France.", "The capital of France is Berlin.")]


@pytest.fixture(scope="module")
def expected():
    """lj.score on the cases' texts (default rubric, balanced orders) and lj.analyze's PriDe per item alone."""
    rows = [{"id": str(i), "text": a, "context": q} for i, (q, a) in enumerate(CASES)]
    t = lj.score(_judging.judge_of(JUDGE), rows, orderings="balanced", progress=False).table
    return t


@pytest.fixture(scope="module")
def expected_first():
    """lj.score on the first case alone, as ``measure`` scores it: one item, so the same trie and the same GEMM row
    counts, hence the same routes. Scored with the second case (``expected``) the rows differ, each bucket may take
    another exact route, the probabilities differ by ~1e-7, and PriDe's prior estimate amplifies that past 1e-6
    (2.5e-6 on an Intel Xeon with AMX)."""
    q, a = CASES[0]
    return lj.score(_judging.judge_of(JUDGE), [{"id": "0", "text": a, "context": q}], orderings="balanced",
                    progress=False).table


def test_evaluate_scores_equal_lj_score(expected, tmp_path, monkeypatch):
    from deepeval import evaluate
    from deepeval.test_case import LLMTestCase

    from logitjudge.integrations.deepeval import RubricMetric

    monkeypatch.chdir(tmp_path)  # DeepEval keeps its run files in the working folder
    cases = [LLMTestCase(input=q, actual_output=a) for q, a in CASES]
    res = evaluate(cases, [RubricMetric("default", JUDGE, threshold=0.5)])
    t = expected
    e = t.expected_score()[:, 0].mean(axis=1)  # order-averaged expected score per text, on 1..5
    got = {tr.actual_output: tr.metrics_data[0] for tr in res.test_results}
    for (_, a), want in zip(CASES, (e - 1) / 4):
        md = got[a]
        assert md.score == pytest.approx(float(want), abs=1e-6) and md.success is (md.score >= 0.5)
        assert md.name == "logitjudge Quality" and md.evaluation_model == JUDGE and md.error is None
        assert "order-averaged over 10 balanced orders" in md.reason and "\n" not in md.reason


def test_measure_breakdown_equals_lj_score_and_analyze(expected_first):
    from deepeval.test_case import LLMTestCase

    from logitjudge.integrations.deepeval import RubricMetric

    t = expected_first
    m = RubricMetric("default", JUDGE, threshold=0.9)
    score = m.measure(LLMTestCase(input=CASES[0][0], actual_output=CASES[0][1]))
    b, mean = m.score_breakdown, t.probs[0, 0].mean(axis=0)
    np.testing.assert_allclose(b["distribution"], mean, atol=1e-6, rtol=0)
    assert b["expected"] == pytest.approx(float(mean @ t.values[0]), abs=1e-6) and score == m.score
    pride = lj.analyze(t.select_items(np.array([0])), n_boot=0).scores["pride"].iloc[0]
    assert b["debiased"] == pytest.approx(float(pride), abs=1e-6)
    assert b["hold"] == pytest.approx(float(np.mean(t.probs[0, 0].argmax(axis=1) == mean.argmax())))
    assert b["bias"] == {"tested": False, "reason": b["bias"]["reason"]} and b["n_orders"] == 10
    assert m.is_successful() is (m.score >= 0.9)


def test_bad_arguments_are_refused_in_one_line():
    from deepeval.test_case import LLMTestCase

    from logitjudge.integrations.deepeval import RubricMetric

    for kw, says in [({"threshold": 3}, "RubricMetric(threshold=3)"), ({"rubric": "nope"}, "RubricMetric(rubric"),
                     ({"orderings": "sorted"}, "RubricMetric(orderings='sorted')")]:
        with pytest.raises(LogitJudgeError) as e:
            RubricMetric(**kw)
        assert says in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(LogitJudgeError, match="no actual_output"):
        RubricMetric().measure(LLMTestCase(input="q", actual_output=""))


def test_geval_weighting_is_deepevals():
    """The side-by-side's G-Eval reading (logitjudge.integrations.readings) against DeepEval's own function."""
    import math
    from types import SimpleNamespace as NS

    from deepeval.metrics.g_eval.utils import calculate_weighted_summed_score

    from logitjudge.integrations.readings import geval_score

    top = [("4", 0.40), ("3", 0.20), ("Four", 0.15), ("7", 0.10), (" 2", 0.05), ("4", 0.02), ("1", 0.009)]
    pairs = [(tok, math.log(p)) for tok, p in top]
    content = [NS(token="Score", top_logprobs=[]),
               NS(token="4", top_logprobs=[NS(token=tok, logprob=lp) for tok, lp in pairs])]
    response = NS(choices=[NS(logprobs=NS(content=content))])
    assert geval_score(pairs, 4) == pytest.approx(calculate_weighted_summed_score(4, response), rel=1e-12)
