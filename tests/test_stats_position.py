import warnings

import numpy as np
import pytest
from scipy import stats as sps
from synthetic import planted_table

from logitjudge import orderings as ords
from logitjudge.stats import (
    ConfoundedDesignError,
    ConfoundedDesignWarning,
    DesignError,
    InsufficientDataError,
    ShapeError,
    StatsError,
    chosen_positions,
    detect_design,
    fit_position_effect,
    position_chisquare,
    position_distribution,
    position_label,
    pride_prior,
    probs_by_position,
    probs_from_positions,
    rao_scott_chisquare,
)


def _onehot_pbp(positions: np.ndarray, n: int) -> np.ndarray:
    return np.eye(n)[positions].astype(float)


def test_probs_by_position_matches_table_and_inverts():
    t = planted_table(7, 4, position_bias=[0.3, 0, 0, -0.2], prompt_noise=0.5, n_criteria=2, rng=3)
    pbp = probs_by_position(t.probs, t.option_orders)
    np.testing.assert_array_equal(pbp, t.probs_by_position())
    np.testing.assert_allclose(probs_from_positions(pbp, t.option_orders), t.probs)
    # by hand: order [2, 0, 1] shows option 2 first
    p = np.array([[[0.1, 0.2, 0.7]]])
    np.testing.assert_allclose(probs_by_position(p, [[2, 0, 1]]), [[[0.7, 0.1, 0.2]]])


def test_detect_design():
    assert detect_design(ords.balanced(5)) == "balanced"
    assert detect_design(ords.fixed(5, 3)) == "fixed"
    assert detect_design(ords.shared_random(5, 7, rng=0)) == "shared-random"


def test_chisquare_matches_scipy_and_cramers_v_by_hand():
    n, items = 4, 10
    orders = ords.balanced(n)  # 8 orderings -> 80 prompts
    positions = np.repeat([0, 1, 2, 3], [30, 15, 20, 15])
    pbp = _onehot_pbp(np.random.default_rng(0).permutation(positions).reshape(items, 8), n)
    res = position_chisquare(pbp, orders, n_boot=200, rng=1)
    ref = sps.chisquare([30, 15, 20, 15])
    assert res.statistic == pytest.approx(ref.statistic)
    assert res.pvalue_per_prompt == pytest.approx(ref.pvalue)  # prompts as if independent: kept, not the verdict
    rs = rao_scott_chisquare(pbp.sum(axis=1))  # the verdict's test: items as clusters
    assert res.pvalue == pytest.approx(rs.pvalue) and res.design_effect == pytest.approx(rs.design_effect)
    np.testing.assert_allclose(res.counts, [30, 15, 20, 15])
    assert res.dof == 3 and res.n == 80 and res.n_items == 10
    # chi2 = sum (o - 20)^2 / 20 = (100 + 25 + 0 + 25) / 20 = 7.5 ; V = sqrt(7.5 / (80 * 3))
    assert res.statistic == pytest.approx(7.5)
    assert res.cramers_v_raw == pytest.approx(np.sqrt(7.5 / 240))
    d = rs.design_effect  # bias-corrected: sqrt(max(0, X² - 3 d) / (3 (80 - d)))
    assert res.cramers_v == pytest.approx(np.sqrt(max(0.0, 7.5 - 3 * d) / (3 * (80 - d))))
    assert res.cramers_v_ci_low <= res.cramers_v <= res.cramers_v_ci_high
    assert np.all(res.share_ci_low <= res.shares) and np.all(res.shares <= res.share_ci_high)
    assert res.design == "balanced"


def test_argmax_ties_are_split_not_given_to_position_zero():
    pbp = np.full((3, 8, 4), 0.25)
    w = chosen_positions(pbp)
    np.testing.assert_allclose(w, 0.25)
    res = position_chisquare(pbp, ords.balanced(4), n_boot=0)
    np.testing.assert_allclose(chosen_positions(np.array([[[0.4, 0.4, 0.2]]])), [[[0.5, 0.5, 0.0]]])
    assert res.statistic == pytest.approx(0.0) and res.label == "none"


def test_draws_follow_the_exact_distribution():
    pbp = np.broadcast_to(np.array([0.5, 0.3, 0.2]), (2000, 3, 3))
    w = chosen_positions(pbp, reading="draw", rng=0)
    assert w.sum(axis=2).max() == 1
    np.testing.assert_allclose(w.mean(axis=(0, 1)), [0.5, 0.3, 0.2], atol=0.02)


