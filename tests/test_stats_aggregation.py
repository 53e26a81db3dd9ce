import numpy as np
import pytest
from synthetic import planted_table

from logitjudge import orderings as ords
from logitjudge.stats import (
    DesignError,
    StatsError,
    aggregate_scores,
    balanced_sequence,
    debias_probs,
    pride_debias,
    read_scores,
    select_orderings,
)

V = np.array([1.0, 2.0, 3.0])


def test_readings_by_hand():
    p = np.array([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]])
    np.testing.assert_allclose(read_scores(p, V), [0.2 + 1.0 + 0.9, 0.6 + 0.2 + 0.9])
    np.testing.assert_allclose(read_scores(p, V, reading="argmax"), [2.0, 1.0])
    draws = read_scores(np.broadcast_to(p[0], (20000, 3)), V, reading="draw", rng=0)
    np.testing.assert_allclose([np.mean(draws == v) for v in V], p[0], atol=0.015)
    # ties in argmax go to the lowest canonical option
    assert read_scores(np.array([0.4, 0.4, 0.2]), V, reading="argmax") == 1.0


def _table():
    return planted_table(40, 3, position_bias=[0.6, 0, 0], prompt_noise=0.4, rng=0)


def test_fixed_uses_the_canonical_ordering():
    orders = np.array([[1, 2, 0], [0, 1, 2], [2, 0, 1]])
    assert np.all(select_orderings(orders, 4, strategy="fixed", k=3) == 1)  # the identity row
    assert np.all(select_orderings(orders[[0, 2]], 2, strategy="fixed") == 0)  # no identity: row 0
    t = _table()
    p, v = t.probs[:, 0], t.values[0]
    one = aggregate_scores(p, v, t.option_orders, strategy="fixed")
    many = aggregate_scores(p, v, t.option_orders, strategy="fixed", k=5)
    np.testing.assert_allclose(one.scores, p[:, 0] @ v)  # balanced(3) row 0 is the identity
    np.testing.assert_allclose(many.scores, one.scores)  # exact readings do not change with repeats
    d1 = aggregate_scores(p, v, t.option_orders, strategy="fixed", k=1, reading="draw", rng=0).scores
    d400 = aggregate_scores(p, v, t.option_orders, strategy="fixed", k=400, reading="draw", rng=0).scores
    assert not np.allclose(d1, one.scores)
    np.testing.assert_allclose(d400, one.scores, atol=0.15)  # many draws approach the expected score


def test_balanced_and_random_strategies():
    t = _table()
    p, v = t.probs[:, 0], t.values[0]
    full = aggregate_scores(p, v, t.option_orders)
    assert full.k == 6 and full.strategy == "balanced"
    np.testing.assert_allclose(full.scores, (p @ v).mean(axis=1))
    sub = aggregate_scores(p, v, t.option_orders, k=2, offset=5)
    np.testing.assert_array_equal(sub.orderings[0], [5, 0])  # windows wrap around
    np.testing.assert_allclose(sub.scores, (p[:, [5, 0]] @ v).mean(axis=1))
    with pytest.raises(StatsError, match="exceeds"):
        aggregate_scores(p, v, t.option_orders, k=7)
    r = aggregate_scores(p, v, t.option_orders, strategy="random", k=4, rng=3)
    assert r.orderings.shape == (40, 4) and r.orderings.min() >= 0 and r.orderings.max() < 6
    np.testing.assert_allclose(r.scores, np.take_along_axis(p @ v, r.orderings, axis=1).mean(axis=1))
    again = aggregate_scores(p, v, t.option_orders, strategy="random", k=4, rng=3)
    np.testing.assert_array_equal(r.orderings, again.orderings)
    tr = planted_table(10, 3, orderings="random", rng=0)
    with pytest.raises(DesignError, match="balanced"):
        aggregate_scores(tr.probs[:, 0], tr.values[0], tr.option_orders, strategy="balanced")


