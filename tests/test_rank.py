"""Issue 34: picks that survive the order. Planted tables with known fragile and robust groups, whose hold
probabilities and smallest K are computed by hand; ties; the Monte-Carlo path against the exact one; pairwise and
listwise groups; the leaderboard; ``logitjudge rank`` on the built-in judge and on hostile input."""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction as F

import numpy as np
import pandas as pd
import pytest

from logitjudge import balanced
from logitjudge.cli import main
from logitjudge.picks import RankError, id_suffix, rank
from logitjudge.stats._result import StatsError
from logitjudge.stats.hold import hold_probability, leaderboard, pairwise_hold
from logitjudge.table import ScoreTable

# scores (1, 2 or 3) of each candidate under the 6 orders of 3 options (balanced(3) = all 3! orders)
GROUPS = {"robust": {"A": [3] * 6, "B": [2] * 6, "C": [1] * 6},
          "fragile": {"A": [3, 3, 3, 3, 1, 1], "B": [2] * 6, "C": [1] * 6},
          "tie": {"A": [3] * 6, "B": [3] * 6, "C": [1] * 6},
          "looktie": {"A": [3, 1, 3, 1, 3, 1], "B": [2] * 6, "C": [1] * 6}}


def binom_tail(k: int, p: F, above) -> F:
    """P(#successes in k trials satisfies ``above``)."""
    return sum((math.comb(k, j) * p ** j * (1 - p) ** (k - j) for j in range(k + 1) if above(j)), F(0))


# fragile: A's K-order mean beats B's constant 2 iff more than half of A's K draws are a 3 (p = 4/6); an exact
# half ties A with B, a different top set. looktie: the pick is the tie {A, B} (both mean 2); it holds only when
# exactly half of A's draws are a 3 (p = 1/2).
FRAGILE = [binom_tail(k, F(2, 3), lambda j, k=k: 2 * j > k) for k in range(1, 7)]
LOOKTIE = [binom_tail(k, F(1, 2), lambda j, k=k: 2 * j == k) for k in range(1, 7)]


def planted(groups=GROUPS) -> ScoreTable:
    """One-hot distributions: every prompt's expected score is the planted value exactly."""
    probs, ids, gs = [], [], []
    for g, cands in groups.items():
        for c, s in cands.items():
            p = np.zeros((1, 6, 3))
            p[0, np.arange(6), np.asarray(s) - 1] = 1.0
            probs.append(p)
            ids.append(f"{g}/{c}")
            gs.append(g)
    probs = np.stack(probs)
    return ScoreTable(probs, np.ones(probs.shape[:3]), balanced(3), np.zeros((6, 1), dtype=int), [[1.0, 2.0, 3.0]],
                      ids, ["Quality"], gs)


def test_hand_computed_holds_and_smallest_k():
    assert [float(x) for x in FRAGILE] == pytest.approx([2 / 3, 4 / 9, 20 / 27, 48 / 81, 192 / 243, 496 / 729])
    r = rank(planted(), stability=0.95)
    h = {g: d.sort_values("k") for g, d in r.holds.groupby("group")}
    np.testing.assert_allclose(h["fragile"]["hold"], [float(x) for x in FRAGILE], atol=1e-12)
    np.testing.assert_allclose(h["looktie"]["hold"], [float(x) for x in LOOKTIE], atol=1e-12)
    np.testing.assert_allclose(h["robust"]["hold"], 1.0, atol=1e-12)
    np.testing.assert_allclose(h["tie"]["hold"], 1.0, atol=1e-12)  # the same tie under every order: it holds
    assert all(r.holds["exact"]) and (r.holds["hold_se"] == 0).all()
    g = r.groups.set_index("group")
    assert g.loc["robust", "min_k"] == 1 and g.loc["tie", "min_k"] == 1
    assert pd.isna(g.loc["fragile", "min_k"]) and pd.isna(g.loc["looktie", "min_k"])  # not within 6 orders
    assert g.loc["tie", "pick"] == "tie/A|tie/B" and g.loc["tie", "pick_candidate"] == "1|2"
    assert r.summary["fragile"] == 2 and r.summary["not_within_budget"] == 2 and r.summary["pool"] == "all orders"
    # the smallest K reaching a lower stability: the first K whose hand-computed hold reaches it
    g = rank(planted(), stability=0.75).groups.set_index("group")
    assert g.loc["fragile", "min_k"] == 5  # 192/243 = 0.790; K = 1..4 stay below 0.75
    assert rank(planted(), stability=0.6).groups.set_index("group").loc["fragile", "min_k"] == 1
    c = r.candidates.set_index("item_id")
    assert c.loc["fragile/A", "rank"] == 1 and c.loc["fragile/A", "score"] == pytest.approx(14 / 6)
    assert c.loc["tie/A", "rank"] == c.loc["tie/B", "rank"] == 1 and c.loc["tie/C", "rank"] == 3
    assert c.loc["robust/B", "score_ci_low"] == c.loc["robust/B", "score_ci_high"] == 2.0  # the same under all
    assert set(c["candidate"]) == {1, 2, 3} and set(r.candidates["reading"]) == {"expected"}


