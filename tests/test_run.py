"""The request layer and the Run: per-item option orders, the one dump, the checkpoint's batch records."""

from __future__ import annotations

import json

import numpy as np
import pytest

from logitjudge import orderings
from logitjudge.checkpoint import Checkpoint
from logitjudge.engine import Engine, distribution, plain_prompt_logprobs
from logitjudge.items import Item
from logitjudge.orderings import OrderingError
from logitjudge.prompts import builtin_template
from logitjudge.requests import (
    RequestPlan,
    dump_prompts,
    encode,
    first_requests,
    item_prompts,
    single_requests,
    slot_request,
)
from logitjudge.rubric import Criterion, Rubric, ScoreOption, builtin_rubric
from logitjudge.runs import Run

TEXTS = ["Once upon a time a cat sat on the mat.", "The economy grew by three percent, the article says.",
         "A dog barked at the moon while the sun rose slowly."]


def two_criteria() -> Rubric:
    def crit(name, labels):
        return Criterion(name, tuple(ScoreOption(float(i + 1), lab, f"level {lab}") for i, lab in enumerate(labels)),
                         f"the {name.lower()} of the text")
    return Rubric((crit("Coherence", ["1", "2", "3"]), crit("Fluency", ["Poor", "Fair", "Good"])), "Rate the text.")


def items() -> list[Item]:
    return [Item(f"i{k}", t) for k, t in enumerate(TEXTS)]


def per_item_orders(n_items: int, k: int, n: int) -> np.ndarray:
    return np.stack([orderings.shared_random(n, k, rng=10 + i) for i in range(n_items)])  # (I, K, n)


