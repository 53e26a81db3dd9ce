"""The probed prompts: exactly the prompts the engine scores (one criterion, every ordering of an item), with
the token spans of their option lines. This is the one place that calls the prompt encoder."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..prompts import EncodedPrompt, load_template, uses_chat
from ..requests import item_prompts
from ..rubric import Rubric
from .spans import Spans, prompt_spans


@dataclass(frozen=True)
class ProbePrompt:
    encoded: EncodedPrompt
    order: np.ndarray  # (n,) canonical option shown at each position
    spans: Spans

    @property
    def ids(self) -> tuple[int, ...]:
        return self.encoded.prompt_ids

    @property
    def answer(self) -> int:
        """Index of the answer position: the last prompt token, where the first label token is predicted."""
        return len(self.encoded.prompt_ids) - 1


def single_criterion(rubric: Rubric, criterion: int) -> Rubric:
    return Rubric((rubric.criteria[criterion],), rubric.instructions, rubric.name)


def probe_prompts(lm, rubric: Rubric, item, option_orders, template=None, *, criterion: int = 0
                  ) -> list[ProbePrompt]:
    """The prompts of one item and one criterion under each ordering, with their spans."""
    template = load_template(template)
    one = single_criterion(rubric, criterion)
    encoded = item_prompts(lm, one, item, option_orders, template)
    crit = one.criteria[0]
    return [ProbePrompt(ep, np.asarray(order), prompt_spans(
        lm.tokenizer, ep, template, crit, rubric.instructions, item.text, item.context or "", order,
        add_special_tokens=not uses_chat(template, lm.tokenizer))) for ep, order in zip(encoded, option_orders)]


def common_prefix(seqs, cap: int) -> int:
    """Length of the longest common token prefix of ``seqs``, at most ``cap``."""
    n = 0
    first = seqs[0]
    while n < cap and all(len(s) > n and s[n] == first[n] for s in seqs):
        n += 1
    return n
