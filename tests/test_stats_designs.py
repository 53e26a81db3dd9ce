"""Ordering designs (all n!, per-item random, balanced+random), per-item ScoreTables, and the position tests
that are valid on each design: planted judges whose truth is known."""

import math

import numpy as np
import pytest
from scipy import stats as sps
from synthetic import planted_table

from logitjudge import orderings as ords
from logitjudge.stats import (
    PER_ITEM_RANDOM,
    ConfoundedDesignError,
    InsufficientDataError,
    detect_design,
    fit_position_effect,
    has_all_orders,
    position_chisquare,
    position_label,
    probs_by_position,
)
from logitjudge.stats.direction import count_list
from logitjudge.table import ScoreTable


# ---- orderings ---------------------------------------------------------------------------------------------
def test_all_orders_and_refusals():
    a = ords.all_orders(4)
    assert a.shape == (24, 4) and len({tuple(r) for r in a}) == 24 and a[0].tolist() == [0, 1, 2, 3]
    assert ords.is_complete(a) and ords.is_balanced(a) and has_all_orders(a)
    assert ords.is_complete(np.concatenate([a, a])) and not ords.is_complete(a[:-1])
    assert not ords.is_complete(ords.balanced(5)) and ords.is_complete(ords.balanced(3))  # n=3: 2n = n!
    np.testing.assert_array_equal(ords.parse("all", 4), a)
    with pytest.raises(ords.OrderingError, match="40,320.*random:K"):
        ords.parse("all", 8)
    for spec in ("random:0", "fixed:0", "shared-random:0", "balanced+random:0"):
        with pytest.raises(ords.OrderingError, match="at least 1 ordering"):
            ords.parse(spec, 5, n_items=3)
    with pytest.raises(ords.OrderingError, match="n_items.*shared-random"):
        ords.parse("random:3", 5)
    with pytest.raises(ords.OrderingError, match="all n! orders"):
        ords.parse("all:3", 5)


def test_per_item_random_orders_are_seeded_independent_and_extendable():
    r = ords.parse("random:6", 5, seed=7, n_items=40)
    assert r.shape == (40, 6, 5)
    np.testing.assert_array_equal(r, ords.parse("random:6", 5, seed=7, n_items=40))  # one seed, one draw
    assert not np.array_equal(r, ords.parse("random:6", 5, seed=8, n_items=40))
    np.testing.assert_array_equal(r[:10], ords.parse("random:6", 5, seed=7, n_items=10))  # item i's draw is its own
    assert len({r[i].tobytes() for i in range(40)}) == 40  # independent per item
    ords.validate(r, 5, per_item=True)
    # every permutation equally likely: position of option 0 is uniform over 40 * 6 draws (chi-square, loose)
    pos0 = ords.inverse(r)[..., 0].ravel()
    assert sps.chisquare(np.bincount(pos0, minlength=5)).pvalue > 1e-3
    br = ords.parse("balanced+random:3", 5, seed=1, n_items=4)
    assert br.shape == (4, 13, 5)
    np.testing.assert_array_equal(br[:, :10], np.broadcast_to(ords.balanced(5), (4, 10, 5)))
    np.testing.assert_array_equal(br[:, 10:], ords.parse("random:3", 5, seed=1, n_items=4))
    assert ords.parse("shared-random:4", 5, seed=1).shape == (4, 5)


def test_designs_are_detected_for_shared_and_per_item_orders():
    assert detect_design(ords.all_orders(4)) == "balanced"
    assert detect_design(ords.parse("random:4", 4, n_items=5)) == PER_ITEM_RANDOM
    same = np.broadcast_to(ords.balanced(4), (3, 8, 4))
    assert detect_design(same) == "balanced"  # identical per-item sets are one shared set
    assert detect_design(ords.shared_random(4, 5, rng=0)) == "shared-random"


# ---- per-item tables ---------------------------------------------------------------------------------------
def _per_item_table(n_items=6, n=4, k=5):
    return planted_table(n_items, n, orderings="per-item-random", n_orderings=k, prompt_noise=0.4, rng=2,
                         n_groups=2)


def test_per_item_table_views_and_round_trip(tmp_path):
    t = _per_item_table()
    assert t.orders_per_item and t.option_orders.shape == (6, 5, 4)
    pbp = t.probs_by_position()
    for i in range(6):  # brute force: the option shown at position q of item i's ordering k
        for k in range(5):
            for q in range(4):
                assert pbp[i, 0, k, q] == t.probs[i, 0, k, t.option_orders[i, k, q]]
    np.testing.assert_array_equal(probs_by_position(t.probs[:, 0], t.option_orders), pbp[:, 0])
    df = t.to_dataframe()
    row = df[(df.item_id == t.item_ids[3]) & (df.ordering == 2) & (df.option == 1)].iloc[0]
    assert row.position_index == int(np.flatnonzero(t.option_orders[3, 2] == 1)[0])
    assert row.position == row.position_index + 1  # as the prompt numbers it
    back = ScoreTable.load(t.save(tmp_path / "t.npz"))
    np.testing.assert_array_equal(back.option_orders, t.option_orders)
    np.testing.assert_array_equal(back.probs, t.probs)
    sub = t.select_items([1, 4]).select_orderings([0, 3])
    np.testing.assert_array_equal(sub.option_orders, t.option_orders[[1, 4]][:, [0, 3]])
    shared = planted_table(3, 4, rng=0)  # the shared [K, n] form stays valid and round-trips
    back = ScoreTable.load(shared.save(tmp_path / "s.npz"))
    assert not back.orders_per_item and back.option_orders.shape == (8, 4)
    with pytest.raises(Exception, match="option_orders has shape"):
        ScoreTable(t.probs, t.label_mass, t.option_orders[:3], t.criterion_orders, t.values, t.item_ids,
                   t.criteria)


