"""The judging path the inspect_ai scorers and the DeepEval metric share (logitjudge.integrations._judging), on the
tiny judge in the main venv: in-process, concurrent calls merged into one lj.score call, and through a
``logitjudge serve``, each the same numbers as lj.score; bad settings refused in one line before anything runs."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from test_serve import Server

import logitjudge as lj
from logitjudge.errors import LogitJudgeError
from logitjudge.integrations._judging import Judging, criterion_numbers, describe, rubric_of
from logitjudge.serve.app import Limits, create_app

pytestmark = pytest.mark.usefixtures("one_thread")

ROWS = [{"id": "a", "text": "The text is clear, well written and correct.", "context": "Rate this."},
        {"id": "b", "text": "Very poor. Worst.", "context": "Rate this."}]


@pytest.fixture(scope="module")
def table(tiny_lm):
    return lj.score(tiny_lm, ROWS, orderings="balanced", progress=False).table


def check(n: dict, table, i: int, tol=1e-6, alone=True):
    """``n`` against lj.score's table; PriDe's prior is estimated on the call's own items (alone: item i's)."""
    mean = table.probs[i, 0].mean(axis=0)
    np.testing.assert_allclose(n["distribution"], mean, atol=tol, rtol=0)
    np.testing.assert_allclose([o["distribution"] for o in n["orders"]], table.probs[i, 0], atol=tol, rtol=0)
    assert n["expected"] == pytest.approx(float(mean @ table.values[0]), abs=tol)
    assert n["scaled"] == pytest.approx((n["expected"] - 1) / 4, abs=1e-12) and (n["low"], n["high"]) == (1, 5)
    part = table.select_items(np.array([i])) if alone else table
    pride = lj.analyze(part, n_boot=0).scores["pride"].iloc[0 if alone else i]
    assert n["debiased"] == pytest.approx(float(pride), abs=tol)
    assert n["n_orders"] == 10 and n["orderings"] == "balanced"


def test_in_process_and_merged_calls_equal_lj_score(tiny_lm, table, monkeypatch):
    j = Judging(rubric_of("default", "test"), tiny_lm)
    both = j.answer(ROWS)  # one call, both items: lj.score's own numbers
    for i in range(2):
        check(criterion_numbers(both, i, "Quality"), table, i, tol=1e-12, alone=False)

    async def together():  # as a framework scores its samples: one call per sample, concurrently
        return await asyncio.gather(*(j.a_answer([r]) for r in ROWS))

    calls, score = [], lj.score
    monkeypatch.setattr(lj, "score", lambda judge, rows, **kw: calls.append(len(rows)) or score(judge, rows, **kw))
    answers = asyncio.run(together())
    assert calls == [2]  # the two samples' calls went into one lj.score call
    for i, a in enumerate(answers):
        n = criterion_numbers(a, 0, "Quality")
        check(n, table, i)
        line = describe(n)
        assert "order-averaged over 10 balanced orders" in line and "\n" not in line


def test_through_logitjudge_serve_equals_lj_score(tiny_lm, table):
    with Server(create_app(tiny_lm, Limits(window_s=0.01, api_key="k"))) as url:
        j = Judging(rubric_of("default", "test"), "not-loaded-here", server=url, api_key="k")
        check(criterion_numbers(j.answer([ROWS[1]]), 0, "Quality"), table, 1)
        with pytest.raises(LogitJudgeError, match=r"refused the text \(401\)"):
            Judging(rubric_of("default", "test"), server=url, api_key="wrong").answer([ROWS[0]])


def test_bad_settings_are_refused_in_one_line(tiny_lm):
    for kw, says in [({"criterion": "Tone"}, "scorer(criterion='Tone'): not a criterion of rubric 'default'"),
                     ({"orderings": "sideways"}, "scorer(orderings='sideways')"),
                     ({"judge": 3}, "scorer(judge=...): expected a judge's name")]:
        with pytest.raises(LogitJudgeError) as e:
            Judging(rubric_of("default", "test"), **{"judge": tiny_lm, **kw}, where="scorer")
        assert says in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(LogitJudgeError, match=r"scorer\(rubric=...\): "):
        rubric_of("no_such_rubric", "scorer(rubric=...)")
    gone = Judging(rubric_of("default", "test"), server="http://127.0.0.1:9", where="scorer")
    with pytest.raises(LogitJudgeError, match="could not be reached .*start it with logitjudge serve"):
        gone.answer(ROWS[:1])
