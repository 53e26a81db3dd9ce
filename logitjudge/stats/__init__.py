"""Statistics on exact judge distributions: position preference, criterion-position effects, aggregation
strategies, human alignment, budget curves, rank stability, and the estimates on a probe run's arrays (logit lens,
attention, patching, linear probes).

Every estimator is a pure function on numpy arrays (scipy.stats style: data positional, options keyword-only,
randomness via ``rng=``) returning a frozen result dataclass with a JSON-ready ``to_dict()``.
"""

from ._result import (
    PER_ITEM_RANDOM,
    AlignmentError,
    ConfoundedDesignError,
    ConfoundedDesignWarning,
    DesignError,
    InsufficientDataError,
    RandomDesignWarning,
    Result,
    ShapeError,
    StatsError,
    canonical_index,
    detect_design,
    has_all_orders,
    jsonable,
)
from .aggregation import (
    AggregateResult,
    DebiasResult,
    aggregate_scores,
    balanced_rows,
    balanced_sequence,
    debias_probs,
    pride_debias,
    read_scores,
    select_orderings,
)
from .alignment import (
    CorrelationDifferenceResult,
    CorrelationResult,
    GroupedCorrelationResult,
    HumanScores,
    PerGroupCorrelations,
    align_human,
    compare_correlations,
    correlation,
    grouped_correlation,
    per_group_correlations,
    system_correlation,
)
from .budget import (
    BudgetCurveResult,
    CorrelationStatistic,
    GainResult,
    budget_curve,
    gain_fraction,
)
from .clustered import RaoScottResult, cramers_v_corrected, cramers_v_gof, rao_scott_chisquare
from .criteria import CriterionPositionResult, criterion_position_effect
from .direction import position_label
from .expectation import (
    ExpectationResult,
    draw_random_scores,
    item_outcomes,
    mean_answer_distribution,
    pool_kind,
    random_expectation,
    random_expectation_ref,
    random_item_scores,
    random_label_shares,
    random_rows,
)
from .linear_probe import LinearSummary, ProbeResult, linear_summary, probe_accuracy

# issue #25: the judging paradigms (stats/paradigms.py gathers pairwise, listwise and slots)
from .paradigms import (
    BradleyTerryResult,
    ListwiseRankingResult,
    PairwiseRankingResult,
    ParadigmComparison,
    ParadigmSummary,
    SlotTestResult,
    SwapConsistencyResult,
    Top1StabilityResult,
    bradley_terry,
    check_listwise,
    check_pairwise,
    choice_by_candidate,
    compare_paradigms,
    cost_from_meta,
    debiased_preference,
    listwise_design,
    listwise_ranking,
    listwise_slot_test,
    listwise_summary,
    pair_verdicts,
    pairwise_ranking,
    pairwise_slot_test,
    pairwise_summary,
    pointwise_summary,
    slot_chisquare,
    slot_prior,
    swap_consistency,
    top1_stability,
    winning_sets,
)
from .position import (
    PositionChiSquareResult,
    PositionDistributionResult,
    PositionEffectResult,
    PriorResult,
    chosen_positions,
    fit_position_effect,
    position_chisquare,
    position_distribution,
    pride_prior,
    probs_by_position,
    probs_from_positions,
)
from .probing import (
    AttentionSummary,
    LensPositionResult,
    PatchSummary,
    attention_summary,
    chosen_option,
    holm,
    lens_position_effect,
    patch_summary,
    preference_onset,
)
from .ranking import (
    BestOfNResult,
    RankStabilityResult,
    best_of_n_instability,
    kendall_tau_matrix,
    rank_stability,
)
from .readings import READINGS, answer_probs, check_reading, tempered
from .top1 import (
    Top1ChangeRandomResult,
    Top1ChangeResult,
    Top1FlipResult,
    top1_change,
    top1_change_random,
    top1_change_sampled,
    top1_flips,
    top_set_probabilities,
    win_probabilities,
)

__all__ = [
    "AttentionSummary", "LensPositionResult", "LinearSummary", "PatchSummary", "ProbeResult", "attention_summary",
    "chosen_option", "holm", "lens_position_effect", "linear_summary", "patch_summary", "preference_onset",
    "probe_accuracy", "balanced_rows", "CorrelationStatistic",
    "PER_ITEM_RANDOM", "ConfoundedDesignError", "has_all_orders", "READINGS", "answer_probs", "check_reading",
    "tempered", "ExpectationResult", "draw_random_scores", "pool_kind", "random_expectation",
    "random_expectation_ref", "random_item_scores", "random_label_shares", "Top1ChangeResult", "Top1FlipResult",
    "top1_change", "top1_flips", "win_probabilities", "mean_answer_distribution", "top1_change_sampled",
    "Top1ChangeRandomResult", "top1_change_random", "top_set_probabilities",
    "RaoScottResult", "cramers_v_corrected", "rao_scott_chisquare", "item_outcomes", "random_rows",
    "AggregateResult", "AlignmentError", "BestOfNResult", "BudgetCurveResult", "ConfoundedDesignWarning",
    "CorrelationDifferenceResult", "CorrelationResult", "CriterionPositionResult", "DebiasResult",
    "DesignError", "GainResult", "GroupedCorrelationResult", "HumanScores", "InsufficientDataError",
    "PerGroupCorrelations", "PositionChiSquareResult", "PositionDistributionResult", "PositionEffectResult",
    "PriorResult", "RandomDesignWarning", "RankStabilityResult", "Result", "ShapeError", "StatsError",
    "aggregate_scores", "align_human", "balanced_sequence", "best_of_n_instability", "budget_curve",
    "canonical_index", "chosen_positions", "compare_correlations", "correlation", "cramers_v_gof",
    "criterion_position_effect", "debias_probs", "detect_design", "fit_position_effect", "gain_fraction",
    "grouped_correlation", "jsonable", "kendall_tau_matrix", "per_group_correlations", "position_chisquare",
    "position_distribution", "position_label", "pride_debias", "pride_prior", "probs_by_position",
    "probs_from_positions", "rank_stability", "read_scores", "select_orderings", "system_correlation",
]
__all__ += [  # issue #25 (paradigms)
    "BradleyTerryResult", "ListwiseRankingResult", "PairwiseRankingResult", "ParadigmComparison", "ParadigmSummary",
    "SlotTestResult", "SwapConsistencyResult", "Top1StabilityResult",
    "bradley_terry", "check_listwise", "check_pairwise", "choice_by_candidate", "compare_paradigms", "cost_from_meta",
    "debiased_preference", "listwise_design",
    "listwise_ranking", "listwise_slot_test", "listwise_summary", "pair_verdicts", "pairwise_ranking",
    "pairwise_slot_test", "pairwise_summary", "pointwise_summary", "slot_chisquare", "slot_prior",
    "swap_consistency", "top1_stability", "winning_sets",
]
