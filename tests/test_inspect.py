"""inspect_ai's scorers (issue 54 item 2): a real ``inspect eval`` run, offline (a tiny task, inspect's
``mockllm/model`` as the solver, gemma-3-270m as the judge), whose task names the scorers through inspect's registry
(``logitjudge/rubric_judge``, ``logitjudge/logit_graded_qa``: the entry point must resolve them); the scores in its
log equal ``lj.score``'s on the same texts and orders. Runs in .venv-integrations (``make test-integrations``);
skipped, with the reason, where inspect_ai is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("inspect_ai", reason="inspect_ai is not installed here: `make test-integrations` runs this "
                                         "file in .venv-integrations (pip install 'logitjudge[inspect]')")

import logitjudge as lj  # noqa: E402
from logitjudge.integrations import _judging  # noqa: E402
from logitjudge.integrations.inspect import grade_rubric  # noqa: E402

JUDGE = "gemma-3-270m"
SAMPLES = [("a", "What is 2 + 2?", "4", "2 + 2 = 4."),
           ("b", "Name the capital of France.", "Paris", "The capital of France is Berlin.")]
# three levels: 6 balanced orders per text (the default rubric's five would take 10)
RUBRIC = {"name": "three", "instructions": "Rate the answer to the question.", "criteria": [
    {"name": "Correct", "description": "Is the answer correct?", "options": [
        {"value": 0, "label": "A", "description": "wrong"}, {"value": 1, "label": "B", "description": "partly right"},
        {"value": 2, "label": "C", "description": "right"}]}]}

TASK = f'''
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer._scorer import scorer_create


def output(text):  # usage given: mockllm would count the tokens with tiktoken, which downloads its tables
    o = ModelOutput.from_content("mockllm/model", text)
    o.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return o


@task
def tiny():
    samples = {SAMPLES!r}
    return Task(dataset=[Sample(id=i, input=q, target=t) for i, q, t, _ in samples],
                model=get_model("mockllm/model", custom_outputs=[output(a) for *_, a in samples]),
                scorer=[scorer_create("logitjudge/rubric_judge", rubric={RUBRIC!r}, judge="{JUDGE}"),
                        scorer_create("logitjudge/logit_graded_qa", model="{JUDGE}", partial_credit=True,
                                      include_history=True)])
'''


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    """The log of ``inspect eval`` on the tiny task (the task file imports nothing of logitjudge)."""
    d = tmp_path_factory.mktemp("inspect")
    (d / "task.py").write_text(TASK)
    env = {**os.environ, "INSPECT_DISPLAY": "plain", "INSPECT_LOG_DIR": str(d / "logs")}
    inspect = Path(sys.executable).parent / "inspect"
    run = subprocess.run([str(inspect), "eval", "task.py", "--log-format", "json", "--no-log-images"], cwd=d,
                         env=env, capture_output=True, text=True, timeout=600)
    logs = sorted((d / "logs").glob("*.json"))
    assert run.returncode == 0 and logs, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(logs[-1].read_text())


def lj_table(rubric, rows):
    """lj.score on the texts the log's samples hold, balanced orders (the scorers' default)."""
    return lj.score(_judging.judge_of(JUDGE), rows, rubric=_judging.rubric_of(rubric, "test"), orderings="balanced",
                    progress=False).table


def test_rubric_judge_scores_equal_lj_score(log):
    assert log["status"] == "success", log.get("error")
    samples = sorted(log["samples"], key=lambda s: s["id"])
    rows = [{"id": s["id"], "text": s["output"]["choices"][0]["message"]["content"], "context": s["input"]}
            for s in samples]
    assert [r["text"] for r in rows] == [a for *_, a in SAMPLES]  # mockllm answered what the task told it to
    t = lj_table(RUBRIC, rows)
    pride = lj.analyze(t, n_boot=0).scores.set_index("item_id")["pride"]
    for i, s in enumerate(samples):
        sc = s["scores"]["rubric_judge"]
        mean = t.probs[i, 0].mean(axis=0)
        assert sc["value"]["expected"] == pytest.approx(float(mean @ t.values[0]), abs=1e-6)
        assert sc["value"]["hold"] == pytest.approx(float(np.mean(t.probs[i, 0].argmax(axis=1) == mean.argmax())))
        meta = sc["metadata"]["logitjudge"]
        np.testing.assert_allclose(meta["distribution"], mean, atol=1e-6, rtol=0)
        np.testing.assert_allclose([o["distribution"] for o in meta["orders"]], t.probs[i, 0], atol=1e-6, rtol=0)
        assert meta["n_orders"] == 6 and meta["orders"][0]["labels_by_position"] == ["A", "B", "C"]
        # PriDe on one sample's own rotations (the scorer's unit is a sample), as lj.analyze reads it alone
        alone = lj.analyze(t.select_items(np.array([i])), n_boot=0).scores["pride"].iloc[0]
        assert sc["value"]["debiased"] == pytest.approx(float(alone), abs=1e-6) and np.isfinite(pride[s["id"]])
        assert "order-averaged over 6 balanced orders" in sc["explanation"] and sc["answer"] == meta["top_label"]
    # metrics per key: the mean (and stderr) over the samples of each key
    means = {sc["name"]: sc["metrics"]["mean"]["value"] for sc in log["results"]["scores"]
             if sc["scorer"] == "rubric_judge" and "mean" in sc["metrics"]}
    assert means == {k: pytest.approx(np.mean([s["scores"]["rubric_judge"]["value"][k] for s in samples]))
                     for k in ("expected", "debiased", "hold")}


def test_logit_graded_qa_reads_the_grades_exactly(log):
    samples = sorted(log["samples"], key=lambda s: s["id"])
    shown = [s["scores"]["logit_graded_qa"]["metadata"]["logitjudge"] for s in samples]
    for (_, q, t, a), m in zip(SAMPLES, shown):  # the task's history as model_graded_qa renders it, then the target
        assert m["text"] == a and m["context"].startswith(f"[Task]: {q}") and m["context"].endswith(f"[Criterion]: {t}")
    t = lj_table(grade_rubric(True, None), [{"id": s["id"], "text": m["text"], "context": m["context"]}
                                            for s, m in zip(samples, shown)])
    for i, s in enumerate(samples):
        sc = s["scores"]["logit_graded_qa"]
        mean = t.probs[i, 0].mean(axis=0)  # over the 6 balanced orders of C, P, I
        assert list(t.option_labels()[0]) == ["C", "P", "I"]
        assert sc["value"] == pytest.approx(float(mean[0] + 0.5 * mean[1]), abs=1e-6)
        assert sc["metadata"]["logitjudge"]["n_orders"] == 6
    accuracy = [sc["metrics"]["accuracy"]["value"] for sc in log["results"]["scores"]
                if sc["name"] == "logit_graded_qa"]
    assert accuracy == [pytest.approx(np.mean([s["scores"]["logit_graded_qa"]["value"] for s in samples]))]


def test_bad_arguments_are_refused_in_one_line():
    from logitjudge.errors import LogitJudgeError
    from logitjudge.integrations import inspect as scorers  # by name through the entry point: the inspect eval above

    for name, kw, says in [("rubric_judge", {"rubric": "nope"}, "rubric_judge(rubric=...)"),
                           ("rubric_judge", {"orderings": "random"}, "rubric_judge(orderings='random')"),
                           ("rubric_judge", {"criterion": "Tone"}, "not a criterion of rubric 'default'"),
                           ("logit_graded_qa", {"grade_pattern": "GRADE: (C|I)"}, "drop grade_pattern"),
                           ("logit_graded_qa", {"template": "{question} {answer}"}, "built-in logitjudge template")]:
        with pytest.raises(LogitJudgeError) as e:
            getattr(scorers, name)(**kw)
        assert says in str(e.value) and "\n" not in str(e.value)
