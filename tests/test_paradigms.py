"""Pairwise and listwise judging on the rubric's engine (issue 25): the dumped prompts reproduce every probability
with a plain forward, the table layout the estimators read, planted judges through the engine-produced tables,
the spec's refusals, and ``logitjudge compare``."""

from __future__ import annotations

import json
import re
import string
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import fresh_tiny_lm, shared_data_dir

from logitjudge.analysis import analyze, format_markdown
from logitjudge.candidates import plan
from logitjudge.checkpoint import Checkpoint
from logitjudge.cli import main
from logitjudge.design import prepare
from logitjudge.engine import Engine, plain_prompt_logprobs
from logitjudge.experiment import SpecError, run_experiment
from logitjudge.items import Item
from logitjudge.paradigm_run import CandidateRun, check_template
from logitjudge.requests import item_prompts, orders_of
from logitjudge.rubric import builtin_rubric
from logitjudge.steps import score_batch
from logitjudge.table import ScoreTable

LETTERS = string.ascii_uppercase
PROB_ATOL = 1e-5
TEXTS = ["The cat sat on the mat.", "A dog barked at the moon while the sun rose slowly.",
         "The economy grew by three percent, the article says.", "Once upon a time a cat sat on the mat.",
         "The text is clear, well written and correct.", "Very poor. Poor. Fair."]
CONTEXT = "The article says that the economy grew by three percent."
TIE_TEMPLATE = """paradigm = "pairwise"
tie_label = "equal"
body = "Which text is better?\\n\\n{context_block}{rubric}\\nAnswer A, B or equal."
context_block = "Context: {context}\\n\\n"
criterion_block = "{name}: {description}\\n{options}"
option_line = "Text {label}: {description}"
answer_prefix = "\\nAnswer: "
terminator = "."
"""


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def lm():
    return fresh_tiny_lm(LETTERS)  # capital letters label the candidates


@pytest.fixture(scope="module")
def root(tmp_path_factory, lm):
    root = tmp_path_factory.mktemp("paradigms")
    lm.model.save_pretrained(root / "tiny")
    lm.tokenizer.save_pretrained(root / "tiny")
    with (root / "texts.jsonl").open("w", encoding="utf-8") as f:
        for i, text in enumerate(TEXTS):
            f.write(json.dumps({"id": f"t{i}", "text": text, "group": f"g{i // 3}",
                                "context": CONTEXT if i < 3 else "", "human": {"Quality": float((i * 2) % 5)}})
                    + "\n")
    (root / "tie.toml").write_text(TIE_TEMPLATE, encoding="utf-8")
    return root


def items(n_groups: int = 2, per: int = 3) -> list[Item]:
    return [Item(f"g{g}c{c}", TEXTS[(g + c) % len(TEXTS)], CONTEXT if g == 0 else "", f"g{g}")
            for g in range(n_groups) for c in range(per)]


# ---- exactness: the dumped prompts against a plain forward --------------------------------------------------
def plain_probs_of_record(model, tok, rec) -> np.ndarray:
    """One dumped prompt: every label continuation by a full forward of prompt + continuation, fp32 softmax."""
    lps = []
    for cont in rec["continuations"]:
        ids = tok(rec["prompt"] + cont, add_special_tokens=rec["add_special_tokens"]).input_ids
        with torch.inference_mode():
            logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
        lps.append(sum(float(logp[i - 1, ids[i]]) for i in range(rec["prompt_tokens"], len(ids))))
    p = np.exp(np.array(lps) - max(lps))
    return p / p.sum()


@pytest.mark.parametrize("paradigm, extra", [("pairwise", []), ("pairwise", ["--template", "tie.toml"]),
                                             ("pairwise", ["--pairs", "2", "--verify", "3"]), ("listwise", []),
                                             ("listwise", ["--orderings", "random:3"])])
