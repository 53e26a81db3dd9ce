"""The paradigm statistics (issue 25): the cluster-robust slot test, pairwise swap consistency and Bradley-Terry,
listwise choice scores, winning-set flips and the comparison, on planted judges and hand-checked values."""

from itertools import combinations

import numpy as np
import pytest
from scipy import optimize
from scipy import stats as sps

from logitjudge import stats as st
from logitjudge.orderings import balanced, inverse
from logitjudge.report.compare import comparison_table, plot_comparison


def sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def all_pairs(groups):
    g = np.asarray(groups)
    return np.array([(a, b) for a, b in combinations(range(g.size), 2) if g[a] == g[b]])


def pairwise_judge(quality, pairs, beta=0.0, scale=1.0):
    """P("A") = sigma(scale (q_first - q_second) + beta): ``beta`` > 0 prefers the first slot."""
    d = scale * (quality[pairs[:, 0]] - quality[pairs[:, 1]])
    a0, a1 = sig(d + beta), sig(-d + beta)
    return np.stack([np.stack([a0, 1 - a0], -1), np.stack([a1, 1 - a1], -1)], axis=1)


def listwise_judge(quality, n_groups, m, beta=0.0, orders=None):
    """Slot-s probability proportional to exp(q(candidate) + beta [s == 0]) under every balanced order."""
    orders = balanced(m) if orders is None else orders
    probs = []
    for g in range(n_groups):
        logit = quality[g * m + orders] + beta * (np.arange(m) == 0)
        probs.append(np.exp(logit) / np.exp(logit).sum(axis=1, keepdims=True))
    return np.stack(probs), np.broadcast_to(orders, (n_groups,) + orders.shape).copy(), \
        np.arange(n_groups * m).reshape(n_groups, m)


def pointwise_judge(quality, beta=0.0, n=5):
    """Options 1..n with logits -(v - q)^2 plus ``beta`` at position 0, under the balanced orders."""
    orders = balanced(n)
    values = np.arange(1.0, n + 1)
    content = -(values[None, :] - quality[:, None]) ** 2  # [items, options]
    logits = content[:, None, :] + beta * (inverse(orders)[None] == 0)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True), values, orders


# ---- the cluster-robust slot test ------------------------------------------------------------------------------
def test_two_slots_equal_the_cluster_robust_t_test_by_hand():
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 6, size=30)
    cl = np.repeat(np.arange(30), sizes)
    ans = (rng.random(cl.size) < np.repeat(rng.uniform(0.2, 0.9, 30), sizes)).astype(int)  # slot index 0/1
    r = st.slot_chisquare(ans, cl, n_slots=2, n_boot=0)
    y1 = np.bincount(cl, weights=(ans == 0).astype(float))
    n, c = float(cl.size), 30
    p1 = y1.sum() / n
    var = c / (c - 1) * ((y1 - sizes * p1) ** 2).sum() / n ** 2  # linearisation variance of a ratio estimator
    z2 = (p1 - 0.5) ** 2 / var
    assert r.statistic_corrected == pytest.approx(z2, rel=1e-10)
    assert r.dof == pytest.approx(1.0)
    # F(1, C - 1) of z^2: the cluster-robust t-test with C - 1 degrees of freedom
    assert r.pvalue == pytest.approx(2 * sps.t.sf(np.sqrt(z2), c - 1), rel=1e-9)
    assert r.design_effect == pytest.approx(var / (0.25 / n), rel=1e-10)
    assert r.statistic == pytest.approx(sps.chisquare(np.bincount(ans, minlength=2)).statistic)
    assert r.pvalue_per_prompt == pytest.approx(sps.chisquare(np.bincount(ans, minlength=2)).pvalue)