def test_shared_design_enumerates_row_multisets():
    """One draw of K rows for the group: B now varies with the order, in step with A (hand count over rows)."""
    s = np.array([[3, 2], [3, 2], [1, 2], [2, 3], [3, 1], [2, 2.5]], dtype=float)  # A mean 14/6 > B mean 12.5/6
    r = hold_probability(s, ks=[1, 2], design="shared")
    assert r.pick_index.tolist() == [0]
    assert r.hold[0] == pytest.approx(3 / 6)  # rows where A > B: 0, 1, 4
    means = (s[:, None] + s[None, :]) / 2  # every ordered pair of rows, probability 1/36 each
    assert r.hold[1] == pytest.approx(np.mean(means[..., 0] > means[..., 1] + 1e-9))


def test_independent_exact_equals_brute_force():
    """The convolution and grid formula against every joint draw (3 rows, 3 candidates, K = 1..3: up to 27^3
    outcomes), with ties at the top in some outcomes (integer scores)."""
    import itertools

    from logitjudge.stats.top1 import top_sets

    s = np.random.default_rng(5).integers(1, 4, size=(3, 3)).astype(float)
    s[:, 0] += 0.5  # candidate 1 leads on average
    res = hold_probability(s, ks=[1, 2, 3])
    for k, h in zip(res.ks, res.hold):
        draws = list(itertools.product(range(3), repeat=k))
        means = np.array([[s[list(d), j].mean() for d in draws] for j in range(3)])  # [candidate, draw]
        total = 0.0
        for combo in itertools.product(range(len(draws)), repeat=3):
            x = means[np.arange(3), list(combo)]
            total += np.array_equal(top_sets(x, True), np.isin(np.arange(3), res.pick_index))
        assert h == pytest.approx(total / len(draws) ** 3, abs=1e-12)


def test_monte_carlo_agrees_with_exact_and_carries_its_se():
    s = np.array(GROUPS["fragile"]["A"] + GROUPS["fragile"]["B"] + GROUPS["fragile"]["C"], float).reshape(3, 6).T
    exact = hold_probability(s, ks=[1, 2, 3])
    for design in ("independent", "shared"):
        mc = hold_probability(s, ks=[1, 2, 3], design=design, method="mc", n_draws=20000, rng=1)
        assert not mc.exact.any() and (mc.outcomes == 20000).all()
        np.testing.assert_allclose(mc.hold_se, np.sqrt(mc.hold * (1 - mc.hold) / 20000), rtol=1e-3)
        assert np.all(np.abs(mc.hold - exact.hold) < 4 * mc.hold_se)  # here both designs give one distribution
    again = hold_probability(s, ks=[1, 2, 3], method="mc", n_draws=20000, rng=1)
    np.testing.assert_array_equal(again.hold, hold_probability(s, ks=[1, 2, 3], method="mc", n_draws=20000,
                                                                rng=1).hold)  # seeded
    auto = hold_probability(s, ks=[6], max_outcomes=5, rng=0)  # a support of 7 values passes 5: Monte-Carlo
    assert not auto.exact[0] and auto.hold_se[0] > 0
    with pytest.raises(StatsError, match="max_outcomes"):
        hold_probability(s, ks=[6], method="exact", max_outcomes=5)
    with pytest.raises(StatsError, match="stability"):
        hold_probability(s, stability=1.5)


