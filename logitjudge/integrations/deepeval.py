"""A DeepEval metric read from the judge's exact label probabilities over several option orders
(``pip install 'logitjudge[deepeval]'``; docs/integrations.md, "DeepEval").

:class:`RubricMetric` judges a test case's ``actual_output`` (with its ``input`` as the context) on a rubric:
``score`` is the order-averaged expected score rescaled to [0, 1] over the criterion's values (min -> 0, max -> 1),
``success`` is ``score >= threshold``, ``reason`` says in one line what the numbers are, and ``score_breakdown``
holds the rubric-scale numbers (the distribution, the expected and the PriDe-debiased scores, the hold probability,
the bias summary). The judge is loaded in this process once (``a_measure`` calls that arrive together share one
``lj.score`` call) or reached through a ``logitjudge serve`` URL (``server=``).
"""

from __future__ import annotations

from deepeval.metrics import BaseMetric
from deepeval.test_case import LLMTestCase, SingleTurnParams

from ..errors import LogitJudgeError
from ._judging import Judging, criterion_numbers, describe, rubric_of


class RubricMetric(BaseMetric):
    """A rubric's exact, order-averaged score as a DeepEval metric (module doc). ``rubric``: a built-in name, a
    rubric file or an inline dict; ``judge``: a name ``lj.load_judge`` takes, or a loaded judge; ``orderings``:
    balanced, all, random:K (with ``seed``) or fixed; ``server``: a ``logitjudge serve`` URL (None: load the
    judge here); ``criterion``: the one scored (None: the rubric's first)."""

    _required_params = [SingleTurnParams.INPUT, SingleTurnParams.ACTUAL_OUTPUT]

    def __init__(self, rubric="default", judge="gemma-3-270m", *, threshold: float = 0.5,
                 orderings: str = "balanced", server: str | None = None, criterion: str | None = None,
                 seed: int = 0, template: str | None = None, api_key: str | None = None, n_boot: int = 200,
                 async_mode: bool = True):
        if not 0 <= threshold <= 1:
            raise LogitJudgeError(f"RubricMetric(threshold={threshold}): the score is in [0, 1]; give a threshold "
                                  "there")
        self.judging = Judging(rubric_of(rubric, "RubricMetric(rubric=...)"), judge, orderings, seed, template,
                               criterion, server, api_key, n_boot, where="RubricMetric")
        self.threshold, self.async_mode, self.include_reason = threshold, async_mode, True
        self.evaluation_model = str(judge if isinstance(judge, str) else getattr(judge, "model_id", judge))
        self.evaluation_cost = None

    @property
    def __name__(self):
        return f"logitjudge {self.judging.name}"

    @staticmethod
    def _item(test_case: LLMTestCase) -> dict:
        if not test_case.actual_output:
            raise LogitJudgeError("RubricMetric: the test case has no actual_output; give the text to judge")
        return {"id": "case", "text": test_case.actual_output,
                **({"context": test_case.input} if test_case.input else {})}

    def _set(self, answer: dict) -> float:
        n = criterion_numbers(answer, 0, self.judging.name)
        self.score = n["scaled"]
        self.success = self.score >= self.threshold
        self.reason = f"{describe(n)}; score {self.score:.4g} (rescaled to 0..1) vs threshold {self.threshold:g}"
        self.score_breakdown = {k: n[k] for k in ("criterion", "labels", "values", "distribution", "expected",
                                                  "debiased", "top_label", "hold", "label_mass", "n_orders",
                                                  "orderings", "bias")}
        return self.score

    def measure(self, test_case: LLMTestCase, *args, **kwargs) -> float:
        return self._set(self.judging.answer([self._item(test_case)]))

    async def a_measure(self, test_case: LLMTestCase, *args, **kwargs) -> float:
        return self._set(await self.judging.a_answer([self._item(test_case)]))

    def is_successful(self) -> bool:
        if self.error is not None or self.score is None:
            self.success = False
        else:
            self.success = self.score >= self.threshold
        return self.success