def test_balanced_windows_visit_distinct_option_orders_first():
    np.testing.assert_array_equal(balanced_sequence(ords.balanced(5)), np.arange(10))
    opt, _ = ords.cross(ords.balanced(3), np.array([[0, 1], [1, 0]]))  # each option order twice in a row
    seq = balanced_sequence(opt)
    np.testing.assert_array_equal(seq, [0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11])
    assert ords.is_balanced(opt[seq[:6]])
    idx = select_orderings(opt, 2, strategy="balanced", k=6)
    assert ords.is_balanced(opt[idx[0]])


def test_averaging_probabilities_versus_scores():
    v = np.array([1.0, 3.0])
    p = np.array([[[0.6, 0.4], [0.3, 0.7], [0.3, 0.7], [0.6, 0.4]]])  # one item, the 4 balanced orders of 2
    orders = ords.balanced(2)
    # argmax readings 1, 3, 3, 1 -> mean 2 ; mean distribution [0.45, 0.55] -> argmax 3
    assert aggregate_scores(p, v, orders, reading="argmax").scores[0] == pytest.approx(2.0)
    assert aggregate_scores(p, v, orders, reading="argmax", mode="probs").scores[0] == pytest.approx(3.0)
    # the expected reading is linear: both modes agree (2.1)
    np.testing.assert_allclose(aggregate_scores(p, v, orders).scores, 2.1)
    np.testing.assert_allclose(aggregate_scores(p, v, orders, mode="probs").scores, 2.1)


def test_debias_probs_by_hand():
    prior = np.array([0.5, 0.25, 0.25])
    order = np.array([2, 0, 1])  # option 2 at position 0
    p = np.array([0.5, 0.25, 0.25])  # canonical: option 0 -> position 1, option 2 -> position 0
    # by position: [p2, p0, p1] = [0.25, 0.5, 0.25] -> / prior = [0.5, 2, 1] -> normalised [1/7, 4/7, 2/7]
    np.testing.assert_allclose(debias_probs(p, order, prior), [4 / 7, 2 / 7, 1 / 7])
    with pytest.raises(StatsError, match="positive"):
        debias_probs(p, order, [1.0, 0.0, 0.0])


def test_pride_debias_recovers_unbiased_scores_exactly_without_noise():
    biased = planted_table(200, 5, position_bias=[0.8, 0, 0, 0, -0.3], rng=9)
    clean = planted_table(200, 5, rng=9)  # same content, no positional prior
    res = pride_debias(biased.probs[:, 0], biased.values[0], biased.option_orders, rng=0)
    assert len(res.estimation_items) == 40 and len(res.items) == 160
    truth = clean.probs[res.items, 0, 0] @ clean.values[0]
    np.testing.assert_allclose(res.scores, truth, atol=1e-9)
    assert np.abs(res.raw_scores - truth).mean() > 0.1
    b = np.array([0.8, 0, 0, 0, -0.3])
    np.testing.assert_allclose(res.prior, np.exp(b) / np.exp(b).sum(), atol=1e-9)


def test_pride_debias_options_and_errors():
    t = planted_table(30, 4, position_bias=[0.5, 0, 0, 0], prompt_noise=0.3, rng=2)
    p, v = t.probs[:, 0], t.values[0]
    res = pride_debias(p, v, t.option_orders, estimation_items=[0, 1, 2], ordering=3)
    np.testing.assert_array_equal(res.estimation_items, [0, 1, 2])
    assert res.ordering == 3 and len(res.scores) == 27
    with pytest.raises(StatsError, match="estimation_fraction"):
        pride_debias(p, v, t.option_orders, estimation_fraction=1.5)
    with pytest.raises(StatsError, match="at least one item"):
        pride_debias(p, v, t.option_orders, estimation_items=list(range(30)))
    tr = planted_table(30, 4, orderings="random", rng=2)
    with pytest.raises(DesignError, match="balanced"):
        pride_debias(tr.probs[:, 0], v, tr.option_orders)
    with pytest.raises(StatsError, match="2 items"):
        pride_debias(p[:1], v, t.option_orders)
    with pytest.raises(ValueError, match="values has shape"):
        aggregate_scores(p, v[:2], ords.balanced(4))