def test_single_prompt_clusters_have_design_effect_one_and_duplicates_scale_it():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 4, size=2000)
    r = st.slot_chisquare(a, np.arange(a.size), n_slots=4, n_boot=0)
    assert abs(r.design_effect - 1) < 0.02 and abs(r.pvalue - r.pvalue_per_prompt) < 0.02
    dup = st.slot_chisquare(np.repeat(a, 5), np.repeat(np.arange(a.size), 5), n_slots=4, n_boot=0)
    assert dup.statistic == pytest.approx(5 * r.statistic)
    assert dup.design_effect == pytest.approx(5 * r.design_effect)
    assert dup.pvalue == pytest.approx(r.pvalue) and dup.dof == pytest.approx(r.dof)
    assert dup.pvalue_per_prompt < r.pvalue_per_prompt  # the per-prompt p counts each answer 5 times


def test_items_with_their_own_preferred_positions_are_no_shared_bias():
    """Issue 23's case: 40 items each always answering its own position (12/8/8/6/6 items prefer 1..5)."""
    pref = np.repeat(np.arange(5), [12, 8, 8, 6, 6])
    r = st.slot_chisquare(np.repeat(pref, 10), np.repeat(np.arange(40), 10), n_slots=5, rng=0)
    assert r.pvalue_per_prompt < 1e-4 < 0.05 < r.pvalue
    assert r.label == "none" and r.design_effect == pytest.approx(10, rel=0.1)
    assert r.cramers_v_ci_low == 0.0  # the corrected V's interval reaches 0


def test_a_shared_first_position_bias_stays_significant():
    """Issue 23's case: a shared +0.7 log-odds first-position bias on 200 items (balanced orders, greedy)."""
    rng = np.random.default_rng(1)
    p, values, orders = pointwise_judge(rng.uniform(1, 5, 200), beta=0.7)
    s = st.pointwise_summary(p, values, orders, np.repeat(np.arange(40), 5), n_boot=200, rng=0)
    assert s.slot_test.pvalue < 1e-3 and s.slot_test.label == "first" and s.slot_test.favoured_index == (0,)
    assert s.slot_test.cramers_v_ci_low > 0


@pytest.mark.parametrize("n_boot", [0, 200])
def test_the_rubric_position_test_and_the_pointwise_slot_test_are_one_test(n_boot):
    rng = np.random.default_rng(11)
    p, _, orders = pointwise_judge(rng.uniform(1, 5, 30), beta=0.5)
    pbp = st.probs_by_position(p, orders)
    rubric = st.position_chisquare(pbp, orders, n_boot=n_boot, rng=0)
    items = np.repeat([f"{i:02d}" for i in range(30)], len(orders))  # sorted as the items: one bootstrap draw
    slot = st.slot_chisquare(st.chosen_positions(pbp).reshape(-1, 5), items, n_boot=n_boot, rng=0)
    for a, b in (("statistic", "statistic"), ("pvalue", "pvalue"), ("design_effect", "design_effect"),
                 ("statistic_corrected", "statistic_corrected"), ("dof_corrected", "dof"),
                 ("cramers_v", "cramers_v"), ("cramers_v_ci_low", "cramers_v_ci_low"),
                 ("cramers_v_ci_high", "cramers_v_ci_high"), ("cramers_v_raw", "cramers_v_uncorrected"),
                 ("pvalue_per_prompt", "pvalue_per_prompt"), ("n_items", "n_clusters")):
        assert getattr(rubric, a) == pytest.approx(getattr(slot, b), nan_ok=True), a
    np.testing.assert_allclose(rubric.share_ci_low, slot.share_ci_low)
    assert rubric.label == slot.label == "first" and rubric.favoured_index == slot.favoured_index == (0,)
    assert slot.label_reason == rubric.label_reason.replace("positions", "slots").replace("by position", "by slot")