def test_every_probability_equals_a_plain_forward_of_the_dumped_prompt(root, lm, paradigm, extra, tmp_path):
    out, dump = tmp_path / "table.npz", tmp_path / "prompts.jsonl"
    extra = [str(root / x) if x.endswith(".toml") else x for x in extra]
    rc = main(["score", "--model", str(root / "tiny"), "--texts", str(root / "texts.jsonl"), "--paradigm",
               paradigm, "--out", str(out), "--dump-prompts", str(dump), "--threads", "1", "--quiet", *extra])
    assert rc == 0
    t = ScoreTable.load(out)
    tie = "--template" in extra
    assert t.meta["paradigm"] == paradigm and t.meta["tie_label"] == ("equal" if tie else "")
    if "--verify" in extra:  # the exactness audit before the run draws from the candidate rows' prompts
        assert t.meta["exactness_audit"]["n_prompts"] == 3
        assert t.meta["exactness_audit"]["max_abs_prob_diff"] < PROB_ATOL
    recs = [json.loads(x) for x in dump.read_text(encoding="utf-8").splitlines()]
    if paradigm == "pairwise":
        n_pairs = 2 * (2 if "--pairs" in extra else 3)
        assert t.shape == (n_pairs, 1, 2, 3 if tie else 2)
        assert t.option_orders.tolist() == ([[0, 1, 2], [1, 0, 2]] if tie else [[0, 1], [1, 0]])
        assert all(json.loads(rid) == c for rid, c in zip(t.item_ids, t.meta["candidates"]))
    else:
        K = 3 if "random:3" in extra else 6
        assert t.shape == (2, 1, K, 3) and list(t.item_ids) == ["g0", "g1"]
        assert t.meta["candidates"] == [["t0", "t1", "t2"], ["t3", "t4", "t5"]]
        assert t.orders_per_item == ("random:3" in extra)
    assert list(t.item_groups) == [f"g{int(c[0][1:]) // 3}" for c in t.meta["candidates"]]  # each row's group
    assert len(recs) == t.shape[0] * t.shape[2]
    tok, model = lm.tokenizer, lm.model
    row = {rid: i for i, rid in enumerate(t.item_ids)}
    worst = 0.0
    for rec in recs:
        i, k = row[rec["item_id"]], rec["ordering"]
        order = orders_of(t.option_orders, i)[k]
        assert rec["option_order"] == order.tolist() and rec["paradigm"] == paradigm
        assert rec["candidates"] == t.meta["candidates"][i]
        # labels belong to slots: the candidate shown at slot s answers with the s-th letter
        m = len(rec["candidates"])
        assert [rec["labels"][c] for c in order[:m]] == list(LETTERS[:m])
        for s, c in enumerate(order[:m]):
            text = TEXTS[int(rec["candidates"][c][1:])]
            assert rec["prompt"].index(text) == sorted(rec["prompt"].index(TEXTS[int(x[1:])])
                                                       for x in rec["candidates"])[s]
        worst = max(worst, float(np.abs(plain_probs_of_record(model, tok, rec) - t.probs[i, 0, k]).max()))
    assert worst < PROB_ATOL
    if tie:  # the tie label is several tokens and is never listed as a candidate
        assert len(tok("equal", add_special_tokens=False).input_ids) > 1
        assert all("equal." in rec["continuations"][-1] and rec["labels"][-1] == "equal" for rec in recs)


def test_the_rows_of_a_group_share_one_trie_and_the_same_numbers(lm):
    rub = builtin_rubric("default")
    rows, orders = plan(items(2, 4), "pairwise")
    tpl = check_template(None, "pairwise")
    prompts = [item_prompts(lm, rub, r, orders, tpl) for r in rows]
    alone, shared = Engine(lm, token_budget=100_000), Engine(lm, token_budget=100_000)
    a = score_batch(alone, prompts, 1)
    b = score_batch(shared, prompts, 1, share=[r.group for r in rows])
    assert max(np.abs(x[0] - y[0]).max() for x, y in zip(a, b)) < 1e-6
    assert shared.stats["tokens"] < 0.6 * alone.stats["tokens"]  # the context and instructions once per group
    plain = plain_prompt_logprobs(lm.model, prompts[5])
    got = b[5][0].reshape(len(plain), -1)
    for p, lp in enumerate(plain):
        q = np.exp(lp - lp.max())
        assert np.abs(q / q.sum() - got[p]).max() < PROB_ATOL


