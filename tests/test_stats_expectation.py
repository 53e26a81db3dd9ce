"""RANDOM as an exact expectation over uniformly drawn orders, and the three readings."""

import itertools

import numpy as np
import pytest
from synthetic import planted_table

from logitjudge import orderings as ords
from logitjudge.stats import (
    StatsError,
    aggregate_scores,
    item_outcomes,
    random_expectation,
    random_expectation_ref,
    random_item_scores,
    random_label_shares,
    read_scores,
    tempered,
)
from logitjudge.stats.alignment import _corr_rows


def _all_table(n_items=3, n=3, rng=1):
    return planted_table(n_items, n, orderings="all", position_bias=[0.8] + [0.0] * (n - 1), prompt_noise=0.7,
                         rng=rng)


def _pearson_with(y):
    return lambda x: _corr_rows(x, np.broadcast_to(y, x.shape), "pearson")


@pytest.mark.parametrize("reading", ["greedy", "expected", "sampled"])
def test_k1_expectation_is_the_mean_over_all_permutations(reading):
    t = _all_table(n_items=5, n=4, rng=3)
    p, v = t.probs[:, 0], t.values[0]
    got = random_item_scores(p, v, reading=reading)
    # brute force: enumerate the n! permutations, find each one's row, read its prompt, average
    perms = list(itertools.permutations(range(4)))
    for i in range(5):
        scores = []
        for perm in perms:
            row = int(np.flatnonzero(np.all(t.option_orders == perm, axis=1))[0])
            q = p[i, row]
            if reading == "greedy":
                scores.append(v[int(np.argmax(q))])
            else:  # one sampled answer's expected value at T=1 is the probability-weighted score
                scores.append(float(q @ v))
        assert got[i] == pytest.approx(np.mean(scores), abs=1e-12)
    # the same as a closed-form random_expectation of the mean score (affine), with zero standard error
    res = random_expectation(p, v, lambda x: x.mean(axis=1), k=1, reading=reading, linear=True,
                             option_orders=t.option_orders)
    assert res.exact and res.se == 0 and res.value == pytest.approx(got.mean(), abs=1e-12)
    assert res.pool == "all orders" and res.reading == reading


@pytest.mark.parametrize("reading", ["greedy", "expected", "sampled"])
@pytest.mark.parametrize("replace", [True, False])
def test_monte_carlo_k3_lies_within_3_se_of_brute_force(reading, replace):
    t = _all_table()
    p, v = t.probs[:, 0], t.values[0]
    stat = _pearson_with(np.array([1.0, 2.5, 1.7]))
    exact = random_expectation_ref(p, v, stat, k=3, reading=reading, replace=replace)
    mc = random_expectation(p, v, stat, k=3, reading=reading, replace=replace, precision=0.01, max_outcomes=0,
                            rng=0)
    assert not mc.exact and mc.reached and mc.se <= 0.01 and mc.n_draws >= 200
    assert abs(mc.value - exact) <= 3 * mc.se, (mc.value, exact, mc.se)
    again = random_expectation(p, v, stat, k=3, reading=reading, replace=replace, precision=0.01, max_outcomes=0,
                               rng=0)
    assert again.value == mc.value and again.n_draws == mc.n_draws  # one seed, one number


@pytest.mark.parametrize("reading", ["greedy", "expected", "sampled"])
@pytest.mark.parametrize("k", [1, 3])
def test_small_draw_spaces_are_enumerated_exactly(reading, k):
    t = _all_table()
    p, v = t.probs[:, 0], t.values[0]
    stat = _pearson_with(np.array([1.0, 2.5, 1.7]))
    ref = random_expectation_ref(p, v, stat, k=k, reading=reading)
    res = random_expectation(p, v, stat, k=k, reading=reading, option_orders=t.option_orders)
    assert res.exact and res.se == 0 and res.value == pytest.approx(ref, abs=1e-8)  # sums rounded at 1e-9
    assert "exact" in res.note and res.n_draws == np.prod([len(a) for a, _ in item_outcomes(p, v, k=k,
                                                                                             reading=reading)])
    # above the bound the same expectation is Monte-Carlo, within 4 SE
    mc = random_expectation(p, v, stat, k=k, reading=reading, max_outcomes=res.n_draws - 1, precision=0.01, rng=0)
    assert not mc.exact and abs(mc.value - ref) <= 4 * mc.se