def test_pairwise_bradley_terry_holds():
    """A judge that always answers the first slot: debiased, every candidate ties; one orientation per pair
    makes a winner unless the verdicts cycle (2 of the 8 orientations of 3 pairs), which ties all three again."""
    v = np.tile(np.array([[1.0, 0, 0], [0, 1.0, 0]]), (3, 1, 1))  # orientation 0: pairs[p, 0] wins
    r = pairwise_hold(v, [[0, 1], [0, 2], [1, 2]], 3, ks=[1, 2])
    assert r.pick_index.tolist() == [0, 1, 2] and r.exact.all()
    assert r.hold[0] == pytest.approx(2 / 8)
    one = pairwise_hold(v[:1], [[0, 1]], 2, ks=[1, 2, 3, 4])  # one pair: holds iff the orientations split evenly
    np.testing.assert_allclose(one.hold, [0, 1 / 2, 0, 3 / 8], atol=1e-12)
    mc = pairwise_hold(v[:1], [[0, 1]], 2, ks=[2], method="mc", n_draws=400, rng=0)
    assert abs(mc.hold[0] - 0.5) < 4 * mc.hold_se[0]


def _pairwise_table() -> ScoreTable:
    """One group of three candidates, every pair in both orders, the always-"A" judge of the test above."""
    pairs = [("g/x", "g/y"), ("g/x", "g/z"), ("g/y", "g/z")]
    probs = np.zeros((3, 1, 2, 2))
    probs[:, 0, 0] = [1, 0]  # ordering 0 shows candidate 0 as "A"
    probs[:, 0, 1] = [0, 1]  # ordering 1 shows candidate 1 as "A"
    return ScoreTable(probs, np.ones((3, 1, 2)), [[0, 1], [1, 0]], np.zeros((2, 1), dtype=int), [[1.0, 2.0]],
                      [f"{a}|{b}" for a, b in pairs], ["Quality"], ["g"] * 3,
                      {"paradigm": "pairwise", "candidates": [list(p) for p in pairs], "tie_label": ""})


def _listwise_table() -> ScoreTable:
    """One list of three; the judge picks candidate 0 unless candidate 1 is shown first (2 of the 6 orders)."""
    orders = balanced(3)
    probs = np.zeros((1, 1, 6, 3))
    for k, o in enumerate(orders):
        probs[0, 0, k, 1 if o[0] == 1 else 0] = 1.0
    return ScoreTable(probs, np.ones((1, 1, 6)), orders, np.zeros((6, 1), dtype=int), [[1.0, 2.0, 3.0]], ["h"],
                      ["Quality"], ["h"], {"paradigm": "listwise", "candidates": [["h/x", "h/y", "h/z"]]})


def test_rank_pairwise_and_listwise_tables():
    p = rank(_pairwise_table(), reading="greedy")
    assert p.summary["paradigm"] == "pairwise" and p.groups.loc[0, "pick"] == "g/x|g/y|g/z"
    assert p.holds.set_index("k").loc[1, "hold"] == pytest.approx(2 / 8)
    assert p.candidates["score_name"].iloc[0].startswith("Bradley-Terry")
    s = rank(_listwise_table(), reading="greedy")
    assert s.groups.loc[0, "pick"] == "h/x" and s.groups.loc[0, "hold_k1"] == pytest.approx(4 / 6)
    assert s.candidates.set_index("item_id").loc["h/x", "score"] == pytest.approx(4 / 6)


