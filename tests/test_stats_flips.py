"""Top-1 flips as a change of the winning set, on hand-built examples (3 prompts x 3 candidates x 2 orderings,
all-tied groups, 9 of 30 groups changing winner) and against brute-force enumeration of every joint answer."""

import itertools

import numpy as np
import pytest

from logitjudge.stats import (
    top1_change,
    top1_change_random,
    top1_flips,
    top_set_probabilities,
    win_probabilities,
)

V = np.array([1.0, 2.0, 3.0])
# probs[item, ordering, option]; items 0-2 answer prompt "a", 3-5 prompt "b", 6-8 prompt "c"
P = np.array([
    [[0.1, 0.3, 0.6], [0.2, 0.5, 0.3]],  # A: greedy 3 -> 2, expected 2.5 -> 2.1
    [[0.2, 0.5, 0.3], [0.1, 0.2, 0.7]],  # B: greedy 2 -> 3, expected 2.1 -> 2.6
    [[0.5, 0.2, 0.3], [0.1, 0.3, 0.6]],  # C: greedy 1 -> 3, expected 1.8 -> 2.5
    [[0.6, 0.3, 0.1], [0.6, 0.3, 0.1]],  # D: greedy 1 -> 1, expected 1.5 -> 1.5
    [[0.1, 0.2, 0.7], [0.1, 0.2, 0.7]],  # E: greedy 3 -> 3, expected 2.6 -> 2.6
    [[0.2, 0.2, 0.6], [0.5, 0.3, 0.2]],  # F: greedy 3 -> 1, expected 2.4 -> 1.7
    [[0.7, 0.2, 0.1], [0.7, 0.2, 0.1]],  # G
    [[0.1, 0.8, 0.1], [0.1, 0.8, 0.1]],  # H
    [[0.3, 0.3, 0.4], [0.3, 0.3, 0.4]],  # I: the top under both orderings
])
GROUPS = np.repeat(["a", "b", "c"], 3)


def test_greedy_flips_by_hand():
    # a: top {A} -> {B, C} (tied): the winning set changed, and disjointly (certain).
    # b: top {E, F} (tied) -> {E}: the set changed, not disjointly; a uniform tie-break differs half the time.
    # c: top {I} -> {I}: unchanged.
    r = top1_flips(P, V, GROUPS, reading="greedy", canonical=0, n_boot=0)
    assert r.flip == pytest.approx(2 / 3)
    assert r.flip_certain == pytest.approx(1 / 3) and r.flip_possible == pytest.approx(2 / 3)
    assert r.tied == pytest.approx(2 / 3) and r.n_groups == 3 and r.reading == "greedy"
    assert r.flip_tie_broken == pytest.approx((1 + 0.5 + 0) / 3)
    np.testing.assert_array_equal(r.other, [1])


def test_expected_flips_by_hand():
    # a: A (2.5) -> B (2.6) changes; b: E stays on top (2.6 vs 2.4, then 2.6 vs 1.7); c: unchanged.
    r = top1_flips(P, V, GROUPS, reading="expected", canonical=0, n_boot=0)
    assert r.flip == pytest.approx(1 / 3) and r.flip_certain == pytest.approx(1 / 3)
    assert r.flip_possible == pytest.approx(1 / 3) and r.tied == 0 and r.flip_tie_broken == pytest.approx(1 / 3)


def test_all_tied_groups_are_no_flip():
    # 4 groups of m = 5 candidates that all answer the same label under both orderings: no winner changes.
    p = np.tile(np.array([0.1, 0.7, 0.2]), (20, 2, 1))
    g = np.repeat(list("abcd"), 5)
    r = top1_flips(p, V, g, reading="greedy", n_boot=0)
    assert r.flip == 0 and r.flip_certain == 0 and r.flip_possible == 1 and r.tied == 1
    assert r.flip_tie_broken == pytest.approx(1 - 1 / 5)  # the old headline: tie-break noise, 1 - 1/m
    c = top1_change(np.ones(20), np.ones(20), g, reading="greedy", n_boot=0)
    assert c.changed == 0 and c.changed_tie_broken == pytest.approx(0.8)
    s = top1_flips(np.tile(np.array([0.0, 1.0, 0.0]), (20, 2, 1)), V, g, reading="sampled", n_boot=0)
    assert s.flip == pytest.approx(0) and s.flip_tie_broken == pytest.approx(0.8)


