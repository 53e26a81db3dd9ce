import warnings

import numpy as np
import pytest
from scipy import stats as sps

from logitjudge.stats import (
    AlignmentError,
    InsufficientDataError,
    align_human,
    compare_correlations,
    correlation,
    grouped_correlation,
    per_group_correlations,
    system_correlation,
)
from logitjudge.stats._result import bootstrap_indices

RNG = np.random.default_rng(0)
X = RNG.normal(size=40)
Y = 0.6 * X + RNG.normal(size=40)


@pytest.mark.parametrize("method,ref", [("pearson", sps.pearsonr), ("spearman", sps.spearmanr),
                                        ("kendall", sps.kendalltau)])
def test_correlation_matches_scipy(method, ref):
    res = correlation(X, Y, method=method, n_boot=300, rng=1)
    r = ref(X, Y)
    assert res.statistic == pytest.approx(r.statistic)
    assert res.pvalue == pytest.approx(r.pvalue)
    assert res.defined and res.reason == "" and res.n == 40 and res.level == "item"
    assert res.ci_low < res.statistic < res.ci_high
    # the percentile CI is that of the statistic on resampled items
    idx = bootstrap_indices(40, 300, 1)
    boot = [ref(X[i], Y[i]).statistic for i in idx]
    assert res.ci_low == pytest.approx(np.quantile(boot, 0.025))
    assert res.ci_high == pytest.approx(np.quantile(boot, 0.975))


def test_constant_scores_give_a_clear_undefined_result():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = correlation(np.full(10, 3.0), Y[:10], n_boot=100)
        res2 = correlation(X[:10], np.ones(10), method="kendall")
    assert not res.defined and np.isnan(res.statistic) and "judge scores are constant" in res.reason
    assert not res2.defined and "human scores are constant" in res2.reason
    assert res.to_dict()["statistic"] is None


def test_single_item_and_shape_errors():
    with pytest.raises(InsufficientDataError, match="at least 3"):
        correlation([1.0], [2.0])
    with pytest.raises(ValueError, match="same length"):
        correlation(X, Y[:5])
    with pytest.raises(ValueError, match="NaN"):
        correlation(np.r_[X[:5], np.nan], Y[:6])


def test_grouped_correlation_by_hand():
    x = np.array([1, 2, 3, 4, 1, 2, 3, 5, 5, 5, 5, 2], dtype=float)
    y = np.array([1, 3, 2, 4, 4, 3, 2, 1, 1, 2, 3, 0], dtype=float)
    g = np.array(["a"] * 4 + ["b"] * 4 + ["c"] * 3 + ["d"] * 1)  # c: constant judge scores; d: one item
    res = grouped_correlation(x, y, g, n_boot=200, rng=0)
    ra = sps.pearsonr(x[:4], y[:4]).statistic
    rb = sps.pearsonr(x[4:8], y[4:8]).statistic
    assert res.statistic == pytest.approx((ra + rb) / 2)
    assert res.n_groups == 4 and res.n_groups_used == 2
    assert res.skipped == {"judge scores are constant": 1, "fewer than 3 items": 1}
    assert res.ci_low <= res.statistic <= res.ci_high
    per = per_group_correlations(x, y, g)
    np.testing.assert_array_equal(per.groups, ["a", "b", "c", "d"])
    np.testing.assert_allclose(per.statistic, [ra, rb, np.nan, np.nan])
    k = grouped_correlation(x, y, g, method="kendall", n_boot=0)
    assert k.statistic == pytest.approx((sps.kendalltau(x[:4], y[:4]).statistic
                                         + sps.kendalltau(x[4:8], y[4:8]).statistic) / 2)
    none = grouped_correlation(x, y, np.arange(12).astype(str))
    assert not none.defined and "no group" in none.reason and np.isnan(none.statistic)


def test_system_correlation_by_hand():
    sys_ = np.repeat(["s1", "s2", "s3", "s4", "s5"], 8)
    res = system_correlation(X, Y, sys_, method="spearman", n_boot=200, rng=0)
    mx = [X[sys_ == s].mean() for s in ["s1", "s2", "s3", "s4", "s5"]]
    my = [Y[sys_ == s].mean() for s in ["s1", "s2", "s3", "s4", "s5"]]
    assert res.statistic == pytest.approx(sps.spearmanr(mx, my).statistic)
    assert res.level == "system" and res.n == 5
    with pytest.raises(InsufficientDataError, match="systems"):
        system_correlation(X, Y, np.repeat(["a", "b"], 20))


def test_paired_comparison_uses_the_same_resamples():
    good = Y + RNG.normal(scale=0.3, size=40)
    bad = Y + RNG.normal(scale=2.0, size=40)
    res = compare_correlations(good, bad, Y, n_boot=500, rng=5)
    assert res.r_a == pytest.approx(sps.pearsonr(good, Y).statistic)
    assert res.statistic == pytest.approx(res.r_a - res.r_b)
    idx = bootstrap_indices(40, 500, 5)
    d = np.array([sps.pearsonr(good[i], Y[i]).statistic - sps.pearsonr(bad[i], Y[i]).statistic for i in idx])
    assert res.ci_low == pytest.approx(np.quantile(d, 0.025))
    below, above = (1 + (d <= 0).sum()) / 501, (1 + (d >= 0).sum()) / 501
    assert res.pvalue == pytest.approx(min(1, 2 * min(below, above)))
    assert res.pvalue < 0.01 and res.ci_low > 0
    same = compare_correlations(good, good, Y, n_boot=100, rng=0)
    assert same.statistic == 0 and same.pvalue == 1.0


def test_paired_comparison_grouped_and_system():
    g = np.repeat(np.arange(8).astype(str), 5)
    a, b = Y + RNG.normal(scale=0.2, size=40), Y + RNG.normal(scale=1.5, size=40)
    res = compare_correlations(a, b, Y, level="grouped", groups=g, n_boot=300, rng=0)
    assert res.defined and res.statistic > 0 and res.n_boot_used == 300
    sysr = compare_correlations(a, b, Y, level="system", systems=g, n_boot=100, rng=0)
    assert sysr.defined and np.isfinite(sysr.statistic)
    with pytest.raises(ValueError, match="needs groups"):
        compare_correlations(a, b, Y, level="grouped")
    flat = compare_correlations(np.ones(40), b, Y, n_boot=10)
    assert not flat.defined and "constant" in flat.reason


def test_align_human():
    ids = np.array(["a", "b", "c", "d"])
    hs = align_human(ids, {"c": {"Coh": 3.0}, "a": {"Coh": 1.0, "Flu": 2.0}, "b": {"Flu": 1.0}}, "Coh")
    np.testing.assert_array_equal(hs.index, [0, 2])
    np.testing.assert_allclose(hs.scores, [1.0, 3.0])
    assert hs.n_missing == 2
    with pytest.raises(AlignmentError, match="not in the table"):
        align_human(ids, {"a": {"Coh": 1.0}, "zz": {"Coh": 2.0}}, "Coh")
    with pytest.raises(AlignmentError, match="no human scores for criterion 'Rel'"):
        align_human(ids, {"a": {"Coh": 1.0}}, "Rel")
    with pytest.raises(AlignmentError, match="not a finite number"):
        align_human(ids, {"a": {"Coh": "high"}}, "Coh")
