"""Top-1 flips as the study counts them, on a hand-built example of 3 prompts x 3 candidates x 2 orderings."""

import itertools

import numpy as np
import pytest

from logitjudge.stats import top1_change, top1_flips, win_probabilities

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
    # a: top {A} -> {B, C} (tied): changed whatever the tie-break.
    # b: top {E, F} (tied) -> {E}: changed only if the tie went to F: 1/2 with a uniform tie-break.
    # c: top {I} -> {I}: unchanged.
    r = top1_flips(P, V, GROUPS, reading="greedy", canonical=0, n_boot=0)
    assert r.flip == pytest.approx((1 + 0.5 + 0) / 3)
    assert r.flip_certain == pytest.approx(1 / 3) and r.flip_possible == pytest.approx(2 / 3)
    assert r.tied == pytest.approx(2 / 3) and r.n_groups == 3 and r.reading == "greedy"
    np.testing.assert_array_equal(r.other, [1])


def test_expected_flips_by_hand():
    # a: A (2.5) -> B (2.6) changes; b: E stays on top (2.6 vs 2.4, then 2.6 vs 1.7); c: unchanged.
    r = top1_flips(P, V, GROUPS, reading="expected", canonical=0, n_boot=0)
    assert r.flip == pytest.approx(1 / 3) and r.flip_certain == pytest.approx(1 / 3)
    assert r.flip_possible == pytest.approx(1 / 3) and r.tied == 0


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


def test_sampled_flip_is_the_exact_probability_that_the_top_changes():
    # two candidates by hand: X answers 1 or 2 with 1/2 each, Y always 2: X wins only by a tie, half the time
    np.testing.assert_allclose(win_probabilities([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0]], V), [0.25, 0.75])
    # three identical candidates: 1/3 each by symmetry
    np.testing.assert_allclose(win_probabilities(np.tile([0.2, 0.3, 0.5], (3, 1)), V), [1 / 3] * 3)
    r = top1_flips(P, V, GROUPS, reading="sampled", canonical=0, n_boot=0)
    want = []
    for g in range(3):
        rows = slice(3 * g, 3 * g + 3)
        w0, w1 = _brute_win(P[rows, 0]), _brute_win(P[rows, 1])
        np.testing.assert_allclose(win_probabilities(P[rows, 0], V), w0, atol=1e-12)
        want.append(1 - w0 @ w1)
    assert r.flip == pytest.approx(np.mean(want), abs=1e-12)
    assert np.isnan(r.flip_certain) and r.reading == "sampled"
    # prompt c is identical under both orderings, yet two sampling runs disagree with probability 1 - sum w^2
    w = _brute_win(P[6:9, 0])
    assert want[2] == pytest.approx(1 - w @ w) and want[2] > 0


def test_fixed_vs_aggregated_top1_change_by_hand():
    greedy = V[P.argmax(axis=2)]  # [items, orderings]
    fixed, mean = greedy[:, 0], greedy.mean(axis=1)
    # a: {A} vs mean {A 2.5, B 2.5} tied -> 1/2; b: {E, F} vs {E} -> 1/2; c: {I} vs {I} -> 0
    r = top1_change(fixed, mean, GROUPS, reading="greedy", n_boot=0)
    assert r.changed == pytest.approx(1 / 3) and r.changed_certain == 0
    assert r.changed_possible == pytest.approx(2 / 3) and r.tied == pytest.approx(2 / 3)
    r = top1_change(fixed, mean, GROUPS, reading="greedy", n_boot=200, rng=0)
    assert r.changed_ci_low <= r.changed <= r.changed_ci_high


def _brute_mean_win(dists_per_candidate):
    """Enumerate every joint answer of every candidate's K orders; a candidate's score is its mean answer."""
    m, k = len(dists_per_candidate), len(dists_per_candidate[0])
    win = np.zeros(m)
    for ans in itertools.product(range(3), repeat=m * k):
        a = np.asarray(ans).reshape(m, k)
        pr = np.prod([dists_per_candidate[j][o][a[j, o]] for j in range(m) for o in range(k)])
        score = V[a].mean(axis=1)
        top = np.flatnonzero(np.isclose(score, score.max()))
        win[top] += pr / top.size
    return win


def test_sampled_fixed_vs_aggregated_by_brute_force():
    from logitjudge.stats import mean_answer_distribution, top1_change_sampled

    s, w = mean_answer_distribution([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]], V)  # (1 or 2) and 3, halved
    np.testing.assert_allclose(s, [2.0, 2.5])
    np.testing.assert_allclose(w, [0.5, 0.5])
    r = top1_change_sampled(P, V, GROUPS, [0], [0, 1], n_boot=0)
    want = []
    for g in range(3):
        cand = P[3 * g: 3 * g + 3]
        wa = _brute_mean_win([c[[0]] for c in cand])
        wb = _brute_mean_win([c[[0, 1]] for c in cand])
        want.append(1 - wa @ wb)
    assert r.changed == pytest.approx(np.mean(want), abs=1e-12) and r.reading == "sampled"
