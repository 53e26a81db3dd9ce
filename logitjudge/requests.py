"""Requests: every prompt the judge is asked, rendered and encoded by one function.

A request is one question to the judge about one item under one option order: which criteria the prompt shows
(in which order), which criterion is asked, and, for several criteria in one prompt, the labels already written
to the earlier answer slots. Single-criterion prompts show the asked criterion alone and end in its named answer
prefix (``Quality score: ``); multi-criteria prompts show every criterion, a plain answer prefix, one forced
``Criterion: label`` line per earlier slot and the forced prefix of the asked slot. Chat templates wrap the body
in the tokenizer's chat template in both cases. The ``--dump-prompts`` JSONL is written from the same requests.

Option orders are either shared by all items, ``(K, n)``, or per item, ``(I, K, n)``: item ``i`` uses its own
rows (:func:`orders_of`).

Pairwise and listwise prompts are the same requests on a candidate rubric (:func:`candidate_rubric`): the
options are a row's candidates (:mod:`logitjudge.candidates`), each labelled by the letter of the slot it is
shown at, so one request per (criterion, ordering) of a row, rendered, encoded and dumped by the functions
below.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .candidates import LETTERS, POINTWISE, Row
from .items import Item
from .orderings import inverse, validate
from .prompts import EncodedPrompt, PromptError, Template, encode_prompt, uses_chat, wrap_chat
from .rubric import Criterion, Rubric, ScoreOption


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


def default_template(multi: bool, paradigm: str = POINTWISE) -> str:
    """The built-in template a run uses when none is given (pairwise and listwise: the template of that name)."""
    if paradigm != POINTWISE:
        return paradigm
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
    head = wrap_chat(tokenizer, body, prefix) if uses_chat(template, tokenizer) else body + prefix
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
                         add_special_tokens=not uses_chat(template, lm.tokenizer), max_length=lm.max_length,
                         where=where)


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


def dump_record(template: Template, rubric: Rubric, req: Request, ep: EncodedPrompt, *, chat: bool) -> dict:
    """One prompt of the dump; ``chat``: whether it went through the judge's chat template (:func:`uses_chat`)."""
    asked = rubric.criteria[req.criterion]
    rec = {"item_id": req.item.id, "criterion": asked.name, "ordering": req.ordering,
           "option_order": list(req.option_order), "prompt": ep.prompt_text, "prompt_tokens": len(ep.prompt_ids),
           "add_special_tokens": not chat, "chat": chat, "continuations": list(ep.continuations),
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
    p, chat = Path(path), uses_chat(template, lm.tokenizer)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8") as f:
        for i, it in enumerate(items):
            for req in first_requests(rubric, it, orders_of(orders, i), criterion_orders):
                rec = dump_record(template, rubric, req, encode(lm, template, rubric, req), chat=chat)
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return p


# ---- candidates: pairwise and listwise prompts -------------------------------------------------------------
def candidate_rubric(criterion: Criterion, row: Row, order, *, tie_label: str = "", instructions: str = "",
                     name: str = "candidates") -> Rubric:
    """The candidates of ``row`` as a one-criterion rubric under ``order`` (the candidate at each slot): option c
    is candidate c (canonical order) with the letter of the slot it is shown at as its label and its text as
    its description; the tie label, if any, is one more option after them (value 0; never listed). Values are
    the candidates' numbers 1..m: identifiers, not scores."""
    pos = inverse(np.asarray(order)[None, :len(row.candidates)])[0]
    opts = [ScoreOption(float(c + 1), LETTERS[pos[c]], cand.text) for c, cand in enumerate(row.candidates)]
    if tie_label:
        opts.append(ScoreOption(0.0, tie_label, "a tie"))
    return Rubric((Criterion(criterion.name, tuple(opts), criterion.description),), instructions, name)


def candidate_requests(rubric: Rubric, row: Row, option_orders, tie_label: str = "") -> list[tuple]:
    """(candidate rubric, request) per (criterion, ordering) of a row, criterion-major: index c * K + k. The
    request shows the candidate slots only (the tie label, last in every order, is not listed)."""
    m = len(row.candidates)
    out = []
    for crit in rubric.criteria:
        for k, order in enumerate(option_orders):
            order = tuple(map(int, order))
            if tie_label and order[m:] != (m,):
                raise PromptError(f"row {row.id!r}, ordering {k}: the tie label must stay last, got order {order}")
            crub = candidate_rubric(crit, row, order, tie_label=tie_label, instructions=rubric.instructions,
                                    name=rubric.name)
            out.append((crub, Request(row.item, order[:m], (0,), ordering=k)))
    return out


def encode_candidates(lm, template: Template, crub: Rubric, req: Request, row: Row) -> EncodedPrompt:
    """A candidate request's prompt tokens and each label's continuation tokens (canonical candidate order, the
    tie last): :func:`render` and the exact label boundary of rubric prompts."""
    for cand in row.candidates:
        if not isinstance(cand.text, str) or not cand.text.strip():
            raise PromptError(f"item {cand.id!r} (a candidate of {row.id!r}): the text is empty")
    where = f"row {row.id!r}, criterion {crub.criteria[0].name!r}, ordering {req.ordering}"
    prompt = render(template, lm.tokenizer, crub, req)
    return encode_prompt(lm.tokenizer, prompt, [template.continuation(lab) for lab in crub.criteria[0].labels],
                         add_special_tokens=not uses_chat(template, lm.tokenizer), max_length=lm.max_length,
                         where=where)


def row_prompts(lm, rubric: Rubric, row: Row, option_orders, template: Template) -> list[EncodedPrompt]:
    """Every prompt of one candidate row, criterion-major: index c * K + k (as :func:`item_prompts`)."""
    return [encode_candidates(lm, template, crub, req, row)
            for crub, req in candidate_requests(rubric, row, option_orders, template.tie_label)]


def dump_candidate_prompts(lm, rows: list[Row], rubric: Rubric, option_orders, template: Template, path,
                           *, paradigm: str) -> Path:
    """The ``--dump-prompts`` JSONL of a pairwise or listwise run: the records of :func:`dump_prompts` (``item_id``
    is the row's id, ``labels`` each candidate's letter in canonical order, the tie last; ``option_order`` the
    candidate at each slot) plus ``paradigm`` and ``candidates`` (the item ids, canonical order)."""
    orders = validate(option_orders, per_item=True, n_items=len(rows))
    p, chat = Path(path), uses_chat(template, lm.tokenizer)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8") as f:
        for i, row in enumerate(rows):
            for crub, req in candidate_requests(rubric, row, orders_of(orders, i), template.tie_label):
                rec = dump_record(template, crub, req, encode_candidates(lm, template, crub, req, row), chat=chat)
                rec.update(paradigm=paradigm, candidates=row.candidate_ids,
                           option_order=[int(x) for x in orders_of(orders, i)[req.ordering]])
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return p