def test_position_label_rules():
    assert position_label([0.4, 0.2, 0.2, 0.2], [0.3, 0.1, 0.1, 0.1], 0.001, 0.05)[0] == "first"
    assert position_label([0.2, 0.2, 0.2, 0.4], [0.1, 0.1, 0.1, 0.3], 0.001, 0.05)[0] == "last"
    assert position_label([0.2, 0.4, 0.2, 0.2], [0.1, 0.3, 0.1, 0.1], 0.001, 0.05)[0] == "middle"
    assert position_label([0.4, 0.2, 0.2, 0.2], [0.3, 0.1, 0.1, 0.1], 0.2, 0.05)[0] == "none"
    label, why = position_label([0.3, 0.3, 0.2, 0.2], [0.2, 0.2, 0.1, 0.1], 0.01, 0.05)
    assert label == "none" and "1/4" in why


def test_chisquare_design_handling():
    t = planted_table(20, 3, orderings="fixed", rng=0)
    pbp = probs_by_position(t.probs[:, 0], t.option_orders)
    with pytest.raises(DesignError, match="allow_confounded"):
        position_chisquare(pbp, t.option_orders, n_boot=0)
    with pytest.warns(ConfoundedDesignWarning):
        assert position_chisquare(pbp, t.option_orders, n_boot=0, allow_confounded=True).design == "fixed"
    t = planted_table(20, 3, orderings="random", rng=0)  # one random set shared by every item
    pbp = probs_by_position(t.probs[:, 0], t.option_orders)
    with pytest.raises(ConfoundedDesignError, match="confounded.*random:K"):
        position_chisquare(pbp, t.option_orders, n_boot=0)
    with pytest.warns(ConfoundedDesignWarning):
        position_chisquare(pbp, t.option_orders, n_boot=0, allow_confounded=True)


def test_chisquare_null_rejection_rate_is_nominal():
    # no planted bias, content noise: over 200 balanced tables the test rejects at about alpha
    rejections = 0
    for seed in range(200):
        t = planted_table(50, 5, content_scale=0.3, prompt_noise=1.5, rng=seed)
        pbp = probs_by_position(t.probs[:, 0], t.option_orders)
        res = position_chisquare(pbp, t.option_orders, reading="draw", n_boot=0, rng=seed)
        rejections += res.pvalue < 0.05
    assert 0.02 <= rejections / 200 <= 0.09


def test_planted_first_position_bias_is_labelled_first():
    t = planted_table(300, 5, position_bias=[0.7, 0, 0, 0, 0], prompt_noise=0.5, rng=2)
    pbp = probs_by_position(t.probs[:, 0], t.option_orders)
    res = position_chisquare(pbp, t.option_orders, n_boot=200, rng=0)
    assert res.label == "first" and res.pvalue < 1e-6
    assert res.share_ci_low[0] > 0.2


def test_position_distribution_by_hand_and_errors():
    pbp = np.array([[[0.5, 0.5], [0.7, 0.3]], [[0.1, 0.9], [0.3, 0.7]]])
    res = position_distribution(pbp, n_boot=100, rng=0)
    np.testing.assert_allclose(res.distribution, [0.4, 0.6])
    assert np.all(res.ci_low <= res.distribution) and np.all(res.distribution <= res.ci_high)
    again = position_distribution(pbp, n_boot=100, rng=0)
    np.testing.assert_array_equal(res.ci_low, again.ci_low)
    with pytest.raises(InsufficientDataError, match="at least 2 items"):
        position_distribution(pbp[:1], n_boot=100)
    assert np.isnan(position_distribution(pbp[:1], n_boot=0).ci_low).all()
    with pytest.raises(ShapeError, match="3-D"):
        position_distribution(pbp[0])
    with pytest.raises(StatsError, match="do not sum to 1"):
        position_distribution(pbp * 2)
    with pytest.raises(ShapeError, match="expected"):
        position_chisquare(pbp, ords.balanced(3), n_boot=0)


def test_position_effect_recovers_planted_log_odds():
    t = planted_table(2000, 5, position_bias=[0.7, 0, 0, 0, 0], prompt_noise=0.5, rng=11)
    res = fit_position_effect(t.probs[:, 0], t.option_orders, n_boot=200, rng=0)
    assert res.log_odds[0] == pytest.approx(0.7, abs=0.05)
    np.testing.assert_allclose(res.log_odds[1:], -0.7 / 4, atol=0.05)
    assert res.log_odds_ci_low[0] < res.log_odds[0] < res.log_odds_ci_high[0]
    assert res.bias.sum() == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(res.prior, np.exp(res.bias) / np.exp(res.bias).sum())


