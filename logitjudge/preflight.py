"""The checks that need the judge's tokenizer and config but not its weights (seconds, not the minutes of a
model load): run after :func:`logitjudge.design.prepare` and before :func:`~logitjudge.experiment.load_judge`,
so that a label the tokenizer cannot produce, a text past the model's context or a probe layer the model does not
have is refused before the load."""

from __future__ import annotations

import numpy as np

from .models import read_judge
from .requests import RequestPlan, orders_of, slot_request
from .spec import Experiment, SpecError


def preflight(exp: Experiment, lm=None):
    """The checks that need the judge's tokenizer and config but not its weights, run before the model loads:
    the labels (token prefixes of each other, labels the tokenizer cannot produce), every item's prompts against
    the model's context and the judge's token convention (:mod:`logitjudge.tokens`: one BOS first where the judge
    expects one, mended or refused as each prompt is encoded; the plan's ``mends`` go into the table's meta), and
    the probe's layers against the model's layer count (what needs no tokenizer was checked when the spec was
    prepared: :func:`logitjudge.design.prepare`). ``lm``: a judge already loaded (the Python API), whose tokenizer
    and config are checked before any item is scored.

    Returns the run's :class:`~logitjudge.requests.RequestPlan`, whose prompts read here stay encoded for the
    run; None for multi-criteria (its later slots follow the judge's answers: the run encodes them)."""
    judge = lm if lm is not None else read_judge(exp.paths.model)  # its tokenizer and config, no weights
    layers, n = exp.spec.probe.layers, judge.n_layers  # the probe's layers against the model's (None: unsaid)
    if exp.spec.probe.probes and layers and n is not None and any(not 0 <= x < n for x in layers):
        bad = [x for x in layers if not 0 <= x < n]
        raise SpecError(f"{exp.spec.where('probe', 'layers')}: layer {bad[0]} is outside 0..{n - 1} (the model "
                        f"has {n} layers, read from its config); choose layers in that range")
    context, rubric, orders = judge.max_length, exp.rubric, np.asarray(exp.option_orders)
    K = orders.shape[-2]
    if exp.rows is not None:  # pairwise / listwise: every row's first ordering, labels and context at once
        plan = RequestPlan(judge, exp.template, rubric, exp.rows, orders, max_length=context)
        for i in range(len(plan)):
            for c in range(rubric.n_criteria):
                plan.prompt(i, c * K)
        return plan
    if exp.criterion_orders is None:  # item 0's labels, then every item's first prompt of each criterion
        plan = RequestPlan(judge, exp.template, rubric, exp.items, orders, max_length=context)
        asks = [(0, c * K) for c in range(rubric.n_criteria)]
        asks += [(i, c * K, c) for i in range(len(plan)) for c in range(rubric.n_criteria)]
    else:  # every slot of the first ordering, the earlier slots holding their first label; then the last slot
        co = tuple(map(int, exp.criterion_orders[0]))
        answers = [rubric.criteria[c].options[0].label for c in co]
        plan = RequestPlan(judge, exp.template, rubric, exp.items, orders, max_length=context,
                           requests=lambda i: [slot_request(exp.items[i], orders_of(orders, i)[0], co, answers[:j])
                                               for j in range(len(co))])
        asks = [(0, j) for j in range(len(co))] + [(i, len(co) - 1, co[-1]) for i in range(len(plan))]
    for ask in asks:
        ep = plan.prompt(*ask[:2], check=False)
        if len(ask) == 3:
            _check_context(plan.units[ask[0]], rubric.criteria[ask[2]], ep, context)
    return None if exp.criterion_orders is not None else plan


def _check_context(item, criterion, ep, max_length: int) -> None:
    """An item's prompt with its criterion's longest label, as the run tokenizes it, against the model's context:
    a text past it is refused before any item is scored (the run's own check still holds every prompt to it
    exactly). The prompt and a label, tokenized together, are the prompt's tokens and the label's continuation."""
    labels = criterion.labels
    n_tokens = len(ep.prompt_ids) + len(ep.continuation_ids[labels.index(max(labels, key=len))])
    if n_tokens > max_length:
        raise SpecError(f"item {item.id!r}, criterion {criterion.name!r}: the prompt is {n_tokens:,} tokens long but "
                        f"the model's context is {max_length:,} tokens (from its config); shorten the text or use a "
                        "model with a longer context")
