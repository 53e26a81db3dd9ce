"""The one path from a framework's scorer to the judge, shared by the inspect_ai scorer and the DeepEval metric.

A :class:`Judging` holds what a scorer was built with (rubric, judge, orderings, a ``logitjudge serve`` URL or
none) and answers texts with ``/v1/judge``'s JSON answer, whichever way it is computed:

- in-process: the judge is loaded once per process (:func:`judge_of`) and the texts scored with ``lj.score``,
  ``lj.analyze`` and the service's own :func:`logitjudge.serve.answers.judge_answer`; asynchronous calls that
  arrive together (a framework scoring its samples concurrently) are merged into one ``lj.score`` call by the
  service's :class:`~logitjudge.serve.batcher.Batcher`, one per event loop;
- ``server=URL``: a ``POST /v1/judge`` to a running ``logitjudge serve``.

So a scorer's numbers are the service's, each with the reading the answer names. :func:`criterion_numbers` reads
one item's criterion out of an answer.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import urllib.error
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LogitJudgeError
from ..rubric import Rubric, load_rubric

_JUDGES: dict[str, object] = {}  # judge name -> loaded Judge: one load per process
_LOCK = threading.Lock()
_BATCHERS: dict[tuple, list] = {}  # (id(judge), id(loop)) -> [Batcher, calls waiting on it]
_UNIQUE = itertools.count()


def judge_of(judge):
    """A loaded judge: ``judge`` itself, or ``lj.load_judge(judge)`` once per process for a name."""
    if not isinstance(judge, (str, Path)):
        return judge
    key = str(judge)
    with _LOCK:
        if key not in _JUDGES:
            import logitjudge as lj

            _JUDGES[key] = lj.load_judge(key)
        return _JUDGES[key]


def rubric_of(rubric, where: str) -> Rubric:
    """A Rubric from a built-in name, a rubric file, an inline dict (as ``/v1/judge`` takes it) or a Rubric."""
    if isinstance(rubric, Rubric):
        return rubric
    try:
        return Rubric.from_dict(rubric, source=where) if isinstance(rubric, dict) else load_rubric(rubric)
    except LogitJudgeError as e:
        raise LogitJudgeError(f"{where}: {e}") from None


@dataclass(frozen=True)
class Judging:
    """What a scorer scores with (module doc). ``criterion``: the one a scorer reports (None: the rubric's
    first); ``server``: a ``logitjudge serve`` URL (None: the judge in this process); ``api_key`` its bearer
    token; ``n_boot``: bootstrap resamples of the bias summary, as ``logitjudge serve --n-boot``."""

    rubric: Rubric
    judge: object = "gemma-3-270m"
    orderings: str = "balanced"
    seed: int = 0
    template: str | None = None
    criterion: str | None = None
    server: str | None = None
    api_key: str | None = None
    n_boot: int = 200
    timeout: float = 600.0
    where: str = "logitjudge"
    _key: tuple = field(default=(), compare=False, repr=False)

    def __post_init__(self):
        from ..orderings import parse

        names = [c.name for c in self.rubric.criteria]
        if self.criterion is not None and self.criterion not in names:
            raise LogitJudgeError(f"{self.where}(criterion={self.criterion!r}): not a criterion of rubric "
                                  f"{self.rubric.name!r}; use one of {names}")
        try:
            parse(self.orderings, self.rubric.n_options, seed=self.seed, n_items=1)
        except LogitJudgeError as e:
            raise LogitJudgeError(f"{self.where}(orderings={self.orderings!r}): {e}") from None
        if self.server is None and not isinstance(self.judge, (str, Path)) and not hasattr(self.judge, "model_id"):
            raise LogitJudgeError(f"{self.where}(judge=...): expected a judge's name (gemma-3-270m, a GGUF file, "
                                  f"ORG/NAME) or lj.load_judge(...)'s judge, got {type(self.judge).__name__}")
        from ..serve.batcher import merge_key

        object.__setattr__(self, "_key", merge_key(self._settings(), json.dumps(self.rubric.to_dict(),
                                                                                sort_keys=True), next(_UNIQUE)))

    @property
    def name(self) -> str:
        return self.criterion or self.rubric.criteria[0].name

    def _settings(self) -> dict:
        return {"rubric": self.rubric, "criteria": None, "orderings": self.orderings, "seed": self.seed,
                "template": self.template}

    def answer(self, items: list[dict]) -> dict:
        """``/v1/judge``'s answer (per_order on) for ``items`` (dicts of id, text, context, group)."""
        if self.server is not None:
            return self._post(items)
        import logitjudge as lj

        judge = judge_of(self.judge)
        table = lj.score(judge, items, progress=False, **self._settings()).table
        return self._answer_of(table, judge)

    async def a_answer(self, items: list[dict]) -> dict:
        """:meth:`answer` from a coroutine: merged with the other calls that arrive together (module doc)."""
        if self.server is not None:
            return await asyncio.to_thread(self._post, items)
        import logitjudge as lj

        from ..serve.batcher import Batcher, ItemRefused, JudgeJob

        judge = await asyncio.to_thread(judge_of, self.judge)
        key = (id(judge), id(asyncio.get_running_loop()))  # one per loop: a framework may run one per evaluation
        if key not in _BATCHERS:
            _BATCHERS[key] = [Batcher(lambda rows, **s: lj.score(judge, rows, progress=False, **s),
                                      window_s=0.05), 0]
        held = _BATCHERS[key]
        held[1] += 1
        try:
            table = await held[0].submit(JudgeJob(items, self._settings(), self._key))
        except ItemRefused as e:
            raise LogitJudgeError(f"{self.where}: {e}") from None
        finally:
            held[1] -= 1
            if held[1] == 0:  # nothing waits: stop its worker, so no task outlives the framework's loop
                del _BATCHERS[key]
                held[0].close()
        return await asyncio.to_thread(self._answer_of, table, judge)

    def _answer_of(self, table, judge) -> dict:
        import logitjudge as lj

        from ..serve.answers import judge_answer

        report = lj.analyze(table, n_boot=self.n_boot)
        return judge_answer(table, report, per_order=True, model=judge.model_id, orderings=self.orderings)

    def _post(self, items: list[dict]) -> dict:
        import os

        from .promptfoo_assert import _post, refusal

        body = {"rubric": self.rubric.to_dict(), "items": items, "orderings": self.orderings, "seed": self.seed,
                "template": self.template, "per_order": True}
        key = self.api_key or os.environ.get("LOGITJUDGE_API_KEY")
        try:
            return _post(self.server, body, key, self.timeout)
        except urllib.error.HTTPError as e:
            raise LogitJudgeError(f"{self.where}: logitjudge serve at {self.server} refused the text ({e.code}): "
                                  f"{refusal(e)}") from None
        except (urllib.error.URLError, OSError) as e:
            raise LogitJudgeError(f"{self.where}: logitjudge serve at {self.server} could not be reached ({e}); "
                                  f"start it with logitjudge serve, or leave server unset to load the judge "
                                  f"here") from None