def test_nine_of_thirty_groups_changing_winner_is_0_30():
    # 30 groups x 3 candidates: candidate 0 wins under the canonical order; under the other order candidate 1 wins
    # in groups 0-8 (untied both times), candidate 0 again elsewhere
    scores = np.tile([3.0, 2.0, 1.0], 30)
    other = scores.copy()
    for g in range(9):
        other[3 * g + 1] = 4.0
    groups = np.repeat(np.arange(30), 3)
    r = top1_change(scores, other, groups, reading="expected", n_boot=200, rng=0)
    assert r.changed == pytest.approx(0.30) and r.changed_certain == pytest.approx(0.30)
    assert r.changed_possible == pytest.approx(0.30) and r.tied == 0 and r.n_groups == 30
    assert r.changed_ci_low < 0.30 < r.changed_ci_high
    onehot = np.eye(4)[np.stack([scores, other], axis=1).astype(int) - 1]  # [items, 2 orderings, 4 options]
    f = top1_flips(onehot, np.arange(1.0, 5), groups, reading="greedy", n_boot=0)
    assert f.flip == pytest.approx(0.30) and f.flip_tie_broken == pytest.approx(0.30)


def _brute_win(dists):
    """Enumerate every joint answer; ties at the top split uniformly."""
    m = len(dists)
    win = np.zeros(m)
    for ans in itertools.product(range(3), repeat=m):
        pr = np.prod([dists[j][a] for j, a in enumerate(ans)])
        vals = V[list(ans)]
        top = np.flatnonzero(vals == vals.max())
        win[top] += pr / top.size
    return win


def _brute_sets(da, db, values=V):
    """(changed, certain, possible, tied, tie_broken) of two independent runs by enumerating every joint answer."""
    m, n = len(da), len(values)
    out = np.zeros(5)
    for ans in itertools.product(range(n), repeat=2 * m):
        a, b = np.asarray(ans[:m]), np.asarray(ans[m:])
        pr = np.prod([da[j][a[j]] for j in range(m)]) * np.prod([db[j][b[j]] for j in range(m)])
        if pr == 0:
            continue
        sa, sb = values[a] == values[a].max(), values[b] == values[b].max()
        same = np.array_equal(sa, sb)
        out += pr * np.array([not same, not np.any(sa & sb), not (same and sa.sum() == 1),
                              sa.sum() > 1 or sb.sum() > 1, 1 - (sa / sa.sum()) @ (sb / sb.sum())])
    return out


def test_sampled_flip_is_the_exact_probability_that_the_top_set_changes():
    # two candidates by hand: X answers 1 or 2 with 1/2 each, Y always 2: X wins only by a tie, half the time
    np.testing.assert_allclose(win_probabilities([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0]], V), [0.25, 0.75])
    # three identical candidates: 1/3 each by symmetry
    np.testing.assert_allclose(win_probabilities(np.tile([0.2, 0.3, 0.5], (3, 1)), V), [1 / 3] * 3)
    # the same two candidates in both runs: the top set is {Y} or {X, Y} with 1/2 each
    got = top_set_probabilities([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0]], [[0.5, 0.5, 0.0], [0.0, 1.0, 0.0]], V)
    np.testing.assert_allclose(got, [0.5, 0.0, 1 - 0.25, 0.75, 1 - (0.25 ** 2 + 0.75 ** 2)], atol=1e-12)
    r = top1_flips(P, V, GROUPS, reading="sampled", canonical=0, n_boot=0)
    want = np.array([_brute_sets(P[3 * g: 3 * g + 3, 0], P[3 * g: 3 * g + 3, 1]) for g in range(3)])
    for g in range(3):
        np.testing.assert_allclose(top_set_probabilities(P[3 * g: 3 * g + 3, 0], P[3 * g: 3 * g + 3, 1], V),
                                   want[g], atol=1e-12)
    got = [r.flip, r.flip_certain, r.flip_possible, r.tied, r.flip_tie_broken]
    np.testing.assert_allclose(got, want.mean(axis=0), atol=1e-12)
    assert r.reading == "sampled" and r.flip_certain <= r.flip <= r.flip_possible
    # prompt c is identical under both orderings, yet two sampling runs disagree with probability > 0
    assert want[2, 0] > 0


def test_sampled_with_one_hot_answers_is_the_greedy_count():
    onehot = np.eye(3)[P.argmax(axis=2)]  # a judge whose distribution is its greedy answer
    s = top1_flips(onehot, V, GROUPS, reading="sampled", n_boot=0)
    g = top1_flips(P, V, GROUPS, reading="greedy", n_boot=0)
    np.testing.assert_allclose([s.flip, s.flip_certain, s.flip_possible, s.tied, s.flip_tie_broken],
                               [g.flip, g.flip_certain, g.flip_possible, g.tied, g.flip_tie_broken], atol=1e-12)


