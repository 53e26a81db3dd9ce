import json
import math

import numpy as np
import pytest
from synthetic import planted_human, planted_table

from logitjudge.analysis import HumanScoresError, analyze, format_markdown, read_human_scores
from logitjudge.stats import AlignmentError

SECTIONS = ["position", "criterion_position", "aggregation", "alignment", "budget", "rank_stability"]


def _no_nan(x) -> bool:
    if isinstance(x, float):
        return math.isfinite(x)
    if isinstance(x, dict):
        return all(_no_nan(v) for v in x.values())
    if isinstance(x, list):
        return all(_no_nan(v) for v in x)
    return True


@pytest.fixture(scope="module")
def planted():
    t = planted_table(160, 5, n_criteria=2, position_bias=[0.6, 0, 0, 0, 0],
                      criterion_position_shift=[0.3, -0.3], prompt_noise=0.5, n_groups=20, rng=0)
    return t, planted_human(t, rng=1)


def test_analyze_returns_every_section(planted):
    t, human = planted
    res = analyze(t, human=human, rng=0, n_boot=60, n_draws=5)
    for s in SECTIONS:
        assert res[s], f"section {s} missing: {res['skipped']}"
    assert res["verdict"].startswith("C0: first-position bias (p = ")
    assert "Cramér's V" in res["verdict"] and "items as clusters" in res["verdict"]
    assert "C1: first-position bias" in res["verdict"]
    assert res["table"]["design"] == "balanced"
    assert res["position"]["C0"]["chi_square"]["label"] == "first"
    assert res["position"]["C0"]["effect"]["log_odds"][0] == pytest.approx(0.6, abs=0.1)
    assert res["criterion_position"]["spread"][0] == pytest.approx(0.6, abs=0.1)
    al = res["alignment"]["C0"]
    assert set(al["item"]) == {"fixed", "random", "balanced"} and al["n_items"] == 160
    assert al["item"]["balanced"]["pearson"]["statistic"] > 0.5
    assert "balanced_vs_fixed" in al["compare"] and "pride" in al
    assert set(res["budget"]["C0"]["curves"]) == {"fixed", "random", "balanced"}
    assert res["rank_stability"]["C1"]["stability"]["n_groups_used"] == 20
    text = json.dumps(res, allow_nan=False)
    assert json.loads(text) == res and _no_nan(res)
    md = format_markdown(res)
    assert md.startswith(res["verdict"])
    assert "## Human alignment" in md and "## Criterion-position effect" in md and "## Rank stability" in md


def test_analyze_skips_with_reasons_and_names_the_direction():
    t = planted_table(150, 4, position_bias=[0, 0, 0, 0.8], prompt_noise=0.4, rng=2)
    res = analyze(t, n_boot=50)
    assert res["verdict"].startswith("last-position bias (p = ") and "favoured position 4" in res["verdict"]
    for s in ["alignment", "budget", "rank_stability", "criterion_position"]:
        assert res[s] is None
    assert res["skipped"]["alignment"] == "no human scores given"
    assert "single criterion" in res["skipped"]["criterion_position"]
    assert res["position"]["C0"]["pride_prior"]["prior"][3] > 0.25
    json.dumps(res, allow_nan=False)
    assert format_markdown(res).startswith(res["verdict"])


def test_analyze_fixed_and_random_designs():
    t = planted_table(60, 4, orderings="fixed", rng=0)
    res = analyze(t, n_boot=20)
    assert "not tested" in res["verdict"] and "FIXED" in res["skipped"]["position.C0.chi_square"]
    assert "not identifiable" in res["skipped"]["position.C0.effect"]
    t = planted_table(60, 4, orderings="random", position_bias=[0.9, 0, 0, 0], prompt_noise=0.3, rng=0)
    res = analyze(t, n_boot=20)  # one random set shared by every item: content and position confounded
    assert "not tested" in res["verdict"] and "confounded" in res["skipped"]["position.C0.chi_square"]
    t = planted_table(60, 4, rng=0)
    res = analyze(t, n_boot=20)
    assert res["verdict"].startswith("no significant position bias")


def test_analyze_groups_argument_and_mismatched_ids(planted):
    t, human = planted
    one = planted_table(40, 3, rng=0)
    groups = {iid: f"q{i // 4}" for i, iid in enumerate(one.item_ids)}
    res = analyze(one, groups=groups, n_boot=20, n_draws=3)
    assert res["rank_stability"]["C0"]["stability"]["n_groups_used"] == 10
    with pytest.raises(AlignmentError, match="not in the table"):
        analyze(t, human={"nope": {"C0": 1.0}}, n_boot=10)
    with pytest.raises(AlignmentError, match="none of the table"):
        analyze(t, human={t.item_ids[0]: {"Other": 1.0}}, n_boot=10)
    with pytest.raises(AlignmentError, match="group ids"):
        analyze(one, groups={"nope": "g"}, n_boot=10)


