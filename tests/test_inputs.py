"""Rubrics, orderings, prompts and the table: validation, label boundaries and clear errors on bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from logitjudge import orderings
from logitjudge.items import Item, ItemError, read_items
from logitjudge.prompts import PromptError, Template, builtin_template, encode_prompt
from logitjudge.requests import item_prompts
from logitjudge.rubric import Criterion, Rubric, RubricError, ScoreOption, builtin_rubric, likert
from logitjudge.runs import score
from logitjudge.table import ScoreTable, TableError


# ---- rubrics ------------------------------------------------------------------------------------------------
def test_rubric_roundtrip(tmp_path):
    r = builtin_rubric("default")
    for ext in ("toml", "json"):
        p = r.save(tmp_path / f"r.{ext}")
        assert Rubric.load(p) == r


@pytest.mark.parametrize("crits, match", [
    ([{"name": "Q", "options": [{"value": 1, "label": "1"}, {"value": 2, "label": "1"}]}], "duplicate option labels"),
    ([{"name": "Q", "options": [{"value": 1, "label": "a"}, {"value": 1, "label": "b"}]}], "duplicate option values"),
    ([{"name": "Q", "options": [{"value": 1}]}], "at least 2"),
    ([{"name": "A", "options": [{"value": 1}, {"value": 2}]},
      {"name": "B", "options": [{"value": 1}, {"value": 2}, {"value": 3}]}], "same number of options"),
    ([{"name": "Q", "options": [{"value": "high"}, {"value": 2}]}], "not a number"),
])
def test_rubric_validation_names_the_problem(crits, match):
    with pytest.raises(RubricError, match=match):
        Rubric.from_dict({"criteria": crits})


def test_empty_descriptions_refused_where_the_template_shows_them(tiny_lm):
    r = Rubric.from_dict({"criteria": [{"name": "Q", "description": "quality",
                                        "options": [{"value": 1}, {"value": 2, "description": "good"}]}]})
    with pytest.raises(RubricError, match="empty 'description'"):
        score(tiny_lm, [Item("a", "a text")], r, progress=False)


def test_malformed_rubric_file(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("criteria = [ {name = 'Q' ", encoding="utf-8")
    with pytest.raises(RubricError, match="not valid TOML"):
        Rubric.load(p)
    q = tmp_path / "r.yaml"
    q.write_text("x", encoding="utf-8")
    with pytest.raises(RubricError, match="use .toml or .json"):
        Rubric.load(q)


# ---- orderings ----------------------------------------------------------------------------------------------
def test_balanced_orders_match_the_study():
    b = orderings.balanced(5) + 1
    assert b[:2].tolist() == [[1, 2, 3, 4, 5], [2, 3, 4, 5, 1]]
    assert b[5:7].tolist() == [[5, 4, 3, 2, 1], [4, 3, 2, 1, 5]]
    for n in range(2, 9):
        assert orderings.is_balanced(orderings.balanced(n))
        assert orderings.balanced(n).shape == (2 * n, n)
    assert not orderings.is_balanced(orderings.fixed(5, 10))
    assert not orderings.is_balanced(orderings.balanced(5)[:7])


def test_random_and_parse():
    a = orderings.shared_random(5, 8, rng=3)
    assert np.array_equal(a, orderings.shared_random(5, 8, rng=3))
    assert orderings.parse("shared-random:4", 5, seed=1).shape == (4, 5)
    assert orderings.parse("random:4", 5, seed=1, n_items=3).shape == (3, 4, 5)
    assert orderings.parse("fixed:3", 5).tolist() == [[0, 1, 2, 3, 4]] * 3
    with pytest.raises(orderings.OrderingError, match="random:10"):
        orderings.parse("random:x", 5)
    with pytest.raises(orderings.OrderingError, match="not a permutation"):
        orderings.validate([[0, 0, 1]])
    inv = orderings.inverse(a)
    for k in range(len(a)):
        assert np.array_equal(a[k][inv[k]], np.arange(5))


# ---- label boundary -----------------------------------------------------------------------------------------
def test_boundary_when_the_space_merges_into_the_label(tiny_lm):
    ep = encode_prompt(tiny_lm.tokenizer, "Quality score: ", ["1", "2", "5"])
    # this tokenizer writes "▁5" as one token: the space belongs to the continuation
    assert ep.prompt_text == "Quality score:"
    assert ep.continuations == (" 1", " 2", " 5")
    assert all(len(c) == 1 for c in ep.continuation_ids)
    full = tiny_lm.tokenizer("Quality score: 5").input_ids
    assert list(ep.prompt_ids) + list(ep.continuation_ids[2]) == full


@pytest.mark.slow
def test_boundary_with_gemma_lone_space(gemma_lm):
    ep = encode_prompt(gemma_lm.tokenizer, "Score: ", ["1", "2", "3"])
    toks = gemma_lm.tokenizer.convert_ids_to_tokens(list(ep.prompt_ids))
    assert toks[-1] == "▁" and ep.prompt_text == "Score: "  # Gemma: "Score: " ends in a lone "▁" token
    assert ep.continuations == ("1", "2", "3")
    with pytest.raises(PromptError, match="terminator"):
        encode_prompt(gemma_lm.tokenizer, "Score: ", ["1", "10"])
    ok = encode_prompt(gemma_lm.tokenizer, "Rating: [[", ["1]]", "10]]"])
    assert len(ok.continuation_ids[1]) == 3


def test_prefix_labels_need_a_terminator(tiny_lm):
    with pytest.raises(PromptError, match="terminator"):
        encode_prompt(tiny_lm.tokenizer, "Score: ", ["1", "1 0"])
    r = Rubric((likert("Rating", "overall", [f"level {i}" for i in range(1, 11)]),), "Rate.")
    eps = item_prompts(tiny_lm, r, Item("a", "a text"), orderings.fixed(10), builtin_template("bracketed"))
    assert len(eps[0].continuation_ids) == 10


def test_unproducible_label(tiny_lm):
    with pytest.raises(PromptError, match="cannot produce"):
        encode_prompt(tiny_lm.tokenizer, "Score: ", ["1", "\u2603"])


def test_text_longer_than_context(tiny_lm):
    r = builtin_rubric("default")
    long = Item("long", "the cat sat on the mat " * 600)
    with pytest.raises(PromptError, match=r"tokens long but the model's context is 2048"):
        item_prompts(tiny_lm, r, long, orderings.fixed(5), Template())


def test_empty_text_and_bad_texts_file(tmp_path, tiny_lm):
    with pytest.raises(PromptError, match="empty"):
        item_prompts(tiny_lm, builtin_rubric("default"), Item("e", "   "), orderings.fixed(5), Template())
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({"id": "a", "text": ""}) + "\n", encoding="utf-8")
    with pytest.raises(ItemError, match="'text' is empty"):
        read_items(p)
    p.write_text('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', encoding="utf-8")
    with pytest.raises(ItemError, match="duplicate id"):
        read_items(p)
    p.write_text('{"id": "a"\n', encoding="utf-8")
    with pytest.raises(ItemError, match="not valid JSON"):
        read_items(p)


def test_template_file(tmp_path):
    p = tmp_path / "mine.toml"
    p.write_text('base = "text-first"\nbody = "{instructions} {text}"\n', encoding="utf-8")
    with pytest.raises(PromptError, match=r"\{rubric\}"):
        Template.load(p)
    p.write_text('body = "{text}\\n{rubric}"\nanswr = 1\n', encoding="utf-8")
    with pytest.raises(PromptError, match="unknown keys"):
        Template.load(p)


# ---- table --------------------------------------------------------------------------------------------------
def test_table_views_and_files(tmp_path, tiny_lm):
    r = Rubric((builtin_rubric("default").criteria[0], likert("Style", "style", ["a", "b", "c", "d", "e"])), "Rate.")
    items = [Item("x", "The cat sat on the mat.", group="g1"), Item("y", "A dog barked.", group="g1")]
    t = score(tiny_lm, items, r, orderings.balanced(5), progress=False)
    assert t.shape == (2, 2, 10, 5)
    pbp = t.probs_by_position()
    k = 3
    assert np.allclose(pbp[0, 0, k], t.probs[0, 0, k, t.option_orders[k]])
    assert np.allclose(t.expected_score(), (t.probs * t.values[None, :, None, :]).sum(-1))
    assert set(np.unique(t.argmax_score())) <= set(range(1, 6))
    t.save(tmp_path / "t.npz")
    t2 = ScoreTable.load(tmp_path / "t.npz")
    assert np.array_equal(t2.probs, t.probs) and t2.meta["model_id"] == "tiny-random-gemma3"
    assert list(t2.item_groups) == ["g1", "g1"]
    df = t.to_dataframe()
    assert len(df) == 2 * 2 * 10 * 5
    row = df[(df.item_id == "x") & (df.criterion == "Style") & (df.ordering == k)].sort_values("option")
    assert np.allclose(row.prob.to_numpy(), t.probs[0, 1, k])
    t.to_parquet(tmp_path / "t.parquet")
    with pytest.raises(TableError, match="does not exist"):
        ScoreTable.load(tmp_path / "missing.npz")
    with pytest.raises(TableError, match="label_mass"):
        ScoreTable(t.probs, t.label_mass[:, :, :3], t.option_orders, t.criterion_orders, t.values, t.item_ids,
                   t.criteria)


def test_criterion_options_value_order():
    c = Criterion("Q", (ScoreOption(5.0, "5", "best"), ScoreOption(1.0, "1", "worst")), "q")
    assert c.values == [5.0, 1.0] and c.labels == ["5", "1"]


def test_builtin_templates_put_the_answer_on_its_own_line(tiny_lm):
    """TOML drops a newline right after an opening triple quote: the answer prefix must keep its own."""
    from logitjudge.requests import Request, render

    r = builtin_rubric("default")
    for name, tail in [("text-first", "best.\nQuality score: "), ("rubric-first", "best.\nQuality score: "),
                       ("bracketed", '"Rating: [[label]]".\nRating: [[')]:
        req = Request(Item("a", "A text."), tuple(range(5)), (0,))
        prompt = render(builtin_template(name), tiny_lm.tokenizer, r, req)
        assert prompt.endswith(tail), (name, prompt[-60:])
    assert builtin_template("multi-criteria").answer_prefix == "\nAnswers:\n"


def test_set_threads_defaults_and_refusals(monkeypatch):
    import os

    import torch

    from logitjudge.models import ModelError, set_threads

    before = torch.get_num_threads()
    try:
        assert set_threads(1) == 1 == torch.get_num_threads()
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        assert set_threads() == len(os.sched_getaffinity(0)) == torch.get_num_threads()
        monkeypatch.setenv("OMP_NUM_THREADS", "1")  # torchrun's per-rank setting is left alone
        torch.set_num_threads(1)
        assert set_threads() == 1
        for bad in (0, -2, 1.5, True):
            with pytest.raises(ModelError, match="threads must be a positive integer"):
                set_threads(bad)
    finally:
        torch.set_num_threads(before)


def test_toml_files_name_the_file_and_the_fix(tmp_path):
    """Templates, rubrics and experiment specs share one TOML reader: missing and invalid files are named."""
    from logitjudge.experiment import SpecError, load_spec
    from logitjudge.tomlfile import read_toml

    bad = tmp_path / "bad.toml"
    bad.write_text("x = [1,\n", encoding="utf-8")
    for load, err, what in ((Template.load, PromptError, "template file"), (Rubric.load, RubricError, "rubric file"),
                            (load_spec, SpecError, "experiment spec")):
        with pytest.raises(err, match=f"{what} .*bad.toml is not valid TOML"):
            load(bad)
        with pytest.raises(err, match=f"{what} .*nope.toml does not exist"):
            load(tmp_path / "nope.toml")
    with pytest.raises(SpecError, match="see experiments/"):
        load_spec(tmp_path / "nope.toml")
    ok = tmp_path / "ok.toml"
    ok.write_text('a = 1\n[b]\nc = "d"\n', encoding="utf-8")
    assert read_toml(ok, what="file") == {"a": 1, "b": {"c": "d"}}