@pytest.mark.parametrize("paradigm", ["pairwise", "listwise"])
def test_a_resumed_candidate_run_keeps_its_checkpointed_rows(lm, tmp_path, paradigm):
    """A row's record holds the row's options (its candidates, plus a pairwise tie), not the rubric's: the
    checkpoint keeps it on resume, and the resumed table equals an uninterrupted one bit for bit."""
    rub, out = builtin_rubric("default"), tmp_path / "t.npz"
    rows, orders = plan(items(2, 3), paradigm)
    full = CandidateRun(lm, rows, rub, orders, paradigm=paradigm, progress=False).execute()
    first = CandidateRun(lm, rows, rub, orders, paradigm=paradigm, out=out, progress=False)
    ckpt = Checkpoint(out, first.fingerprint, check=first.steps.check_record)
    batch = next(first.batches(list(range(len(rows))), {}))
    ckpt.add_batch({first.items[i].id: rec for i, rec in zip(batch.idx, batch.step(batch.idx))})
    ckpt.close()  # interrupted after its first batch
    resumed = CandidateRun(lm, rows, rub, orders, paradigm=paradigm, out=out, progress=False)
    again = Checkpoint(out, resumed.fingerprint, check=resumed.steps.check_record)
    assert set(again.done) == {rows[i].id for i in batch.idx}
    again.close()
    table = resumed.execute()
    assert np.array_equal(table.probs, full.probs) and np.array_equal(table.label_mass, full.label_mass)


# ---- planted judges through the engine-produced tables ------------------------------------------------------
QUALITY = {text: float(q) for q, text in enumerate(TEXTS)}  # the planted content preference: later texts are better


def planted(kind: str, bias: float = 0.0):
    """``engine.prompt_logprobs`` of a planted judge, read from each real prompt: which candidate text is shown
    at which letter (the prompt as rendered), and the labels' continuations in canonical candidate order."""

    def judge(groups):
        out = []
        for g in groups:
            res = []
            for ep in g:
                text = ep.prompt_text
                shown = sorted((text.index(t), t) for t in TEXTS if f"\n{t}\n" in text)  # slot order
                slot_q = np.array([QUALITY[t] for _, t in shown])
                if kind == "always-A":
                    logit = np.r_[10.0, np.zeros(len(slot_q) - 1)]
                else:  # content (order-blind) plus a bias towards slot 1
                    logit = 3.0 * slot_q + bias * (np.arange(len(slot_q)) == 0)
                letters = [c.split("]]")[0].strip()[-1] for c in ep.continuations]
                res.append(np.array([logit[LETTERS.index(x)] for x in letters]) - 20.0)
            out.append(res)
        return out

    return judge


def planted_table(lm, paradigm: str, kind: str, bias: float = 0.0, per: int = 4) -> ScoreTable:
    its = [Item(f"g{g}c{c}", TEXTS[(g + c) % len(TEXTS)], CONTEXT, f"g{g}") for g in range(3) for c in range(per)]
    rows, orders = plan(its, paradigm, orderings="balanced")
    engine = Engine(lm)
    engine.prompt_logprobs = planted(kind, bias)
    return CandidateRun(lm, rows, builtin_rubric("default"), orders, paradigm=paradigm, engine=engine,
                        progress=False).execute()


def quality_of(ids) -> np.ndarray:
    return np.array([QUALITY[TEXTS[(int(x[1]) + int(x[3])) % len(TEXTS)]] for x in ids])


def test_a_pairwise_judge_that_always_answers_a(lm):
    res = analyze(planted_table(lm, "pairwise", "always-A"), reading="greedy", n_boot=50)
    r = res["pairwise"]["Quality"]
    assert r["swap"]["consistency"] == 0.0 and r["swap"]["first_slot_preference"] == 1.0
    assert r["slot_test"]["shares"] == [1.0, 0.0] and r["slot_test"]["pvalue"] == 0.0
    # per pair: the verdict follows the slot entirely, so the order-debiased verdict is an even split
    assert len(r["pairs"]) == 3 * 6
    for x in r["pairs"]:
        assert x["shown_1_first"] == [1.0, 0.0, 0.0] and x["shown_2_first"] == [0.0, 1.0, 0.0]
        assert x["debiased"] == [0.5, 0.5, 0.0] and x["order_effect"] == 1.0
    md = format_markdown(res)
    assert "Pairs whose verdict the order moves most (10 of 18 pairs" in md
    assert "| 1.00 / 0.00 | 0.00 / 1.00 | 0.50 / 0.50 | 1.00 |" in md


