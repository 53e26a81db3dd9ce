"""The position test with items as the unit (Rao-Scott second-order χ² referred to F(d, d(C-1))) and the
bias-corrected Cramér's V, by hand, against scipy, and on the planted designs of issue 23: idiosyncratic item
preferences are no bias, a shared one is."""

import numpy as np
import pytest
from scipy import stats as sps
from synthetic import planted_table

from logitjudge import orderings as ords
from logitjudge.analysis import analyze
from logitjudge.stats import cramers_v_corrected, position_chisquare, probs_by_position, rao_scott_chisquare
from logitjudge.stats.clustered import chi2_and_design_effect
from logitjudge.table import ScoreTable


def test_rao_scott_by_hand():
    # 3 items x 4 prompts, 2 categories: two items answer category 1 always, one category 2 always.
    # p = (2/3, 1/3), X² = N k sum (p - 1/2)² = 12 * 2 * 2/36 = 4/3. Residuals e_i = c_i - 4 p: (4/3, -4/3) twice,
    # (-8/3, 8/3); V = 3/2 * sum e e^T / 144 has V11 = 1/9; on the contrast (1, -1)/sqrt(2): 2/9; delta = N k 2/9.
    r = rao_scott_chisquare([[4, 0], [4, 0], [0, 4]])
    assert r.statistic == pytest.approx(4 / 3) and r.dof == 1 and r.n == 12 and r.n_clusters == 3
    assert r.design_effect == pytest.approx(16 / 3) and r.a_squared == pytest.approx(0)
    assert r.statistic_corrected == pytest.approx(0.25) and r.dof_corrected == pytest.approx(1)
    # F(1, C - 1 = 2) of 0.25: the cluster-robust t-test, t = 0.5 on 2 df, P(|T| > t) = 1 - t / sqrt(t² + 2) = 2/3
    # (the χ²(1) reference gave 0.617)
    assert r.dof_denominator == pytest.approx(2) and r.pvalue == pytest.approx(2 / 3)
    assert r.pvalue == pytest.approx(sps.f.sf(0.25, 1, 2))
    assert r.pvalue_per_prompt == pytest.approx(sps.chisquare([8, 4]).pvalue)
    # the effect: phi² = 1/9 lies below its no-preference expectation (k-1) d / N = 4/9: corrected V is 0
    assert cramers_v_corrected(r.statistic, 12, 2, design_effect=r.design_effect) == 0
    # independent prompts (d = 1): sqrt((3 - 1) / (1 * (12 - 1))) for X² = 3 on 12 prompts
    assert cramers_v_corrected(3.0, 12, 2) == pytest.approx(np.sqrt(2 / 11))
    assert cramers_v_corrected(12 * 4, 12, 5, design_effect=0.0) == pytest.approx(1.0)  # all at one position


def test_second_order_correction_by_hand():
    # 3 categories, unequal design effects: check against the eigenvalues computed here from the definition
    c = np.array([[5, 1, 0], [4, 2, 0], [0, 1, 5], [3, 3, 0], [2, 2, 2]], dtype=float)
    r = rao_scott_chisquare(c)
    n, k, i = c.sum(), 3, len(c)
    p = c.sum(axis=0) / n
    e = c - c.sum(axis=1, keepdims=True) * p
    v = i / (i - 1) * e.T @ e / n ** 2
    v0 = (np.diag(np.full(k, 1 / k)) - 1 / k ** 2) / n
    d = np.sort(np.linalg.eigvals(np.linalg.pinv(v0) @ v).real)[1:]  # drop the eigenvalue 0 along (1, 1, 1)
    np.testing.assert_allclose(np.sort(r.eigenvalues), d, rtol=1e-10)
    a2 = d.var() / d.mean() ** 2
    x2 = sps.chisquare(c.sum(axis=0)).statistic
    assert r.statistic == pytest.approx(x2) and r.a_squared == pytest.approx(a2)
    dof = 2 / (1 + a2)  # referred to F(d, d (C - 1)) with C = 5 items: p = 0.521 (the χ²(d) reference: 0.485)
    assert r.dof_corrected == pytest.approx(dof) and r.dof_denominator == pytest.approx(4 * dof)
    assert r.pvalue == pytest.approx(sps.f.sf(x2 / (d.mean() * (1 + a2)) / dof, dof, 4 * dof))
    assert r.pvalue == pytest.approx(0.5207, abs=1e-4)
    chi2, deff, nn = chi2_and_design_effect(np.ones((1, i)), c)  # the bootstrap's vectorised form
    assert chi2[0] == pytest.approx(x2) and deff[0] == pytest.approx(d.mean()) and nn[0] == n


