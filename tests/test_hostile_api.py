"""Hostile inputs of the Python API (issue 35 item 4, the DataFrame part): a missing or duplicate id column,
duplicate ids, non-string, None and NaN texts and ids, and the rest of a bad ``data``. Each is one
:class:`~logitjudge.errors.LogitJudgeError` line naming the problem and the fix, raised before anything is scored:
the judge is a stub that fails the test when it is touched, and the files around are left as they were."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import logitjudge as lj
from logitjudge import models
from logitjudge.cli import main
from logitjudge.errors import LogitJudgeError


class Untouchable:
    """A judge that fails the test if anything reads it: the data is refused before the judge is used."""

    def __getattr__(self, name):
        raise AssertionError(f"the judge was used ({name}) before the data was checked")


def ok() -> pd.DataFrame:
    return pd.DataFrame({"id": ["a", "b", "c"], "response": ["One text.", "Two texts.", "Three."],
                         "question": ["q", "q", "r"]})


def with_(column: str, values) -> pd.DataFrame:
    df = ok()
    df[column] = pd.Series(values, dtype=object if any(v is None for v in values) else None)
    return df


def _refused(data, *words, error=LogitJudgeError, judge=None, **kw) -> str:
    with pytest.raises(error) as e:
        lj.score(judge if judge is not None else Untouchable(), data, **{"text": "response", **kw})
    msg = str(e.value)
    assert "\n" not in msg and isinstance(e.value, LogitJudgeError), msg
    for w in words:
        assert w in msg, (w, msg)
    return msg


CASES = {
    "no text column": (ok(), {"text": "answer"}, ["no column 'answer' for the texts", "'response'",
                                                  'text="response"']),
    "default text column absent": (ok(), {"text": "text"}, ["no column 'text' for the texts"]),
    "named id column absent": (ok(), {"id": "uid"}, ["no column 'uid' for the id",
                                                     "id=None (the rows are then numbered)"]),
    "named context column absent": (ok(), {"context": "prompt"}, ["no column 'prompt' for the context",
                                                                  "context=None"]),
    "duplicate id column": (pd.concat([ok(), ok()[["id"]]], axis=1), {}, ["several columns named 'id'",
                                                                           "columns.duplicated()"]),
    "duplicate ids": (with_("id", ["a", "b", "a"]), {}, ["data.iloc[2]", "duplicate id 'a'", "own id",
                                                         "id=None"]),
    "NaN text": (with_("response", ["x", np.nan, "z"]), {}, ["data.iloc[1]", "column 'response'", "missing",
                                                             "dropna(subset=['response'])"]),
    "None text": (with_("response", ["x", "y", None]), {}, ["data.iloc[2]", "missing (None/NaN)"]),
    "pd.NA text": (with_("response", pd.array(["x", pd.NA, "z"], dtype="string")), {}, ["data.iloc[1]",
                                                                                         "missing"]),
    "integer text": (with_("response", [1, 2, 3]), {}, ["data.iloc[0]", "'response' must be a string, got int",
                                                         "astype(str)"]),
    "float text": (with_("response", ["x", 2.5, "z"]), {}, ["data.iloc[1]", "got float (2.5)"]),
    "list text": (with_("response", ["x", ["a"], "z"]), {}, ["got list"]),
    "blank text": (with_("response", ["x", "   ", "z"]), {}, ["data.iloc[1]", "'response' is empty"]),
    "NaN id": (with_("id", ["a", np.nan, "c"]), {}, ["data.iloc[1]", "column 'id' (the id) is missing",
                                                     "id=None"]),
    "None id": (with_("id", [None, "b", "c"]), {}, ["data.iloc[0]", "missing"]),
    "float id": (with_("id", [1.0, 2.5, 3.0]), {}, ["'id' must be a string or an integer, got float (1.0)"]),
    "empty id": (with_("id", ["a", " ", "c"]), {}, ["data.iloc[1]", "'id' is empty"]),
    "bool id": (with_("id", [True, False, True]), {}, ["got bool"]),
    "object context": (with_("question", ["q", {"a": 1}, "r"]), {"context": "question"},
                       ["'question' must be a string, got dict"]),
    "no rows": (ok().iloc[:0], {}, ["data has no rows"]),
    "list with a non-dict": ([{"id": "a", "response": "x"}, "y"], {}, ["data[1]", "expected a dict"]),
    "list row without the text": ([{"id": "a", "response": "x"}, {"id": "b"}], {}, ["data[1]", "no ['response']"]),
    "a dict": ({"response": ["x"]}, {}, ["data must be a pandas DataFrame, a list of dicts or the path"]),
    "a file that is not there": ("/nonexistent/t.csv", {}, ["texts file /nonexistent/t.csv does not exist"]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_dataframes_are_refused_before_the_judge(name):
    data, kw, words = CASES[name]
    _refused(data, *words, **kw)


def test_bad_files_are_refused_before_the_judge(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("id,response\na,one\nb,\n", encoding="utf-8")  # an empty cell is '', never NaN
    _refused(csv, f"{csv} row 2", "'response' is empty")
    csv.write_text("id,response\na,one\na,two\n", encoding="utf-8")
    _refused(csv, f"{csv} row 2", "duplicate id 'a'")
    bad = tmp_path / "t.parquet"
    bad.write_text("not parquet", encoding="utf-8")
    _refused(bad, f"{bad}: not a readable PARQUET file")
    jl = tmp_path / "t.jsonl"
    jl.write_text('{"id": "a", "response": null}\n', encoding="utf-8")
    _refused(jl, f"{jl}:1", "'response' must be a string, got NoneType", "JSON string")
    folder = tmp_path / "d.csv"
    folder.mkdir()
    _refused(folder, "is a folder")


def test_bad_settings_are_refused_before_any_prompt(tmp_path):
    stub = SimpleNamespace(model_id="stub", settings=None)  # read for the spec; no tokenizer, no weights
    _refused(ok(), "lj.score(orderings=...)", "random:x", judge=stub, orderings="random:x")
    _refused(ok(), "lj.score(rubric=...)", judge=stub, rubric=5)
    _refused(ok(), "not its name 'gemma-3-270m'", "lj.load_judge('gemma-3-270m')", judge="gemma-3-270m")
    _refused(ok(), "lj.score(rubric=...)", "nope", judge=stub, rubric="nope")
    _refused(ok(), "lj.score(criteria=...)", "Fluency", judge=stub, criteria=["Fluency"])
    _refused(ok(), "lj.score(seed=...)", "at least 0", judge=stub, seed=-1)
    notes = tmp_path / "notes.txt"
    notes.write_text("mine", encoding="utf-8")
    _refused(ok(), f"lj.score(out=...): {notes} exists and is not a score table", "force", judge=stub, out=notes)
    assert notes.read_text() == "mine"


def _table():
    """A made-up table of 2 items under the 2 options' 2 orders (the human-score checks come before any statistic)."""
    from logitjudge.orderings import all_orders
    from logitjudge.table import ScoreTable

    return ScoreTable(np.full((2, 1, 2, 2), 0.5), np.ones((2, 1, 2)), all_orders(2), np.zeros((2, 1), int),
                      np.array([[1.0, 2.0]]), np.array(["a", "b"]), ["Quality"])