def test_read_human_scores(tmp_path):
    nested = tmp_path / "h.jsonl"
    nested.write_text('{"id": "a", "human": {"Coherence": 3.3, "Fluency": 2}, "group": "d1"}\n\n'
                      '{"id": "b", "human": {"Coherence": 4}, "group": "d1"}\n')
    human, groups = read_human_scores(nested)
    assert human == {"a": {"Coherence": 3.3, "Fluency": 2.0}, "b": {"Coherence": 4.0}}
    assert groups == {"a": "d1", "b": "d1"}
    flat = tmp_path / "f.jsonl"
    flat.write_text('{"id": 1, "Coherence": 3.3, "doc": "x", "text": "t"}\n'
                    '{"id": 2, "Coherence": 1, "doc": "y"}\n')
    human, groups = read_human_scores(flat, group_by="doc")
    assert human == {"1": {"Coherence": 3.3}, "2": {"Coherence": 1.0}} and groups == {"1": "x", "2": "y"}
    assert read_human_scores(flat)[1] is None
    with pytest.raises(HumanScoresError, match="no field 'src'"):
        read_human_scores(flat, group_by="src")
    bad = tmp_path / "bad.jsonl"
    cases = [('{"Coherence": 1}\n', "'id'"),
             ('{"id": 1, "Coherence": 1}\n{"id": 1, "Coherence": 2}\n', "duplicate id"),
             ("not json\n", "not valid JSON"),
             ('{"id": 1, "human": {"C": "high"}}\n', "not numbers"),
             ('{"id": 1, "doc": "x"}\n', "no human scores")]
    for text, msg in cases:
        bad.write_text(text)
        with pytest.raises(HumanScoresError, match=msg):
            read_human_scores(bad)
    with pytest.raises(HumanScoresError, match="does not exist"):
        read_human_scores(tmp_path / "missing.jsonl")


def test_analyze_with_read_human_scores(tmp_path):
    t = planted_table(40, 3, position_bias=[0.5, 0, 0], prompt_noise=0.3, rng=5)
    human = planted_human(t)
    path = tmp_path / "h.jsonl"
    path.write_text("".join(json.dumps({"id": iid, "C0": h["C0"], "doc": f"d{i % 5}"}) + "\n"
                            for i, (iid, h) in enumerate(human.items())))
    h, g = read_human_scores(path, group_by="doc")
    res = analyze(t, human=h, groups=g, n_boot=30, n_draws=3)
    assert res["alignment"]["C0"]["grouped"]["balanced"]["n_groups"] == 5
    assert np.isfinite(res["alignment"]["C0"]["item"]["balanced"]["pearson"]["statistic"])


def test_analyze_partial_human_scores_and_systems(planted):
    t, human = planted
    only_c0 = {iid: {"C0": h["C0"]} for iid, h in human.items()}
    systems = {iid: f"sys{i % 8}" for i, iid in enumerate(t.item_ids)}
    res = analyze(t, human=only_c0, systems=systems, n_boot=20, n_draws=3)
    assert res["alignment"]["C0"]["system"]["balanced"]["n"] == 8
    assert "C1" not in res["alignment"]
    assert "no human scores for criterion 'C1'" in res["skipped"]["alignment.C1"]
    json.dumps(res, allow_nan=False)


def test_verdict_names_a_degenerate_interval():
    """A judge whose answers do not vary across items: the bootstrap CI has no width, and the verdict says why."""
    t = planted_table(40, 4, position_bias=[1.5, 0, 0, 0], content_scale=0.0, rng=0)
    res = analyze(t, n_boot=50)
    assert res["verdict"].startswith("first-position bias")
    assert "no spread: every item chose alike" in res["verdict"]
    t = planted_table(150, 4, position_bias=[0, 0, 0, 0.8], prompt_noise=0.4, rng=2)
    assert "no spread" not in analyze(t, n_boot=50)["verdict"]


def test_pride_reads_the_balanced_rows_inside_all_and_balanced_plus_random_tables():
    from logitjudge import orderings as ords
    from logitjudge import stats as st

    for orders in ("all", ords.parse("balanced+random:4", 4, seed=1, n_items=40)):
        t = planted_table(40, 4, orderings=orders, position_bias=[0, 0, 0, 0.8], prompt_noise=0.4, rng=2)
        res = analyze(t, human=planted_human(t, rng=1), n_boot=20, n_draws=3)
        rows = st.balanced_rows(t.option_orders)
        got = res["position"]["C0"]["pride_prior"]["prior"]
        pbp = st.probs_by_position(t.probs[:, 0], t.option_orders)
        if isinstance(orders, str):  # all n! orders, a balanced design: the prior uses every row
            rows = np.arange(t.option_orders.shape[-2])
        shared = t.option_orders[..., rows, :]
        shared = shared[0] if shared.ndim == 3 else shared
        want = st.pride_prior(np.log(np.maximum(pbp[:, rows], 1e-12)), option_orders=shared).prior
        assert np.allclose(got, want) and got[3] > 0.25
        assert res["alignment"]["C0"]["pride"]["n_estimation_items"] == 8


def test_positions_are_numbered_from_1_for_people():
    """A planted first-position table: the verdict says 'position 1', no position column of the Markdown holds a
    0, the JSON field a person reads is 1-based (the 0-based index is named *_index), counts print as integers."""
    t = planted_table(120, 5, n_criteria=2, position_bias=[0.8, 0, 0, 0, 0], criterion_position_shift=[0.3, -0.3],
                      prompt_noise=0.5, rng=4)
    res = analyze(t, n_boot=100, reading="greedy")
    assert "favoured position 1)" in res["verdict"] and "position 0" not in res["verdict"]
    chi = res["position"]["C0"]["chi_square"]
    assert chi["favoured"] == [1] and chi["favoured_index"] == [0]
    counts = res["verdict"].split("counts by position [", 1)[1].split("]", 1)[0]
    assert all(c.strip().isdigit() for c in counts.split(","))  # integers, not 50.0
    md = format_markdown(res)
    position_rows = [ln.split("|")[1].strip() for ln in md.split("## Position preference")[1].split("\n## ")[0]
                     .splitlines() if ln.startswith("| ") and not ln.startswith("| position")]
    assert position_rows == ["1", "2", "3", "4", "5"] * 2
    crit = md.split("## Criterion-position effect")[1].split("\n## ")[0]
    header = next(ln for ln in crit.splitlines() if ln.startswith("| criterion"))
    assert "position 1" in header and "position 2" in header and "position 0" not in header
    assert "positions [1] have" in chi["label_reason"]