def test_the_slot_tests_accept_the_designs_the_rubric_test_accepts():
    p, values, orders = pointwise_judge(np.linspace(1, 5, 4))
    fixed = np.tile(np.arange(5), (10, 1))
    with pytest.raises(st.DesignError, match="pointwise slot test: the orderings are FIXED"):
        st.pointwise_summary(p, values, fixed, list("aabb"))
    with pytest.warns(st.ConfoundedDesignWarning):
        st.pointwise_summary(p, values, fixed, list("aabb"), allow_confounded=True, n_boot=0)
    per_item = np.stack([np.random.default_rng(i).permuted(np.tile(np.arange(5), (2, 1)), axis=1)
                         for i in range(4)])  # 4 items x 2 own random orders = 8 prompts < 5 per position
    with pytest.raises(st.InsufficientDataError, match="expected count of at least 5 per position"):
        st.position_chisquare(st.probs_by_position(p[:, :2], per_item), per_item, n_boot=0)
    with pytest.raises(st.InsufficientDataError, match="expected count of at least 5 per position"):
        st.pointwise_summary(p[:, :2], values, per_item, list("aabb"))
    lp, lo, _ = listwise_judge(np.zeros(8), 2, 4, orders=np.tile(np.arange(4), (3, 1)))
    with pytest.raises(st.DesignError, match="every prompt shows the candidates in the same order"):
        st.listwise_slot_test(lp, lo)
    with pytest.warns(st.ConfoundedDesignWarning):
        st.listwise_slot_test(lp, lo, allow_confounded=True, n_boot=0)


def test_the_rao_scott_test_holds_its_level_under_clustered_preferences():
    rng = np.random.default_rng(7)
    rejected = 0
    for _ in range(200):
        prefs = rng.dirichlet(np.full(4, 0.5), size=40)  # every item its own preferred positions, none shared
        ans = np.concatenate([rng.choice(4, size=8, p=q) for q in prefs])
        rejected += st.slot_chisquare(ans, np.repeat(np.arange(40), 8), n_slots=4, n_boot=0).pvalue < 0.05
    assert 0.01 <= rejected / 200 <= 0.10


def test_identical_clusters_have_no_variance():
    biased = st.rao_scott_chisquare(np.tile([3.0, 1.0], (10, 1)))
    assert biased.pvalue == 0.0 and biased.design_effect == 0.0 and np.isinf(biased.statistic_corrected)
    assert np.isnan(biased.dof_corrected)  # d = tr(D)^2 / tr(D^2) is 0 / 0
    even = st.rao_scott_chisquare(np.tile([2.0, 2.0], (10, 1)))
    assert even.pvalue == 1.0 and even.statistic == 0.0
    # a cluster whose prompts all answered the tie label (no slot) is a cluster of weight 0: it counts in C
    tie = st.rao_scott_chisquare([[3.0, 1.0], [1.0, 3.0], [0.0, 0.0]])
    assert tie.n_clusters == 3 and tie.dof_denominator == pytest.approx(2 * tie.dof_corrected)


def test_corrected_cramers_v_by_hand():
    # X^2 = 30 on N = 100 over k = 4 with deff 2: sqrt((30 - 3 * 2) / (3 * (100 - 2))) = sqrt(24 / 294) = 2/7
    # (the maximum, X^2 = 3 N, corrected alike)
    assert st.cramers_v_corrected(30.0, 100, 4, design_effect=2.0) == pytest.approx(2 / 7)
    assert st.cramers_v_corrected(5.0, 100, 4, design_effect=2.0) == 0.0  # below its null expectation
    assert st.cramers_v_corrected(300.0, 100, 4, design_effect=0.0) == 1.0  # every prompt answered one slot


# ---- pairwise -------------------------------------------------------------------------------------------------
G2 = np.repeat(["g1", "g2"], 5)
PAIRS = all_pairs(G2)


@pytest.mark.parametrize("tie", [False, True])
def test_a_judge_that_always_answers_a(tie):
    p = np.zeros((len(PAIRS), 2, 3 if tie else 2))
    p[..., 0] = 1.0
    for reading in ("greedy", "sampled"):
        s = st.swap_consistency(p, PAIRS, G2, reading=reading, rng=0)
        assert s.consistency == 0.0 and s.first_slot_preference == 1.0 and s.tie_share == 0.0
        assert s.consistency_ci_high == 0.0 and s.first_slot_ci_low == 1.0
    t = st.pairwise_slot_test(p, PAIRS, G2, rng=0)
    assert t.pvalue == 0.0 and t.cramers_v == 1.0 and t.label == "first" and t.shares.tolist() == [1.0, 0.0]
    # slots numbered from 1 as a person counts them, with their labels
    assert t.label_reason == "slots [1 (A)] have a share whose CI lies above 1/2; counts by slot [A: 40, B: 0]"


