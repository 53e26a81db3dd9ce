"""Every public function of ``logitjudge.stats`` refuses bad input with ``StatsError`` (one error type, whose
message names the problem), never a bare ValueError, an OrderingError or a numpy error."""

import numpy as np
import pytest

from logitjudge import stats as st
from logitjudge.orderings import balanced

O = balanced(3)  # (6, 3)
P = np.full((4, 6, 3), 1 / 3)  # [items, orderings, options]
V = np.arange(3.0)
H = np.array([1.0, 2, 3, 4])
NOT_PERM = np.array([[0, 0, 1]] * 6)
X, Y, G5 = np.arange(5.0), np.array([1.0, 3, 2, 5, 4]), np.array(list("aabbb"))
S, G6 = np.random.default_rng(0).random((6, 6)), np.array(list("aaabbb"))  # [items, orderings] scores
C3 = np.ones((3, 2, 2))  # [items, criteria, orderings]
G4 = np.array(list("aabb"))


LENS = np.full((4, 6, 2, 3), 1 / 3)  # [items, orderings, layers, options]
ATT = np.full((4, 6, 2, 2, 9), 1 / 9)  # [items, orderings, layers, heads, 2n + 3]
PATCHED = np.full((4, 2, 3, 3), 1 / 3)  # [items, pairs, sites, options]
SITES = {"site_layer": [0, 0, 1], "site_kind": [0, 3, 3], "site_head": [-1, 0, 1]}
HID = np.zeros((4, 6, 2, 4, 5))  # [items, orderings, layers, 1 + n, d]


PP = np.tile([[0.7, 0.3], [0.4, 0.6]], (2, 1, 1))  # [pairs, orders, labels]
PAIRS4 = np.array([[0, 1], [2, 3]])
LP, LO, LC = np.full((2, 6, 3), 1 / 3), np.stack([balanced(3)] * 2), np.arange(6).reshape(2, 3)  # listwise
H6 = np.array([1.0, 2, 3, 3, 2, 1])
SUMM = st.listwise_summary(LP, LO, LC, np.array(list("aaabbb")), n_boot=0, rng=0)


def MEAN(x):  # [draws, items] -> [draws]
    return x.mean(axis=1)


