"""Experiments end to end on the tiny random-weight Gemma-3 saved to a folder: spec -> scores -> analysis ->
report folder; determinism, reuse and resumption of the scores, and clear errors for bad specs."""

import json

import numpy as np
import pytest
from conftest import fresh_tiny_lm, shared_data_dir

from logitjudge import demo as demo_mod
from logitjudge.checkpoint import Checkpoint, scan
from logitjudge.design import prepare
from logitjudge.experiment import SpecError, load_spec, run_experiment
from logitjudge.items import read_items
from logitjudge.table import ScoreTable

PNG = b"\x89PNG\r\n\x1a\n"
TEXTS = [
    ("a1", "g1", "The text is clear, well written and correct.", 4.7, 4.0),
    ("a2", "g1", "Once upon a time a cat sat on the mat.", 3.3, 2.7),
    ("a3", "g1", "the the dog moon barked sun.", 1.3, 1.7),
    ("b1", "g2", "The sun rose slowly while the dog barked at the moon.", 4.0, 3.3),
    ("b2", "g2", "Very poor. Poor. Fair.", 1.7, 1.0),
    ("b3", "g2", "A cat sat on the mat and the dog barked.", 3.0, 3.7),
]
RUBRIC = """
name = "tiny"
instructions = "Rate the quality of the text below."
[[criteria]]
name = "Coherence"
description = "The text is clear."
options = [{value = 1, label = "1", description = "Poor."}, {value = 2, label = "2", description = "Fair."},
           {value = 3, label = "3", description = "Good."}]
[[criteria]]
name = "Fluency"
description = "The text is well written."
options = [{value = 1, label = "1", description = "Poor."}, {value = 2, label = "2", description = "Fair."},
           {value = 3, label = "3", description = "Good."}]
"""