def test_an_order_blind_judge():
    q = np.random.default_rng(2).normal(size=10)
    p = pairwise_judge(q, PAIRS)
    g = st.swap_consistency(p, PAIRS, G2, reading="greedy", rng=0)
    assert g.consistency == 1.0 and g.first_slot_preference == 0.5
    s = st.swap_consistency(p, PAIRS, G2, reading="sampled", rng=0)
    win = sig(q[PAIRS[:, 0]] - q[PAIRS[:, 1]])
    assert s.consistency == pytest.approx(np.mean(win ** 2 + (1 - win) ** 2))  # two independent draws agree
    assert s.consistency == pytest.approx(s.consistency_order_blind)
    assert s.first_slot_preference == pytest.approx(0.5)
    t = st.pairwise_slot_test(p, PAIRS, G2, rng=0)
    assert t.statistic == 0.0 and t.pvalue == 1.0 and t.label == "none" and t.cramers_v == 0.0
    for cluster in ("pair", "group"):
        drawn = st.pairwise_slot_test(p, PAIRS, G2, reading="sampled", cluster=cluster, rng=0, n_boot=0)
        assert drawn.unit == cluster and drawn.n == 2 * len(PAIRS)


def test_swap_consistency_and_first_slot_by_hand_with_a_tie_label():
    p = np.array([[[0.6, 0.3, 0.1], [0.2, 0.7, 0.1]]])  # order 1 shows the second item first
    v = st.pair_verdicts(p)
    assert v[0, 1].tolist() == pytest.approx([0.7, 0.2, 0.1])
    s = st.swap_consistency(p, [[0, 1]], ["g", "g"], reading="sampled", n_boot=0)
    assert s.consistency == pytest.approx(0.6 * 0.7 + 0.3 * 0.2 + 0.1 * 0.1)
    assert s.consistency_order_blind == pytest.approx(0.65 ** 2 + 0.25 ** 2 + 0.1 ** 2)
    assert s.first_slot_preference == pytest.approx(0.8 / 1.8) and s.tie_share == pytest.approx(0.1)
    assert st.swap_consistency(p, [[0, 1]], ["g", "g"], reading="greedy", n_boot=0).consistency == 1.0
    assert st.debiased_preference(p)[0].tolist() == pytest.approx([0.65, 0.25, 0.1])


def test_a_tie_that_stays_the_same_tie_is_consistent():
    p = np.array([[[0.5, 0.5], [0.5, 0.5]], [[0.5, 0.5], [0.9, 0.1]]])
    s = st.swap_consistency(p, [[0, 1], [0, 2]], ["g"] * 3, reading="greedy", n_boot=0)
    assert s.per_pair.tolist() == [1.0, 0.0]


def test_bradley_terry_hand_solved_three_candidates():
    strength = np.log([4.0, 2.0, 1.0])
    strength -= strength.mean()
    w = np.array([[0, 2 / 3, 4 / 5], [1 / 3, 0, 2 / 3], [1 / 5, 1 / 3, 0]])  # P(a beats b) of strengths 4:2:1
    r = st.bradley_terry(w, prior=0)
    assert r.defined and not r.separated and r.strength == pytest.approx(strength, abs=1e-9)
    chain = st.bradley_terry(np.array([[0, 2 / 3, 0], [1 / 3, 0, 2 / 3], [0, 1 / 3, 0]]), prior=0)
    assert chain.strength == pytest.approx(strength, abs=1e-9)  # a tree of comparisons fits exactly
    two = st.bradley_terry(np.array([[0, 0.75], [0.25, 0]]), prior=0.2)
    assert two.strength[0] - two.strength[1] == pytest.approx(np.log(0.85 / 0.35))
    cyc = st.bradley_terry(np.array([[0, 0.8, 0.2], [0.2, 0, 0.8], [0.8, 0.2, 0]]), prior=0)
    assert cyc.strength == pytest.approx(np.zeros(3), abs=1e-12)


