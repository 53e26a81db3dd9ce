"""The checks that need the judge's tokenizer and config but not its weights (seconds, not the minutes of a
model load): run after :func:`logitjudge.experiment.prepare` and before :func:`~logitjudge.experiment.load_judge`,
so that a label the tokenizer cannot produce, a text past the model's context or a probe layer the model does not
have is refused before the load."""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .spec import Experiment, SpecError, model_source


def preflight(exp: Experiment, lm=None) -> None:
    """The checks that need the judge's tokenizer and config but not its weights, run before the model loads:
    the labels (token prefixes of each other, labels the tokenizer cannot produce), every item's prompts against
    the model's context, and the probe's layers against the model's layer count; first, without the tokenizer,
    :func:`check_run_files`. ``lm``: a judge already loaded (the Python API), whose tokenizer and config are
    checked before any item is scored."""
    from .models import config_layers, context_length, load_config, load_tokenizer
    from .requests import encode, first_requests, orders_of, slot_request

    check_run_files(exp)
    if lm is not None:
        tokenizer, config = lm.tokenizer, lm.model.config
    else:
        source = model_source(exp.spec)
        tokenizer, config = load_tokenizer(source), load_config(source)
    probe = _TokenizerOnly(tokenizer)
    if exp.rows is not None:  # pairwise / listwise: every row's first ordering, labels and context at once
        _check_rows(exp, tokenizer, context_length(config, tokenizer))
        return
    item, orders = exp.items[0], orders_of(np.asarray(exp.option_orders), 0)
    if exp.criterion_orders is None:
        requests = first_requests(exp.rubric, item, orders[:1])  # one per criterion
    else:  # every slot of the first ordering, the earlier slots holding their first label
        co = exp.criterion_orders[0]
        answers = [exp.rubric.criteria[c].options[0].label for c in co]
        requests = [slot_request(item, orders[0], co, answers[:j]) for j in range(len(co))]
    for req in requests:
        encode(probe, exp.template, exp.rubric, req)
    _check_context(exp, tokenizer, context_length(config, tokenizer))
    layers, n = exp.spec.probe.layers, config_layers(config)
    if exp.spec.probe.probes and layers and n is not None and any(not 0 <= x < n for x in layers):
        bad = [x for x in layers if not 0 <= x < n]
        raise SpecError(f"{exp.spec.where('probe', 'layers')}: layer {bad[0]} is outside 0..{n - 1} (the model "
                        f"has {n} layers, read from its config); choose layers in that range")


def check_run_files(exp: Experiment) -> None:
    """What the run checks when it starts, here before the model loads: the rubric's descriptions against a
    pointwise template that shows them, and each checkpoint the run would resume (a file that is not one, or
    whose first record, the run's settings, is damaged: :func:`logitjudge.checkpoint.check_file`)."""
    from .checkpoint import check_file
    from .prompts import shows_descriptions

    if exp.rows is None:
        exp.rubric.validate(need_descriptions=shows_descriptions(exp.template))
    # the [probe] section was checked by prepare (probe_settings): it probes when it names probes
    tables = {exp.table_path} | ({exp.probe_path} if exp.spec.probe.probes else set())
    for table in sorted(t for t in tables if t is not None):  # None: a Python call that writes no table
        parts = [Path(f"{table}.partial.jsonl")]  # and, under torchrun, each rank's
        if table.parent.is_dir():
            parts += sorted(table.parent.glob(f"{glob.escape(table.name)}.rank*.partial.jsonl"))
        for part in parts:
            check_file(part)


def _check_context(exp: Experiment, tokenizer, max_length: int, chunk: int = 256) -> None:
    """Every item's first prompt of each criterion (the last slot, multi-criteria) with its longest label,
    tokenized as the run tokenizes it, against the model's context: a text past it is refused before any item
    is scored (the run's own check still holds every prompt to it exactly)."""
    from .prompts import uses_chat
    from .requests import Request, orders_of, render

    rubric, template = exp.rubric, exp.template
    orders = np.asarray(exp.option_orders)
    asks = []  # (item, criterion name, request)
    for i, it in enumerate(exp.items):
        order = tuple(map(int, orders_of(orders, i)[0]))
        if exp.criterion_orders is None:
            asks += [(it, c, Request(it, order, (c,))) for c in range(rubric.n_criteria)]
        else:
            co = tuple(map(int, exp.criterion_orders[0]))
            answers = tuple(rubric.criteria[c].options[0].label for c in co[:-1])
            asks.append((it, co[-1], Request(it, order, co, answers, True)))
    for start in range(0, len(asks), chunk):
        part = asks[start:start + chunk]
        texts = []
        for _, c, req in part:
            longest = max(rubric.criteria[c].labels, key=len)
            texts.append(render(template, tokenizer, rubric, req) + template.continuation(longest))
        ids = tokenizer(texts, add_special_tokens=not uses_chat(template, tokenizer))["input_ids"]
        for (it, c, _), tokens in zip(part, ids):
            if len(tokens) > max_length:
                raise SpecError(f"item {it.id!r}, criterion {rubric.criteria[c].name!r}: the prompt is "
                                f"{len(tokens):,} tokens long but the model's context is {max_length:,} tokens "
                                "(from its config); shorten the text or use a model with a longer context")


def _check_rows(exp: Experiment, tokenizer, max_length: int) -> None:
    """A pairwise or listwise run's prompts of every row's first ordering, encoded as the run encodes them: its
    labels (each candidate's slot letter, the tie) and its length against the model's context (a row's prompt
    holds all its candidates' texts, so a long group is refused here, before the model loads)."""
    from .requests import orders_of, row_prompts

    probe = _TokenizerOnly(tokenizer, max_length=max_length)
    orders = np.asarray(exp.option_orders)
    for i, row in enumerate(exp.rows):
        row_prompts(probe, exp.rubric, row, orders_of(orders, i)[:1], exp.template)


@dataclass(frozen=True)
class _TokenizerOnly:
    tokenizer: object
    max_length: int | None = None