def test_greedy_k1_is_a_finite_sum_over_each_items_distinct_answers():
    # item 0 answers 1 in 2 of its 4 rows and 3 in the others; item 1 always 2; item 2: 1, 2, 2, 3
    onehot = np.eye(3)
    p = np.stack([onehot[[0, 0, 2, 2]], onehot[[1, 1, 1, 1]], onehot[[0, 1, 1, 2]]]) * 0.9 + 0.1 / 3
    v = np.array([1.0, 2.0, 3.0])
    sup = item_outcomes(p, v, k=1)
    np.testing.assert_allclose(sup[0][0], [1, 3]) and np.testing.assert_allclose(sup[0][1], [0.5, 0.5])
    np.testing.assert_allclose(sup[2][1], [0.25, 0.5, 0.25])
    mean_of_max = random_expectation(p, v, lambda x: x.max(axis=1), k=1)  # not affine: enumerated
    # max over items: item 1 is 2 always; max = 3 when item 0 or item 2 answers 3: 1 - 0.5 * 0.75 = 0.625
    assert mean_of_max.exact and mean_of_max.value == pytest.approx(0.625 * 3 + 0.375 * 2)
    assert mean_of_max.n_draws == 2 * 1 * 3


def test_precision_is_reported_when_not_reached():
    t = _all_table()
    stat = _pearson_with(np.array([1.0, 2.5, 1.7]))
    res = random_expectation(t.probs[:, 0], t.values[0], stat, k=2, precision=1e-6, max_draws=400, max_outcomes=0,
                             rng=0)
    assert not res.reached and res.n_draws == 400 and "not reached" in res.note and res.se > 1e-6


def test_label_shares_and_per_item_pools():
    t = planted_table(30, 4, orderings="per-item-random", n_orderings=5, prompt_noise=0.5, rng=0)
    p = t.probs[:, 0]
    np.testing.assert_allclose(random_label_shares(p), np.eye(4)[p.argmax(axis=2)].mean(axis=1))
    np.testing.assert_allclose(random_label_shares(p, reading="sampled"), p.mean(axis=1))
    res = random_expectation(p, t.values[0], lambda x: x.mean(axis=1), k=3, option_orders=t.option_orders,
                             rng=0)
    assert res.pool == "per-item random orders"
    assert abs(res.value - random_item_scores(p, t.values[0]).mean()) <= 4 * res.se + 1e-12
    with pytest.raises(StatsError, match="without replacement"):
        random_expectation(p, t.values[0], lambda x: x.mean(axis=1), k=6, replace=False)
    with pytest.raises(StatsError, match="reading"):
        random_item_scores(p, t.values[0], reading="mode")


def test_readings_by_hand():
    p = np.array([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]])
    v = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(read_scores(p, v, reading="greedy"), [2.0, 1.0])
    np.testing.assert_allclose(read_scores(p, v, reading="argmax"), [2.0, 1.0])  # the old name
    np.testing.assert_allclose(read_scores(p, v, reading="expected"), [2.1, 1.7])
    np.testing.assert_allclose(read_scores(p, v, reading="sampled"), [2.1, 1.7])  # T=1: the expected value
    q = tempered(p, 0.5)  # p^2 renormalised
    np.testing.assert_allclose(q[0], np.array([0.04, 0.25, 0.09]) / 0.38)
    np.testing.assert_allclose(read_scores(p, v, reading="sampled", temperature=0.5), q @ v)
    with pytest.raises(StatsError, match="temperature"):
        tempered(p, 0.0)
    res = aggregate_scores(p[:, None], v, ords.fixed(3), strategy="fixed", reading="argmax")
    assert res.reading == "greedy"  # results record the canonical reading name


def test_position_distribution_records_its_reading():
    from logitjudge.stats import position_distribution

    pbp = np.array([[[0.5, 0.3, 0.2], [0.2, 0.2, 0.6]], [[0.1, 0.8, 0.1], [0.3, 0.3, 0.4]]])
    np.testing.assert_allclose(position_distribution(pbp, n_boot=0).distribution, pbp.mean(axis=(0, 1)))
    g = position_distribution(pbp, reading="greedy", n_boot=0)
    np.testing.assert_allclose(g.distribution, [0.25, 0.25, 0.5])  # argmax at 0, 2, 1, 2
    assert g.reading == "greedy"
    s = position_distribution(pbp, reading="sampled", temperature=0.5, n_boot=0)
    np.testing.assert_allclose(s.distribution, tempered(pbp, 0.5).mean(axis=(0, 1)))
