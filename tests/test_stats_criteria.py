import warnings

import numpy as np
import pytest
from scipy import stats as sps
from synthetic import planted_table

from logitjudge.stats import DesignError, InsufficientDataError, criterion_position_effect


def test_matrix_and_spread_by_hand():
    # 2 items, 2 criteria, orderings: [A, B] then [B, A]
    orders = np.array([[0, 1], [1, 0]])
    # scores[item, criterion, ordering]: item 0 scores A 4 at pos 0 and 3 at pos 1; B 2 at pos 1, 2.5 at pos 0
    scores = np.array([[[4.0, 3.0], [2.0, 2.5]],
                       [[5.0, 4.0], [1.0, 2.0]]])
    res = criterion_position_effect(scores, orders, test="permutation", n_perm=50, n_boot=100, rng=0)
    # A: pos 0 mean (4 + 5) / 2 = 4.5, pos 1 (3 + 4) / 2 = 3.5 ; B: pos 0 (2.5 + 2) / 2, pos 1 (2 + 1) / 2
    np.testing.assert_allclose(res.matrix, [[4.5, 3.5], [2.25, 1.5]])
    np.testing.assert_allclose(res.spread, [1.0, 0.75])
    assert res.test == "permutation" and res.n_items == 2
    assert np.all(res.spread_ci_low <= res.spread) and np.all(res.spread <= res.spread_ci_high)


def test_friedman_matches_scipy():
    rng = np.random.default_rng(0)
    orders = np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0], [1, 0, 2], [0, 2, 1]])
    scores = rng.normal(3, 1, size=(15, 3, 6))
    res = criterion_position_effect(scores, orders, n_boot=0)
    assert res.test == "friedman"
    pos = np.argsort(orders, axis=1)  # pos[k, c]
    for c in range(3):
        cols = [np.mean([scores[:, c, k] for k in range(6) if pos[k, c] == p], axis=0) for p in range(3)]
        ref = sps.friedmanchisquare(*cols)
        assert res.statistic[c] == pytest.approx(ref.statistic)
        assert res.pvalue[c] == pytest.approx(ref.pvalue)
        np.testing.assert_allclose(res.matrix[c], [np.mean(x) for x in cols])


def test_planted_criterion_position_shift_is_recovered():
    t = planted_table(300, 5, n_criteria=3, criterion_position_shift=[0.4, 0.0, -0.4], prompt_noise=0.3,
                      rng=7)
    res = criterion_position_effect(t.expected_score(), t.criterion_orders, n_boot=200, rng=0)
    np.testing.assert_allclose(res.spread, 0.8, atol=0.1)
    assert np.all(res.pvalue < 1e-6)
    assert np.all(res.spread_ci_low < res.spread) and np.all(res.spread < res.spread_ci_high)
    # first position scores higher for every criterion
    assert np.all(res.matrix[:, 0] > res.matrix[:, 2])


def test_permutation_test_null_and_planted():
    t0 = planted_table(60, 5, n_criteria=2, prompt_noise=0.5, rng=1)
    null = criterion_position_effect(t0.expected_score(), t0.criterion_orders, test="permutation", n_perm=200,
                                     n_boot=0, rng=0)
    assert null.pvalue.min() > 0.01
    t1 = planted_table(60, 5, n_criteria=2, criterion_position_shift=[0.3, -0.3], prompt_noise=0.5, rng=1)
    hit = criterion_position_effect(t1.expected_score(), t1.criterion_orders, test="permutation", n_perm=200,
                                    n_boot=0, rng=0)
    np.testing.assert_allclose(hit.pvalue, 1 / 201)


def test_degenerate_inputs():
    orders = np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1]])
    with pytest.raises(InsufficientDataError, match="at least 2 items"):
        criterion_position_effect(np.ones((1, 3, 3)), orders)
    with pytest.raises(DesignError, match="never varies"):
        criterion_position_effect(np.ones((4, 3, 2)), np.array([[0, 1, 2], [0, 1, 2]]))
    with pytest.raises(DesignError, match="never varies"):
        criterion_position_effect(np.ones((4, 1, 2)), np.zeros((2, 1), dtype=int))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = criterion_position_effect(np.full((5, 3, 3), 3.0), orders, n_boot=20, rng=0)
    assert np.all(np.isnan(res.statistic)) and len(res.notes) == 3
    np.testing.assert_allclose(res.spread, 0.0)
    with pytest.raises(ValueError, match="NaN"):
        criterion_position_effect(np.full((5, 3, 3), np.nan), orders)


def test_permutation_null_reference_separates_noise_from_a_planted_shift():
    # no planted shift: noisy scores still show a positive max - min spread, which the null reproduces
    rng = np.random.default_rng(3)
    orders = np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0], [1, 0, 2], [0, 2, 1]])
    noise = rng.normal(3, 0.5, size=(30, 3, 6))
    res = criterion_position_effect(noise, orders, n_perm=300, n_boot=0, rng=0)
    assert np.all(res.spread > 0) and res.n_perm == 300
    assert np.all(res.spread <= res.null_spread_high) and np.all(np.abs(res.excess_spread) < 0.15)
    np.testing.assert_allclose(res.excess_spread, res.spread - res.null_spread_mean)
    # a planted shift of 0.8 points for criterion 0 at position 0 stands out of the null by about that much
    shifted = noise.copy()
    pos = np.argsort(orders, axis=1)  # [orderings, criterion] -> position
    shifted[:, 0, :] += 0.8 * (pos[:, 0] == 0)
    res = criterion_position_effect(shifted, orders, n_perm=300, n_boot=0, rng=0)
    assert res.spread[0] > res.null_spread_high[0] and res.excess_spread[0] > 0.5
    assert res.spread[1] <= res.null_spread_high[1]
