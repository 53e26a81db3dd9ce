"""The section registry: analyze(), the Markdown and the report loop over one list; a section that fails with a
StatsError is skipped with its reason while the others go on; a new section is one object and one line."""

import ast
import json
from pathlib import Path

import numpy as np
import pytest
from synthetic import planted_human, planted_table

from logitjudge import analysis, human
from logitjudge.analysis import analyze, format_markdown
from logitjudge.report import write_report
from logitjudge.sections import SECTIONS, Context, Section, _plot
from logitjudge.sections.budget import BUDGET
from logitjudge.stats import StatsError


@pytest.fixture(scope="module")
def planted():
    t = planted_table(40, 4, n_criteria=2, position_bias=[0.5, 0, 0, 0], criterion_position_shift=[0.2, -0.2],
                      prompt_noise=0.4, n_groups=8, rng=3)
    return t, planted_human(t, rng=4)


def test_every_section_is_computed_rendered_and_names_its_reading(planted):
    t, h = planted
    res = analyze(t, human=h, n_boot=20, n_draws=3)
    md = format_markdown(res)
    assert res["settings"]["reading"] == "expected" and res["skipped"] == {}
    for s in SECTIONS:
        assert res[s.name], s.name
        part = s.markdown(res)
        assert part.startswith(f"## {s.title}\n") and part in md, s.name
        assert "reading" in part and "reading" in s.caption(res), s.name  # every number says how it was read
    scores = [s for s in SECTIONS if s.name not in ("position",)]
    assert all("expected reading" in s.caption(res) for s in scores)


def test_a_failing_section_is_skipped_and_the_rest_goes_on(planted, monkeypatch):
    t, h = planted
    def refuse(ctx, c=None):
        raise StatsError("no budget")

    monkeypatch.setattr(BUDGET, "compute", refuse)
    res = analyze(t, human=h, n_boot=10, n_draws=2)
    assert res["budget"] is None and res["skipped"] == {"budget.C0": "no budget", "budget.C1": "no budget"}
    assert res["alignment"]["C0"] and res["rank_stability"]["C1"]
    assert "- budget.C0: no budget" in format_markdown(res)
    monkeypatch.setattr(BUDGET, "compute", lambda ctx, c=None: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # a bug is not a skipped section
        analyze(t, human=h, n_boot=10, n_draws=2)


class MeanScore(Section):
    """A section added by a test: the mean prompt score per criterion, with a plot."""

    name, title = "mean_score", "Mean score"
    CAPTION = "Mean score over items and orderings ({reading})."

    def compute(self, ctx: Context, c=None):
        return {"mean": float(ctx.prompt_scores(c).mean()), "draw": float(ctx.rng.random())}

    def tables(self, res, analysis):
        return [f"- {k}: {v['mean']:.4f}" for k, v in res.items()]

    def summary(self, analysis):
        return [f"{k}: {v['mean']:.4f}" for k, v in self.results(analysis).items()]

    def plot(self, analysis, path):
        fig, (ax,) = _plot.grid(1)
        ax.bar(range(len(self.results(analysis))), [v["mean"] for v in self.results(analysis).values()])
        return _plot.save(fig, path)


@pytest.fixture
def with_mean_score():
    sec = MeanScore()
    SECTIONS.append(sec)
    yield sec
    SECTIONS.remove(sec)


def test_a_new_section_is_one_object_and_one_registry_line(planted, with_mean_score, tmp_path):
    t, h = planted
    res = analyze(t, human=h, n_boot=10, n_draws=3)
    SECTIONS.remove(with_mean_score)
    without = analyze(t, human=h, n_boot=10, n_draws=3)
    SECTIONS.append(with_mean_score)
    assert {k: v for k, v in res.items() if k != "mean_score"} == without  # its draws move no other number
    truth = np.einsum("icko,co->ick", t.probs, t.values).mean(axis=(0, 2))  # expected score, by hand
    assert [res["mean_score"][c]["mean"] for c in t.criteria] == pytest.approx(truth, abs=1e-12)
    md = format_markdown(res)
    assert "## Mean score\n\nScores use the expected reading: each prompt's probability-weighted" in md
    assert f"- C0: {truth[0]:.4f}\n- C1: {truth[1]:.4f}" in md
    paths = write_report(tmp_path, res, title="new section")
    assert paths["plots"]["mean_score"].is_file()
    page = paths["html"].read_text(encoding="utf-8")
    assert "<h2>Mean score</h2>" in page and "Mean score over items and orderings (expected reading:" in page
    assert json.loads(paths["results"].read_text())["plots"]["mean_score"] == "plots/mean_score.png"


def test_context_refuses_a_bad_reading_and_human_reading_lives_beside_items(planted):
    with pytest.raises(StatsError, match="reading"):
        Context.build(planted[0], reading="bogus")
    assert analysis.read_human_scores is human.read_human_scores
    assert analysis.HumanScoresError is human.HumanScoresError


def _imports(path):
    """The logitjudge modules a file imports (relative imports resolved)."""
    pkg = path.relative_to(ROOT.parent).parent.parts  # ("logitjudge", "sections")
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(pkg[:len(pkg) - node.level + 1] + ((node.module,) if node.module else ())) \
                if node.level else node.module
            out.update([base] if node.module else [f"{base}.{a.name}" for a in node.names])
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m.startswith("logitjudge")}