def test_bradley_terry_matches_scipy_optimisation():
    rng = np.random.default_rng(4)
    w = rng.uniform(0, 2, (6, 6)) * (1 - np.eye(6))
    r = st.bradley_terry(w, prior=0.1)
    wt = w + 0.05 * (1 - np.eye(6))

    def nll(t):
        return (wt * np.logaddexp(0, -(t[:, None] - t[None, :]))).sum()

    ref = optimize.minimize(nll, np.zeros(6), method="BFGS", options={"gtol": 1e-10}).x
    assert r.strength == pytest.approx(ref - ref.mean(), abs=1e-6)


def test_bradley_terry_under_separation():
    w = np.triu(np.ones((4, 4)), 1)  # candidate 0 beats all, 1 beats 2 and 3, ...
    assert not st.bradley_terry(w, prior=0).defined
    r = st.bradley_terry(w, prior=0.1)
    assert r.separated and np.all(np.diff(r.strength) < 0)


def test_bradley_terry_recovers_a_planted_ranking_despite_a_first_slot_bias():
    rng = np.random.default_rng(5)
    q = rng.normal(size=10)
    p = pairwise_judge(q, PAIRS, beta=1.5)
    r = st.pairwise_ranking(p, PAIRS, G2, reading="sampled")
    for g in range(2):
        assert sps.kendalltau(r.scores[5 * g:5 * g + 5], q[5 * g:5 * g + 5]).statistic == pytest.approx(1.0)
    # greedy: a pair closer than the bias answers "A" in both orders, a tie after debiasing; never reversed
    r = st.pairwise_ranking(p, PAIRS, G2, reading="greedy")
    d_score = r.scores[PAIRS[:, 0]] - r.scores[PAIRS[:, 1]]
    d_q = q[PAIRS[:, 0]] - q[PAIRS[:, 1]]
    assert np.all(d_score * d_q >= -1e-9) and np.any(np.abs(d_score) < 1e-9)
    exact = st.pairwise_ranking(pairwise_judge(q, PAIRS), PAIRS, G2, prior=0)
    centred = q - np.repeat([q[:5].mean(), q[5:].mean()], 5)
    assert exact.scores == pytest.approx(centred, abs=1e-8)  # the model holds: the MLE is the truth


def test_pairwise_with_k_random_pairs_links_uncompared_candidates_through_the_prior():
    q = np.arange(5.0)
    pairs = np.array([[0, 1], [2, 3]])
    r = st.pairwise_ranking(pairwise_judge(q, pairs), pairs, ["g"] * 5)
    assert np.isfinite(r.scores).all() and r.scores[1] > r.scores[0] and r.scores[3] > r.scores[2]
    assert r.scores[4] == pytest.approx(0.0, abs=1e-9)  # never compared: the prior's centre


# ---- listwise -------------------------------------------------------------------------------------------------
def test_choice_by_candidate_by_hand():
    p = np.array([[[0.5, 0.3, 0.2], [0.1, 0.6, 0.3]]])
    o = np.array([[[2, 0, 1], [1, 2, 0]]])
    by = st.choice_by_candidate(p, o)[0]
    np.testing.assert_allclose(by, [[0.3, 0.2, 0.5], [0.3, 0.1, 0.6]])
    r = st.listwise_ranking(p, o, [[0, 1, 2]], 3)
    assert r.scores.tolist() == pytest.approx([0.3, 0.15, 0.55])
    assert st.listwise_ranking(p, o, [[0, 1, 2]], 3, reading="greedy").scores.tolist() == [0.0, 0.0, 1.0]