def test_independent_prompts_have_a_design_effect_near_one():
    rng = np.random.default_rng(0)
    counts = rng.multinomial(10, [0.24, 0.19, 0.19, 0.19, 0.19], size=2000)  # every prompt its own draw
    r = rao_scott_chisquare(counts)
    assert 0.9 < r.design_effect < 1.1
    assert r.pvalue == pytest.approx(r.pvalue_per_prompt, rel=0.5)


def _own_preference_table(pref, strength=3.0, noise=0.3, rng=0) -> np.ndarray:
    """pbp[item, ordering, position] of a judge with no content and one strongly preferred position per item."""
    gen = np.random.default_rng(rng)
    k = ords.balanced(5).shape[0]
    logits = strength * np.eye(5)[pref][:, None, :] + gen.normal(0, noise, size=(len(pref), k, 5))
    e = np.exp(logits)
    return e / e.sum(axis=2, keepdims=True)


def test_items_each_with_their_own_preferred_position_are_no_bias():
    pref = np.repeat(np.arange(5), [12, 8, 8, 6, 6])  # 40 items, no preference shared by the items
    pbp = _own_preference_table(pref)
    res = position_chisquare(pbp, ords.balanced(5), n_boot=500, rng=0)
    assert res.pvalue > 0.05 and res.label == "none" and res.favoured == ()
    assert res.pvalue_per_prompt < 1e-4  # prompts taken as independent would have called it a bias
    assert res.design_effect > 5  # every item's 10 prompts go one way
    assert res.cramers_v_ci_low == 0  # the interval of the corrected V reaches 0
    probs = np.stack([np.take_along_axis(pbp[i], np.argsort(ords.balanced(5), axis=1), axis=1)
                      for i in range(40)])[:, None]  # back to canonical options: [items, 1 criterion, K, n]
    t = ScoreTable(probs, np.ones(probs.shape[:3]), ords.balanced(5), np.zeros((10, 1), int),
                   np.arange(1.0, 6)[None], [f"i{i}" for i in range(40)], ["C0"])
    verdict = analyze(t, n_boot=200, reading="greedy")["verdict"]
    assert verdict.startswith("no significant position bias"), verdict


def test_a_shared_first_position_bias_stays_significant():
    t = planted_table(200, 5, position_bias=[0.7, 0, 0, 0, 0], prompt_noise=0.5, rng=2)
    res = position_chisquare(probs_by_position(t.probs[:, 0], t.option_orders), t.option_orders, n_boot=300,
                             rng=0)
    assert res.pvalue < 1e-3 and res.label == "first" and res.favoured == (1,) and res.favoured_index == (0,)
    assert res.cramers_v_ci_low > 0 and res.cramers_v < res.cramers_v_raw


def test_null_of_idiosyncratic_preferences_rejects_at_about_alpha():
    # 400 studies of 40 items x 10 prompts: each item prefers a random position of its own, with a random strength
    rng = np.random.default_rng(1)
    rejected, per_prompt = 0, 0
    for _ in range(400):
        pref = rng.integers(0, 5, size=40)
        strength = rng.uniform(0, 0.8, size=40)
        p = np.full((40, 5), 0.0) + ((1 - strength) / 5)[:, None]
        p[np.arange(40), pref] += strength
        r = rao_scott_chisquare(np.stack([rng.multinomial(10, q) for q in p]))
        rejected += r.pvalue < 0.05
        per_prompt += r.pvalue_per_prompt < 0.05
    assert 0.02 <= rejected / 400 <= 0.09
    assert per_prompt / 400 > 0.3  # the per-prompt test reads idiosyncrasy as bias