ROOT = Path(analysis.__file__).parent


@pytest.mark.parametrize("layer,above", [("stats", ("analysis", "report", "sections", "human")),
                                         ("sections", ("analysis", "report"))])
def test_data_flows_one_way(layer, above):
    """stats -> sections -> analysis -> report: nothing below imports what is above."""
    for f in sorted((ROOT / layer).glob("*.py")):
        bad = [m for m in _imports(f) if m.split(".")[1:2] and m.split(".")[1] in above]
        assert not bad, f"{f.name} imports {bad}"


def test_greedy_reading_reaches_every_section_and_random_is_an_expectation(planted):
    """analyze(reading='greedy'): every section names the reading; RANDOM's mean score is the exact expectation
    (the mean over each item's rows of the greedy score), its correlation a Monte-Carlo value with its SE."""
    t, h = planted
    res = analyze(t, human=h, n_boot=20, n_draws=3, reading="greedy")
    assert res["settings"]["reading"] == "greedy"
    for s in SECTIONS:
        assert "greedy reading" in s.markdown(res) or s.name in ("position",), s.name
    greedy = t.values[0][np.argmax(t.probs[:, 0], axis=-1)]  # [items, orderings]
    assert res["aggregation"]["C0"]["mean_score"]["random"] == pytest.approx(greedy.mean())
    rnd = res["alignment"]["C0"]["item"]["random"]["pearson"]
    assert rnd["se"] is not None and 0 < rnd["se"] <= 0.0051 and not rnd["exact"]
    chi = res["position"]["C0"]["chi_square"]
    assert chi["reading"] == "greedy" and "counts by position" in res["verdict"]
    flips = res["rank_stability"]["C0"]
    assert flips["top1_flips"]["reading"] == "greedy" and set(flips["top1_change"]) == {"random", "balanced"}
    assert "pairwise top-set disagreement" in format_markdown(res)


def test_budget_reports_gains_over_fixed_with_cis_and_shares_only_where_they_hold(planted):
    t, h = planted
    res = analyze(t, human=h, n_boot=50, n_draws=3)
    b = res["budget"]["C0"]
    for s in b["curves"]:
        assert b["gain_over_fixed"][s][0] == pytest.approx(b["curves"][s][0] - b["curves"]["fixed"][0])
        lo, hi = b["gain_ci"][s][f"K={len(b['ks'])}"]
        shared = s in b["share_for"]
        assert shared == (b["gain_over_fixed"][s][-1] > 0 and lo > 0)
        assert (b["gain"][s]["fraction"][-1] is not None) == shared
    md = BUDGET.markdown(res)
    assert "gain over FIXED(1), 95% CI" in md and "share of the full gain" in md


def test_edges_and_mixed_labels_read_as_sentences_with_their_counts():
    from logitjudge.sections.position import _criterion_verdict

    base = {"cramers_v": 0.3, "cramers_v_ci_low": 0.2, "cramers_v_ci_high": 0.4, "pvalue": 1e-6, "alpha": 0.05,
            "reading": "greedy", "counts": [40.0, 10.0, 10.0, 40.0], "n": 100.0, "favoured": [1, 4],
            "design_effect": 1.2, "n_items": 10}
    v = _criterion_verdict("C", dict(base, label="edges"), None)
    assert "edges-position" not in v and "U-shaped" in v and "[40, 10, 10, 40]" in v and "positions 1, 4" in v
    assert "of N = 100 prompts from 10 items" in v and "design effect 1.20" in v and "p = 1e-06" in v
    v = _criterion_verdict("C", dict(base, label="mixed", favoured=[1, 3]), None)
    assert "mixed-position" not in v and "neither one end nor one block" in v


def test_shared_random_design_skips_the_chi_square_with_the_reason():
    from synthetic import planted_table

    t = planted_table(30, 4, orderings="random", n_orderings=3, rng=1)
    res = analyze(t, n_boot=10, n_draws=2)
    why = res["skipped"]["position.Q.chi_square"] if "position.Q.chi_square" in res["skipped"] else \
        next(v for k, v in res["skipped"].items() if k.endswith("chi_square"))
    assert "shared by every item" in why and "random:K" in why
    assert "position bias not tested" in res["verdict"]


def test_all_orders_table_compares_random_and_balanced_at_the_rotations_budget():
    """On all n! orders BALANCED is the 2n rotations inside the table: RANDOM's top-1 change is taken at that K,
    drawn from every permutation, and the per-item scores say K=2n."""
    from synthetic import planted_table

    from logitjudge.sections.scores import item_scores

    t = planted_table(24, 4, orderings="all", position_bias=[0.6, 0, 0, 0], prompt_noise=0.5, n_groups=6, rng=1)
    res = analyze(t, n_boot=20, n_draws=3, reading="greedy")
    change = res["rank_stability"]["C0"]["top1_change"]
    assert change["balanced"]["k"] == change["random"]["k"] == 8 and change["random"]["pool"] == "all orders"
    assert set(item_scores(t).random_k) == {8}
