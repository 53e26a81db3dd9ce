import numpy as np
import pytest
from scipy import stats as sps
from synthetic import planted_human, planted_table

from logitjudge import orderings as ords
from logitjudge.stats import (
    ShapeError,
    StatsError,
    aggregate_scores,
    budget_curve,
    gain_fraction,
    read_scores,
)


def test_gain_fraction_by_hand():
    g = gain_fraction([0.5, 0.6, 0.7, 0.8])
    assert g.defined
    np.testing.assert_allclose(g.fraction, [0, 1 / 3, 2 / 3, 1])
    g = gain_fraction([0.60, 0.66, 0.68, 0.69, 0.70])
    np.testing.assert_allclose(g.fraction, [0, 0.6, 0.8, 0.9, 1.0])
    flat = gain_fraction([0.7, 0.72, 0.7])
    assert not flat.defined and np.isnan(flat.fraction).all() and "r(Kmax) = r(1)" in flat.reason
    assert not gain_fraction([np.nan, 0.5]).defined
    with pytest.raises(ShapeError):
        gain_fraction([0.5])


def _study(bias=(0.6, 0, 0, 0, 0), orderings="balanced", n=150):
    t = planted_table(n, 5, position_bias=list(bias), prompt_noise=0.6, orderings=orderings, rng=3)
    h = planted_human(t, noise=0.5, rng=4)
    y = np.array([h[i]["C0"] for i in t.item_ids])
    return t, y


def test_budget_curve_endpoints_by_hand():
    t, y = _study()
    p, v = t.probs[:, 0], t.values[0]
    res = budget_curve(p, v, t.option_orders, y, n_draws=30, rng=0)
    np.testing.assert_array_equal(res.ks, np.arange(1, 11))
    full = aggregate_scores(p, v, t.option_orders).scores
    assert res.curves["balanced"][-1] == pytest.approx(sps.pearsonr(full, y).statistic)
    # BALANCED K=1 averages the correlation of every single ordering (the cyclic windows of length 1)
    single = [sps.pearsonr(p[:, k] @ v, y).statistic for k in range(10)]
    assert res.curves["balanced"][0] == pytest.approx(np.mean(single))
    assert res.curves_sd["balanced"][0] == pytest.approx(np.std(single))
    # FIXED with exact readings is flat at the canonical prompt's correlation, so its gain is undefined
    np.testing.assert_allclose(res.curves["fixed"], sps.pearsonr(p[:, 0] @ v, y).statistic)
    assert not res.gain["fixed"].defined
    g = res.gain["balanced"]  # the share of the gain over FIXED(1), defined: the gain is positive, its CI > 0
    f1 = res.curves["fixed"][0]
    assert g.defined and g.full_gain_ci_low > 0 and g.fraction[-1] == pytest.approx(1.0)
    assert g.fraction[0] == pytest.approx((res.curves["balanced"][0] - f1) / (res.curves["balanced"][-1] - f1))
    np.testing.assert_allclose(res.gain_over_fixed["balanced"], res.curves["balanced"] - f1)
    assert res.curves["random"][-1] > res.curves["random"][0]
    assert res.balanced_minus_random == pytest.approx(res.curves["balanced"] - res.curves["random"])
    den = res.curves["balanced"][-1] - res.curves["fixed"][-1]
    assert res.variance_share == pytest.approx((res.curves["random"][-1] - res.curves["fixed"][-1]) / den)


def test_budget_curve_sampled_reading_improves_fixed_and_unbalanced_tables():
    t, y = _study()
    res = budget_curve(t.probs[:, 0], t.values[0], t.option_orders, y, reading="sampled", strategies=("fixed",),
                       k_max=6, n_draws=10, rng=0)
    assert res.curves["fixed"][-1] > res.curves["fixed"][0]  # repeated sampling averages the draw noise away
    tr, yr = _study(orderings="random")
    res = budget_curve(tr.probs[:, 0], tr.values[0], tr.option_orders, yr, n_draws=10, rng=0,
                       method="spearman")
    assert set(res.curves) == {"fixed", "random"} and "not balanced" in res.notes[0]
    assert "shared orders" in res.notes[1] and res.pool == "shared orders"
    assert not res.variance_share_defined


