"""Data-set loaders: real files in ../shared/data (skipped if absent), malformed copies, subsets, rubrics."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from logitjudge.data import (
    DATASETS,
    DataError,
    dataset_dir,
    default_data_dir,
    load_dataset,
    read_csv,
    read_jsonl,
    subset_items,
)
from logitjudge.data import hanna as hanna_mod
from logitjudge.data import mt_bench as mt_mod
from logitjudge.data import summeval as summeval_mod
from logitjudge.data.base import Origin
from logitjudge.items import Item
from logitjudge.rubric import builtin_rubric


def _real_data_dir() -> Path | None:
    env = os.environ.get("LOGITJUDGE_DATA")
    for p in ([Path(env)] if env else []) + [Path(__file__).resolve().parents[2] / "shared" / "data"]:
        if p.is_dir():
            return p
    return None


@pytest.fixture(scope="module")
def data_dir() -> Path:
    p = _real_data_dir()
    if p is None:
        pytest.skip("real data not found: set LOGITJUDGE_DATA or put the shared data at ../shared/data "
                    "beside the repository")
    return p


def _need(data_dir: Path, name: str) -> Path:
    d = data_dir / name
    if not d.is_dir():
        pytest.skip(f"{d} is absent from the data folder")
    return d


@pytest.fixture(scope="module")
def hanna(data_dir):
    _need(data_dir, "hanna")
    return load_dataset("hanna", data_dir)


@pytest.fixture(scope="module")
def summeval(data_dir):
    _need(data_dir, "summeval")
    return load_dataset("summeval", data_dir)


@pytest.fixture(scope="module")
def mt_bench(data_dir):
    _need(data_dir, "mt_bench")
    return load_dataset("mt_bench", data_dir)


@pytest.fixture(scope="module")
def vicuna(data_dir):
    _need(data_dir, "vicuna_bench")
    return load_dataset("vicuna_bench", data_dir)


# ---- real data ---------------------------------------------------------------------------------------------
def test_hanna_real(hanna):
    assert len(hanna) == 1056 and hanna.has_human
    assert hanna.criteria == ("Relevance", "Coherence", "Empathy", "Surprise", "Engagement", "Complexity")
    assert len({it.id for it in hanna}) == 1056
    sizes = Counter(it.group for it in hanna)
    assert len(sizes) == 96 and set(sizes.values()) == {11}
    by_id = {it.id: it for it in hanna}
    s99 = by_id["99"]
    assert s99.meta["model"] == "BertGeneration" and s99.group == "3"
    assert s99.context == "Write a story about an elderly wizard and his young female apprentice."
    assert s99.text.startswith("“Follow me,” his mentor said.")
    # README sample of story 99 is one annotator's row: RE 3, CH 2, EM 2, SU 2, EG 2, CX 3
    rows = list(zip(*(s99.meta["annotations"][c] for c in hanna.criteria)))
    assert len(rows) == 3 and (3, 2, 2, 2, 2, 3) in rows
    assert by_id["519"].meta["model"] == "GPT-2" and by_id["862"].meta["model"] == "Fusion"
    for it in hanna:
        assert set(it.human) == set(hanna.criteria) and all(1 <= v <= 5 for v in it.human.values())
        assert it.human["Coherence"] == pytest.approx(sum(it.meta["annotations"]["Coherence"]) / 3)
    assert len({it.meta["model"] for it in hanna}) == 11
    assert hanna.rubric.name == "hanna" and [c.name for c in hanna.rubric.criteria] == list(hanna.criteria)


def test_summeval_real(summeval):
    assert len(summeval) == 1600 and summeval.has_human
    ids = [it.id for it in summeval]
    assert len(set(ids)) == 1600 and not any("#" in i for i in ids)  # no duplicate (doc_id, model_id)
    sizes = Counter(it.group for it in summeval)
    assert len(sizes) == 100 and set(sizes.values()) == {16}
    assert len({it.meta["model_id"] for it in summeval}) == 16
    it = summeval.items[0]
    assert it.id == f"{it.group}/{it.meta['model_id']}"
    for it in summeval:
        assert it.context.strip() and it.text.strip()
        assert set(it.human) == {"coherence", "consistency", "fluency", "relevance"}
        assert all(1 <= v <= 5 for v in it.human.values())
    # all summaries of one article share its context; per-expert scores only for the abstractive systems
    first = [x for x in summeval if x.group == it.group]
    assert len({x.context for x in first}) == 1
    m11 = next(x for x in summeval if x.meta["model_id"] == "M11")
    assert m11.human["coherence"] == pytest.approx(sum(m11.meta["expert"]["coherence"]) / 3, abs=1e-6)
    assert "expert" not in next(x for x in summeval if x.meta["model_id"] == "M0").meta


def test_mt_bench_real(mt_bench, data_dir):
    assert len(mt_bench) == 2480 and not mt_bench.has_human
    assert len({it.group for it in mt_bench}) == 80
    assert len({it.meta["question_id"] for it in mt_bench}) == 80
    assert len(mt_bench.options["models"]) == 31 and len({it.id for it in mt_bench}) == 2480
    assert mt_bench.criteria == ("Rating",) and mt_bench.rubric.n_options == 10
    q = {json.loads(x)["question_id"]: json.loads(x) for x in
         (data_dir / "mt_bench" / "question.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()}
    it = next(x for x in mt_bench if x.id == "81/gpt-4")
    assert it.context == q[81]["turns"][0] and it.meta["category"] == "writing" and it.text.strip()
    assert Counter(x.meta["category"] for x in mt_bench)["math"] == 10 * 31


def test_mt_bench_options(data_dir):
    _need(data_dir, "mt_bench")
    t2 = load_dataset("mt_bench", data_dir, models=["gpt-4", "llama-13b"], turn=2)
    assert len(t2) == 160 and {x.meta["model"] for x in t2} == {"gpt-4", "llama-13b"}
    t1 = {x.id: x for x in load_dataset("mt_bench", data_dir, models="gpt-4")}
    x = next(x for x in t2 if x.id == "81/gpt-4/t2")
    assert x.context.startswith("### User:\n" + t1["81/gpt-4"].context)
    assert t1["81/gpt-4"].text in x.context and x.text != t1["81/gpt-4"].text and x.meta["turn"] == 2
    ref = {x.id: x for x in load_dataset("mt_bench", data_dir, models=["gpt-4"], with_reference=True)}
    assert "[The Start of Reference Answer]" in ref["111/gpt-4"].context  # math
    assert ref["111/gpt-4"].meta["reference"] in ref["111/gpt-4"].context
    assert ref["81/gpt-4"].context == t1["81/gpt-4"].context and "reference" not in ref["81/gpt-4"].meta
    with pytest.raises(DataError, match="unknown model 'gpt-5'"):
        load_dataset("mt_bench", data_dir, models=["gpt-5"])
    with pytest.raises(DataError, match="turn=3"):
        load_dataset("mt_bench", data_dir, turn=3)


def test_vicuna_real(vicuna, data_dir):
    assert len(vicuna) == 560 and not vicuna.has_human
    assert len({it.group for it in vicuna}) == 80 and len({it.meta["model"] for it in vicuna}) == 7
    it = next(x for x in vicuna if x.id == "1/gpt35")
    assert it.context == "How can I improve my time management skills?"
    assert it.meta["model_id"] == "gpt-3.5-turbo:20230327"
    sub = load_dataset("vicuna_bench", data_dir, models=["bard:20230327", "gpt35"], with_reference=True)
    assert {x.meta["model"] for x in sub} == {"bard", "gpt35"} and len(sub) == 160
    coding = next(x for x in sub if x.id == "61/bard")
    assert coding.meta["category"] == "coding" and "[The End of Reference Answer]" in coding.context


def test_data_dir_may_be_the_dataset_folder(data_dir):
    d = _need(data_dir, "hanna")
    assert dataset_dir("hanna", d) == d
    assert len(load_dataset("hanna", d, groups=["0"])) == 11


# ---- subsetting --------------------------------------------------------------------------------------------
def test_subset_whole_groups_and_determinism(hanna, data_dir):
    a = load_dataset("hanna", data_dir, limit=22, seed=3)
    b = load_dataset("hanna", data_dir, limit=22, seed=3)
    assert [x.id for x in a] == [x.id for x in b]
    assert len(a) == 22 and len(a.group_ids) == 2
    assert all(Counter(x.group for x in a)[g] == 11 for g in a.group_ids)
    assert len(load_dataset("hanna", data_dir, limit=20)) == 11  # rounded down to whole groups, at least one
    assert len(load_dataset("hanna", data_dir, limit=5)) == 11
    seeds = {tuple(load_dataset("hanna", data_dir, limit=22, seed=s).group_ids) for s in range(5)}
    assert len(seeds) > 1
    g = load_dataset("hanna", data_dir, groups=[5, "3"])
    assert g.group_ids == ["3", "5"] and len(g) == 22  # canonical order
    n = load_dataset("hanna", data_dir, groups=4, seed=1)
    assert len(n) == 44 and n.group_ids == load_dataset("hanna", data_dir, groups=4, seed=1).group_ids
    both = load_dataset("hanna", data_dir, groups=4, seed=1, limit=30)
    assert len(both) == 22 and set(both.group_ids) <= set(n.group_ids)
    order = [int(x.group) for x in n]
    assert order == sorted(order)
    with pytest.raises(DataError, match="unknown group"):
        load_dataset("hanna", data_dir, groups=["999"])


def _items(sizes: dict[str, int]) -> list[Item]:
    return [Item(f"{g}-{i}", "t", "", g) for g, n in sizes.items() for i in range(n)]


def test_subset_items_rule():
    items = _items({"a": 3, "b": 2, "c": 4, "d": 1})
    assert subset_items(items) == items
    for seed in range(10):
        got = subset_items(items, limit=5, seed=seed)
        assert got == subset_items(items, limit=5, seed=seed)
        gs = Counter(x.group for x in got)
        assert all(gs[g] == n for g, n in zip("abcd", (3, 2, 4, 1)) if g in gs)  # whole groups
        assert 1 <= len(got) and (len(gs) == 1 or len(got) <= 5)
        assert got == [x for x in items if x in got]  # canonical order
    assert [x.group for x in subset_items(items, groups=["d", "a"])] == ["a"] * 3 + ["d"]
    ungrouped = [Item(str(i), "t") for i in range(6)]
    assert len(subset_items(ungrouped, limit=4)) == 4
    for bad in ({"limit": 0}, {"groups": 0}, {"groups": 9}, {"groups": True}, {"groups": ["zz"]}):
        with pytest.raises(DataError):
            subset_items(items, **bad)


# ---- malformed files ---------------------------------------------------------------------------------------
def _write_jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    path.write_text(text, encoding="utf-8")
    return path


def _story(sid: int, pid: int, **kw) -> dict:
    d = {"story_id": sid, "prompt_id": pid, "model": "Human", "prompt": f"prompt {pid}",
         "story": f"story {sid}", "annotations": {c: [1, 2, 3] for c in hanna_mod.CRITERIA}}
    d.update(kw)
    return d


def test_missing_file_names_file_fields_and_url(tmp_path):
    with pytest.raises(DataError) as e:
        load_dataset("hanna", tmp_path)
    msg = str(e.value)
    assert str(tmp_path / "hanna" / "hanna_stories.jsonl") in msg
    assert "'story_id'" in msg and "'annotations'" in msg
    assert "github.com/dig-team/hanna-benchmark-asg" in msg
    with pytest.raises(DataError, match="summeval_sources.jsonl.*'source'.*Yale-LILY"):
        load_dataset("summeval", tmp_path)
    with pytest.raises(DataError, match="question.jsonl.*'turns'.*FastChat"):
        load_dataset("mt_bench", tmp_path)


def test_jsonl_missing_field_and_invalid_json(tmp_path):
    f = tmp_path / "hanna" / "hanna_stories.jsonl"
    bad = _story(1, 0)
    del bad["story"]
    _write_jsonl(f, [_story(0, 0), bad])
    with pytest.raises(DataError, match=r"hanna_stories\.jsonl:2: missing field\(s\) \['story'\]"):
        load_dataset("hanna", tmp_path)
    _write_jsonl(f, [_story(0, 0), '{"story_id": 1,'])
    with pytest.raises(DataError, match=r"hanna_stories\.jsonl:2: not valid JSON.*'prompt_id'"):
        load_dataset("hanna", tmp_path)
    _write_jsonl(f, [_story(0, 0, annotations={"Relevance": [1]})])
    with pytest.raises(DataError, match=r":1: annotations\['Relevance'\]|:1: annotations\['Coherence'\]"):
        load_dataset("hanna", tmp_path)
    _write_jsonl(f, [_story(0, 0, story_id="zero")])
    with pytest.raises(DataError, match="field 'story_id' must be an int"):
        load_dataset("hanna", tmp_path)
    _write_jsonl(f, [_story(0, 0), _story(0, 1)])
    with pytest.raises(DataError, match="story_id 0 already used"):
        load_dataset("hanna", tmp_path)
    _write_jsonl(f, [_story(i, i % 2) for i in range(4)])
    ds = load_dataset("hanna", tmp_path)
    assert [x.id for x in ds] == ["0", "2", "1", "3"] and ds.items[0].human["Relevance"] == 2.0


def _summary(doc: str, model: str, **kw) -> dict:
    d = {"doc_id": doc, "model_id": model, "summary": f"{model} on {doc}",
         "expert_mean": dict.fromkeys(summeval_mod.CRITERIA, 3.0), "expert_annotations": None}
    d.update(kw)
    return d


def test_summeval_join_duplicates_and_ranges(tmp_path):
    root = tmp_path / "summeval"
    _write_jsonl(root / "summeval_sources.jsonl", [{"doc_id": "d1", "source": "Article one."}])
    _write_jsonl(root / "summeval_summaries.jsonl",
                 [_summary("d1", "M0"), _summary("d1", "M0"), _summary("d1", "M8")])
    ds = load_dataset("summeval", tmp_path)
    assert [x.id for x in ds] == ["d1/M0", "d1/M0#2", "d1/M8"]
    assert ds.items[1].meta["duplicate_of"] == "d1/M0" and ds.items[0].context == "Article one."
    _write_jsonl(root / "summeval_summaries.jsonl", [_summary("d2", "M0")])
    with pytest.raises(DataError, match="doc_id 'd2' has no article in .*summeval_sources.jsonl"):
        load_dataset("summeval", tmp_path)
    _write_jsonl(root / "summeval_summaries.jsonl", [_summary("d1", "M0", expert_mean={"coherence": 9})])
    with pytest.raises(DataError, match=r"summaries\.jsonl:1: field 'expert_mean' needs a number in"):
        load_dataset("summeval", tmp_path)


def _answers(model: str, qids, turns=("a1", "a2")) -> list:
    return [{"question_id": q, "answer_id": "x", "model_id": model,
             "choices": [{"index": 0, "turns": list(turns)}], "tstamp": 0.0} for q in qids]


def test_mt_bench_malformed(tmp_path):
    root = tmp_path / "mt_bench"
    _write_jsonl(root / "question.jsonl", [{"question_id": q, "category": c, "turns": [f"q{q}a", f"q{q}b"]}
                                           for q, c in ((1, "writing"), (2, "math"))])
    with pytest.raises(DataError, match="model_answer has no <model>.jsonl"):
        load_dataset("mt_bench", tmp_path)
    _write_jsonl(root / "model_answer" / "m1.jsonl", _answers("m1", [1, 2]))
    _write_jsonl(root / "model_answer" / "m2.jsonl", _answers("m2", [1]))
    ds = load_dataset("mt_bench", tmp_path)
    assert [x.id for x in ds] == ["1/m1", "1/m2", "2/m1"] and ds.group_ids == ["1", "2"]
    with pytest.raises(DataError, match=r"reference_answer.gpt-4\.jsonl.*does not exist"):
        load_dataset("mt_bench", tmp_path, with_reference=True)
    _write_jsonl(root / "reference_answer" / "gpt-4.jsonl", _answers("gpt-4", [2], ("r1", "r2")))
    t2 = {x.id: x for x in load_dataset("mt_bench", tmp_path, turn=2, with_reference=True)}
    assert t2["2/m1/t2"].meta["reference"] == "r2" and "r1" in t2["2/m1/t2"].context
    assert t2["2/m1/t2"].context.endswith("### User:\nq2a\n\n### Assistant:\na1\n\n### User:\nq2b")
    _write_jsonl(root / "model_answer" / "m2.jsonl", _answers("m2", [1], ("only one turn",)))
    with pytest.raises(DataError, match=r"m2\.jsonl:1: field 'choices'"):
        load_dataset("mt_bench", tmp_path, turn=2)
    _write_jsonl(root / "model_answer" / "m2.jsonl", _answers("m2", [7]))
    with pytest.raises(DataError, match=r"m2\.jsonl:1: question_id 7 is not in the question file"):
        load_dataset("mt_bench", tmp_path)
    bad = _answers("m2", [1])
    del bad[0]["choices"]
    _write_jsonl(root / "model_answer" / "m2.jsonl", bad)
    with pytest.raises(DataError, match=r"m2\.jsonl:1: missing field\(s\) \['choices'\]"):
        load_dataset("mt_bench", tmp_path)
    assert mt_mod.NEED_REFERENCE == ("math", "reasoning", "coding")


def test_read_helpers(tmp_path):
    origin = Origin("Toy", "https://example.org/toy")
    with pytest.raises(DataError, match=r"toy\.csv does not exist.*'a', 'b'.*example\.org/toy"):
        read_csv(tmp_path / "toy.csv", ["a", "b"], origin)
    (tmp_path / "toy.csv").write_text("a,c\n1,2\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"toy\.csv: missing column\(s\) \['b'\]"):
        read_csv(tmp_path / "toy.csv", ["a", "b"], origin)
    (tmp_path / "toy.csv").write_text("a,b\n1,2\n3\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"toy\.csv:3: the row's number of values"):
        read_csv(tmp_path / "toy.csv", ["a", "b"], origin)
    (tmp_path / "toy.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    assert read_csv(tmp_path / "toy.csv", ["a", "b"], origin)[0][1] == {"a": "1", "b": "2"}
    _write_jsonl(tmp_path / "t.jsonl", ["[1, 2]"])
    with pytest.raises(DataError, match=r"t\.jsonl:1: got a JSON list"):
        read_jsonl(tmp_path / "t.jsonl", ["a"], origin)
    _write_jsonl(tmp_path / "t.jsonl", [""])
    with pytest.raises(DataError, match="has no records"):
        read_jsonl(tmp_path / "t.jsonl", ["a"], origin)


# ---- registry and data folder ------------------------------------------------------------------------------
def test_registry_errors(tmp_path):
    assert DATASETS == ("hanna", "summeval", "mt_bench", "vicuna_bench")
    with pytest.raises(DataError, match="unknown data set 'nope'"):
        load_dataset("nope", tmp_path)
    with pytest.raises(DataError, match=r"hanna has no option\(s\) \['turn'\]"):
        load_dataset("hanna", tmp_path, turn=2)
    assert dataset_dir("mt-bench", tmp_path) == tmp_path / "mt_bench"


def test_default_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGITJUDGE_DATA", str(tmp_path))
    assert default_data_dir() == tmp_path.resolve()
    monkeypatch.setenv("LOGITJUDGE_DATA", str(tmp_path / "missing"))
    with pytest.raises(DataError, match="LOGITJUDGE_DATA="):
        default_data_dir()
    monkeypatch.delenv("LOGITJUDGE_DATA")
    work = tmp_path / "repo"
    work.mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(DataError, match="pass --data-dir.*LOGITJUDGE_DATA"):
        default_data_dir()
    (tmp_path / "shared" / "data").mkdir(parents=True)
    assert default_data_dir() == (tmp_path / "shared" / "data").resolve()


# ---- built-in rubrics --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,n_crit,n_opt", [("default", 1, 5), ("hanna", 6, 5), ("summeval", 4, 5),
                                               ("mt_bench", 1, 10)])
def test_builtin_rubrics(name, n_crit, n_opt):
    r = builtin_rubric(name).validate(need_descriptions=True)
    assert r.name == name and r.n_criteria == n_crit and r.n_options == n_opt and r.instructions.strip()
    for c in r.criteria:
        assert c.labels == [str(i) for i in range(1, n_opt + 1)] and c.values == list(range(1, n_opt + 1))
    if name == "hanna":
        assert tuple(c.name for c in r.criteria) == hanna_mod.CRITERIA
    if name == "summeval":
        assert tuple(c.name for c in r.criteria) == summeval_mod.CRITERIA
    if name == "default":
        assert r.criteria[0].name == "Quality"
        assert r.criteria[0].options[0].description.startswith("Very poor")
        assert r.criteria[0].options[-1].description.startswith("Excellent")