def test_bad_human_scores_and_analysis_settings():
    table = _table()
    for human, words in (
            (pd.DataFrame({"id": ["a", "a"], "Quality": [1, 2]}), ["human.iloc[1]", "duplicate id 'a'"]),
            (pd.DataFrame({"id": [1.5, 2.0], "Quality": [1, 2]}), ["human.iloc[0]", "got float (1.5)"]),
            (pd.DataFrame({"item": ["a"], "Quality": [1]}), ["human.iloc[0]", "'id' field"]),
            (pd.DataFrame({"id": ["a"], "Quality": [np.nan]}), ["has no human scores"]),
            (5, ["lj.analyze(human=...)", "DataFrame"])):
        with pytest.raises(LogitJudgeError) as e:
            lj.analyze(table, human=human)
        assert "\n" not in str(e.value) and all(w in str(e.value) for w in words), (words, str(e.value))
    for kw, words in (({"n_boot": -1}, ["lj.analyze(n_boot=...)", "at least 0"]),
                      ({"reading": "mode"}, ["lj.analyze(reading=...)", "'mode'"]),
                      ({"group_by": "g"}, ["group_by", "human=..."])):
        with pytest.raises(LogitJudgeError) as e:
            lj.analyze(table, **kw)
        assert all(w in str(e.value) for w in words), (words, str(e.value))
    with pytest.raises(LogitJudgeError, match="expected a Result, a ScoreTable or the path"):
        lj.analyze([1, 2])


@pytest.fixture
def no_load(monkeypatch):
    def fail(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(models, "load_model", fail)


def test_the_cli_refuses_a_bad_csv_the_same_way(tmp_path, model_dir, capsys, no_load):
    """``--texts`` takes CSV and Parquet through the same conversion: the same line, exit 2, before the load."""
    csv = tmp_path / "t.csv"
    csv.write_text("id,text\na,one\na,two\n", encoding="utf-8")
    out = tmp_path / "t.npz"
    assert main(["score", "--model", str(model_dir), "--texts", str(csv), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{csv} row 2: duplicate id 'a'" in err and not out.exists()
    csv.write_text("id,response\na,one\n", encoding="utf-8")
    assert main(["score", "--model", str(model_dir), "--texts", str(csv), "--out", str(out), "--quiet"]) == 2
    assert "no ['text'] in this row" in capsys.readouterr().err