def test_leaderboard_on_planted_systems():
    r = rank(planted(), systems=id_suffix, leaderboard_draws=400)
    b = r.leaderboard.set_index("system")
    # A wins robust and fragile, shares tie and looktie with B; mean scores over the four prompts by hand
    np.testing.assert_allclose(b.loc[["A", "B", "C"], "win_rate"], [0.75, 0.25, 0.0])
    np.testing.assert_allclose(b.loc[["A", "B", "C"], "mean_score"], [(3 + 14 / 6 + 3 + 2) / 4, 2.25, 1.0])
    assert b.loc["A", "rank"] == 1 and r.summary["top_systems"] == ["A"]
    assert 0 < r.summary["top_change"] < 1 and r.summary["top_change_se"] > 0
    robust = {g: GROUPS[g] for g in ("robust", "tie")}  # A's total beats B's under every order
    r2 = rank(planted(robust), systems=id_suffix, leaderboard_draws=200)
    assert r2.summary["top_change"] == 0 and r2.summary["top_change_se"] == 0
    lb = leaderboard(np.array([[3.0, 1.0, np.nan], [2.0, np.nan, 2.5]]), n_boot=0)
    np.testing.assert_allclose(lb.score, [2.5, 1.0, 2.5])
    np.testing.assert_allclose(lb.win_rate, [0.5, 0.0, 1.0])
    assert lb.top_index.tolist() == [0, 2] and lb.n_prompts.tolist() == [2, 1, 1]
    with pytest.raises(RankError, match="two candidates of one system"):
        rank(planted(), systems=lambda x: "same")


EXPECT = re.compile(r"^\d\.\d{3} (\(exact\)|± \d\.\d{3} \(MC SE\))$")


def _every_probability_named(md: str) -> int:
    """Every hold cell and the leaderboard's top change say '(exact)' or carry '± SE'; returns the cells seen."""
    seen = 0
    section = ""
    for line in md.splitlines():
        if line.startswith("## "):
            section = line
        if section.startswith("## Hold probability") and line.startswith("| ") and not line.startswith("| group"):
            for cell in line.strip("| ").split(" | ")[1:]:
                assert EXPECT.match(cell), cell
                seen += 1
    return seen


@pytest.mark.slow
def test_cli_rank_on_the_builtin_judge(tmp_path, capsys):
    texts = tmp_path / "texts.jsonl"
    rows = [("q1", "What is the capital of France?", ["Paris.", "It is Paris, a city in France.", "London."]),
            ("q2", "Name a mammal.", ["A whale.", "The salmon.", "Dogs are mammals."])]
    texts.write_text("".join(json.dumps({"id": f"{g}/s{j + 1}", "text": t, "context": q, "group": g}) + "\n"
                             for g, q, ts in rows for j, t in enumerate(ts)), encoding="utf-8")
    table = tmp_path / "t.npz"
    assert main(["rank", "--texts", str(texts), "--orderings", "random:3", "--out", str(table), "--quiet",
                 "--threads", "1"]) == 0  # score, then rank
    md = capsys.readouterr().out
    assert _every_probability_named(md) == 6 and "## Leaderboard" not in md
    out = {k: tmp_path / f"{k}.{ext}" for k, ext in (("cand", "csv"), ("grp", "parquet"), ("k", "csv"),
                                                     ("lb", "csv"), ("md", "md"), ("js", "json"))}
    assert main(["rank", str(table), "--systems", "id-suffix", "--per-candidate", str(out["cand"]), "--per-group",
                 str(out["grp"]), "--per-k", str(out["k"]), "--leaderboard", str(out["lb"]), "--markdown",
                 str(out["md"]), "--json", str(out["js"]), "--n-boot", "200"]) == 0
    cand, grp = pd.read_csv(out["cand"]), pd.read_parquet(out["grp"])
    assert len(cand) == 6 and len(grp) == 2 and set(cand["candidate"]) == {1, 2, 3}
    assert (cand["score_name"] == "mean expected score").all() and (grp["hold_k1_exact"]).all()
    ks = pd.read_csv(out["k"])
    assert set(ks["k"]) == {1, 2, 3} and ks["exact"].all() and ks["hold"].between(0, 1).all()
    md = out["md"].read_text(encoding="utf-8")
    assert _every_probability_named(md) == 6 and re.search(r"instead: \d\.\d{3} ± \d\.\d{3} \(MC SE\)", md)
    js = json.loads(out["js"].read_text(encoding="utf-8"))
    assert js["summary"]["top_change_se"] is not None and len(pd.read_csv(out["lb"])) == 3
    # Monte-Carlo everywhere: every probability carries its SE
    assert main(["rank", str(table), "--method", "mc", "--n-draws", "2000"]) == 0
    md = capsys.readouterr().out
    assert _every_probability_named(md) == 6 and "(exact)" not in md.split("## Hold probability")[1]


