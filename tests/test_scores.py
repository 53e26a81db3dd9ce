"""Per-item scores (one row per item and criterion: ``analyze --scores``, ``scores.csv`` of a run) and the long
export's columns, checked by hand."""

import json

import numpy as np
import pandas as pd
import pytest
from synthetic import planted_human, planted_table

from logitjudge import orderings as ords
from logitjudge.cli import main
from logitjudge.sections.scores import COLUMNS, item_scores


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """2,000 items, balanced rotations + 4 random orders per item (RANDOM's pool: the random rows), with human
    scores in a --human file."""
    root = tmp_path_factory.mktemp("scores")
    orders = ords.parse("balanced+random:4", 5, seed=1, n_items=2000)
    t = planted_table(2000, 5, orderings=orders, position_bias=[0.6, 0, 0, 0, 0], prompt_noise=0.5, n_groups=400,
                      rng=0)
    t.save(root / "t.npz")
    human = planted_human(t, rng=1)
    with (root / "human.jsonl").open("w") as f:
        for iid, h in human.items():
            f.write(json.dumps({"id": iid, "human": h}) + "\n")
    return root, t, human


def test_analyze_scores_writes_one_row_per_item_and_criterion(big, capsys):
    root, t, human = big
    out = root / "scores.csv"
    assert main(["analyze", str(root / "t.npz"), "--human", str(root / "human.jsonl"), "--scores", str(out),
                 "--n-boot", "0", "--n-draws", "2", "--json"]) == 0
    assert f"wrote {out}: 2000 rows" in capsys.readouterr().err
    df = pd.read_csv(out, keep_default_na=False)
    assert len(df) == 2000 and list(df.columns) == list(COLUMNS)
    # one row by hand: item 7, expected reading (the analysis default)
    i, p, v = 7, t.probs[7, 0], t.values[0]
    row = df.iloc[i]
    s = p @ v  # each prompt's expected score, [orderings]
    assert row.item_id == t.item_ids[i] and row.group == t.item_groups[i] and row.criterion == "C0"
    assert row.reading == "expected"
    assert row.fixed == pytest.approx(s[0])  # the canonical prompt: the identity rotation, row 0
    assert row.balanced == pytest.approx(s[:10].mean())  # the 10 balanced rotations
    assert row.random == pytest.approx(s[10:].mean())  # RANDOM draws from the item's 4 random rows
    assert row.random_k == 10  # at BALANCED's budget
    assert row.random_se == pytest.approx(s[10:].std() / np.sqrt(10))
    log_pbp = np.log(np.stack([t.probs[j, 0, r, t.option_orders[j, r]] for j in range(2000) for r in range(10)]))
    prior = np.exp(log_pbp.mean(axis=0))
    prior /= prior.sum()  # PriDe's prior: softmax of the mean log-probability at each position
    debiased = p[0] / prior  # the canonical order shows option j at position j
    assert row.pride == pytest.approx(debiased / debiased.sum() @ v)
    assert row.human == pytest.approx(human[t.item_ids[i]]["C0"])
    assert row.label_mass == pytest.approx(t.label_mass[i, 0].mean())


def test_scores_under_the_greedy_reading_and_without_human_scores():
    t = planted_table(30, 4, n_criteria=2, position_bias=[0.5, 0, 0, 0], prompt_noise=0.4, rng=3)
    df = item_scores(t, reading="greedy")
    assert len(df) == 60 and "human" not in df.columns and set(df.reading) == {"greedy"}
    assert list(df.criterion[:4]) == ["C0", "C1", "C0", "C1"]  # item by item
    greedy = t.values[0][np.argmax(t.probs[:, 0], axis=-1)]  # [items, orderings]
    c0 = df[df.criterion == "C0"]
    np.testing.assert_allclose(c0.balanced, greedy.mean(axis=1))
    np.testing.assert_allclose(c0.random, greedy.mean(axis=1))  # a balanced table: RANDOM's pool is its rows
    k = t.probs.shape[2]  # 16: the 8 balanced option orders crossed with 2 criterion orders
    assert (c0.random_k == k).all()
    np.testing.assert_allclose(c0.random_se, greedy.std(axis=1) / np.sqrt(k))
    assert (df.group == "").all()
    fixed = planted_table(10, 4, orderings="fixed", rng=0)
    assert {"balanced", "pride"}.isdisjoint(item_scores(fixed).columns)  # no rotations: no BALANCED, no PriDe


def test_scores_flag_refuses_other_suffixes(big, capsys):
    root, _, _ = big
    assert main(["analyze", str(root / "t.npz"), "--scores", str(root / "s.txt")]) == 2
    assert ".parquet or .csv" in capsys.readouterr().err


def test_long_export_names_each_option_and_the_judge(tiny_lm):
    from logitjudge import builtin_rubric
    from logitjudge.items import Item
    from logitjudge.runs import score

    t = score(tiny_lm, [Item("a", "A short text."), Item("b", "Another one.")], builtin_rubric("default"),
              ords.balanced(5), progress=False)
    df = t.to_dataframe()
    crit = t.meta["rubric"]["criteria"][0]
    row = df[(df.item_id == "b") & (df.criterion == crit["name"]) & (df.ordering == 3) & (df.option == 2)].iloc[0]
    assert row.label == crit["options"][2]["label"] and row.value == crit["options"][2]["value"]
    assert row.prob == t.probs[1, 0, 3, 2]
    assert row.position == int(np.flatnonzero(t.option_orders[3] == 2)[0]) + 1  # 1..n, as the prompt shows it
    assert row.model_id == "tiny-random-gemma3" and row["dtype"] == "fp32"
    assert row.template == t.meta["template"]["name"] and row.template