def test_an_order_blind_list_judge_has_no_slot_bias_and_no_flips():
    q = np.random.default_rng(6).normal(size=12)
    p, o, c = listwise_judge(q, 3, 4)
    t = st.listwise_slot_test(p, o, rng=0)
    assert t.statistic == 0.0 and t.pvalue == 1.0 and t.unit == "group"
    r = st.listwise_ranking(p, o, c, 12, reading="greedy")
    assert st.top1_stability(list(r.by_ordering), rng=0).flip == 0.0


def test_a_list_judge_that_always_answers_a():
    m = 4
    p, o, c = listwise_judge(np.zeros(8), 2, m, beta=50.0)
    t = st.listwise_slot_test(p, o, rng=0)
    assert t.label == "first" and t.pvalue == 0.0 and t.shares[0] == pytest.approx(1.0)
    assert t.label_reason == ("slots [1 (A)] have a share whose CI lies above 1/4; counts by slot "
                              "[A: 16, B: 0, C: 0, D: 0]")
    r = st.listwise_ranking(p, o, c, 8, reading="greedy")
    # balanced(m) shows each candidate first in 2 of the 2m orders: those 2 rows agree, every other pair flips
    assert st.top1_stability(list(r.by_ordering), n_boot=0).flip == pytest.approx(1 - 1 / (2 * m - 1))


def test_debiasing_by_the_slot_prior_recovers_the_content_preference():
    q = np.random.default_rng(8).normal(size=15)
    prior = np.array([0.4, 0.25, 0.15, 0.12, 0.08])
    p, o, c = listwise_judge(q, 3, 5)
    p = p * prior / (p * prior).sum(axis=-1, keepdims=True)
    r = st.listwise_ranking(p, o, c, 15, debias=True)
    for g in range(3):
        content = np.exp(q[5 * g:5 * g + 5]) / np.exp(q[5 * g:5 * g + 5]).sum()
        assert r.scores[5 * g:5 * g + 5] == pytest.approx(content, abs=1e-9)
        assert st.slot_prior(p, o)[g] == pytest.approx(prior, abs=1e-9)
    assert not np.allclose(st.listwise_ranking(p, o, c, 15).scores, r.scores)


def test_ragged_lists():
    p1, o1, _ = listwise_judge(np.arange(3.0), 1, 3)
    p2, o2, _ = listwise_judge(np.arange(4.0), 1, 4)
    r = st.listwise_ranking([p1[0], p2[0]], [o1[0], o2[0]], [[0, 1, 2], [3, 4, 5, 6]], 7)
    assert np.isfinite(r.scores).all() and [b.shape for b in r.by_ordering] == [(6, 3), (8, 4)]
    assert st.listwise_design([o1[0], o2[0]]) == "balanced"
    with pytest.raises(st.ShapeError):
        st.listwise_slot_test([p1[0], p2[0]], [o1[0], o2[0]])


# ---- top-1 winning sets ---------------------------------------------------------------------------------------
def test_all_tied_groups_give_no_flips():
    r = st.top1_stability(np.ones((6, 4, 5)), rng=0)
    assert r.flip == 0.0 and r.flip_certain == 0.0 and r.flip_possible == 1.0 and r.tied == 1.0
    assert r.flip_tie_broken == pytest.approx(1 - 1 / 5)
    assert r.flip_ci_low == 0.0 and r.flip_ci_high == 0.0


def test_nine_of_thirty_groups_changing_winner_give_0_30():
    s = np.zeros((30, 2, 4))
    s[:, 0, 0] = s[:, 1, 0] = 1.0
    s[:9, 1, 0], s[:9, 1, 2] = 0.0, 1.0
    s[9:12, 1, 1] = 1.0  # a tie that appears: a change of the winning set, not a certain one
    r = st.top1_stability(s, n_boot=0)
    assert r.flip == pytest.approx(12 / 30) and r.flip_certain == pytest.approx(9 / 30)
    assert r.flip_possible == pytest.approx(12 / 30) and r.flip_tie_broken == pytest.approx((9 + 3 * 0.5) / 30)
    s[9:12, 1, 1] = 0.0
    assert st.top1_stability(s, n_boot=0).flip == pytest.approx(0.30)


