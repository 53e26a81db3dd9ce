"""Several criteria in one prompt: greedy and marginal slot distributions against the plain path."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from logitjudge import orderings
from logitjudge.engine import Engine, distribution, plain_prompt_logprobs
from logitjudge.items import Item
from logitjudge.prompts import builtin_template
from logitjudge.requests import encode, slot_request
from logitjudge.rubric import Criterion, Rubric, ScoreOption
from logitjudge.runs import score_multi
from logitjudge.slots import MultiCriteriaError, marginal_cost

TEXT = "Once upon a time a cat sat on the mat and the dog barked at the moon while the sun rose slowly."


def mixed_rubric() -> Rubric:
    """Three criteria whose option labels differ, so a criterion read at the wrong slot would be caught."""
    def crit(name, labels):
        return Criterion(name, tuple(ScoreOption(float(i + 1), lab, f"level {lab}") for i, lab in enumerate(labels)),
                         f"the {name.lower()} of the text")
    return Rubric((crit("Coherence", ["1", "2", "3"]), crit("Fluency", ["Poor", "Fair", "Good"]),
                   crit("Empathy", ["low", "mid", "high"])), "Rate the text.")


def crossed_orders():
    return orderings.cross(orderings.shared_random(3, 2, rng=4), orderings.balanced(3))


def plain_slot(lm, tpl, rub, item, oo, co, answers):
    ep = encode(lm, tpl, rub, slot_request(item, oo, co, answers))
    return distribution(plain_prompt_logprobs(lm.model, [ep])[0])[0]


def test_greedy_matches_plain_path(tiny_lm):
    rub, tpl = mixed_rubric(), builtin_template("multi-criteria")
    oo, co = crossed_orders()
    item = Item("a", TEXT)
    table = score_multi(tiny_lm, [item], rub, oo, co, template=tpl, engine=Engine(tiny_lm, token_budget=256),
                        slots="greedy", progress=False)
    for k in range(len(oo)):
        answers = []
        for c in co[k]:
            ref = plain_slot(tiny_lm, tpl, rub, item, oo[k], co[k], answers)
            # indexed by the canonical criterion c, whatever its position j
            assert np.abs(table.probs[0, c, k] - ref).max() < 1e-5
            answers.append(rub.criteria[c].options[int(np.argmax(ref))].label)
    assert np.array_equal(table.criterion_orders, co)


def test_marginal_equals_brute_force(tiny_lm):
    rub, tpl = mixed_rubric(), builtin_template("multi-criteria")
    oo, co = orderings.fixed(3, 2), orderings.balanced(3)[[0, 4]]
    item = Item("a", TEXT)
    table = score_multi(tiny_lm, [item], rub, oo, co, template=tpl, slots="marginal", progress=False)
    for k in range(len(oo)):
        for j, c in enumerate(co[k]):
            marg = np.zeros(3)
            for path in itertools.product(range(3), repeat=j):
                labels = [rub.criteria[co[k][i]].options[a].label for i, a in enumerate(path)]
                w = 1.0
                for i in range(j):  # probability of the earlier answers, slot by slot
                    w *= plain_slot(tiny_lm, tpl, rub, item, oo[k], co[k], labels[:i])[path[i]]
                marg += w * plain_slot(tiny_lm, tpl, rub, item, oo[k], co[k], labels)
            assert np.abs(table.probs[0, c, k] - marg).max() < 1e-6


def test_marginal_budget_refused(tiny_lm):
    rub = mixed_rubric()
    with pytest.raises(MultiCriteriaError, match="greedy"):
        score_multi(tiny_lm, [Item("a", TEXT)], rub, orderings.fixed(3), orderings.fixed(3), slots="marginal",
                    max_continuations=marginal_cost(3, 3) - 1, progress=False)


def test_misaligned_orders_rejected(tiny_lm):
    with pytest.raises(MultiCriteriaError, match="aligned"):
        score_multi(tiny_lm, [Item("a", TEXT)], mixed_rubric(), orderings.fixed(3, 2), orderings.balanced(3),
                    progress=False)