def write_spec(root, out, **extra) -> str:
    body = f"""
name = "tiny-experiment"
out = "{out}"
[model]
id = "tiny"
[data]
texts = "texts.jsonl"
rubric = "rubric.toml"
[orderings]
options = "balanced"
[analysis]
n_boot = 60
n_draws = 5
seed = 3
"""
    path = root / extra.get("file", "spec.toml")
    path.write_text(body, encoding="utf-8")
    return str(path)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("experiment")
    lm = fresh_tiny_lm()
    lm.model.save_pretrained(root / "tiny")
    lm.tokenizer.save_pretrained(root / "tiny")
    with (root / "texts.jsonl").open("w") as f:
        for iid, group, text, coh, flu in TEXTS:
            f.write(json.dumps({"id": iid, "group": group, "text": text,
                                "human": {"Coherence": coh, "Fluency": flu}}) + "\n")
    (root / "rubric.toml").write_text(RUBRIC, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def first(root):
    out = root / "run1"
    res = run_experiment(write_spec(root, out), progress=False)
    return res, out


def _json(path):
    return json.loads(path.read_text(encoding="utf-8"))


def test_end_to_end_writes_every_report_file(first):
    res, out = first
    assert set(res) >= {"verdict", "report", "results"} and res["report"] == str(out)
    for name in ["report.md", "report.html", "results.json", "table.npz", "spec.toml"]:
        assert (out / name).is_file(), name
    for name in ["position", "budget", "rank_stability", "alignment"]:
        png = (out / "plots" / f"{name}.png").read_bytes()
        assert png.startswith(PNG) and len(png) > 1024, name
    assert not (out / "plots" / "criterion_position.png").exists()  # single-criterion prompts: skipped
    assert not list(out.glob("*.partial.jsonl"))
    table = ScoreTable.load(out / "table.npz")
    assert table.shape == (6, 2, 6, 3) and table.meta["run"] == "tiny-experiment"
    saved = _json(out / "results.json")
    assert saved["verdict"] == res["verdict"] == res["results"]["verdict"]
    assert saved["analysis"] == res["results"]
    assert saved["spec"]["data"]["texts"] == "texts.jsonl" and saved["spec"]["analysis"]["n_boot"] == 60
    assert saved["table_meta"]["timings"]["score_seconds"] > 0
    assert saved["plots"]["position"] == "plots/position.png" and saved["plots"]["criterion_position"] is None
    assert saved["plots_skipped"]["criterion_position"] == res["results"]["skipped"]["criterion_position"]
    r = res["results"]
    assert r["table"]["design"] == "balanced" and r["table"]["criteria"] == ["Coherence", "Fluency"]
    assert set(r["alignment"]) == {"Coherence", "Fluency"} and r["alignment"]["Coherence"]["n_items"] == 6
    assert set(r["budget"]["Fluency"]["gain_at"]["random"]) == {"K=3", "K=5"}
    assert r["rank_stability"]["Coherence"]["stability"]["n_groups_used"] == 2
    md = (out / "report.md").read_text(encoding="utf-8")
    head = md.split("\n## ", 1)[0]
    assert f"**Verdict:** {saved['verdict']}" in head  # the verdict before any section
    assert "Skipped: " + r["skipped"]["criterion_position"] in md
    assert "![Budget curves](plots/budget.png)" in md
    scores = (out / "scores.csv").read_text(encoding="utf-8").splitlines()  # one row per item and criterion
    assert scores[0].startswith("item_id,group,criterion,reading,fixed,balanced,random") and len(scores) == 1 + 12


def test_same_spec_gives_the_same_numbers(first, root):
    res, out = first
    other = run_experiment(write_spec(root, out, file="spec2.toml"), out=root / "run2", progress=False)
    a, b = _json(out / "results.json"), _json(root / "run2" / "results.json")
    assert a["analysis"] == b["analysis"] and other["results"] == res["results"]
    assert b["spec"]["out"] == str(root / "run2") and {**a["spec"], "out": None} == {**b["spec"], "out": None}
    np.testing.assert_array_equal(ScoreTable.load(out / "table.npz").probs,
                                  ScoreTable.load(root / "run2" / "table.npz").probs)


def test_rerun_reuses_the_table(first, root):
    res, out = first
    stamp = (out / "table.npz").stat().st_mtime_ns
    again = run_experiment(write_spec(root, out), progress=False)
    assert (out / "table.npz").stat().st_mtime_ns == stamp  # not scored again
    assert again["results"] == res["results"]
    assert _json(out / "results.json")["analysis"] == res["results"]


def test_interrupted_run_resumes_with_the_same_numbers(first, root, monkeypatch):
    res, _ = first
    out = root / "run3"
    spec = write_spec(root, out, file="spec3.toml")
    real = Checkpoint.add_batch

    class Stop(RuntimeError):
        pass

    def add_then_stop(self, records, *by):
        real(self, records, *by)
        raise Stop("simulated interruption after the first finished batch")

    monkeypatch.setattr(Checkpoint, "add_batch", add_then_stop)
    with pytest.raises(Stop):
        run_experiment(spec, progress=False)
    partial = out / "table.npz.partial.jsonl"
    assert partial.exists() and not (out / "table.npz").exists()
    saved = sum(len(rec["items"]) for rec in scan(partial)[1])
    assert saved == 6  # all 6 items form one batch (token budget 4096): one record, kept whole
    monkeypatch.setattr(Checkpoint, "add_batch", real)
    resumed = run_experiment(spec, progress=False)
    assert not partial.exists() and (out / "table.npz").exists()
    assert resumed["verdict"] == res["verdict"]
    assert resumed["results"] == res["results"]  # the resumed table is bit for bit the uninterrupted one


def test_multi_criteria_experiment_reports_the_criterion_position_effect(root):
    out = root / "multi"
    spec = {"name": "tiny-multi", "out": str(out), "_base": str(root), "model": {"id": "tiny"},
            "data": {"texts": "texts.jsonl", "rubric": "rubric.toml"},
            "prompts": {"multi_criteria": True, "slots": "greedy"},
            "orderings": {"options": "fixed:1", "criteria": "balanced"}, "analysis": {"n_boot": 40, "n_draws": 3}}
    res = run_experiment(spec, progress=False)
    table = ScoreTable.load(out / "table.npz")
    assert table.shape == (6, 2, 4, 3) and table.meta["multi_criteria"] is True
    assert sorted(map(tuple, table.criterion_orders)) == [(0, 1), (0, 1), (1, 0), (1, 0)]
    r = res["results"]
    assert r["table"]["criterion_order_varies"] and len(r["criterion_position"]["spread"]) == 2
    png = (out / "plots" / "criterion_position.png").read_bytes()
    assert png.startswith(PNG) and len(png) > 1024
    assert "position.Coherence.chi_square" in r["skipped"]  # a FIXED option order cannot test position bias
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "![Criterion-position effect](plots/criterion_position.png)" in md

def test_demo_prints_distributions_and_verdict(root, monkeypatch, capsys):
    assert len(read_items(demo_mod.TEXTS)) == 12  # the built-in texts parse
    short = root / "demo_texts.jsonl"  # a shorter run on the tiny model; like the built-in texts, no human scores
    short.write_text("".join(json.dumps({"id": iid, "group": g, "text": t}) + "\n" for iid, g, t, *_ in TEXTS))
    monkeypatch.setattr(demo_mod, "TEXTS", short)
    out = root / "demo"
    assert demo_mod.run_demo(out, model=str(root / "tiny"), n_boot=40, progress=False) == 0
    text = capsys.readouterr().out
    verdict = _json(out / "results.json")["verdict"]
    lines = text.strip().splitlines()
    assert lines[-2] == f"verdict: {verdict}" and str(out / "report.html") in lines[-1]
    assert "pos 1" in text and "E[score]" in text
    for iid, *_ in TEXTS:
        assert any(ln.startswith(iid + " ") for ln in lines), iid
    assert (out / "report.html").is_file() and (out / "plots" / "position.png").is_file()
    saved = _json(out / "results.json")
    assert saved["analysis"]["alignment"] is None  # the demo has no human scores
    assert saved["analysis"]["skipped"]["alignment"] == "no human scores given"


@pytest.mark.parametrize("change, words", [
    ({"data": {"texts": "t.jsonl", "limt": 3}}, ["[data]", "'limt'", "did you mean 'limit'"]),
    ({"data": {"texts": "t.jsonl", "limit": "22"}}, ["[data] limit", "integer", "limit = 22"]),
    ({"data": {"texts": "t.jsonl", "limit": 0}}, ["[data] limit", "at least 1"]),
    ({"data": {"texts": "t.jsonl", "name": "hanna"}}, ["[data]", "exactly one of name"]),
    ({"data": {}}, ["[data]", "exactly one of name"]),
    ({"modle": {"id": "x"}}, ["'modle'", "did you mean 'model'"]),
    ({"model": "gemma"}, ["[model]", "must be a table"]),
    ({"prompts": {"multi_criteria": "yes"}}, ["[prompts] multi_criteria", "true or false"]),
    ({"prompts": {"slots": "fast"}}, ["[prompts] slots", "'greedy'", "'marginal'"]),
    ({"analysis": {"method": "pearsn"}}, ["[analysis] method", "'pearson'"]),
    ({"data": {"texts": "t.jsonl", "groups": [1.5]}}, ["[data] groups", "list of group ids"]),
])
def test_bad_spec_names_the_key(change, words):
    spec = {"name": "bad", "data": {"texts": "t.jsonl"}}
    spec.update(change)
    with pytest.raises(SpecError) as e:
        load_spec(spec)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


@pytest.mark.parametrize("change, words", [
    ({"orderings": {"options": "rand:3"}}, ["[orderings] options", "random:K"]),
    ({"data": {"criteria": ["Coherence", "Wit"]}}, ["[data] criteria", "'Wit'"]),
    ({"data": {"rubric": "nope"}}, ["[data] rubric", "nope"]),
    ({"data": {"texts": "missing.jsonl"}}, ["[data]", "missing.jsonl", "does not exist"]),
    ({"prompts": {"template": "no-such-template"}}, ["[prompts] template", "no-such-template"]),
    ({"prompts": {"multi_criteria": True}, "data": {"criteria": ["Coherence"]}},
     ["[prompts] multi_criteria", "single criterion"]),
])
def test_bad_spec_values_are_caught_before_scoring(root, change, words):
    spec = {"name": "bad", "out": str(root / "bad"), "_base": str(root),
            "data": {"texts": "texts.jsonl", "rubric": "rubric.toml"}}
    for k, v in change.items():
        spec[k] = {**spec.get(k, {}), **v}
    with pytest.raises(SpecError) as e:
        prepare(spec)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_spec_file_errors(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        load_spec(tmp_path / "nope.toml")
    (tmp_path / "broken.toml").write_text('name = "x"\n[data\n', encoding="utf-8")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(tmp_path / "broken.toml")
    (tmp_path / "noname.toml").write_text('[data]\nname = "hanna"\n', encoding="utf-8")
    with pytest.raises(SpecError, match="missing key name"):
        load_spec(tmp_path / "noname.toml")
    spec = load_spec({"name": "x", "data": {"name": "hanna"}})
    assert spec.out == "reports/x" and spec.model.id == "gemma-3-270m"
    assert spec.orderings.options == "balanced" and spec.analysis.n_boot == 1000


def test_example_specs_validate():
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "experiments"
    specs = sorted(folder.glob("*.toml"))
    assert {p.name for p in specs} >= {"hanna_small.toml", "summeval_small.toml", "mt_bench_small.toml"}
    for p in specs:
        spec = load_spec(p)
        assert spec.data.name is not None and spec.out.startswith("reports/"), p


@pytest.mark.skipif(shared_data_dir("hanna", "mt_bench") is None,
                    reason="real data (hanna, mt_bench) not found: set LOGITJUDGE_DATA or put it at ../shared/data")
def test_prepare_reads_data_sets():
    data = shared_data_dir("hanna", "mt_bench")
    exp = prepare({"name": "h", "data": {"name": "hanna", "limit": 22, "criteria": ["Coherence", "Empathy"]}},
                  data_dir=data)
    assert len(exp.items) == 22 and exp.data_info["n_groups"] == 2
    assert [c.name for c in exp.rubric.criteria] == ["Coherence", "Empathy"]
    assert exp.human and set(exp.human[exp.items[0].id]) >= {"Coherence", "Empathy"}
    assert exp.systems and len(set(exp.systems.values())) == 11
    assert exp.option_orders.shape == (10, 5)
    trimmed = prepare({"name": "h", "data": {"name": "hanna", "limit": 22, "per_group": 4}}, data_dir=data)
    assert [it.id for it in trimmed.items] == [it.id for it in exp.items if it.group == exp.items[0].group][:4] + \
        [it.id for it in exp.items if it.group == exp.items[-1].group][:4]
    mt = prepare({"name": "m", "data": {"name": "mt_bench", "groups": 2,
                                        "options": {"models": ["gpt-4", "llama-13b", "vicuna-13b-v1.3"]}},
                  "prompts": {"template": "bracketed"}}, data_dir=data)
    assert len(mt.items) == 6 and mt.human is None and mt.template.terminator == "]]"
    assert mt.option_orders.shape == (20, 10)
    with pytest.raises(SpecError, match=r"\[data\].*no option"):
        prepare({"name": "m", "data": {"name": "mt_bench", "options": {"model": ["gpt-4"]}}}, data_dir=data)



def test_probe_section_probes_the_scored_items(root):
    """[probe] runs the chosen probes on the first `limit` scored items and writes the probe page beside the
    report; the lens's last layer equals the scored probabilities (the same prompts, the same model)."""
    from logitjudge.outputs import Output, check_outputs, report_folder
    from logitjudge.probing.table import ProbeTable

    out = root / "probed"
    spec = {"name": "tiny-probe", "out": str(out), "_base": str(root), "model": {"id": "tiny"},
            "data": {"texts": "texts.jsonl", "rubric": "rubric.toml", "criteria": ["Fluency"]},
            "analysis": {"n_boot": 20, "n_draws": 3},
            "probe": {"probes": ["lens", "attention"], "limit": 2}}
    res = run_experiment(spec, progress=False)
    page = out / "probe" / "probe.html"
    assert res["probe_report"] == str(page) and page.exists()
    probed, table = ProbeTable.load(out / "probe.npz"), ScoreTable.load(out / "table.npz")
    assert list(probed.item_ids) == list(table.item_ids[:2])
    np.testing.assert_allclose(probed.probs, table.probs[:2, 0], atol=1e-5)
    np.testing.assert_allclose(probed.lens_probs[:, :, -1], table.probs[:2, 0], atol=1e-5)  # [I, K, n]
    # every file of the folder is recognised as the one a run writes there: the same run again is not refused
    check_outputs([Output(out, "--out", files=report_folder(probe=True))], [])
    assert {p.name for p in (out / "probe").iterdir()} >= {"probe.md", "probe.html", "probe.json"}


@pytest.mark.parametrize("probe, words", [
    ({"probes": ["lens", "heads"]}, ["[probe]", "unknown probes", "'heads'"]),
    ({"probes": ["lens"], "criterion": "Wit"}, ["[probe] criterion", "'Wit'"]),
    ({"probes": ["patch"], "sites": ["ffn"]}, ["[probe]", "unknown patch sites"]),
])
def test_bad_probe_section_is_refused_before_the_model(root, probe, words):
    from logitjudge.probing.settings import probe_settings

    spec = {"name": "bad", "out": str(root / "bad"), "_base": str(root),
            "data": {"texts": "texts.jsonl", "rubric": "rubric.toml"}, "probe": probe}
    with pytest.raises(SpecError) as e:
        probe_settings(prepare(spec))
    for w in words:
        assert w in str(e.value), (w, str(e.value))
