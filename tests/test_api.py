"""The top-level API (issue 33 item 4): ``lj.load_judge``, ``lj.score`` on a DataFrame, a list of dicts or a
JSONL/CSV/Parquet file, ``lj.analyze``; each equal to the command line's route on the same items."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import logitjudge as lj
from logitjudge import analysis, orderings, runs
from logitjudge.cli import main
from logitjudge.errors import LogitJudgeError
from logitjudge.items import Item
from logitjudge.outputs import EXPORT_COLUMNS
from logitjudge.rubric import builtin_rubric
from logitjudge.table import ScoreTable

sys.path.insert(0, str(Path(__file__).parent))
from test_cli import SENTENCES  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def frame(n: int = 4) -> pd.DataFrame:
    """n responses to two questions, with the column names a user's data has."""
    return pd.DataFrame({"id": [f"r{i}" for i in range(n)], "response": [SENTENCES[i % 4] for i in range(n)],
                         "question": [f"Question {i % 2}?" for i in range(n)],
                         "prompt_id": [f"p{i % 2}" for i in range(n)], "score": range(n)})


COLUMNS = {"text": "response", "context": "question", "group": "prompt_id"}


@pytest.fixture(scope="module")
def judge(model_dir):
    return lj.load_judge(str(model_dir))


@pytest.fixture(scope="module")
def scored(judge):
    """The DataFrame route under random:3 orders (per item), seed 1."""
    return lj.score(judge, frame(), **COLUMNS, orderings="random:3", seed=1, progress=False)


def test_dataframe_equals_the_cli_and_scoring_score(scored, judge, model_dir, tmp_path):
    texts = tmp_path / "texts.jsonl"
    with texts.open("w", encoding="utf-8") as f:
        for r in frame().to_dict("records"):
            f.write(json.dumps({"id": r["id"], "text": r["response"], "context": r["question"],
                                "group": r["prompt_id"]}) + "\n")
    out = tmp_path / "cli.npz"
    assert main(["score", "--model", str(model_dir), "--texts", str(texts), "--orderings", "random:3", "--seed", "1",
                 "--quiet", "--out", str(out)]) == 0
    cli, t = ScoreTable.load(out), scored.table
    assert np.array_equal(t.probs, cli.probs) and np.array_equal(t.label_mass, cli.label_mass)
    assert np.array_equal(t.option_orders, cli.option_orders) and t.option_orders.shape == (4, 3, 5)
    assert list(t.item_ids) == ["r0", "r1", "r2", "r3"] and list(t.item_groups) == ["p0", "p1", "p0", "p1"]
    assert t.meta["fingerprint"] == cli.meta["fingerprint"]  # the same texts, contexts, rubric, orders, judge
    items = [Item(r["id"], r["response"], r["question"], r["prompt_id"]) for r in frame().to_dict("records")]
    long = runs.score(judge, items, builtin_rubric("default"), t.option_orders, progress=False)
    assert np.array_equal(long.probs, t.probs)
    assert scored.path is None and "4 items x 1 criterion x 3 orderings x 5 options" in repr(scored)


