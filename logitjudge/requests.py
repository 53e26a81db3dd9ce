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
shown at. A request carries what it shows (its row and candidate rubric), so one request per (criterion,
ordering) of an item or a row, rendered, encoded and dumped by the same functions below.

A run's prompts are one :class:`RequestPlan`: every unit's requests, each encoded once when first read and kept
for the next reader (the preflight, the audit, the dump, the run's count and its steps) within a memory bound.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .candidates import LETTERS, Row
from .items import Item
from .orderings import inverse
from .prompts import EncodedPrompt, PromptError, Template, check_length, encode_prompt, uses_chat, wrap_chat
from .rubric import Criterion, Rubric, ScoreOption
from .tokens import convention


@dataclass(frozen=True)
class Request:
    """One prompt: ``item`` under ``option_order``, showing ``criterion_order``, asking the criterion at slot
    ``len(answers)``. ``slots``: the multi-criteria answer layout; ``ordering``: the ordering's index k. A
    pairwise / listwise request also carries its ``row`` and the candidate rubric it ``shows`` (its one
    criterion; ``option_order`` then holds the whole order, the tie label's slot too)."""

    item: Item
    option_order: tuple[int, ...]
    criterion_order: tuple[int, ...]
    answers: tuple[str, ...] = ()
    slots: bool = False
    ordering: int = 0
    row: Row | None = None
    shows: Rubric | None = None

    @property
    def criterion(self) -> int:
        """The canonical index of the asked criterion."""
        return self.criterion_order[len(self.answers)]


def single_requests(rubric: Rubric, item: Item, option_orders) -> list[Request]:
    """One request per (criterion, ordering) of an item, criterion-major: index c * K + k."""
    return [Request(item, tuple(map(int, order)), (c,), ordering=k)
            for c in range(rubric.n_criteria) for k, order in enumerate(option_orders)]


def slot_request(item: Item, option_order, criterion_order, answers=(), ordering: int = 0) -> Request:
    """The multi-criteria request for the slot after ``answers`` (labels of the earlier slots)."""
    return Request(item, tuple(map(int, option_order)), tuple(map(int, criterion_order)), tuple(answers), True,
                   ordering)


def unit_requests(rubric: Rubric, unit: Item | Row, option_orders, tie_label: str = "") -> list[Request]:
    """Every single-criterion request of an item, or every request of a candidate row (:func:`candidate_requests`),
    criterion-major: index c * K + k."""
    if isinstance(unit, Row):
        return candidate_requests(rubric, unit, option_orders, tie_label)
    return single_requests(rubric, unit, option_orders)


def render(template: Template, tokenizer, rubric: Rubric, req: Request) -> str:
    """The prompt text of a request, up to where the asked label starts."""
    rubric = req.shows or rubric
    asked = rubric.criteria[req.criterion]
    if req.slots:
        body = template.render_body(rubric, req.item.text, req.item.context, req.option_order, req.criterion_order)
        prefix = template.answer_prefix.format(name="")
    else:
        shown = Rubric((asked,), rubric.instructions, rubric.name)
        order = req.option_order[:len(req.row.candidates)] if req.row else req.option_order  # the tie: not listed
        body = template.render_body(shown, req.item.text, req.item.context, order)
        prefix = template.answer_prefix.format(name=asked.name)
    head = wrap_chat(tokenizer, body, prefix) if uses_chat(template, tokenizer) else body + prefix
    if not req.slots:
        return head
    for j, label in enumerate(req.answers):
        name = rubric.criteria[req.criterion_order[j]].name
        head += template.slot_line.format(name=name) + template.continuation(label) + template.slot_separator
    return head + template.slot_line.format(name=asked.name)


def where(rubric: Rubric, req: Request) -> str:
    """How an error names a request's prompt."""
    asked = (req.shows or rubric).criteria[req.criterion]
    if req.row is not None:
        return f"row {req.row.id!r}, criterion {asked.name!r}, ordering {req.ordering}"
    if req.slots:
        return f"item {req.item.id!r}, slot {len(req.answers)} ({asked.name})"
    return f"item {req.item.id!r}, criterion {asked.name!r}, ordering {req.ordering}"


def encode(judge, template: Template, rubric: Rubric, req: Request, *,
           max_length: int | None | str = "judge") -> EncodedPrompt:
    """The request's prompt tokens and each option's continuation tokens (the exact label boundary; canonical
    option order: a row's candidates, the tie last), with ``judge``'s tokenizer. A prompt and label longer than
    ``max_length`` is refused: "judge" (default), the judge's own context; None, not checked here (a
    :class:`RequestPlan` checks it when the prompt is read)."""
    texts = [(c, f"item {c.id!r} (a candidate of {req.row.id!r})") for c in req.row.candidates] if req.row else \
        [(req.item, f"item {req.item.id!r}")]
    for it, name in texts:
        if not isinstance(it.text, str) or not it.text.strip():
            raise PromptError(f"{name}: the text is empty")
    asked = (req.shows or rubric).criteria[req.criterion]
    tok, labels = judge.tokenizer, [template.continuation(o.label) for o in asked.options]
    return encode_prompt(tok, render(template, tok, rubric, req), labels,
                         add_special_tokens=not uses_chat(template, tok), where=where(rubric, req),
                         max_length=judge.max_length if max_length == "judge" else max_length)


def item_prompts(lm, rubric: Rubric, unit: Item | Row, option_orders, template: Template) -> list[EncodedPrompt]:
    """The prompts of one item (single-criterion) or candidate row, criterion-major: index c * K + k."""
    return [encode(lm, template, rubric, r) for r in unit_requests(rubric, unit, option_orders, template.tie_label)]


# ---- option orders: shared (K, n) or per item (I, K, n) -----------------------------------------------------
def orders_of(option_orders: np.ndarray, i: int) -> np.ndarray:
    """The (K, n) option orders of item ``i``."""
    return option_orders[i] if option_orders.ndim == 3 else option_orders


# ---- a run's prompts, encoded once ------------------------------------------------------------------------
# prompt tokens a plan keeps for its next reader (about 40 bytes a token): a run of that size encodes each prompt
# once; past it, a prompt read again (the run's count, then its steps) is encoded again
KEEP_ENCODED = 2_000_000


class RequestPlan:
    """Every prompt of a run: ``units`` (items, or the candidate rows of a pairwise / listwise run) under
    ``option_orders`` ((K, n) shared or (units, K, n)), each unit's requests criterion-major (c * K + k;
    ``requests``: another list per unit, e.g. the multi-criteria dump's first slots).

    Lazy: a prompt is rendered and encoded (with ``judge``'s tokenizer: a :class:`~logitjudge.models.Judge`,
    weights or not) when first read, and kept for the next reader while the kept prompts hold at most
    :data:`KEEP_ENCODED` tokens; a reader that is a prompt's last (the run's steps) takes it out. ``max_length``:
    the longest prompt and label, checked on each read that asks for it (default: the judge's context; a run
    sets its engine's, :meth:`~logitjudge.models.Judge.max_length_on`)."""

    def __init__(self, judge, template: Template, rubric: Rubric, units, option_orders, *, max_length=None,
                 requests=None):
        self.judge, self.template, self.rubric = judge, template, rubric
        self.tokenizer = judge.tokenizer
        self.units, self.option_orders = list(units), np.asarray(option_orders)
        self.max_length = judge.max_length if max_length is None else max_length
        self._requests = requests or self._unit_requests
        self._last: tuple = (None, [])  # the requests of the unit read last
        self._kept: dict[tuple[int, int], EncodedPrompt] = {}
        self._tokens = 0
        self.mends: set[str] = set()  # what the judge's token convention mended in the prompts read so far
        self.encoded = 0  # prompts encoded so far

    def __len__(self) -> int:
        return len(self.units)

    def _unit_requests(self, i: int) -> list[Request]:
        return unit_requests(self.rubric, self.units[i], orders_of(self.option_orders, i), self.template.tie_label)

    def requests(self, i: int) -> list[Request]:
        """Unit ``i``'s requests (no encoding)."""
        if self._last[0] != i:
            self._last = (i, self._requests(i))
        return self._last[1]

    def prompt(self, i: int, j: int, *, keep: bool = True, check: bool = True) -> EncodedPrompt:
        """Request ``j`` of unit ``i``, encoded: the kept one, else encoded now (and kept while the bound allows,
        unless ``keep`` is False: then it is taken out). ``check``: refuse a prompt past ``max_length``."""
        ep = self._kept.get((i, j)) if keep else self._kept.pop((i, j), None)
        if ep is None:
            ep = encode(self.judge, self.template, self.rubric, self.requests(i)[j], max_length=None)
            self.encoded += 1
            if ep.mended:
                self.mends.add(ep.mended)
            if keep and self._tokens + len(ep.prompt_ids) <= KEEP_ENCODED:
                self._kept[(i, j)] = ep
                self._tokens += len(ep.prompt_ids)
        elif not keep:
            self._tokens -= len(ep.prompt_ids)
        if check and self.max_length is not None and \
                len(ep.prompt_ids) + max(map(len, ep.continuation_ids)) > self.max_length:
            check_length(ep.prompt_ids, ep.continuation_ids, self.max_length, where(self.rubric, self.requests(i)[j]))
        return ep

    def prompts(self, i: int, *, keep: bool = True) -> list[EncodedPrompt]:
        """Every prompt of unit ``i``, in its requests' order (:meth:`prompt`)."""
        return [self.prompt(i, j, keep=keep) for j in range(len(self.requests(i)))]

    def fits(self, units, rubric: Rubric, option_orders, template: Template) -> bool:
        """Whether this plan holds the prompts of these settings (a run takes a plan made before it only then)."""
        orders = np.asarray(option_orders)
        return (self.rubric == rubric and self.template == template and len(units) == len(self.units)
                and all(a is b for a, b in zip(units, self.units)) and orders.shape == self.option_orders.shape
                and bool((orders == self.option_orders).all()))


def demo_plan(lm, *, items: int | None = None, orderings: int | None = None) -> RequestPlan:
    """The built-in demo texts (the first ``items``) under the first ``orderings`` balanced orders of the default
    rubric, default template: the fixed workload of the golden numbers (tests/golden.py), bf16's calibration
    (:func:`logitjudge.autodtype.calibration_plan`) and ``benchmarks.bf16_error``."""
    from .items import read_items
    from .orderings import balanced
    from .prompts import load_template
    from .rubric import builtin_rubric

    texts = read_items(Path(__file__).parent / "demo" / "texts.jsonl")[:items]
    return RequestPlan(lm, load_template(None), builtin_rubric("default"), texts, balanced(5)[:orderings])


def token_meta(plan: RequestPlan) -> dict:
    """What a table's meta says of the judge's tokens: its convention (:mod:`logitjudge.tokens`: BOS expected or
    not, and where that was read) and what was mended in the plan's prompts (its first prompt read if none was,
    as in a run resumed with every item saved: every prompt of a judge and template starts alike)."""
    if len(plan) and not plan.encoded:
        plan.prompt(0, 0, check=False)
    return {**convention(plan.tokenizer).meta(), "mended": sorted(plan.mends)}


# ---- the audit dump ---------------------------------------------------------------------------------------
def first_requests(rubric: Rubric, item: Item, option_orders, criterion_orders=None) -> list[Request]:
    """The requests an item starts with: every single-criterion prompt, or every ordering's first slot."""
    if criterion_orders is None:
        return single_requests(rubric, item, option_orders)
    return [slot_request(item, oo, co, (), k) for k, (oo, co) in enumerate(zip(option_orders, criterion_orders))]


def dump_record(template: Template, rubric: Rubric, req: Request, ep: EncodedPrompt, *, chat: bool) -> dict:
    """One prompt of the dump; ``chat``: whether it went through the judge's chat template (:func:`uses_chat`).
    A candidate request's record adds ``paradigm`` and ``candidates`` (the item ids, canonical order)."""
    asked = (req.shows or rubric).criteria[req.criterion]
    rec = {"item_id": req.item.id, "criterion": asked.name, "ordering": req.ordering,
           "option_order": list(req.option_order), "prompt": ep.prompt_text, "prompt_tokens": len(ep.prompt_ids),
           "add_special_tokens": not chat, "chat": chat, "continuations": list(ep.continuations),
           "labels": asked.labels}
    if req.slots:
        rec.update(criterion_order=[rubric.criteria[c].name for c in req.criterion_order], slot=len(req.answers))
    if req.row is not None:
        rec.update(paradigm=template.paradigm, candidates=req.row.candidate_ids)
    return rec


def dump_prompts(plan: RequestPlan, path) -> Path:
    """JSONL, one line per prompt of the plan (multi-criteria: each ordering's first slot; later slots extend it
    with the answers written before them): the prompt exactly as tokenized, its token count, and each option's
    continuation string (label + terminator, plus any prompt tail that tokenizes together with the label), so
    anyone can audit the numbers with a plain forward pass. A pairwise or listwise plan's records: ``item_id`` is
    the row's id, ``labels`` each candidate's letter in canonical order (the tie last), ``option_order`` the
    candidate at each slot."""
    p, chat = Path(path), uses_chat(plan.template, plan.tokenizer)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8") as f:
        for i in range(len(plan)):
            for j, req in enumerate(plan.requests(i)):
                rec = dump_record(plan.template, plan.rubric, req, plan.prompt(i, j), chat=chat)
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


def candidate_requests(rubric: Rubric, row: Row, option_orders, tie_label: str = "") -> list[Request]:
    """One request per (criterion, ordering) of a row, criterion-major: index c * K + k, showing its candidate
    rubric (the candidate slots are listed; the tie label, last in every order, is not)."""
    m = len(row.candidates)
    out = []
    for crit in rubric.criteria:
        for k, order in enumerate(option_orders):
            order = tuple(map(int, order))
            if tie_label and order[m:] != (m,):
                raise PromptError(f"row {row.id!r}, ordering {k}: the tie label must stay last, got order {order}")
            crub = candidate_rubric(crit, row, order, tie_label=tie_label, instructions=rubric.instructions,
                                    name=rubric.name)
            out.append(Request(row.item, order, (0,), ordering=k, row=row, shows=crub))
    return out
