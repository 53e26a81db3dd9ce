import numpy as np
import pytest
from scipy import stats as sps

from logitjudge import orderings as ords
from logitjudge.stats import InsufficientDataError, best_of_n_instability, rank_stability


def test_kendall_tau_by_hand():
    # one group of 4 candidates, two orderings: one discordant pair of 6 -> tau = (5 - 1) / 6
    scores = np.array([[1.0, 1.0], [2.0, 3.0], [3.0, 2.0], [4.0, 4.0]])
    res = rank_stability(scores, ["q"] * 4, n_boot=0)
    assert res.kendall_tau == pytest.approx(2 / 3)
    assert res.kendall_tau == pytest.approx(sps.kendalltau(scores[:, 0], scores[:, 1]).statistic)
    assert res.n_pairs == 1 and res.flip_rate == 0.0


def test_kendall_tau_b_with_ties_matches_scipy():
    rng = np.random.default_rng(0)
    scores = rng.integers(1, 4, size=(12, 3)).astype(float)  # ties everywhere
    groups = np.repeat(["a", "b"], 6)
    res = rank_stability(scores, groups, n_boot=0)
    taus = [np.mean([sps.kendalltau(scores[groups == g, a], scores[groups == g, b]).statistic
                     for a, b in [(0, 1), (0, 2), (1, 2)]]) for g in ["a", "b"]]
    assert res.kendall_tau == pytest.approx(np.mean(taus))


def test_flip_rate_by_hand():
    # 2 groups x 3 candidates, 3 orderings
    scores = np.array([
        [3.0, 3.0, 1.0],  # group g, candidate 0: best under orderings 0, 1
        [1.0, 2.0, 3.0],  # candidate 1: best under ordering 2
        [2.0, 1.0, 2.0],
        [5.0, 5.0, 5.0],  # group h: candidate 0 always best -> never flips
        [1.0, 1.0, 1.0],
        [2.0, 2.0, 2.0],
    ])
    groups = ["g"] * 3 + ["h"] * 3
    res = rank_stability(scores, groups, n_boot=200, rng=0)
    # group g: pairs (0,1) same, (0,2) flip, (1,2) flip -> 2/3 ; group h: 0 -> mean 1/3
    assert res.flip_rate == pytest.approx(1 / 3)
    # vs canonical (ordering 0): (0,1) same, (0,2) flip -> g 1/2, h 0
    assert res.flip_rate_vs_canonical == pytest.approx(1 / 4)
    assert res.n_groups == 2 and res.n_groups_used == 2 and res.n_pairs == 3
    assert res.flip_rate_ci_low <= res.flip_rate <= res.flip_rate_ci_high


def test_a_tie_is_a_top_set_and_canonical_is_the_identity():
    scores = np.array([[2.0, 2.0], [2.0, 1.0]])  # ordering 0: tie between both; ordering 1: candidate 0
    res = rank_stability(scores, ["g", "g"], n_boot=0)
    assert res.flip_rate == 1.0  # the top set {0, 1} became {0}: a change of the winning set
    tied = rank_stability(np.array([[2.0, 2.0], [2.0, 2.0]]), ["g", "g"], n_boot=0)
    assert tied.flip_rate == 0.0  # the same tie under both orderings: no change
    assert not res.defined and np.isnan(res.kendall_tau)  # ordering 0's ranking is all ties
    orders = np.array([[1, 0, 2], [2, 1, 0], [0, 1, 2]])
    scores = np.ones((2, 3)) + np.arange(3)
    assert rank_stability(scores, ["g", "g"], option_orders=orders, n_boot=0).canonical == 2
    no_identity = ords.balanced(2)[1:3]  # [[1, 0], [1, 0]]
    assert rank_stability(np.ones((2, 2)), ["g", "g"], option_orders=no_identity, n_boot=0).canonical == 0


def test_best_of_n():
    rng = np.random.default_rng(1)
    quality = rng.normal(size=60)
    scores = quality[:, None] + rng.normal(scale=0.5, size=(60, 4))
    groups = np.repeat(np.arange(10).astype(str), 6)
    res = best_of_n_instability(scores, groups, n_draws=40, rng=0)
    np.testing.assert_array_equal(res.ns, [2, 3, 4, 5, 6])
    full = rank_stability(scores, groups, n_boot=0)
    assert res.flip_rate[-1] == pytest.approx(full.flip_rate)  # N = group size: every draw is the whole group
    assert res.flip_rate_vs_canonical[-1] == pytest.approx(full.flip_rate_vs_canonical)
    assert res.flip_rate[0] < res.flip_rate[-1]  # more candidates, more chances to flip
    assert np.all(res.n_groups_used == 10)
    one = best_of_n_instability(scores, groups, ns=[1], n_draws=5, rng=0)
    assert one.flip_rate[0] == 0.0


def test_rank_stability_errors():
    with pytest.raises(InsufficientDataError, match="2 orderings"):
        rank_stability(np.ones((4, 1)), ["a", "a", "b", "b"])
    with pytest.raises(InsufficientDataError, match="no group has 2"):
        rank_stability(np.ones((3, 2)), ["a", "b", "c"])
    with pytest.raises(ValueError, match="one label per item"):
        rank_stability(np.ones((3, 2)), ["a", "b"])