def test_grouped_level_and_errors():
    t, y = _study()
    groups = np.repeat(np.arange(15).astype(str), 10)
    res = budget_curve(t.probs[:, 0], t.values[0], t.option_orders, y, level="grouped", groups=groups,
                       strategies=("balanced",), rng=0)
    assert np.isfinite(res.curves["balanced"]).all()
    with pytest.raises(ShapeError, match="align"):
        budget_curve(t.probs[:, 0], t.values[0], t.option_orders, y[:-1])
    with pytest.raises(StatsError, match="needs groups"):
        budget_curve(t.probs[:, 0], t.values[0], t.option_orders, y, level="grouped")


# ---- gains with their sign ---------------------------------------------------------------------------------
def _canonical_only_judge(n_items=80, n=4, seed=0):
    """A judge that agrees with humans under the canonical order only and answers noise under the others:
    averaging over orders lowers its correlation (a loss, not a gain)."""
    gen = np.random.default_rng(seed)
    y = gen.uniform(1, n, size=n_items)
    orders = ords.balanced(n)
    logits = gen.normal(0, 2.0, size=(n_items, len(orders), n))
    logits[:, 0] = -3.0 * (np.arange(1, n + 1)[None] - y[:, None]) ** 2
    p = np.exp(logits - logits.max(axis=2, keepdims=True))
    return p / p.sum(axis=2, keepdims=True), np.arange(1.0, n + 1), orders, y


@pytest.mark.parametrize("reading", ["greedy", "expected"])
def test_a_falling_correlation_is_never_a_share_of_a_gain(reading):
    p, v, orders, y = _canonical_only_judge()
    res = budget_curve(p, v, orders, y, reading=reading, n_boot=200, rng=0)
    for s in ("random", "balanced"):
        assert res.curves[s][-1] < res.curves["fixed"][0]  # averaging over orders loses agreement
        g = res.gain[s]
        assert not g.defined and np.isnan(g.fraction).all() and "falls" in g.reason and g.full_gain < 0
        assert res.gain_over_fixed[s][-1] == pytest.approx(res.curves[s][-1] - res.curves["fixed"][0])
    assert not res.variance_share_defined and "loss" in res.variance_share_reason
    assert not gain_fraction([0.5, 0.4, 0.3]).defined


def test_a_share_needs_a_gain_whose_ci_excludes_zero():
    g = gain_fraction([0.30, 0.31, 0.32], baseline=0.30, ci=(-0.01, 0.05))
    assert not g.defined and "does not exclude 0" in g.reason
    g = gain_fraction([0.30, 0.36, 0.40], baseline=0.30, ci=(0.02, 0.15))
    assert g.defined
    np.testing.assert_allclose(g.fraction, [0.0, 0.6, 1.0])


def test_gain_ci_is_a_paired_bootstrap_of_the_correlation_difference():
    t, y = _study()
    p, v = t.probs[:, 0], t.values[0]
    res = budget_curve(p, v, t.option_orders, y, strategies=("fixed", "balanced"), n_boot=300, rng=5)
    # the same percentile interval computed by resampling items directly
    gen = np.random.default_rng(5)
    idx = gen.integers(0, len(y), size=(300, len(y)))
    fixed = p[:, 0] @ v
    full = (p @ v).mean(axis=1)
    diff = [sps.pearsonr(full[i], y[i]).statistic - sps.pearsonr(fixed[i], y[i]).statistic for i in idx]
    lo, hi = np.quantile(diff, [0.025, 0.975])
    np.testing.assert_allclose(res.gain_ci["balanced"][f"K={len(res.ks)}"], [lo, hi], atol=1e-9)


def test_all_orders_table_random_and_balanced_like_the_study():
    t = planted_table(60, 4, orderings="all", position_bias=[0.8, 0, 0, 0], prompt_noise=0.6, rng=3)
    h = planted_human(t, noise=0.5, rng=4)
    y = np.array([h[i]["C0"] for i in t.item_ids])
    res = budget_curve(t.probs[:, 0], t.values[0], t.option_orders, y, reading="greedy", n_boot=100, rng=0)
    assert len(res.ks) == 8 and res.pool == "all orders" and not res.notes  # k_max = 2n, balanced rows picked
    assert res.curves_se["random"].max() <= res.precision and res.curves_se["balanced"].max() == 0
    # BALANCED(2n) is the mean over the study's 2n rotations, found among the 24 orders
    rows = [int(np.flatnonzero(np.all(t.option_orders == r, axis=1))[0]) for r in ords.balanced(4)]
    x = read_scores(t.probs[:, 0][:, rows], t.values[0], reading="greedy").mean(axis=1)
    assert res.curves["balanced"][-1] == pytest.approx(sps.pearsonr(x, y).statistic)
    assert res.reading == "greedy" and set(res.gain_ci["random"]) == {"K=3", "K=5", "K=8"}