def test_flips_against_a_canonical_ordering():
    s = np.array([[[1.0, 0], [0, 1.0], [0, 1.0]]])
    assert st.top1_stability(s, n_boot=0).flip == pytest.approx(2 / 3)
    r = st.top1_stability(s, canonical=0, n_boot=0)
    assert r.flip == 1.0 and r.pairs == "vs canonical"


def test_the_monte_carlo_se_of_flips_between_random_draws_by_hand():
    # draws 0 and 1 pick candidate 0, draw 2 candidate 1: flips over pairs (0,1), (0,2), (1,2) = 0, 1, 1
    r = st.top1_stability([[[1.0, 0], [1.0, 0], [0, 1.0]]], draws=True, n_boot=0)
    assert r.flip == pytest.approx(2 / 3)
    # delete-one-draw values 1, 1, 0: sqrt(2/3 * ((1/3)^2 + (1/3)^2 + (2/3)^2)) = 2/3
    assert r.flip_se == pytest.approx(2 / 3)
    assert np.isnan(st.top1_stability([[[1.0, 0], [0, 1.0], [0, 1.0]]], n_boot=0).flip_se)


def test_pairwise_reorderings_are_random_single_order_runs():
    q = np.random.default_rng(10).normal(size=10)
    blind = st.pairwise_summary(pairwise_judge(q, PAIRS), PAIRS, G2, rng=0, n_boot=0)
    assert blind.top1.flip == 0.0 and blind.top1.flip_se == 0.0  # every run ranks alike
    always_a = np.zeros((len(PAIRS), 2, 2))
    always_a[..., 0] = 1.0
    biased = st.pairwise_summary(always_a, PAIRS, G2, rng=0, n_boot=0, n_orientations=30)
    assert biased.top1.flip > 0.5 and 0 < biased.top1.flip_se < 0.2
    r = st.pairwise_ranking(always_a, PAIRS, G2, n_orientations=30, rng=0)
    assert r.orientations.shape == (30, len(PAIRS)) and r.scores == pytest.approx(np.zeros(10), abs=1e-9)
    # each run's winner is whoever was shown first most often: the "first" of a draw ranks highest
    firsts = np.zeros(10)
    o = r.orientations[0]
    np.add.at(firsts, PAIRS[np.arange(len(PAIRS)), o], 1)
    assert np.argmax(r.by_orientation[0][0]) in np.flatnonzero(firsts[:5] == firsts[:5].max())


# ---- the comparison -------------------------------------------------------------------------------------------
def planted_study(beta_point=0.0, beta_pair=0.0, beta_list=0.0, n_groups=4, m=5, seed=9):
    rng = np.random.default_rng(seed)
    q = rng.uniform(1, 5, n_groups * m)
    human = np.round(q + rng.normal(0, 0.3, q.size))  # integer human scores: ties within groups
    groups = np.repeat([f"g{j}" for j in range(n_groups)], m)
    pairs = all_pairs(groups)
    pt = pointwise_judge(q, beta=beta_point)
    lp, lo, lc = listwise_judge(q, n_groups, m, beta=beta_list)
    return q, human, groups, pt, (pairwise_judge(q, pairs, beta=beta_pair), pairs), (lp, lo, lc)


def summaries(reading="greedy", **kw):
    q, human, groups, (p, v, o), (pp, pairs), (lp, lo, lc) = planted_study(**kw)
    cost = {"forward_calls": 10, "trie_tokens": 1000, "seconds": 2.5}
    out = [st.pointwise_summary(p, v, o, groups, reading=reading, cost=cost, rng=0, n_boot=200),
           st.pairwise_summary(pp, pairs, groups, reading=reading, cost=cost, rng=0, n_boot=200),
           st.listwise_summary(lp, lo, lc, groups, reading=reading, cost=cost, rng=0, n_boot=200)]
    return human, groups, out