def criterion_numbers(answer: dict, index: int, name: str) -> dict:
    """Item ``index``'s answer for criterion ``name``, with ``scaled`` (the expected score rescaled to [0, 1]
    over the criterion's values: min -> 0, max -> 1), ``n_orders``, ``orderings``, ``bias`` and ``model``."""
    c = next(x for x in answer["items"][index]["criteria"] if x["criterion"] == name)
    low, high = min(c["values"]), max(c["values"])
    return {**c, "scaled": (c["expected"] - low) / (high - low) if high > low else 1.0, "low": low, "high": high,
            "n_orders": answer["n_orders"], "orderings": answer["orderings"], "model": answer["model"],
            "bias": answer["bias"].get(name) or {}}


def describe(n: dict) -> str:
    """One line: what the numbers of :func:`criterion_numbers` are."""
    deb = "n/a (no balanced rotations among the orders)" if n["debiased"] is None else f"{n['debiased']:.4g}"
    return (f"{n['criterion']}: expected score {n['expected']:.4g} on {n['low']:g}..{n['high']:g}, order-averaged "
            f"over {n['n_orders']} {n['orderings']} orders; PriDe-debiased {deb}; top label {n['top_label']!r} holds "
            f"under a random order with probability {n['hold']:.3g}; label mass {n['label_mass']:.3g} "
            f"(judge {n['model']})")
