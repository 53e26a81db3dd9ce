"""inspect_ai scorers read from the judge's exact label probabilities over several option orders
(``pip install 'logitjudge[inspect]'``; docs/integrations.md, "inspect_ai").

- :func:`rubric_judge`: a rubric's order-averaged expected score, its PriDe-debiased score and the probability
  that its top label holds under a random order, as ``Score.value`` ``{"expected", "debiased", "hold"}`` with
  mean and stderr per key; ``Score.metadata["logitjudge"]`` holds the distribution and each order's answer.
- :func:`logit_graded_qa`: ``model_graded_qa``'s arguments, but the grade is read from the exact probabilities
  of the grades C/P/I over the orders instead of a regex over one sampled completion.

Both judge ``state.output.completion`` with the sample's input as its context, with the judge loaded in this
process once (samples scored together share one ``lj.score`` call) or through a ``logitjudge serve`` URL
(``server=``). The entry point ``[project.entry-points.inspect_ai] logitjudge`` registers them, so
``--scorer logitjudge/rubric_judge`` resolves.
"""

from __future__ import annotations

from inspect_ai.scorer import Score, Target, accuracy, mean, scorer, stderr
from inspect_ai.solver import TaskState

from ..errors import LogitJudgeError
from ._judging import Judging, criterion_numbers, describe, rubric_of

KEYS = ("expected", "debiased", "hold")

GRADE_INSTRUCTIONS = "You are assessing a submitted answer on a given task based on a criterion."
GRADES = {"C": (1.0, "correct: the submission meets the criterion"),
          "P": (0.5, "partially correct: the submission meets part of the criterion"),
          "I": (0.0, "incorrect: the submission does not meet the criterion")}


def _item(state: TaskState, context: str | None) -> dict:
    return {"id": str(state.sample_id), "text": state.output.completion,
            **({"context": context} if context else {})}


def _metadata(n: dict, item: dict) -> dict:
    """The numbers, and what the judge was shown (``text``, ``context``)."""
    keep = ("criterion", "labels", "values", "distribution", "expected", "debiased", "top_label", "hold",
            "label_mass", "orders", "n_orders", "orderings", "model", "bias")
    return {"logitjudge": {**{k: n[k] for k in keep}, "text": item["text"], "context": item.get("context")}}


@scorer(metrics=[{k: [mean(), stderr()] for k in KEYS}])
def rubric_judge(rubric="default", judge="gemma-3-270m", orderings: str = "balanced", server: str | None = None,
                 criterion: str | None = None, seed: int = 0, template: str | None = None,
                 api_key: str | None = None, n_boot: int = 200):
    """A rubric's exact, order-averaged score of each sample's output (module doc). ``rubric``: a built-in name,
    a rubric file or an inline dict; ``judge``: a name ``lj.load_judge`` takes, or a loaded judge; ``orderings``:
    balanced, all, random:K (with ``seed``) or fixed; ``server``: a ``logitjudge serve`` URL (None: load the judge
    here); ``criterion``: the one reported (None: the rubric's first). ``Score.value``: ``expected`` (expected
    score on the rubric's scale, averaged over the orders), ``debiased`` (PriDe; absent where the orders hold no
    balanced rotations) and ``hold`` (probability that the top label holds under a random order)."""
    j = Judging(rubric_of(rubric, "rubric_judge(rubric=...)"), judge, orderings, seed, template, criterion,
                server, api_key, n_boot, where="rubric_judge")

    async def score(state: TaskState, target: Target) -> Score:
        item = _item(state, state.input_text)
        n = criterion_numbers(await j.a_answer([item]), 0, j.name)
        value = {k: n[k] for k in KEYS if n[k] is not None}
        return Score(value=value, answer=n["top_label"], explanation=describe(n), metadata=_metadata(n, item))

    return score


def grade_rubric(partial_credit: bool, instructions: str | None) -> dict:
    """model_graded_qa's grades as a rubric: C = 1, P = 0.5 (with ``partial_credit``), I = 0."""
    letters = ("C", "P", "I") if partial_credit else ("C", "I")
    return {"name": "graded_qa", "instructions": instructions or GRADE_INSTRUCTIONS,
            "criteria": [{"name": "GRADE", "description": "Does the submission meet the criterion?",
                          "options": [{"value": GRADES[x][0], "label": x, "description": GRADES[x][1]}
                                      for x in letters]}]}


def graded_context(question: str, criterion: str) -> str:
    return f"[Task]: {question}\n***\n[Criterion]: {criterion}"


@scorer(metrics=[accuracy(), stderr()])
def logit_graded_qa(template: str | None = None, instructions: str | None = None, grade_pattern: str | None = None,
                    include_history=False, partial_credit: bool = False, model="gemma-3-270m",
                    orderings: str = "balanced", server: str | None = None, seed: int = 0,
                    api_key: str | None = None):
    """``model_graded_qa`` read from the judge's exact probabilities (module doc). The judge sees the task and the
    target as the context, the output as the text and the grades C (correct), P (partially correct, with
    ``partial_credit``) and I (incorrect) in each order; ``Score.value`` is the order-averaged expected grade,
    C = 1, P = 0.5, I = 0 (``accuracy`` averages it). ``template``: a built-in logitjudge template's name (an
    inspect prompt template has no place for the options' orders); ``instructions``: the prompt's opening
    instructions; ``grade_pattern`` is refused: nothing is parsed. ``model``: the judge (a name or a loaded
    judge); ``include_history``: as model_graded_qa (True: the chat history as the task; a function of the state:
    its text)."""
    if grade_pattern is not None:
        raise LogitJudgeError("logit_graded_qa(grade_pattern=...): the grade is read from the exact probabilities "
                              "of the grade labels, not parsed from a completion; drop grade_pattern")
    if template is not None and "{" in template:
        raise LogitJudgeError("logit_graded_qa(template=...): an inspect prompt template has no place for the "
                              "grades' orders; give a built-in logitjudge template's name (text-first, "
                              "rubric-first, bracketed) or leave it unset")
    if isinstance(model, list):
        raise LogitJudgeError("logit_graded_qa(model=...): one judge; its orders take the place of a panel")
    j = Judging(rubric_of(grade_rubric(partial_credit, instructions), "logit_graded_qa"), model, orderings, seed,
                template, None, server, api_key, where="logit_graded_qa")

    async def score(state: TaskState, target: Target) -> Score:
        if include_history is True:  # model_graded_qa's own rendering of the history, as its grader sees it
            from inspect_ai.scorer._model import chat_history

            question = chat_history(state)
        else:
            question = include_history(state) if callable(include_history) else state.input_text
        item = _item(state, graded_context(question, target.text))
        n = criterion_numbers(await j.a_answer([item]), 0, j.name)
        return Score(value=n["expected"], answer=state.output.completion,
                     explanation=describe(n) + f"; grades {dict(zip(n['labels'], n['distribution']))}",
                     metadata=_metadata(n, item))

    return score