CASES = {
    "probs_by_position": [lambda: st.probs_by_position(P, NOT_PERM), lambda: st.probs_by_position([["a"]], O),
                          lambda: st.probs_by_position(P, O[:, :2])],
    "probs_from_positions": [lambda: st.probs_from_positions(P, NOT_PERM),
                             lambda: st.probs_from_positions(np.ones(3), O)],
    "position_distribution": [lambda: st.position_distribution(P[..., :2]), lambda: st.position_distribution("x"),
                              lambda: st.position_distribution(P, n_boot=-1),
                              lambda: st.position_distribution(P[:1])],
    "position_chisquare": [lambda: st.position_chisquare(P, NOT_PERM), lambda: st.position_chisquare(P, O, reading="x"),
                           lambda: st.position_chisquare(P, O, confidence=2), lambda: st.position_chisquare(P, O[:1])],
    "chosen_positions": [lambda: st.chosen_positions(P, reading="x"), lambda: st.chosen_positions(P * 2)],
    "fit_position_effect": [lambda: st.fit_position_effect(P, NOT_PERM),
                            lambda: st.fit_position_effect(P, np.zeros((6, 3), int)),
                            lambda: st.fit_position_effect(P[..., :1] * 0 + 1, O[:, :1])],
    "pride_prior": [lambda: st.pride_prior(np.log(P), option_orders=NOT_PERM),
                    lambda: st.pride_prior(np.log(P), average="x"), lambda: st.pride_prior(np.ones(3)),
                    lambda: st.pride_prior([["a"]])],
    "cramers_v_gof": [lambda: st.cramers_v_gof(1.0, 10, 1), lambda: st.cramers_v_gof(-1.0, 10, 3),
                      lambda: st.cramers_v_gof(1.0, 0, 3)],
    "position_label": [lambda: st.position_label([0.5, 0.5], [0.4, 0.4], None, 0.05),
                       lambda: st.position_label([], [], 0.01, 0.05),
                       lambda: st.position_label([0.5, 0.5], [0.4, 0.4], 0.01, 0.05, names=["A"])],
    "read_scores": [lambda: st.read_scores(P, V, reading="x"), lambda: st.read_scores(P, V[:2]),
                    lambda: st.read_scores("a", V)],
    "select_orderings": [lambda: st.select_orderings(NOT_PERM, 3, strategy="fixed"),
                         lambda: st.select_orderings(O, 3, strategy="x"),
                         lambda: st.select_orderings(O, 3, strategy="balanced", k=99),
                         lambda: st.select_orderings(O, -1, strategy="fixed")],
    "balanced_sequence": [lambda: st.balanced_sequence(NOT_PERM), lambda: st.balanced_sequence([])],
    "aggregate_scores": [lambda: st.aggregate_scores(P, V, NOT_PERM), lambda: st.aggregate_scores(P, V[:2], O),
                         lambda: st.aggregate_scores(P, V, O, k=0), lambda: st.aggregate_scores(P, V, O, mode="x")],
    "debias_probs": [lambda: st.debias_probs(P[:, 0], [0, 0, 1], [1 / 3] * 3),
                     lambda: st.debias_probs(P[:, 0], 3, [1 / 3] * 3),
                     lambda: st.debias_probs(P[:, 0], [0, 1, 2], [0, 1, 0])],
    "pride_debias": [lambda: st.pride_debias(P, V, NOT_PERM), lambda: st.pride_debias(P, V, O, ordering=99),
                     lambda: st.pride_debias(P, V, O, estimation_items=[0, 1, 2, 3]),
                     lambda: st.pride_debias(P[:1], V, O)],
    "correlation": [lambda: st.correlation(X, Y[:3]), lambda: st.correlation(X, Y * np.nan),
                    lambda: st.correlation(X[:2], Y[:2]), lambda: st.correlation(X, Y, method="x"),
                    lambda: st.correlation(["a"] * 5, Y)],
    "system_correlation": [lambda: st.system_correlation(X, Y, G5[:2]), lambda: st.system_correlation(X, Y, G5),
                           lambda: st.system_correlation(X, Y * np.inf, G5)],
    "per_group_correlations": [lambda: st.per_group_correlations(X, Y, G5[:2]),
                               lambda: st.per_group_correlations(X, Y, G5, method="x")],
    "grouped_correlation": [lambda: st.grouped_correlation(X, Y, G5, n_boot=1.5),
                            lambda: st.grouped_correlation(X, Y[:2], G5)],
    "compare_correlations": [lambda: st.compare_correlations(X, X, Y, n_boot=0),
                             lambda: st.compare_correlations(X, X, Y, level="grouped"),
                             lambda: st.compare_correlations(X, X, Y, level="system"),
                             lambda: st.compare_correlations(X, X[:2], Y)],
    "align_human": [lambda: st.align_human(["a"], {"b": {"C": 1}}, "C"), lambda: st.align_human(["a"], {"a": 3}, "C"),
                    lambda: st.align_human(["a"], {"a": {"C": "x"}}, "C"),
                    lambda: st.align_human(["a"], {"a": {"D": 1}}, "C")],
    "gain_fraction": [lambda: st.gain_fraction([1.0]), lambda: st.gain_fraction("ab")],
    "budget_curve": [lambda: st.budget_curve(P, V, O, H, level="grouped"),
                     lambda: st.budget_curve(P, V, O, H, n_draws=0), lambda: st.budget_curve(P, V, O, H, k_max=99),
                     lambda: st.budget_curve(P, V, O, H[:2]), lambda: st.budget_curve(P, V, NOT_PERM, H),
                     lambda: st.budget_curve(P, V, O, H, k_max=1),
                     lambda: st.budget_curve(P, V, O, H, strategies=["x"]),
                     lambda: st.budget_curve(P, V, O, H, random_first=st.random_expectation(
                         P, V, MEAN, k=2, linear=True))],
    "criterion_position_effect": [lambda: st.criterion_position_effect(C3 * np.nan, [[0, 1], [1, 0]]),
                                  lambda: st.criterion_position_effect(C3, [[0, 1], [1, 0]], n_perm=0),
                                  lambda: st.criterion_position_effect(C3, [[0, 0], [1, 0]]),
                                  lambda: st.criterion_position_effect(C3, [[0, 1], [0, 1]])],
    "rank_stability": [lambda: st.rank_stability(S * np.nan, G6), lambda: st.rank_stability(S, G6, canonical=99),
                       lambda: st.rank_stability(S, G6[:2]), lambda: st.rank_stability(S[:, :1], G6),
                       lambda: st.rank_stability(S, np.arange(6))],
    "best_of_n_instability": [lambda: st.best_of_n_instability(S, G6, n_draws=0),
                              lambda: st.best_of_n_instability(S, G6, ns=[0]),
                              lambda: st.best_of_n_instability(S, G6, ns=[])],
    "kendall_tau_matrix": [lambda: st.kendall_tau_matrix(np.ones(3), np.ones(3, bool))],
    "detect_design": [lambda: st.detect_design(NOT_PERM), lambda: st.detect_design([[]])],
    "canonical_index": [lambda: st.canonical_index(NOT_PERM)],
    "has_all_orders": [lambda: st.has_all_orders(NOT_PERM), lambda: st.has_all_orders("x")],
    "pool_kind": [lambda: st.pool_kind(NOT_PERM)],
    "check_reading": [lambda: st.check_reading("x"), lambda: st.check_reading("draw")],
    "tempered": [lambda: st.tempered(P, 0), lambda: st.tempered("a")],
    "answer_probs": [lambda: st.answer_probs(P, reading="expected"), lambda: st.answer_probs("a", reading="greedy")],
    "random_item_scores": [lambda: st.random_item_scores(P, V[:2]), lambda: st.random_item_scores("a", V),
                           lambda: st.random_item_scores(P, V, reading="x")],
    "random_label_shares": [lambda: st.random_label_shares(P[0]), lambda: st.random_label_shares(P, reading="x")],
    "draw_random_scores": [lambda: st.draw_random_scores(P, V, 10, k=0),
                           lambda: st.draw_random_scores(P, V[:2], 10, k=2),
                           lambda: st.draw_random_scores(P, V, 0, k=2)],
    "random_expectation": [lambda: st.random_expectation(P, V, MEAN, k=0),
                           lambda: st.random_expectation(P, V, MEAN, k=2, reading="x"),
                           lambda: st.random_expectation(P, V[:2], MEAN, k=2),
                           lambda: st.random_expectation(P, V, MEAN, k=2, precision=0),
                           lambda: st.random_expectation(P, V, MEAN, k=2, max_outcomes=-1)],
    "random_expectation_ref": [lambda: st.random_expectation_ref(P, V, MEAN, k=0),
                               lambda: st.random_expectation_ref(P, V, lambda x: MEAN(x) * np.nan, k=2)],
    "win_probabilities": [lambda: st.win_probabilities(np.ones(3), V), lambda: st.win_probabilities(P[0], V[:2]),
                          lambda: st.win_probabilities("a", V)],
    "mean_answer_distribution": [lambda: st.mean_answer_distribution(P[0], V[:2]),
                                 lambda: st.mean_answer_distribution("a", V)],
    "top1_flips": [lambda: st.top1_flips(P, V, G4, reading="x"), lambda: st.top1_flips(P, V, G4[:2]),
                   lambda: st.top1_flips(P, V, G4, canonical=99), lambda: st.top1_flips(P[:, :1], V, G4)],
    "top1_change": [lambda: st.top1_change(H, H[:2], G4, reading="greedy"),
                    lambda: st.top1_change(H, H * np.nan, G4, reading="greedy"),
                    lambda: st.top1_change(H, H, G4, reading="x")],
    "balanced_rows": [lambda: st.balanced_rows(NOT_PERM), lambda: st.balanced_rows([["a"]])],
    "top1_change_sampled": [lambda: st.top1_change_sampled(P, V, G4, [99], [0]),
                            lambda: st.top1_change_sampled(P, V, G4, "x", [0]),
                            lambda: st.top1_change_sampled(P, V, G4, [0], [1], temperature=0)],
    "chosen_option": [lambda: st.chosen_option(P, NOT_PERM), lambda: st.chosen_option(P[0], O)],
    "holm": [lambda: st.holm([0.5, 2.0]), lambda: st.holm([[0.1]])],
    "preference_onset": [lambda: st.preference_onset([0.01, 0.02], [1.0]),
                         lambda: st.preference_onset([0.01], [1.0], alpha=0),
                         lambda: st.preference_onset([], [])],
    "lens_position_effect": [lambda: st.lens_position_effect(LENS[..., 0], O),
                             lambda: st.lens_position_effect(LENS, NOT_PERM),
                             lambda: st.lens_position_effect(LENS * 2, O),
                             lambda: st.lens_position_effect(LENS, O, n_boot=-1)],
    "attention_summary": [lambda: st.attention_summary(ATT[..., :7], O, P),
                          lambda: st.attention_summary(ATT, NOT_PERM, P),
                          lambda: st.attention_summary(ATT[:2], O, P)],
    "patch_summary": [lambda: st.patch_summary(P, PATCHED[..., :2], [[0, 1], [1, 0]], O, **SITES),
                      lambda: st.patch_summary(P, PATCHED, [[0, 9], [1, 0]], O, **SITES),
                      lambda: st.patch_summary(P, PATCHED, [[0, 1], [1, 0]], O, **{**SITES, "site_kind": [0, 7, 3]}),
                      lambda: st.patch_summary(P, PATCHED, [[0, 1]], O, **SITES)],
    "probe_accuracy": [lambda: st.probe_accuracy(X[:, None], [0, 1, 0, 1, 0], np.zeros(5)),
                       lambda: st.probe_accuracy(X, [0, 1, 0, 1, 0], G5),
                       lambda: st.probe_accuracy(X[:, None], [0.5, 1, 0, 1, 0], G5),
                       lambda: st.probe_accuracy(X[:, None], [0, 1, 0, 1, 0], G5, n_folds=1)],
    "rao_scott_chisquare": [lambda: st.rao_scott_chisquare(np.ones(5)), lambda: st.rao_scott_chisquare([[1, 2]]),
                            lambda: st.rao_scott_chisquare([[1, -2], [1, 1]]),
                            lambda: st.rao_scott_chisquare(np.zeros((3, 2))),
                            lambda: st.rao_scott_chisquare([[1, np.nan], [1, 1]]),
                            lambda: st.rao_scott_chisquare([[1], [2]]), lambda: st.rao_scott_chisquare("ab")],
    "cramers_v_corrected": [lambda: st.cramers_v_corrected(1.0, 10, 1),
                            lambda: st.cramers_v_corrected(-1.0, 10, 3),
                            lambda: st.cramers_v_corrected(1.0, 2, 3, design_effect=3.0),
                            lambda: st.cramers_v_corrected(1.0, 10, 3, design_effect=np.nan),
                            lambda: st.cramers_v_corrected(1.0, 10, 3, design_effect=-1.0),
                            lambda: st.cramers_v_corrected("x", 10, 3)],
    "top_set_probabilities": [lambda: st.top_set_probabilities(P[0], P[0, :2], V),
                              lambda: st.top_set_probabilities(P[0], P[0], V[:2]),
                              lambda: st.top_set_probabilities("a", P[0], V)],
    "top1_change_random": [lambda: st.top1_change_random(P, V, G4, k=0),
                           lambda: st.top1_change_random(P, V, G4, k=2, reading="x"),
                           lambda: st.top1_change_random(P, V, G4, k=2, precision=0),
                           lambda: st.top1_change_random(P, V, G4, k=2, pool_rows=[99]),
                           lambda: st.top1_change_random(P, V, G4, k=2, canonical=99),
                           lambda: st.top1_change_random(P, V, G4[:2], k=2)],
    "item_outcomes": [lambda: st.item_outcomes(P, V[:2], k=1), lambda: st.item_outcomes(P, V, k=0),
                      lambda: st.item_outcomes(P, V, k=1, reading="x")],
    "random_rows": [lambda: st.random_rows(NOT_PERM), lambda: st.random_rows("x")],
    "linear_summary": [lambda: st.linear_summary(HID, [0, 1], P[:2], O),
                       lambda: st.linear_summary(HID[..., :3, :], [0, 1], P, O),
                       lambda: st.linear_summary(HID, [0], P, O)],
    # issue #25: the paradigms
    "slot_chisquare": [lambda: st.slot_chisquare([0, 1, 2], [0, 0, 1]), lambda: st.slot_chisquare([0, 1], [0])],
    "top1_stability": [lambda: st.top1_stability(np.ones((2, 1, 3))), lambda: st.top1_stability([]),
                       lambda: st.top1_stability(np.ones((2, 3, 3)), canonical=5),
                       lambda: st.top1_stability(np.ones((2, 3, 3)), canonical=0, draws=True),
                       lambda: st.top1_stability([np.ones((3, 2)), np.ones((4, 2))], draws=True)],
    "winning_sets": [lambda: st.winning_sets([np.nan, 1.0]), lambda: st.winning_sets(np.ones((2, 0)))],
    "check_pairwise": [lambda: st.check_pairwise(PP, [[0, 1]], G4), lambda: st.check_pairwise(PP, PAIRS4[:1], G4),
                       lambda: st.check_pairwise(PP, [[0, 0], [2, 3]], G4),
                       lambda: st.check_pairwise(PP, [[0, 2], [1, 3]], G4),
                       lambda: st.check_pairwise(PP, [[0, 1], [1, 0]], G4),
                       lambda: st.check_pairwise(PP, [[0.5, 1], [2, 3]], G4)],
    "pair_verdicts": [lambda: st.pair_verdicts(PP[:, :1]), lambda: st.pair_verdicts(PP, reading="expected"),
                      lambda: st.pair_verdicts(PP * 2)],
    "debiased_preference": [lambda: st.debiased_preference(PP, reading="x"),
                            lambda: st.debiased_preference(PP, reading="sampled", temperature=0)],
    "swap_consistency": [lambda: st.swap_consistency(PP, PAIRS4, G4, cluster="x"),
                         lambda: st.swap_consistency(PP, PAIRS4, G4, n_boot=-1),
                         lambda: st.swap_consistency(PP, PAIRS4, G4[:2])],
    "pairwise_slot_test": [lambda: st.pairwise_slot_test(PP, PAIRS4, G4, reading="expected"),
                           lambda: st.pairwise_slot_test(PP[:1], PAIRS4[:1], G4)],
    "bradley_terry": [lambda: st.bradley_terry(np.ones((3, 3))), lambda: st.bradley_terry(np.zeros((2, 3))),
                      lambda: st.bradley_terry(np.zeros((2, 2)), prior=-1),
                      lambda: st.bradley_terry(np.zeros((2, 2)), max_iter=0)],
    "pairwise_ranking": [lambda: st.pairwise_ranking(PP, PAIRS4, G4, n_orientations=1),
                         lambda: st.pairwise_ranking(PP, PAIRS4, G4, prior=0, reading="greedy")],
    "check_listwise": [lambda: st.check_listwise(LP, LO[:1]), lambda: st.check_listwise(LP, LO[..., ::-1] * 0),
                       lambda: st.check_listwise(LP * 2, LO), lambda: st.check_listwise(LP, LO, [[0, 1, 2]]),
                       lambda: st.check_listwise(LP, LO, [[0, 1, 2], [2, 3, 4]])],
    "choice_by_candidate": [lambda: st.choice_by_candidate(LP[:, :, :1], LO[:, :, :1]),
                            lambda: st.choice_by_candidate(LP, 3)],
    "listwise_design": [lambda: st.listwise_design([]), lambda: st.listwise_design([[[0, 0, 1]]])],
    "slot_prior": [lambda: st.slot_prior(LP, np.zeros_like(LO) + np.arange(3)), lambda: st.slot_prior(LP, LO[:1])],
    "listwise_ranking": [lambda: st.listwise_ranking(LP, LO, LC, 3),
                         lambda: st.listwise_ranking(LP, LO, LC, 6, reading="expected")],
    "listwise_slot_test": [lambda: st.listwise_slot_test(LP, np.zeros_like(LO) + np.arange(3)),
                           lambda: st.listwise_slot_test([LP[0], np.full((6, 4), 0.25)],
                                                         [LO[0], np.tile(np.arange(4), (6, 1))]),
                           lambda: st.listwise_slot_test(LP[:, :1], LO[:, :1])],
    "pointwise_summary": [lambda: st.pointwise_summary(P, V, O, G4[:3]),
                          lambda: st.pointwise_summary(P, V, np.zeros((6, 3), int) + np.arange(3), G4),
                          lambda: st.pointwise_summary(P, V, O, G4, reading="expected")],
    "pairwise_summary": [lambda: st.pairwise_summary(PP, PAIRS4, G4, cost={"dollars": 1}),
                         lambda: st.pairwise_summary(PP, PAIRS4, G4, cost={"seconds": "slow"})],
    "listwise_summary": [lambda: st.listwise_summary(LP, LO, LC, np.array(list("aabbab"))),
                         lambda: st.listwise_summary(LP, LO, LC, np.array(list("aaabbb")), reading="expected")],
    "compare_paradigms": [lambda: st.compare_paradigms([], H), lambda: st.compare_paradigms(["x"], H),
                          lambda: st.compare_paradigms([SUMM, SUMM], H6),
                          lambda: st.compare_paradigms([SUMM], H6[:2]),
                          lambda: st.compare_paradigms([SUMM], np.full(6, np.nan))],
    "cost_from_meta": [lambda: st.cost_from_meta(None), lambda: st.cost_from_meta([1, 2])],
}


def test_every_public_function_has_bad_input_cases():
    public = {n for n in st.__all__ if n[0].islower()} - {"jsonable"}  # jsonable accepts anything
    assert public == set(CASES), f"add bad-input cases for {sorted(public - set(CASES))}"


@pytest.mark.parametrize("case", [lambda: st.CorrelationStatistic(H, method="x"),
                                  lambda: st.CorrelationStatistic([[1.0, 2.0]]),
                                  lambda: st.CorrelationStatistic([1.0, np.nan, 2.0]),
                                  lambda: st.CorrelationStatistic(H, groups=G5)])
def test_correlation_statistic_refuses_bad_input(case):
    with pytest.raises(st.StatsError):
        case()


@pytest.mark.parametrize("name,case", [(n, i) for n, cs in CASES.items() for i in range(len(cs))])
def test_bad_input_raises_stats_error(name, case):
    with pytest.raises(st.StatsError) as e:
        CASES[name][case]()
    assert type(e.value).__module__.startswith("logitjudge.stats")
    assert len(str(e.value)) > 10 and "\n" not in str(e.value)  # one line naming the problem
