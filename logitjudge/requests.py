"""Requests: every prompt the judge is asked, rendered and encoded by one function.

A request is one question to the judge about one item under one option order: which criteria the prompt shows
(in which order), which criterion is asked, and, for several criteria in one prompt, the labels already written
to the earlier answer slots. Single-criterion prompts show the asked criterion alone and end in its named answer
prefix (``Quality score: ``); multi-criteria prompts show every criterion, a plain answer prefix, one forced
``Criterion: label`` line per earlier slot and the forced prefix of the asked slot. Chat templates wrap the body
in the tokenizer's chat template in both cases. The ``--dump-prompts`` JSONL is written from the same requests.

Option orders are either shared by all items, ``(K, n)``, or per item, ``(I, K, n)``: item ``i`` uses its own
rows (:func:`orders_of`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .items import Item
from .orderings import validate
from .prompts import EncodedPrompt, PromptError, Template, encode_prompt, wrap_chat
from .rubric import Rubric


@dataclass(frozen=True)
class Request:
    """One prompt: ``item`` under ``option_order``, showing ``criterion_order``, asking the criterion at slot
    ``len(answers)``. ``slots``: the multi-criteria answer layout; ``ordering``: the ordering's index k."""

    item: Item
    option_order: tuple[int, ...]
    criterion_order: tuple[int, ...]
    answers: tuple[str, ...] = ()
    slots: bool = False
    ordering: int = 0

    @property
    def criterion(self) -> int:
        """The canonical index of the asked criterion."""
        return self.criterion_order[len(self.answers)]


def default_template(multi: bool) -> str:
    """The built-in template a run uses when none is given."""
    return "multi-criteria" if multi else "text-first"


def single_requests(rubric: Rubric, item: Item, option_orders) -> list[Request]:
    """One request per (criterion, ordering) of an item, criterion-major: index c * K + k."""
    return [Request(item, tuple(map(int, order)), (c,), ordering=k)
            for c in range(rubric.n_criteria) for k, order in enumerate(option_orders)]


def slot_request(item: Item, option_order, criterion_order, answers=(), ordering: int = 0) -> Request:
    """The multi-criteria request for the slot after ``answers`` (labels of the earlier slots)."""
    return Request(item, tuple(map(int, option_order)), tuple(map(int, criterion_order)), tuple(answers), True,
                   ordering)


def render(template: Template, tokenizer, rubric: Rubric, req: Request) -> str:
    """The prompt text of a request, up to where the asked label starts."""
    asked = rubric.criteria[req.criterion]
    if req.slots:
        body = template.render_body(rubric, req.item.text, req.item.context, req.option_order, req.criterion_order)
        prefix = template.answer_prefix.format(name="")
    else:
        shown = Rubric((asked,), rubric.instructions, rubric.name)
        body = template.render_body(shown, req.item.text, req.item.context, req.option_order)
        prefix = template.answer_prefix.format(name=asked.name)
    head = wrap_chat(tokenizer, body, prefix) if template.chat else body + prefix
    if not req.slots:
        return head
    for j, label in enumerate(req.answers):
        name = rubric.criteria[req.criterion_order[j]].name
        head += template.slot_line.format(name=name) + template.continuation(label) + template.slot_separator
    return head + template.slot_line.format(name=asked.name)


def encode(lm, template: Template, rubric: Rubric, req: Request) -> EncodedPrompt:
    """The request's prompt tokens and each option's continuation tokens (the exact label boundary)."""
    item, asked = req.item, rubric.criteria[req.criterion]
    if not isinstance(item.text, str) or not item.text.strip():
        raise PromptError(f"item {item.id!r}: the text is empty")
    where = (f"item {item.id!r}, slot {len(req.answers)} ({asked.name})" if req.slots
             else f"item {item.id!r}, criterion {asked.name!r}, ordering {req.ordering}")
    prompt = render(template, lm.tokenizer, rubric, req)
    return encode_prompt(lm.tokenizer, prompt, [template.continuation(o.label) for o in asked.options],
                         add_special_tokens=not template.chat, max_length=lm.max_length, where=where)


def item_prompts(lm, rubric: Rubric, item: Item, option_orders, template: Template) -> list[EncodedPrompt]:
    """Single-criterion prompts of one item, criterion-major: index c * K + k."""
    return [encode(lm, template, rubric, r) for r in single_requests(rubric, item, option_orders)]


# ---- option orders: shared (K, n) or per item (I, K, n) -----------------------------------------------------
def orders_of(option_orders: np.ndarray, i: int) -> np.ndarray:
    """The (K, n) option orders of item ``i``."""
    return option_orders[i] if option_orders.ndim == 3 else option_orders


# ---- the audit dump ---------------------------------------------------------------------------------------
def first_requests(rubric: Rubric, item: Item, option_orders, criterion_orders=None) -> list[Request]:
    """The requests an item starts with: every single-criterion prompt, or every ordering's first slot."""
    if criterion_orders is None:
        return single_requests(rubric, item, option_orders)
    return [slot_request(item, oo, co, (), k) for k, (oo, co) in enumerate(zip(option_orders, criterion_orders))]


def dump_record(template: Template, rubric: Rubric, req: Request, ep: EncodedPrompt) -> dict:
    asked = rubric.criteria[req.criterion]
    rec = {"item_id": req.item.id, "criterion": asked.name, "ordering": req.ordering,
           "option_order": list(req.option_order), "prompt": ep.prompt_text, "prompt_tokens": len(ep.prompt_ids),
           "add_special_tokens": not template.chat, "continuations": list(ep.continuations),
           "labels": asked.labels}
    if req.slots:
        rec.update(criterion_order=[rubric.criteria[c].name for c in req.criterion_order], slot=len(req.answers))
    return rec


def dump_prompts(lm, items: list[Item], rubric: Rubric, option_orders, template: Template, path,
                 *, criterion_orders=None) -> Path:
    """JSONL, one line per prompt (multi-criteria: each ordering's first slot; later slots extend it with the
    answers written before them): the prompt exactly as tokenized, its token count, and each option's
    continuation string (label + terminator, plus any prompt tail that tokenizes together with the label), so
    anyone can audit the numbers with a plain forward pass."""
    orders = validate(option_orders, rubric.n_options, per_item=True, n_items=len(items))
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8") as f:
        for i, it in enumerate(items):
            for req in first_requests(rubric, it, orders_of(orders, i), criterion_orders):
                rec = dump_record(template, rubric, req, encode(lm, template, rubric, req))
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return p