def test_position_effect_on_per_item_orders_recovers_the_planted_bias():
    bias = np.array([0.6, 0.0, -0.2, -0.4])
    t = planted_table(200, 4, orderings="per-item-random", n_orderings=6, position_bias=bias, rng=4)
    res = fit_position_effect(t.probs[:, 0], t.option_orders, n_boot=0)
    np.testing.assert_allclose(res.bias, bias - bias.mean(), atol=1e-9)  # noiseless log-linear judge: exact
    assert res.design == PER_ITEM_RANDOM and res.rmse < 1e-9


# ---- (a) a judge whose choice ignores the order -----------------------------------------------------------
def _order_blind(orderings, n_items=200, n=4, **kw):
    # no position bias, no prompt noise: each item's distribution is the same under every order
    return planted_table(n_items, n, orderings=orderings, content_scale=3.0, rng=5, **kw)


@pytest.mark.parametrize("design", ["balanced", "all"])
def test_order_blind_judge_is_exactly_uniform_on_balanced_designs(design):
    t = _order_blind(design)
    pbp = t.probs_by_position()[:, 0]
    res = position_chisquare(pbp, t.option_orders, n_boot=100, rng=0)
    assert res.statistic == pytest.approx(0.0, abs=1e-9) and res.cramers_v == pytest.approx(0.0, abs=1e-6)
    assert res.label == "none" and res.pvalue == pytest.approx(1.0) and res.design == "balanced"
    np.testing.assert_allclose(res.counts, res.n / 4)


def test_order_blind_judge_shows_no_bias_on_per_item_random_orders():
    t = _order_blind("per-item-random", n_orderings=6)
    res = position_chisquare(t.probs_by_position()[:, 0], t.option_orders, n_boot=100, rng=0)
    assert res.design == PER_ITEM_RANDOM and res.label == "none"
    assert res.pvalue > 0.05 and res.cramers_v < 0.05  # multinomial counts: chi2 ~ chi2(3), V ~ sqrt(3 / 3N)
    # and over many seeds the test holds its level (the null is exact: each chosen position uniform, independent)
    p = [position_chisquare(pbp, orders, n_boot=0).pvalue for pbp, orders in _per_item_null_tables(120)]
    assert 0.01 <= np.mean(np.asarray(p) < 0.05) <= 0.11


def _per_item_null_tables(n_tables):
    base = _order_blind("balanced", n_items=40)  # content only: the same distribution under every order
    p = base.probs[:, 0, 0]  # [items, options]
    for seed in range(n_tables):
        orders = ords.random(4, 4, 40, rng=seed)
        pbp = np.take_along_axis(np.broadcast_to(p[:, None], (40, 4, 4)), orders, axis=2)
        yield pbp, orders


def test_order_blind_judge_is_refused_on_a_shared_random_design():
    # the case: every item picks the same option under 4 shared random orders -> spurious "bias"
    t = _order_blind(ords.shared_random(4, 4, rng=1))
    pbp = t.probs_by_position()[:, 0]
    with pytest.raises(ConfoundedDesignError, match="content and position are confounded.*random:K"):
        position_chisquare(pbp, t.option_orders, n_boot=0)
    with pytest.warns(UserWarning, match="confounded"):
        res = position_chisquare(pbp, t.option_orders, n_boot=0, allow_confounded=True)
    assert res.pvalue < 1e-6  # what the refusal prevents: content read as position


def test_per_item_random_needs_enough_prompts():
    t = planted_table(3, 5, orderings="per-item-random", n_orderings=2, rng=0)
    with pytest.raises(InsufficientDataError, match="expected count of at least 5"):
        position_chisquare(t.probs_by_position()[:, 0], t.option_orders, n_boot=0)


# ---- (b) direction verdicts: U-shapes and ties ------------------------------------------------------------
def test_u_shaped_preference_is_edges_not_first():
    t = planted_table(300, 5, position_bias=[0.6, 0.0, -0.4, 0.0, 0.6], prompt_noise=0.5, rng=2)
    res = position_chisquare(t.probs_by_position()[:, 0], t.option_orders, n_boot=300, rng=0)
    assert res.label == "edges" and res.favoured == (1, 5) and res.favoured_index == (0, 4) and res.pvalue < 1e-6
    assert str(count_list(res.counts)) in res.label_reason  # the verdict quotes the counts it rests on
    assert "positions [1, 5]" in res.label_reason  # numbered as a person counts them
    # the counts, without a bootstrap: the two ends tie at the top
    c = np.array([30, 21, 12, 17, 30])
    p = sps.chisquare(c).pvalue
    assert position_label(c / c.sum(), [np.nan] * 5, p, 0.05, counts=c)[0] == "edges"
    assert position_label(c / c.sum(), [np.nan] * 5, p, 0.05, counts=[40, 21, 12, 17, 20])[0] == "first"


@pytest.mark.parametrize("low, label", [
    ([0.25, 0.22, 0.1, 0.1, 0.1], "first"),    # a leading block
    ([0.1, 0.1, 0.1, 0.21, 0.3], "last"),      # a trailing block
    ([0.1, 0.25, 0.21, 0.1, 0.1], "middle"),   # an interior block
    ([0.1, 0.25, 0.1, 0.21, 0.1], "mixed"),    # two separate interior positions
    ([0.21, 0.1, 0.1, 0.1, 0.21], "edges"),
    ([0.1, 0.1, 0.1, 0.1, 0.1], "none"),
])
def test_direction_label_shapes(low, label):
    shares = np.asarray(low) + 0.05
    assert position_label(shares, low, 1e-4, 0.05)[0] == label


def test_all_orders_count_is_n_factorial():
    assert len(ords.all_orders(5)) == math.factorial(5)