@pytest.mark.parametrize("reading", ["greedy", "sampled"])
def test_an_order_blind_pairwise_judge_and_bradley_terry_recovers_the_planted_ranking(lm, reading):
    t = planted_table(lm, "pairwise", "blind")
    r = analyze(t, reading=reading, n_boot=50)["pairwise"]["Quality"]
    assert r["swap"]["first_slot_preference"] == pytest.approx(0.5, abs=1e-9)  # exact under both readings
    if reading == "greedy":  # (the sampled reading's slot test counts one random sampling run)
        assert r["swap"]["consistency"] == 1.0
        assert r["slot_test"]["statistic"] == pytest.approx(0.0, abs=1e-9)
        for x in r["pairs"]:  # the order changes nothing; the better text is preferred in both orders
            better = int(np.argmax(quality_of(x["candidates"])))
            assert x["order_effect"] == 0.0 and x["debiased"] == [1.0 - better, float(better), 0.0]
    for g in r["ranking"]:  # best first: the planted order
        assert list(quality_of(g["candidates"])) == sorted(quality_of(g["candidates"]), reverse=True)
    # a first-slot bias that flips close pairs does not move the Bradley-Terry ranking of the debiased preferences
    biased = analyze(planted_table(lm, "pairwise", "blind", bias=3.0), reading="sampled", n_boot=50)
    rb = biased["pairwise"]["Quality"]
    assert rb["swap"]["first_slot_preference"] > 0.55
    assert [g["candidates"] for g in rb["ranking"]] == [g["candidates"] for g in r["ranking"]]


def test_planted_listwise_judges(lm):
    a = analyze(planted_table(lm, "listwise", "always-A"), reading="greedy", n_boot=50)["listwise"]["Quality"]
    # each candidate opens 2 of the 8 balanced orders: the winner changes between all other pairs of orders
    assert a["slot_test"]["shares"][0] == 1.0 and a["top1"]["flip"] == pytest.approx(24 / 28)
    b = analyze(planted_table(lm, "listwise", "blind"), reading="sampled", n_boot=50)["listwise"]["Quality"]
    assert b["slot_test"]["n_slots"] == 4 and b["top1"]["flip"] == 0.0
    g = analyze(planted_table(lm, "listwise", "blind"), reading="greedy", n_boot=50)["listwise"]["Quality"]
    assert g["slot_test"]["statistic"] == pytest.approx(0.0, abs=1e-9)  # a balanced design: every slot alike
    for grp in b["ranking"]:
        assert list(quality_of(grp["candidates"])) == sorted(quality_of(grp["candidates"]), reverse=True)


# ---- the spec, the run, compare ----------------------------------------------------------------------------
def spec(root, **prompts) -> dict:
    orderings = {"options": prompts.pop("orderings", "balanced")}
    return {"name": "p", "out": str(root / "out"), "model": {"id": str(root / "tiny")},
            "data": {"texts": str(root / "texts.jsonl")}, "prompts": prompts, "orderings": orderings}


@pytest.mark.parametrize("prompts, words", [
    ({"paradigm": "pairwise", "orderings": "random:3"}, ["both orders", "orderings"]),
    ({"paradigm": "listwise", "pairs": 2}, ["pairwise prompts only"]),
    ({"paradigm": "pointwise", "pairs": 2}, ["pairwise only"]),
    ({"paradigm": "pairwise", "template": "text-first"}, ["pointwise prompts", "'pairwise'"]),
    ({"template": "listwise"}, ["paradigm = \"listwise\""]),
    ({"paradigm": "listwise", "template": "pairwise-tie"}, ["listwise"]),
    ({"paradigm": "pairwise", "multi_criteria": True}, ["multi_criteria"]),
])
def test_bad_paradigm_settings_are_refused_before_the_model(root, prompts, words):
    with pytest.raises(SpecError) as e:
        prepare(spec(root, **prompts))
    assert all(w in str(e.value) for w in words), str(e.value)