@pytest.mark.parametrize("multi", [False, True], ids=["single", "multi"])
def test_per_item_option_orders_use_the_items_own_rows(tiny_lm, multi):
    """(I, K, n) option orders: item i's records equal a run of item i alone under its own (K, n) orders."""
    rub, its = two_criteria(), items()
    orders = per_item_orders(len(its), 2, 3)
    kw = {"criterion_orders": np.array([[0, 1], [1, 0]])} if multi else {}
    engine = Engine(tiny_lm, token_budget=256)
    got = Run(tiny_lm, its, rub, orders, engine=engine, progress=False, **kw).records(Checkpoint(None, "x"))
    for i, it in enumerate(its):
        alone = Run(tiny_lm, [it], rub, orders[i], engine=engine, progress=False, **kw).records(Checkpoint(None, "y"))
        assert np.abs(got[it.id][0] - alone[it.id][0]).max() <= 1e-6
        assert np.abs(got[it.id][1] - alone[it.id][1]).max() <= 1e-6
    # and the single-criterion numbers are the plain path's under that item's own orders
    if not multi:
        eps = item_prompts(tiny_lm, rub, its[1], orders[1], builtin_template("text-first"))
        plain = [distribution(lp)[0] for lp in plain_prompt_logprobs(tiny_lm.model, eps)]
        K = orders.shape[1]
        for p, ref in enumerate(plain):
            assert np.abs(got["i1"][0][p // K, p % K] - ref).max() < 1e-5


def test_per_item_orders_are_checked(tiny_lm):
    bad = per_item_orders(2, 2, 3)  # 2 items' orders for 3 items
    with pytest.raises(OrderingError, match="for 3 items"):
        Run(tiny_lm, items(), two_criteria(), bad, progress=False)
    bad = per_item_orders(3, 2, 3)
    bad[2, 1] = [0, 0, 1]
    with pytest.raises(OrderingError, match="not a permutation"):
        Run(tiny_lm, items(), two_criteria(), bad, progress=False)


def test_one_dump_for_single_and_multi_criteria(tiny_lm, tmp_path):
    rub, its = two_criteria(), items()[:2]
    orders = per_item_orders(2, 2, 3)
    tpl = builtin_template("text-first")
    single = [json.loads(x) for x in dump_prompts(RequestPlan(tiny_lm, tpl, rub, its, orders), tmp_path / "s.jsonl")
              .read_text(encoding="utf-8").splitlines()]
    assert len(single) == 2 * 2 * 2  # items x criteria x orderings
    assert [r["option_order"] for r in single[:2]] == orders[0].tolist()
    assert [r["option_order"] for r in single[4:6]] == orders[1].tolist()  # the second item's own orders
    assert single[2]["criterion"] == "Fluency" and single[2]["labels"] == ["Poor", "Fair", "Good"]
    assert "slot" not in single[0]
    ep = encode(tiny_lm, tpl, rub, single_requests(rub, its[0], orders[0])[0])
    assert single[0]["prompt"] == ep.prompt_text and single[0]["prompt_tokens"] == len(ep.prompt_ids)
    co = np.array([[1, 0], [0, 1]])
    mtpl = builtin_template("multi-criteria")
    firsts = RequestPlan(tiny_lm, mtpl, rub, its, orders, requests=lambda i: first_requests(rub, its[i], orders[i], co))
    multi = [json.loads(x) for x in dump_prompts(firsts, tmp_path / "m.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(multi) == 2 * 2 and multi[0]["slot"] == 0
    assert multi[0]["criterion_order"] == ["Fluency", "Coherence"] and multi[0]["criterion"] == "Fluency"
    ep = encode(tiny_lm, mtpl, rub, slot_request(its[0], orders[0][0], co[0]))
    assert multi[0]["prompt"] == ep.prompt_text and multi[0]["continuations"] == list(ep.continuations)


def test_checkpoint_keeps_whole_batches_and_leaves_nothing_before_the_first(tmp_path):
    out = tmp_path / "t.npz"
    ck = Checkpoint(out, "fp1")
    assert ck.done == {} and not list(tmp_path.glob("*.partial.jsonl"))  # nothing before a batch is finished
    a = (np.array([[[0.25, 0.75]]]), np.array([[0.5]]))
    b = (np.array([[[1 / 3, 2 / 3]]]), np.array([[0.1 + 0.2]]))
    ck.add_batch({"x": a, "y": b})
    path = tmp_path / "t.npz.partial.jsonl"
    assert len(path.read_text(encoding="utf-8").splitlines()) == 2  # the header + one record for the batch
    with path.open("a", encoding="utf-8") as f:
        f.write('{"batch": {"z": [[[0.5, ')  # a record cut by a kill
    ck.close()  # release the run lock: the same --out may be resumed
    again = Checkpoint(out, "fp1")
    assert set(again.done) == {"x", "y"}
    assert np.array_equal(again.done["y"][0], b[0]) and again.done["y"][1][0, 0] == 0.1 + 0.2  # exact floats
    again.close()
    other = Checkpoint(out, "fp2")  # other settings: replaced, never blocking the run
    assert other.done == {} and not path.exists()
    other.finish()
    assert not list(tmp_path.iterdir())  # finished: neither checkpoint nor lock left


def test_rerun_reuses_a_finished_table_and_replaces_other_settings(tiny_lm, tmp_path, caplog):
    from logitjudge.runs import score

    out = tmp_path / "t.npz"
    rub = builtin_rubric("default")
    t1 = score(tiny_lm, items()[:2], rub, orderings.fixed(5), out=out, progress=False)
    stamp = out.stat().st_mtime_ns
    t2 = score(tiny_lm, items()[:2], rub, orderings.fixed(5), out=out, progress=False)
    assert out.stat().st_mtime_ns == stamp and np.array_equal(t1.probs, t2.probs)
    with caplog.at_level("WARNING"):
        t3 = score(tiny_lm, items()[:2], rub, orderings.fixed(5, 2), out=out, progress=False)
    assert t3.shape[2] == 2 and "replaces it" in caplog.text


@pytest.mark.parametrize("mode", ["single", "marginal", "greedy"])
def test_plan_counts_the_tokens_the_engine_runs(tiny_lm, mode, monkeypatch):
    """A run's plan (its start line and the bar's total) counts the trie tokens the engine then runs: exactly,
    but for greedy slots, whose later prompts follow the judge's answers (an estimate, said so). The prompts the
    plan encodes are kept for the run (in its request plan): each prompt is encoded once."""
    from logitjudge import requests as requests_mod

    rub = two_criteria()
    kw = {} if mode == "single" else {"criterion_orders": np.array([[0, 1], [1, 0]]), "slots": mode}
    engine = Engine(tiny_lm, token_budget=256)
    r = Run(tiny_lm, items(), rub, per_item_orders(3, 2, 3), engine=engine, progress=False, **kw)
    encoded = []
    real = requests_mod.encode
    monkeypatch.setattr(requests_mod, "encode", lambda *a, **kw: encoded.append(a[3].item.id) or real(*a, **kw))
    ckpt = Checkpoint(None, "p")
    plan = r.plan([0, 1, 2], ckpt)
    r.records(ckpt)
    ran = engine.stats["tokens"]
    assert plan.items == 3 and plan.saved == 0 and plan.prompts == 3 * 2 * 2
    if mode == "greedy":
        assert plan.estimate and abs(plan.tokens - ran) <= 0.1 * ran
    else:
        assert not plan.estimate and plan.tokens == ran
    if mode == "single":
        assert plan.batches >= 2 and sorted(encoded) == sorted(["i0", "i1", "i2"] * 4)  # each prompt once
        monkeypatch.setattr(requests_mod, "KEEP_ENCODED", 0)  # nothing kept: the run encodes them again
        encoded.clear()
        r.plan([0, 1, 2], Checkpoint(None, "p"))
        r.records(Checkpoint(None, "p"))
        assert sorted(encoded) == sorted(["i0", "i1", "i2"] * 8)