def test_position_effect_is_exact_without_noise_and_works_on_random_designs():
    bias = np.array([0.4, -0.1, 0.0, 0.2])
    t = planted_table(30, 4, position_bias=bias, rng=1)
    res = fit_position_effect(t.probs[:, 0], t.option_orders, n_boot=0)
    np.testing.assert_allclose(res.bias, bias - bias.mean(), atol=1e-10)
    assert res.rmse < 1e-10
    t = planted_table(30, 4, position_bias=bias, orderings="random", n_orderings=12, rng=1)
    res = fit_position_effect(t.probs[:, 0], t.option_orders, n_boot=0)
    np.testing.assert_allclose(res.bias, bias - bias.mean(), atol=1e-10)
    assert res.design == "shared-random"


def test_position_effect_refuses_fixed_design():
    t = planted_table(10, 4, orderings="fixed", n_orderings=3, rng=0)
    with pytest.raises(DesignError, match="not identifiable"):
        fit_position_effect(t.probs[:, 0], t.option_orders, n_boot=0)
    # identical rows whose double-centred indicators are rounding noise (~1e-16, not exact zeros): numpy's
    # matrix_rank, relative to the largest singular value, called these full rank and the fit returned biases
    # such as [-0.17, 0.33, -0.16] for 3 options under 6 copies of the identity order
    p = np.random.default_rng(0).dirichlet(np.ones(3), size=(4, 6))
    for orders in (np.tile(np.arange(3), (6, 1)), np.tile([1, 2, 0], (6, 1))):
        with pytest.raises(DesignError, match="not identifiable"):
            fit_position_effect(p, orders, n_boot=0)
        with pytest.raises(DesignError, match="not identifiable"):  # per item: every item its one order
            fit_position_effect(p, np.stack([orders, orders[:, ::-1], orders, orders]), n_boot=0)
    p5 = np.random.default_rng(1).dirichlet(np.ones(5), size=(3, 2))
    with pytest.raises(DesignError, match="not identifiable"):
        fit_position_effect(p5, np.tile(np.arange(5), (2, 1)), n_boot=0)


def test_pride_prior_equals_general_fit_on_balanced_designs():
    t = planted_table(200, 5, position_bias=[0.5, 0.1, 0, -0.2, 0.3], prompt_noise=0.8, rng=4)
    pbp = probs_by_position(t.probs[:, 0], t.option_orders)
    prior = pride_prior(np.log(pbp), option_orders=t.option_orders)
    fit = fit_position_effect(t.probs[:, 0], t.option_orders, n_boot=0)
    np.testing.assert_allclose(prior.prior, fit.prior, atol=1e-12)
    np.testing.assert_allclose(prior.log_prior, fit.bias, atol=1e-12)
    # cyclic (forward rotations only) is balanced too
    cyc = ords.balanced(5)[:5]
    t2 = planted_table(100, 5, position_bias=[0.5, 0, 0, 0, 0], orderings=cyc, prompt_noise=0.3, rng=5)
    p2 = pride_prior(np.log(probs_by_position(t2.probs[:, 0], cyc)), option_orders=cyc)
    np.testing.assert_allclose(p2.prior, fit_position_effect(t2.probs[:, 0], cyc, n_boot=0).prior, atol=1e-12)
    # the original per-item-average form differs slightly but agrees on the direction
    orig = pride_prior(np.log(pbp), average="prob")
    assert orig.prior.sum() == pytest.approx(1.0) and np.argmax(orig.prior) == 0


def test_pride_prior_errors():
    t = planted_table(10, 4, orderings="random", rng=0)
    lp = np.log(probs_by_position(t.probs[:, 0], t.option_orders))
    with pytest.raises(DesignError, match="balanced"):
        pride_prior(lp, option_orders=t.option_orders)
    with pytest.raises(ShapeError, match="-inf"):
        pride_prior(np.full((2, 3, 4), -np.inf))


def test_no_runtime_warnings_on_uniform_judges():
    pbp = np.full((5, 6, 3), 1 / 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = position_chisquare(pbp, ords.balanced(3), n_boot=50, rng=0)
    assert res.cramers_v == 0 and res.label == "none"