def test_every_input_form_equals_the_dataframe(judge, tmp_path):
    df = frame(3)
    want = lj.score(judge, df, **COLUMNS, orderings="fixed:1", progress=False).table
    df.to_csv(tmp_path / "d.csv", index=False)
    df.to_parquet(tmp_path / "d.parquet", index=False)
    with (tmp_path / "d.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in df.to_dict("records"))
    for data in (df.to_dict("records"), tmp_path / "d.jsonl", str(tmp_path / "d.csv"), tmp_path / "d.parquet"):
        got = lj.score(judge, data, **COLUMNS, orderings="fixed:1", progress=False).table
        assert np.array_equal(got.probs, want.probs), data
        assert list(got.item_ids) == list(want.item_ids) and list(got.item_groups) == list(want.item_groups)
    # a Rubric object and a rubric file are the built-in name's rubric
    rubric_file = tmp_path / "r.json"
    rubric_file.write_text(json.dumps(builtin_rubric("default").to_dict()), encoding="utf-8")
    for rubric in (builtin_rubric("default"), rubric_file):
        got = lj.score(judge, df, **COLUMNS, rubric=rubric, orderings="fixed:1", progress=False).table
        assert np.array_equal(got.probs, want.probs)


def test_default_columns_and_row_numbers_as_ids(judge):
    df = pd.DataFrame({"text": SENTENCES[:3], "group": ["g", "g", "h"]})
    t = lj.score(judge, df, orderings="fixed:1", progress=False).table
    assert list(t.item_ids) == ["0", "1", "2"] and list(t.item_groups) == ["g", "g", "h"]  # group: read when present
    t2 = lj.score(judge, df, group=None, orderings="fixed:1", progress=False).table
    assert t2.item_groups is None and np.array_equal(t2.probs, t.probs)


def test_to_pandas_is_the_export(scored, tmp_path, capsys):
    df = scored.to_pandas()
    t = scored.table
    assert len(df) == t.probs.size == 4 * 1 * 3 * 5 and set(df.columns) <= EXPORT_COLUMNS
    assert {"item_id", "group", "criterion", "ordering", "option", "position", "prob"} <= set(df.columns)
    assert np.allclose(df.groupby(["item_id", "ordering"])["prob"].sum(), 1.0)
    path = scored.save(tmp_path / "t.npz")
    assert main(["analyze", str(path), "--export", str(tmp_path / "e.csv")]) == 0
    exported = pd.read_csv(tmp_path / "e.csv", dtype={"item_id": str, "group": str})
    assert list(exported.columns) == list(df.columns) and len(exported) == len(df)
    assert np.allclose(exported["prob"], df["prob"], atol=1e-15, rtol=0)


def test_out_saves_and_continues(judge, tmp_path):
    out = tmp_path / "t.npz"
    first = lj.score(judge, frame(2), **COLUMNS, orderings="fixed:1", out=out, progress=False)
    assert first.path == out and np.array_equal(ScoreTable.load(out).probs, first.table.probs)
    again = lj.score(judge, frame(2), **COLUMNS, orderings="fixed:1", out=out, progress=False)  # reused
    assert np.array_equal(again.table.probs, first.table.probs) and f"saved at {out}" in repr(again)


def test_analyze_is_the_cli_analyze(scored, tmp_path, capsys):
    human_df = pd.DataFrame({"id": ["r0", "r1", "r2", "r3"], "Quality": [1.0, 4.0, np.nan, 2.0]})
    report = lj.analyze(scored, human=human_df, n_boot=50, seed=3)
    human = {"r0": {"Quality": 1.0}, "r1": {"Quality": 4.0}, "r2": {}, "r3": {"Quality": 2.0}}
    want = analysis.analyze(scored.table, human=human, rng=3, n_boot=50)
    assert report.verdict == want["verdict"] and report.results == want
    # the same from files: the table's path and the --human JSONL, as the command line reads them
    table_path = scored.save(tmp_path / "t.npz")
    human_path = tmp_path / "h.jsonl"
    human_path.write_text("".join(json.dumps({"id": k, "human": v}) + "\n" for k, v in human.items()))
    assert lj.analyze(table_path, human=human_path, n_boot=50, seed=3).results == want
    capsys.readouterr()
    assert main(["analyze", str(table_path), "--human", str(human_path), "--n-boot", "50", "--seed", "3",
                 "--scores", str(tmp_path / "s.csv")]) == 0
    assert capsys.readouterr().out == report.to_markdown() + "\n"
    cli_scores = pd.read_csv(tmp_path / "s.csv", dtype={"item_id": str, "group": str})
    assert list(cli_scores.columns) == list(report.scores.columns) and len(report.scores) == 4
    assert np.allclose(cli_scores["balanced" if "balanced" in cli_scores else "random"],
                       report.scores["balanced" if "balanced" in cli_scores else "random"])
    assert report.scores["human"].isna().tolist() == [False, False, True, False]
    assert "4 items x 1 criterion x 3 orderings" in repr(report)


def test_report_save_writes_the_report_folder(scored, tmp_path):
    report = lj.analyze(scored.table, n_boot=20)
    folder = report.save(tmp_path / "rep")
    for name in ("table.npz", "results.json", "report.md", "report.html", "scores.csv"):
        assert (folder / name).is_file(), name
    saved = json.loads((folder / "results.json").read_text())
    assert saved["verdict"] == report.verdict and saved["analysis"]["table"] == report.results["table"]
    assert np.array_equal(ScoreTable.load(folder / "table.npz").probs, scored.table.probs)
    assert len(pd.read_csv(folder / "scores.csv")) == len(report.scores)
    report.save(folder)  # its own files are replaced


def test_builtin_judge_on_a_dataframe():
    """The front-page route on the built-in Gemma-3-270M (converted in the cache), 2 texts, one ordering."""
    judge = lj.load_judge("gemma-3-270m")
    df = pd.DataFrame({"question": ["What is 2 + 2?"] * 2, "response": ["4", "5"]})
    result = lj.score(judge, df, text="response", context="question", orderings="fixed:1", progress=False)
    items = [Item(str(i), r, "What is 2 + 2?") for i, r in enumerate(df["response"])]
    long = runs.score(judge, items, builtin_rubric("default"), orderings.fixed(5, 1), progress=False)
    assert np.array_equal(result.table.probs, long.probs)
    assert result.table.meta["model_id"] == "gemma-3-270m"


def test_order_arrays_and_template_objects_are_the_names(judge, scored):
    """orderings= takes lj.balanced(n)'s (K, n) array and a per-item (I, K, n) one; template= a Template."""
    from logitjudge.prompts import builtin_template

    df = frame(2)
    by_name = lj.score(judge, df, **COLUMNS, progress=False).table
    by_array = lj.score(judge, df, **COLUMNS, orderings=lj.balanced(5), progress=False).table
    assert np.array_equal(by_array.probs, by_name.probs) and np.array_equal(by_array.option_orders, lj.balanced(5))
    per_item = lj.score(judge, frame(), **COLUMNS, orderings=scored.table.option_orders, progress=False).table
    assert np.array_equal(per_item.probs, scored.table.probs) and per_item.meta["orderings"] == "given:3 per item"
    named = lj.score(judge, df, **COLUMNS, template="rubric-first", orderings="fixed:1", progress=False).table
    given = lj.score(judge, df, **COLUMNS, template=builtin_template("rubric-first"), orderings="fixed:1",
                     progress=False).table
    assert np.array_equal(given.probs, named.probs) and given.meta["fingerprint"] == named.meta["fingerprint"]


@pytest.mark.parametrize("kw,message", [
    ({"orderings": np.array([[0, 1, 2, 3, 3]])}, "lj.score(orderings=...): ordering 0 = [0, 1, 2, 3, 3] is not a"),
    ({"orderings": lj.balanced(4)}, "lj.score(orderings=...): orderings have 4 columns but the rubric has 5"),
    ({"orderings": np.zeros((3, 1, 5), int)}, "lj.score(orderings=...): per-item option orders have 3 rows"),
    ({"orderings": [[0.5]]}, "lj.score(orderings=...): expected a design name"),
    ({"orderings": lj.balanced(5), "paradigm": "pairwise"}, "applies to pointwise prompts"),
    ({"template": 3}, "lj.score(template=...): expected a built-in name"),
    ({"slots": "sum"}, "lj.score(slots=...): 'sum' is not one of ['greedy', 'marginal']"),
    ({"max_continuations": 0}, "lj.score(max_continuations=...): must be at least 1"),
    ({"chat": "yes"}, "lj.score(chat=...): expected \"auto\", true or false"),
    ({"limit": 0}, "lj.score(limit=...): must be at least 1"),
    ({"dataset": "hanna"}, "lj.score: give exactly one of data"),
])
def test_the_new_keywords_refuse_in_one_line(judge, kw, message):
    with pytest.raises(LogitJudgeError) as e:
        lj.score(judge, frame(), **COLUMNS, progress=False, **kw)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_dataset_limit_and_slots_reach_the_run(judge):
    with pytest.raises(Exception, match=r"lj.score\(dataset=...\): unknown data set 'nope'"):
        lj.score(judge, dataset="nope", progress=False)
    assert lj.score(judge, frame(4), **COLUMNS, limit=2, orderings="fixed:1", progress=False).table.shape[0] == 2
    with pytest.raises(Exception, match="above the budget of 2"):  # reaches the multi-criteria planner
        lj.score(judge, frame(), **COLUMNS, rubric="hanna", multi_criteria=True, slots="marginal",
                 max_continuations=2, progress=False)
