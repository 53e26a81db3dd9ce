"""A reward for RL from AI feedback: the judge's expected rubric score of each completion, averaged over option
orders, as the callable TRL's ``GRPOTrainer`` takes in ``reward_funcs``.

``reward(judge, rubric=..., orderings="random:3")`` returns a :class:`JudgeReward`; calling it with
``prompts, completions, **kwargs`` (TRL's signature) returns one float per completion: the completion scored as
the text and its prompt as the context (template text-first by default), the exact expected score (or the
answered label's value, ``reading='greedy'``) of every order, averaged over the orders and over the rubric's
criteria (``criterion=`` one of them). The completions of one prompt (GRPO's group) are one token trie
(:class:`logitjudge.runs.GroupedRun`): the instructions and the prompt are computed once for the group, each
completion once for all its orders. Each call draws fresh per-item orders from ``seed`` + the call's number, so
the reward is reproducible; ``history`` keeps every call's completions, orders and rewards (the last
``keep`` calls), and ``last_table`` the last :class:`~logitjudge.table.ScoreTable`.

Prompts and completions may be strings (TRL's standard format) or chat message lists (its conversational
format: ``[{"role": ..., "content": ...}, ...]``): a prompt's messages become its context, one message per
paragraph (``role: content``), and a completion's text is its messages' contents joined by blank lines.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from .errors import LogitJudgeError
from .items import Item
from .orderings import parse
from .stats.readings import read_scores


class RewardError(LogitJudgeError, ValueError):
    """Reward settings or inputs that cannot be scored; the message names the problem and the fix."""


def _content(message) -> str:
    if not isinstance(message, dict) or "content" not in message:
        raise RewardError(f"a chat message must be a dict with 'role' and 'content', got {message!r:.80}")
    c = message["content"]
    if isinstance(c, list):  # multimodal parts: the text parts
        c = "".join(p.get("text", "") for p in c if isinstance(p, dict))
    return str(c)


def prompt_text(prompt) -> str:
    """A TRL prompt as the judge's context: a string as is; chat messages as ``role: content`` paragraphs."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "\n\n".join(f"{m.get('role', 'user')}: {_content(m)}" for m in prompt)
    raise RewardError(f"a prompt must be a string or a list of chat messages, got {type(prompt).__name__}")


def completion_text(completion) -> str:
    """A TRL completion as the judged text: a string as is; chat messages: their contents."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "\n\n".join(_content(m) for m in completion)
    raise RewardError(f"a completion must be a string or a list of chat messages, got {type(completion).__name__}")


class JudgeReward:
    """TRL reward function (module doc). ``__name__`` names its metrics in TRL's logs
    (``rewards/<name>/mean``)."""

    def __init__(self, lm, rubric, *, orderings: str = "random:3", criterion: str | None = None, template=None,
                 reading: str = "expected", seed: int = 0, token_budget: int = 4096, keep: int = 100,
                 name: str = "logitjudge"):
        from .engine import Engine
        from .paradigm_run import check_template

        if reading not in ("expected", "greedy"):
            raise RewardError(f"reading={reading!r}: the reward reads 'expected' (the probability-weighted score) or "
                              "'greedy' (the answered label's value)")
        if criterion is not None:
            names = [c.name for c in rubric.criteria]
            if criterion not in names:
                raise RewardError(f"criterion {criterion!r} is not in the rubric; its criteria are {names}")
            rubric = rubric.subset([criterion])
        parse(orderings, rubric.n_options, seed=seed, n_items=1)  # a bad spec fails here, not in the trainer
        self.lm, self.rubric, self.orderings, self.reading, self.seed = lm, rubric, orderings, reading, int(seed)
        self.template = check_template(template, "pointwise") if template is not None else None
        self.engine = Engine(lm, token_budget=token_budget)
        self.calls = 0
        self.history: deque = deque(maxlen=keep)
        self.last_table = None
        self.__name__ = name

    def items(self, prompts, completions) -> list[Item]:
        """The judged items of one call: context = the prompt, text = the completion, group = the prompt."""
        if len(prompts) != len(completions):
            raise RewardError(f"{len(prompts)} prompts for {len(completions)} completions: TRL passes one prompt "
                              "per completion")
        contexts = [prompt_text(p) for p in prompts]
        group = {c: f"p{i}" for i, c in enumerate(dict.fromkeys(contexts))}
        return [Item(f"c{i}", completion_text(c), context=ctx, group=group[ctx])
                for i, (c, ctx) in enumerate(zip(completions, contexts))]

    def orders(self, n_items: int, call: int) -> np.ndarray:
        """The option orders of call number ``call`` (seeded with ``seed + call``)."""
        return parse(self.orderings, self.rubric.n_options, seed=self.seed + call, n_items=n_items)

    def score_items(self, items: list[Item], option_orders) -> tuple[np.ndarray, object]:
        """(reward per item, the table): each item's score averaged over its orders and the criteria."""
        from .runs import score_grouped

        table = score_grouped(self.lm, items, self.rubric, option_orders, template=self.template, engine=self.engine,
                              progress=False)
        s = np.stack([read_scores(table.probs[:, c], table.values[c], reading=self.reading)
                      for c in range(table.probs.shape[1])], axis=1)  # [items, criteria, orders]
        return s.mean(axis=(1, 2)), table

    def __call__(self, prompts, completions, **kwargs) -> list[float]:
        items = self.items(list(prompts), list(completions))
        orders = self.orders(len(items), self.calls)
        rewards, self.last_table = self.score_items(items, orders)
        self.history.append({"call": self.calls, "items": items, "option_orders": orders,
                             "rewards": rewards.copy()})
        self.calls += 1
        return [float(x) for x in rewards]


def reward(judge, *, rubric="default", orderings: str = "random:3", criterion: str | None = None, template=None,
           reading: str = "expected", seed: int = 0, token_budget: int = 4096, name: str = "logitjudge"
           ) -> JudgeReward:
    """A TRL ``reward_funcs`` callable scoring each completion with ``judge`` (a loaded model, or a model id or
    folder to load) on ``rubric`` (a :class:`~logitjudge.rubric.Rubric`, a built-in name or a file), averaged
    over ``orderings`` (module doc)."""
    from .rubric import Rubric, load_rubric

    if isinstance(judge, str):
        from .models import load_model

        judge = load_model(judge)
    if not isinstance(rubric, Rubric):
        rubric = load_rubric(rubric)  # a file, or a built-in by name
    return JudgeReward(judge, rubric, orderings=orderings, criterion=criterion, template=template, reading=reading,
                       seed=seed, token_budget=token_budget, name=name)