def test_items_that_cannot_be_compared_are_refused_with_the_fix(root, tmp_path):
    uneven = tmp_path / "uneven.jsonl"
    uneven.write_text("".join(json.dumps({"id": f"u{i}", "text": TEXTS[i], "group": "a" if i < 2 else "b"}) + "\n"
                              for i in range(5)), encoding="utf-8")
    s = spec(root, paradigm="listwise")
    with pytest.raises(SpecError, match="per_group = 2"):
        prepare(dict(s, data={"texts": str(uneven)}))
    assert len(prepare(dict(s, data={"texts": str(uneven), "per_group": 2})).rows) == 2
    lone = tmp_path / "lone.jsonl"
    lone.write_text(json.dumps({"id": "x", "text": "A text."}) + "\n", encoding="utf-8")
    with pytest.raises(SpecError, match="give every item a 'group'"):
        prepare(dict(spec(root, paradigm="pairwise"), data={"texts": str(lone)}))


@pytest.mark.parametrize("paradigm", ["pairwise", "listwise"])
def test_a_group_of_one_candidate_is_refused_in_one_line_before_the_model_loads(root, tmp_path, monkeypatch,
                                                                              capsys, paradigm):
    from logitjudge import models

    def no_model(*a, **kw):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(models, "load_model", no_model)
    texts = tmp_path / "one.jsonl"
    texts.write_text("".join(json.dumps({"id": f"o{i}", "text": TEXTS[i], "group": "g0" if i < 2 else "g1"}) + "\n"
                             for i in range(3)), encoding="utf-8")
    rc = main(["score", "--model", str(root / "tiny"), "--texts", str(texts), "--paradigm", paradigm, "--out",
               str(tmp_path / "t.npz"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "group 'g1' has a single item ('o2')" in err and "nothing to compare it with" in err
    assert not (tmp_path / "t.npz").exists()


def test_a_pairwise_run_writes_its_report_and_reuses_its_table(root):
    s = dict(spec(root, paradigm="pairwise", template="pairwise-tie"), out=str(root / "run"),
             analysis={"n_boot": 30, "reading": "greedy"})
    res = run_experiment(s, progress=False)
    out = Path(res["report"])
    assert "swap consistency" in res["verdict"] and "position bias not tested" not in res["verdict"]
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "## Pairwise judging" in md and "## Position preference" not in md
    assert (out / "plots" / "pairwise.png").read_bytes()[:4] == b"\x89PNG"
    scores = (out / "scores.csv").read_text(encoding="utf-8").splitlines()
    assert scores[0].startswith("item_id,group,criterion,paradigm") and len(scores) == 1 + 6
    # analyze --scores and --export read the candidates, not the rows' candidate numbers as scores
    assert main(["analyze", str(out / "table.npz"), "--scores", str(out / "again.csv")]) == 0
    head = (out / "again.csv").read_text(encoding="utf-8").splitlines()[0]
    assert head.startswith("item_id,group,criterion,paradigm")
    long = ScoreTable.load(out / "table.npz").to_dataframe()
    shown = long[long["candidate_id"] != ""]
    assert set(shown["label"]) == {"A", "B"} and (shown["label"] == shown["position"].map({1: "A", 2: "B"})).all()
    assert set(long.loc[long["candidate_id"] == "", "label"]) == {"C"}  # the tie, never permuted
    assert set(shown["candidate_id"]) == {f"t{i}" for i in range(6)}
    stamp = (out / "table.npz").stat().st_mtime_ns
    run_experiment(s, progress=False)
    assert (out / "table.npz").stat().st_mtime_ns == stamp


def test_compare_prints_the_table_and_writes_the_plot(root, tmp_path, capsys):
    tables = []
    for paradigm in ("pointwise", "pairwise", "listwise"):
        out = tmp_path / f"{paradigm}.npz"
        assert main(["score", "--model", str(root / "tiny"), "--texts", str(root / "texts.jsonl"), "--paradigm",
                     paradigm, "--out", str(out), "--threads", "1", "--quiet"]) == 0
        tables.append(str(out))
    human = tmp_path / "human.jsonl"
    human.write_text("".join(json.dumps({"id": f"t{i}", "Quality": float((i * 2) % 5)}) + "\n" for i in range(6)),
                     encoding="utf-8")
    capsys.readouterr()
    png, js = tmp_path / "cmp.png", tmp_path / "cmp.json"
    assert main(["compare", *tables, "--human", str(human), "--plot", str(png), "--json", str(js),
                 "--n-boot", "30"]) == 0
    printed = capsys.readouterr().out
    rows = [ln for ln in printed.splitlines() if re.match(r"\| (pointwise|pairwise|listwise) \|", ln)]
    assert [r.split("|")[1].strip() for r in rows] == ["pointwise", "pairwise", "listwise"]
    assert png.read_bytes()[:4] == b"\x89PNG"
    d = json.loads(js.read_text(encoding="utf-8"))["Quality"]
    assert d["paradigms"] == ["pointwise", "pairwise", "listwise"] and len(d["group_names"]) == 2
    assert all(x > 0 for x in d["trie_tokens"]) and d["n_items"] == 6


@pytest.mark.parametrize("dataset", ["hanna", "summeval"])
def test_the_benchmark_scores_the_same_items_under_the_three_paradigms(dataset, tmp_path):
    """benchmarks/paradigms.py's specs (no model): the pairs and the lists hold exactly the pointwise items."""
    from types import SimpleNamespace

    from benchmarks import paradigms as bench

    data = shared_data_dir(dataset)
    if data is None:
        pytest.skip(f"no {dataset} data set beside the repository (../shared/data) or in $LOGITJUDGE_DATA")
    args = SimpleNamespace(model="gemma-3-270m", threads=1, data_dir=str(data), groups=2, per_group=3, seed=0)
    exps = {p: prepare(bench.spec(dataset, p, args, tmp_path)) for p in bench.PARADIGMS}
    ids = {it.id for it in exps["pointwise"].items}
    assert len(ids) == 6 and exps["pointwise"].rubric.criteria[0].name == bench.CRITERION[dataset]
    assert {c.id for r in exps["pairwise"].rows for c in r.candidates} == ids and len(exps["pairwise"].rows) == 6
    assert [len(r.candidates) for r in exps["listwise"].rows] == [3, 3]
    assert {c.id for r in exps["listwise"].rows for c in r.candidates} == ids


@pytest.mark.slow
def test_parity_gemma_pairwise_and_listwise(gemma_lm):
    """The built-in judge: every label of a pair under both orders (FastChat's tie template: labels "A]]" of
    several tokens) and of a list of three under its reversed order, within 1e-5 of the plain forward (a plain
    forward computes the 262k-word read-out at every position: 9 of them here)."""
    rub = builtin_rubric("default")
    its = [Item(f"c{i}", t, CONTEXT, "g") for i, t in enumerate(TEXTS[:3])]
    for paradigm, name in (("pairwise", "pairwise-tie"), ("listwise", "listwise")):
        tpl = check_template(name, paradigm)
        rows, orders = plan(its, paradigm, tie_label=tpl.tie_label)
        orders = orders[[0, 1]] if paradigm == "pairwise" else orders[[len(orders) // 2]]  # listwise: reversed
        t = CandidateRun(gemma_lm, rows[:1], rub, orders, paradigm=paradigm, template=tpl,
                         engine=Engine(gemma_lm, token_budget=2048), progress=False).execute()
        eps = item_prompts(gemma_lm, rub, rows[0], orders, tpl)
        assert min(len(c) for c in eps[0].continuation_ids) >= 2
        for k, lp in enumerate(plain_prompt_logprobs(gemma_lm.model, eps)):
            q = np.exp(lp - lp.max())
            assert np.abs(q / q.sum() - t.probs[0, 0, k]).max() < PROB_ATOL


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