def _refused(capsys, argv, *words):
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (argv, rc, err)
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_hostile_rank_inputs(tmp_path, capsys):
    one = dict(GROUPS)
    one["alone"] = {"A": [1] * 6}
    bad = planted(one)
    bad.save(tmp_path / "one.npz")
    _refused(capsys, ["rank", str(tmp_path / "one.npz")], "group 'alone' has 1 candidate")
    t = planted()
    ScoreTable(t.probs, t.label_mass, t.option_orders, t.criterion_orders, t.values, t.item_ids,
               t.criteria).save(tmp_path / "nogroups.npz")
    _refused(capsys, ["rank", str(tmp_path / "nogroups.npz")], "no groups")
    planted().save(tmp_path / "ok.npz")
    for s in ("0", "1.5", "-0.1", "nan"):
        _refused(capsys, ["rank", str(tmp_path / "ok.npz"), "--stability", s], "--stability")
    # refused before anything is scored (no model, no texts file needed)
    _refused(capsys, ["rank", "--texts", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "x.npz"),
                      "--stability", "2"], "--stability")
    _refused(capsys, ["rank", str(tmp_path / "ok.npz"), "--per-group", str(tmp_path / "g.txt")], ".csv or .parquet")
    _refused(capsys, ["rank", str(tmp_path / "ok.npz"), "--per-group", str(tmp_path / "ok.npz")], "input")
    (tmp_path / "notes.csv").write_text("my,own\n1,2\n", encoding="utf-8")
    _refused(capsys, ["rank", str(tmp_path / "ok.npz"), "--per-group", str(tmp_path / "notes.csv")], "--force")
    assert (tmp_path / "notes.csv").read_text(encoding="utf-8") == "my,own\n1,2\n"
    _refused(capsys, ["rank", str(tmp_path / "ok.npz"), "--leaderboard", str(tmp_path / "lb.csv")], "--systems")
    _refused(capsys, ["rank", str(tmp_path / "ok.npz"), "--criterion", "Nope"], "criterion 'Nope'")
    _refused(capsys, ["rank", str(tmp_path / "missing.npz")], "no such file")
    assert not (tmp_path / "lb.csv").exists() and not (tmp_path / "g.txt").exists()


def test_rank_scores_candidates_first(tiny_lm):
    """rank(items, judge=...) scores the groups on one trie each, then ranks: the same as ranking the table."""
    from logitjudge.picks import score_candidates

    items = [{"id": f"{g}/{j}", "text": t, "context": f"Question {g}?", "group": g}
             for g in ("a", "b") for j, t in enumerate(["The cat sat.", "A dog ran far.", "Yes."])]
    kw = {"rubric": "default", "orderings": "random:2", "seed": 4}
    direct = rank(items, judge=tiny_lm, score=kw)
    table = score_candidates(items, tiny_lm, **kw)
    again = rank(table)
    pd.testing.assert_frame_equal(direct.groups, again.groups)
    assert len(direct.candidates) == 6 and set(direct.holds["k"]) == {1, 2} and direct.holds["exact"].all()
    with pytest.raises(RankError, match="judge="):
        rank(items)