def test_per_item_random_table_has_random_but_no_fixed_curve():
    t = planted_table(40, 4, orderings="per-item-random", n_orderings=6, prompt_noise=0.6, rng=1)
    h = planted_human(t, noise=0.5, rng=2)
    y = np.array([h[i]["C0"] for i in t.item_ids])
    res = budget_curve(t.probs[:, 0], t.values[0], t.option_orders, y, reading="greedy", n_boot=50, rng=0)
    assert set(res.curves) == {"random"} and res.pool == "per-item random orders"
    assert any("no FIXED curve" in n for n in res.notes) and not res.gain["random"].defined
    assert res.curves_se["random"].max() <= res.precision


def test_balanced_plus_random_table_draws_random_from_its_random_rows():
    orders = ords.parse("balanced+random:6", 4, seed=3, n_items=40)
    t = planted_table(40, 4, orderings=orders, position_bias=[0.8, 0, 0, 0], prompt_noise=0.6, rng=1)
    h = planted_human(t, noise=0.5, rng=2)
    y = np.array([h[i]["C0"] for i in t.item_ids])
    res = budget_curve(t.probs[:, 0], t.values[0], t.option_orders, y, reading="expected", n_boot=50, rng=0)
    assert len(res.ks) == 8 and set(res.curves) == {"fixed", "random", "balanced"}
    assert res.pool == "per-item random orders"
    # RANDOM(K) mean of expected scores is linear: its K=1 correlation draws only from rows 8..13
    from logitjudge.stats import random_expectation
    from logitjudge.stats.alignment import _corr_rows

    ref = random_expectation(t.probs[:, 0, 8:], t.values[0], lambda x: _corr_rows(x, np.broadcast_to(y, x.shape),
                             "pearson"), k=1, reading="expected", precision=0.002, rng=1)
    assert abs(res.curves["random"][0] - ref.value) <= 3 * np.hypot(res.curves_se["random"][0], ref.se)
    x = (t.probs[:, 0, :8] @ t.values[0]).mean(axis=1)
    assert res.curves["balanced"][-1] == pytest.approx(sps.pearsonr(x, y).statistic)


def test_balanced_rows_finds_the_rotations_in_every_design():
    from logitjudge.stats import balanced_rows

    ref = ords.balanced(4)
    assert np.array_equal(balanced_rows(ref), np.arange(8))
    a = ords.all_orders(4)  # the 8 rotations/reversals found among the 24 orders, in the study's order
    assert np.array_equal(a[balanced_rows(a)], ref)
    both = ords.parse("balanced+random:6", 4, seed=3, n_items=5)  # (5, 14, 4): rotations first in every item
    assert np.array_equal(balanced_rows(both), np.arange(8))
    assert balanced_rows(ords.random(4, 6, 5, rng=0)) is None
    assert balanced_rows(ords.fixed(4, 3)) is None


def test_correlation_statistic_item_and_grouped_levels_by_hand():
    from logitjudge.stats import CorrelationStatistic

    y = np.array([1.0, 2, 4, 3, 5, 7])
    x = np.array([[1.0, 3, 2, 4, 6, 5], [6.0, 5, 4, 3, 2, 1]])  # [B, items]
    item = CorrelationStatistic(y, method="spearman")(x)
    assert item == pytest.approx([sps.spearmanr(r, y).statistic for r in x])
    g = np.array(list("aaabbb"))
    grouped = CorrelationStatistic(y, groups=g)(x)
    want = [np.mean([sps.pearsonr(r[:3], y[:3]).statistic, sps.pearsonr(r[3:], y[3:]).statistic]) for r in x]
    assert grouped == pytest.approx(want)