def test_kendall_tau_b_per_group_matches_scipy():
    human, groups, summ = summaries()
    c = st.compare_paradigms(summ, human, rng=0, n_boot=200)
    for j, s in enumerate(summ):
        for k, name in enumerate(c.group_names):
            m = groups == name
            ref = sps.kendalltau(s.scores[m], human[m]).statistic  # tau-b: ties on either side
            assert c.tau_per_group[j, k] == pytest.approx(ref) or (np.isnan(ref) and np.isnan(c.tau_per_group[j, k]))
        assert c.tau[j] == pytest.approx(np.nanmean(c.tau_per_group[j]))
        assert c.tau_ci_low[j] <= c.tau[j] <= c.tau_ci_high[j]
    assert np.isnan(c.tau_difference[0]) and np.isfinite(c.tau_difference[1:]).all()


def test_top1_agreement_with_humans_by_hand():
    base = st.top1_stability(np.ones((1, 2, 2)), n_boot=0)
    slot = st.slot_chisquare([0, 1, 0, 1], [0, 0, 1, 1], n_slots=2, n_boot=0)
    mk = lambda sc: st.ParadigmSummary("pointwise", np.asarray(sc), np.array(list("aaabbb")), slot, base,  # noqa: E731
                                       None, {k: np.nan for k in st.paradigms.COST_KEYS}, "greedy", 1.0)
    human = np.array([3.0, 1, 2, 5, 5, 1])
    c = st.compare_paradigms([mk([2.0, 2, 1, 1, 3, 2])], human, n_boot=0)
    assert c.top1_human[0] == pytest.approx((0.5 + 1.0) / 2)  # group a: judge {0, 1}, human {0}; b: {4} of {3, 4}


def test_the_comparison_reads_each_paradigms_bias_and_cost(tmp_path):
    human, groups, summ = summaries(beta_pair=3.0)
    c = st.compare_paradigms(summ, human, rng=0, n_boot=200)
    assert c.paradigms == ("pointwise", "pairwise", "listwise") and c.bias_unit == ("item", "pair", "group")
    assert c.n_slots.tolist() == [5, 2, 5] and c.seconds.tolist() == [2.5] * 3
    assert c.bias_pvalue[1] < 1e-6 and c.first_slot_share[1] > 0.5 and c.swap_consistency[1] < 1
    assert c.bias_pvalue[2] == 1.0 and c.top1_flip[2] == 0.0  # the listwise judge is order-blind here
    assert np.isnan(c.swap_consistency[[0, 2]]).all()
    d = c.to_dict()
    table = comparison_table(d)
    assert table.count("\n| ") == 3 and "pairwise" in table and "clusters = pointwise: item" in table
    png = plot_comparison(c, tmp_path / "compare.png")
    assert png.stat().st_size > 20_000 and png.read_bytes()[:4] == b"\x89PNG"


def test_the_sampled_reading_and_refusals():
    human, groups, summ = summaries(reading="sampled")
    c = st.compare_paradigms(summ, human, n_boot=0)
    assert c.reading == "sampled" and np.isfinite(c.tau).all()
    _, _, greedy = summaries()
    with pytest.raises(st.StatsError, match="reading"):
        st.compare_paradigms([summ[0], greedy[1]], human)
    other = st.ParadigmSummary(**{**{f: getattr(summ[1], f) for f in summ[1].__dataclass_fields__},
                                  "groups": np.roll(summ[1].groups, 1)})
    with pytest.raises(st.StatsError, match="same items"):
        st.compare_paradigms([summ[0], other], human)


def test_cost_from_meta():
    meta = {"engine_stats": {"forward_calls": 12, "tokens": 3456}, "timings": {"score_seconds": 7.5}}
    assert st.cost_from_meta(meta) == {"forward_calls": 12.0, "trie_tokens": 3456.0, "seconds": 7.5}
    assert np.isnan(st.cost_from_meta({})["seconds"])