def test_fixed_vs_aggregated_top1_change_by_hand():
    greedy = V[P.argmax(axis=2)]  # [items, orderings]
    fixed, mean = greedy[:, 0], greedy.mean(axis=1)
    # a: {A} vs mean {A 2.5, B 2.5}: the set changed (not disjointly); b: {E, F} vs {E}: changed; c: {I} vs {I}
    r = top1_change(fixed, mean, GROUPS, reading="greedy", n_boot=0)
    assert r.changed == pytest.approx(2 / 3) and r.changed_certain == 0
    assert r.changed_possible == pytest.approx(2 / 3) and r.tied == pytest.approx(2 / 3)
    assert r.changed_tie_broken == pytest.approx(1 / 3)  # a: 1 - 1/2, b: 1 - 1/2, c: 0
    r = top1_change(fixed, mean, GROUPS, reading="greedy", n_boot=200, rng=0)
    assert r.changed_ci_low <= r.changed <= r.changed_ci_high


def _brute_mean_sets(dists_a, dists_b):
    """Five quantities for two runs scoring each candidate by its mean answer over its K orders, enumerated."""
    m = len(dists_a)

    def outcomes(dists):  # every joint answer of every candidate's orders: (top-set masks, probabilities)
        k = len(dists[0])
        ans = np.asarray(list(itertools.product(range(3), repeat=m * k))).reshape(-1, m, k)
        pr = np.prod([np.asarray(dists[j][o])[ans[:, j, o]] for j in range(m) for o in range(k)], axis=0)
        means = V[ans].mean(axis=2)
        return np.isclose(means, means.max(axis=1, keepdims=True)), pr

    (sa, pa), (sb, pb) = outcomes(dists_a), outcomes(dists_b)
    sa, sb = sa[:, None], sb[None, :]  # [A outcomes, B outcomes, m]
    same = np.all(sa == sb, axis=2)
    na, nb = sa.sum(axis=2), sb.sum(axis=2)
    q = np.stack([~same, ~np.any(sa & sb, axis=2), ~(same & (na == 1)), (na > 1) | (nb > 1),
                  1 - ((sa / na[..., None]) * (sb / nb[..., None])).sum(axis=2)]).astype(float)
    return np.einsum("qab,a,b->q", q, pa, pb)


def test_sampled_fixed_vs_aggregated_by_brute_force():
    from logitjudge.stats import mean_answer_distribution, top1_change_sampled

    s, w = mean_answer_distribution([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]], V)  # (1 or 2) and 3, halved
    np.testing.assert_allclose(s, [2.0, 2.5])
    np.testing.assert_allclose(w, [0.5, 0.5])
    r = top1_change_sampled(P, V, GROUPS, [0], [0, 1], n_boot=0)
    want = np.mean([_brute_mean_sets([c[[0]] for c in P[3 * g: 3 * g + 3]], [c[[0, 1]] for c in P[3 * g: 3 * g + 3]])
                    for g in range(3)], axis=0)
    got = [r.changed, r.changed_certain, r.changed_possible, r.tied, r.changed_tie_broken]
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert r.reading == "sampled"


def test_random_top1_change_at_budget_k_is_the_expectation_over_draws():
    # 2 groups x 2 candidates, 3 rows per item; FIXED = row 0. RANDOM(K=1): each item's score is the greedy value of
    # one of its 3 rows, uniformly: enumerate the 3^4 joint draws for the exact expectation.
    p = np.array([
        [[0.1, 0.2, 0.7], [0.6, 0.3, 0.1], [0.1, 0.8, 0.1]],  # greedy 3, 1, 2
        [[0.2, 0.7, 0.1], [0.1, 0.1, 0.8], [0.2, 0.7, 0.1]],  # greedy 2, 3, 2
        [[0.7, 0.2, 0.1], [0.7, 0.2, 0.1], [0.1, 0.1, 0.8]],  # greedy 1, 1, 3
        [[0.1, 0.7, 0.2], [0.6, 0.2, 0.2], [0.1, 0.7, 0.2]],  # greedy 2, 1, 2
    ])
    groups = ["a", "a", "b", "b"]
    s = V[p.argmax(axis=2)]
    want = np.zeros(5)
    for rows in itertools.product(range(3), repeat=4):
        x = s[np.arange(4), rows]
        r = top1_change(s[:, 0], x, groups, reading="greedy", n_boot=0)
        want += np.array([r.changed, r.changed_certain, r.changed_possible, r.tied, r.changed_tie_broken]) / 81
    res = top1_change_random(p, V, groups, k=1, canonical=0, reading="greedy", precision=0.01, rng=0)
    got = [res.changed, res.changed_certain, res.changed_possible, res.tied, res.changed_tie_broken]
    ses = [res.changed_se, res.changed_certain_se, res.changed_possible_se, res.tied_se, res.changed_tie_broken_se]
    assert res.reached and res.changed_se <= 0.01 and res.n_draws >= 200 and res.k == 1
    for g, w, e in zip(got, want, ses):
        assert abs(g - w) <= 4 * e + 1e-12, (g, w, e)
    again = top1_change_random(p, V, groups, k=1, canonical=0, reading="greedy", precision=0.01, rng=0)
    assert again == res  # one seed, one number
