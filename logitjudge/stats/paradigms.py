"""Pointwise, pairwise or listwise: one summary per paradigm on the same items, and their comparison.

Array contracts (what a paradigm's run produces; item indices are rows of one item list shared by all three
paradigms, and ``groups[item]`` is that item's group: the candidates compared are the items of one group)
---------------------------------------------------------------------------------------------------------------
* **pointwise** (today's rubric table, one criterion): ``probs[item, ordering, option]`` = ``ScoreTable.probs[:,
  c]`` (canonical option order, renormalised), ``option_orders[ordering, position]`` or per item
  ``[item, ordering, position]``, ``values[option]``.
* **pairwise** (:mod:`logitjudge.stats.pairwise`): ``pair_probs[pair, order, label]`` (P, 2, L) with L = 2
  ("A", "B") or 3 ("A", "B", tie), renormalised over the L labels; order 0 shows ``pairs[pair, 0]`` first (as
  "A"), order 1 shows ``pairs[pair, 1]`` first; ``pairs[pair] = (i, j)`` (P, 2) item indices of one group, each
  unordered pair once (every pair of a group, or ``--pairs K`` random ones per group; both orders always).
* **listwise** (:mod:`logitjudge.stats.listwise`): per group g, ``choice_probs[g][ordering, slot]`` (K_g, m_g)
  the probability of answering slot s's letter (renormalised over the m_g <= 26 letters),
  ``orders[g][ordering, slot]`` (K_g, m_g) the candidate index (0-based within the group) shown at slot s,
  ``candidates[g][candidate]`` (m_g,) its item index. A 3-D array stands for equal-size groups.
* **cost** (all three): ``{"forward_calls", "trie_tokens", "seconds"}`` (:func:`cost_from_meta` reads them
  from a table's meta: ``engine_stats.forward_calls``, ``engine_stats.tokens``, ``timings.score_seconds``).

Every summary reads the judge one way, ``reading``: ``greedy`` (the answered label; exact ties split) or
``sampled`` (a judge sampling at ``temperature``; T = 1: the exact distribution). Under ``sampled`` scores and
shares are the exact expectations of a sampling judge's answers, and the slot test counts one seeded run.

What a summary holds, per paradigm
----------------------------------
* ``scores[item]``: the judge's order-debiased score used to rank a group (pointwise: the mean over orderings of
  the answered value - greedy: the argmax option's value, sampled: the tempered mean; pairwise: the
  Bradley-Terry log-strength from the order-debiased preferences; listwise: the mean answer weight over
  orderings, optionally after dividing out the slot prior).
* ``slot_test``: the position test of the answered slot with the reordered unit as cluster (pointwise: items;
  pairwise: pairs, or groups; listwise: groups) - :func:`logitjudge.stats.slot_chisquare`.
* ``top1``: winning-set flips between orderings (:func:`logitjudge.stats.top1_stability`; pointwise: the
  scores of each ordering row; pairwise: Bradley-Terry from random single-order runs, one uniformly drawn order
  per pair, a Monte-Carlo estimate with its SE; listwise: the answer weights of each ordering). Per-item
  (per-group) random orders are random draws too: their flip carries its Monte-Carlo SE (``flip_se``).
* ``swap``: swap consistency and first-slot preference (pairwise only).

The comparison (:func:`compare_paradigms`) adds, per paradigm, the agreement with human rankings: Kendall tau-b
(``scipy.stats.kendalltau``, which corrects for ties on either side) between ``scores`` and the human scores
within each group, the mean over groups where it is defined with a percentile bootstrap CI over groups
(:func:`logitjudge.stats.grouped_correlation`), and its paired difference from the first paradigm
(:func:`logitjudge.stats.compare_correlations`, level 'grouped'); and ``top1_human``: per group
|J & H| / |J| for the judge's winning set J and the human's H (the probability that the judge's pick, its ties
broken uniformly, is a human-best candidate), the mean over groups with a bootstrap CI.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._result import (
    PER_ITEM_RANDOM,
    InsufficientDataError,
    Result,
    ShapeError,
    StatsError,
    as_array,
    as_float,
    as_rng,
    bootstrap_weights,
    check_confidence,
    check_distributions,
    check_n_boot,
    check_orders,
    detect_design,
    percentile_ci,
)
from .alignment import compare_correlations, grouped_correlation, per_group_correlations
from .listwise import (
    ListwiseRankingResult,
    check_listwise,
    choice_by_candidate,
    listwise_design,
    listwise_ranking,
    listwise_slot_test,
    slot_prior,
)
from .pairwise import (
    BradleyTerryResult,
    PairwiseRankingResult,
    SwapConsistencyResult,
    bradley_terry,
    check_pairwise,
    debiased_preference,
    group_candidates,
    pair_verdicts,
    pairwise_ranking,
    pairwise_slot_test,
    swap_consistency,
)
from .position import _check_design, chosen_positions, probs_by_position
from .readings import check_reading, read_scores
from .slots import SlotTestResult, slot_chisquare
from .top1 import Top1StabilityResult, top1_stability, winning_sets

PARADIGMS = ("pointwise", "pairwise", "listwise")
COST_KEYS = ("forward_calls", "trie_tokens", "seconds")
__all__ = [  # this module's own names and the paradigm estimators it gathers for logitjudge.stats
    "BradleyTerryResult", "ListwiseRankingResult", "PairwiseRankingResult", "ParadigmComparison", "ParadigmSummary",
    "SlotTestResult", "SwapConsistencyResult", "Top1StabilityResult",
    "bradley_terry", "check_listwise", "check_pairwise", "choice_by_candidate", "compare_paradigms", "cost_from_meta",
    "debiased_preference", "listwise_design",
    "listwise_ranking", "listwise_slot_test", "listwise_summary", "pair_verdicts", "pairwise_ranking",
    "pairwise_slot_test", "pairwise_summary", "pointwise_summary", "slot_chisquare", "slot_prior",
    "swap_consistency", "top1_stability", "winning_sets",
]


def cost_from_meta(meta: dict) -> dict:
    """``{"forward_calls", "trie_tokens", "seconds"}`` from a ScoreTable's meta (NaN where absent)."""
    if not isinstance(meta, dict):
        raise StatsError(f"meta must be a table's meta dict, got {type(meta).__name__}")
    eng, tim = meta.get("engine_stats") or {}, meta.get("timings") or {}
    raw = {"forward_calls": eng.get("forward_calls"), "trie_tokens": eng.get("tokens"),
           "seconds": tim.get("score_seconds")}
    return {k: float("nan") if v is None else float(v) for k, v in raw.items()}


def _cost(cost) -> dict:
    if cost is None:
        return {k: float("nan") for k in COST_KEYS}
    if not isinstance(cost, dict) or set(cost) - set(COST_KEYS):
        raise StatsError(f"cost must be a dict with keys among {list(COST_KEYS)}, got {cost!r}")
    out = {}
    for k in COST_KEYS:
        v = cost.get(k)
        try:
            out[k] = float("nan") if v is None else float(v)
        except (TypeError, ValueError):
            raise StatsError(f"cost[{k!r}] must be a number, got {v!r}") from None
    return out


@dataclass(frozen=True)
class ParadigmSummary(Result):
    """One paradigm's results on the shared items (module doc): ``scores[item]`` (NaN: not ranked),
    ``groups[item]``, ``slot_test``, ``top1``, ``swap`` (pairwise only), ``cost``."""

    paradigm: str
    scores: np.ndarray
    groups: np.ndarray
    slot_test: SlotTestResult
    top1: Top1StabilityResult
    swap: object
    cost: dict
    reading: str
    temperature: float


def _groups(groups, n: int) -> np.ndarray:
    g = np.asarray(groups).astype(str)
    if g.shape != (n,):
        raise ShapeError(f"groups must give one label per item ({n}), got shape {g.shape}")
    return g


def pointwise_summary(probs, values, option_orders, groups, *, reading: str = "greedy",
                      temperature: float = 1.0, cost=None, allow_confounded: bool = False, alpha: float = 0.05,
                      n_boot: int = 1000, confidence: float = 0.95, rng=None) -> ParadigmSummary:
    """Rubric scoring of one criterion as a paradigm (module doc): ``probs[item, ordering, option]``,
    ``values[option]``, ``option_orders``, ``groups[item]``. The slot test clusters the prompts by item; a FIXED
    or shared random design confounds content with position (refused as by the rubric position test, unless
    ``allow_confounded``: then computed with a ConfoundedDesignWarning); per-item random orders need an expected
    count of 5 per position, as there."""
    p = as_array(probs, "probs", 3, "[items, orderings, options]")
    check_distributions(p, "probs")
    i, k, n = p.shape
    if n < 2 or k < 2:
        raise ShapeError(f"pointwise needs >= 2 options and >= 2 orderings, got probs of shape {p.shape}")
    orders = check_orders(option_orders, k, n, n_items=i)
    g = _groups(groups, i)
    reading = check_reading(reading)
    if reading == "expected":
        raise StatsError("a paradigm summary reads answers: reading='greedy' or 'sampled'")
    rng = as_rng(rng)
    design = detect_design(orders)
    _check_design(design, allow_confounded, "pointwise slot test", n_prompts=i * k, n_places=n)
    per = read_scores(p, values, reading=reading, temperature=temperature)  # [items, orderings]
    pbp = probs_by_position(p, orders)
    answered = chosen_positions(pbp, reading=reading, temperature=temperature, rng=rng).reshape(-1, n)
    slot = slot_chisquare(answered, np.repeat(np.arange(i), k), reading=reading, unit="item", alpha=alpha,
                          n_boot=n_boot, confidence=confidence, rng=rng)
    _, members = group_candidates(g)
    top1 = top1_stability([per[m].T for m in members], draws=design == PER_ITEM_RANDOM, reading=reading,
                          n_boot=n_boot, confidence=confidence, rng=rng)
    return ParadigmSummary("pointwise", per.mean(axis=1), g, slot, top1, None, _cost(cost), reading,
                           float(temperature))


def pairwise_summary(pair_probs, pairs, groups, *, reading: str = "greedy", temperature: float = 1.0,
                     cost=None, cluster: str = "pair", prior: float = 0.1, n_orientations: int = 20,
                     alpha: float = 0.05,
                     n_boot: int = 1000, confidence: float = 0.95, rng=None) -> ParadigmSummary:
    """Pairwise judging as a paradigm (module doc; arrays of :mod:`logitjudge.stats.pairwise`)."""
    reading = check_reading(reading)
    if reading == "expected":
        raise StatsError("a paradigm summary reads answers: reading='greedy' or 'sampled'")
    rng = as_rng(rng)
    rank = pairwise_ranking(pair_probs, pairs, groups, reading=reading, temperature=temperature, prior=prior,
                            n_orientations=n_orientations, rng=rng)
    swap = swap_consistency(pair_probs, pairs, groups, reading=reading, temperature=temperature, cluster=cluster,
                            n_boot=n_boot, confidence=confidence, rng=rng)
    slot = pairwise_slot_test(pair_probs, pairs, groups, reading=reading, temperature=temperature,
                              cluster=cluster, alpha=alpha, n_boot=n_boot, confidence=confidence, rng=rng)
    top1 = top1_stability(list(rank.by_orientation), draws=True, reading=reading, n_boot=n_boot,
                          confidence=confidence, rng=rng)
    return ParadigmSummary("pairwise", rank.scores, np.asarray(groups).astype(str), slot, top1, swap, _cost(cost),
                           reading, float(temperature))


def listwise_summary(choice_probs, orders, candidates, groups, *, reading: str = "greedy",
                     temperature: float = 1.0, cost=None, debias: bool = False, allow_confounded: bool = False,
                     alpha: float = 0.05, n_boot: int = 1000, confidence: float = 0.95, rng=None
                     ) -> ParadigmSummary:
    """Listwise judging as a paradigm (module doc; arrays of :mod:`logitjudge.stats.listwise`); every list's
    candidates must be items of one group."""
    reading = check_reading(reading)
    if reading == "expected":
        raise StatsError("a paradigm summary reads answers: reading='greedy' or 'sampled'")
    rng = as_rng(rng)
    g = np.asarray(groups).astype(str)
    if g.ndim != 1:
        raise ShapeError(f"groups must be 1-D (one label per item), got shape {g.shape}")
    rank = listwise_ranking(choice_probs, orders, candidates, g.size, reading=reading, temperature=temperature,
                            debias=debias)
    for c in rank.candidates:
        if np.unique(g[c]).size != 1:
            raise StatsError(f"a list mixes groups {sorted(set(g[c]))}; a list holds the candidates of one group")
    slot = listwise_slot_test(choice_probs, orders, reading=reading, temperature=temperature,
                              allow_confounded=allow_confounded, alpha=alpha, n_boot=n_boot,
                              confidence=confidence, rng=rng)
    top1 = top1_stability(list(rank.by_ordering), draws=listwise_design(orders) == PER_ITEM_RANDOM,
                          reading=reading, n_boot=n_boot, confidence=confidence, rng=rng)
    return ParadigmSummary("listwise", rank.scores, g, slot, top1, None, _cost(cost), reading,
                           float(temperature))


# ---- the comparison -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ParadigmComparison(Result):
    """Per paradigm (axis 0 of every array, in ``paradigms`` order) on the same items (module doc):

    * human agreement: ``tau`` (mean Kendall tau-b over groups) [``tau_ci_low``, ``tau_ci_high``],
      ``tau_groups_used``, ``tau_per_group[paradigm, group]`` (NaN where undefined; groups ``group_names``),
      ``tau_difference`` = tau - tau of the first paradigm with its paired bootstrap CI and p over groups;
      ``top1_human`` [CI]: P(the judge's pick, ties broken uniformly, is a human-best candidate);
    * position bias: ``bias_v`` (bias-corrected Cramér's V of the answered slot) [CI], ``bias_pvalue``
      (cluster-robust), ``bias_design_effect``, ``bias_unit``, ``n_slots``, ``first_slot_share`` [CI] beside
      its chance level ``1 / n_slots``;
    * top-1 stability: ``top1_flip`` [CI over groups] with ``top1_flip_certain`` / ``top1_flip_possible`` and
      ``top1_tied``; ``top1_flip_se``: its Monte-Carlo SE where the orderings are random draws (else NaN);
    * ``swap_consistency`` (pairwise; NaN otherwise);
    * cost: ``forward_calls``, ``trie_tokens``, ``seconds``.
    """

    paradigms: tuple
    tau: np.ndarray
    tau_ci_low: np.ndarray
    tau_ci_high: np.ndarray
    tau_groups_used: np.ndarray
    tau_per_group: np.ndarray
    tau_difference: np.ndarray
    tau_difference_ci_low: np.ndarray
    tau_difference_ci_high: np.ndarray
    tau_difference_pvalue: np.ndarray
    top1_human: np.ndarray
    top1_human_ci_low: np.ndarray
    top1_human_ci_high: np.ndarray
    bias_v: np.ndarray
    bias_v_ci_low: np.ndarray
    bias_v_ci_high: np.ndarray
    bias_pvalue: np.ndarray
    bias_design_effect: np.ndarray
    bias_unit: tuple
    n_slots: np.ndarray
    first_slot_share: np.ndarray
    first_slot_ci_low: np.ndarray
    first_slot_ci_high: np.ndarray
    top1_flip: np.ndarray
    top1_flip_ci_low: np.ndarray
    top1_flip_ci_high: np.ndarray
    top1_flip_se: np.ndarray
    top1_flip_certain: np.ndarray
    top1_flip_possible: np.ndarray
    top1_tied: np.ndarray
    swap_consistency: np.ndarray
    forward_calls: np.ndarray
    trie_tokens: np.ndarray
    seconds: np.ndarray
    group_names: np.ndarray
    n_items: int
    reading: str
    temperature: float
    confidence_level: float


def _top1_human(scores, human, groups, tol: float) -> np.ndarray:
    """Per group with >= 2 candidates scored by both: |J & H| / |J|."""
    out = []
    for j in np.unique(groups):
        m = (groups == j) & np.isfinite(scores) & np.isfinite(human)
        if m.sum() < 2:
            out.append(np.nan)
            continue
        jw, hw = winning_sets(scores[m], tol=tol), winning_sets(human[m], tol=tol)
        out.append((jw & hw).sum() / jw.sum())
    return np.asarray(out)


def compare_paradigms(summaries, human, *, tol: float = 1e-9, n_boot: int = 1000, confidence: float = 0.95,
                      rng=None) -> ParadigmComparison:
    """Compare paradigm summaries of the same items (the same ``groups``, one reading) against ``human[item]``
    scores (NaN: no human score); see :class:`ParadigmComparison` and the module doc for the definitions."""
    summ = list(summaries) if not isinstance(summaries, ParadigmSummary) else [summaries]
    if not summ or not all(isinstance(s, ParadigmSummary) for s in summ):
        raise StatsError("summaries must be ParadigmSummary results (pointwise_summary, pairwise_summary, "
                         "listwise_summary)")
    names = [s.paradigm for s in summ]
    if len(set(names)) != len(names):
        raise StatsError(f"one summary per paradigm, got {names}")
    g = summ[0].groups
    if any(s.groups.shape != g.shape or np.any(s.groups != g) for s in summ):
        raise StatsError("the summaries are not of the same items (their groups differ)")
    if len({(s.reading, s.temperature) for s in summ}) != 1:
        raise StatsError("the summaries read the judge differently; compare them under one reading")
    h = as_float(human, "human")
    if h.shape != g.shape:
        raise ShapeError(f"human must give one score per item ({g.size}; NaN where missing), got {h.shape}")
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    rng = as_rng(rng)
    names_g = np.unique(g)
    nan = float("nan")
    rows: dict[str, list] = {}

    def put(key, value):
        rows.setdefault(key, []).append(value)

    have = np.isfinite(h)
    if have.sum() < 3:
        raise InsufficientDataError(f"human agreement needs at least 3 items with human scores, got {have.sum()}")
    ref = None
    for s in summ:
        ok = have & np.isfinite(s.scores)
        x, y, gg = s.scores[ok], h[ok], g[ok]
        gc = grouped_correlation(x, y, gg, method="kendall", n_boot=n_boot, confidence=confidence, rng=rng)
        per = per_group_correlations(x, y, gg, method="kendall")
        full = np.full(names_g.size, np.nan)
        full[np.searchsorted(names_g, per.groups)] = per.statistic
        put("tau", gc.statistic), put("tau_ci_low", gc.ci_low), put("tau_ci_high", gc.ci_high)
        put("tau_groups_used", gc.n_groups_used), put("tau_per_group", full)
        if ref is None:
            ref = s
            put("tau_difference", nan), put("tau_difference_ci_low", nan), put("tau_difference_ci_high", nan)
            put("tau_difference_pvalue", nan)
        else:
            both = have & np.isfinite(s.scores) & np.isfinite(ref.scores)
            if n_boot and both.sum() >= 3:
                d = compare_correlations(s.scores[both], ref.scores[both], h[both], method="kendall",
                                         level="grouped", groups=g[both], n_boot=n_boot, confidence=confidence,
                                         rng=rng)
                vals = (d.statistic, d.ci_low, d.ci_high, d.pvalue)
            else:
                vals = (nan,) * 4
            for key, v in zip(("tau_difference", "tau_difference_ci_low", "tau_difference_ci_high",
                               "tau_difference_pvalue"), vals):
                put(key, v)
        th = _top1_human(s.scores, h, g, tol)
        th = th[np.isfinite(th)]
        lo = hi = nan
        if n_boot and th.size >= 2:
            lo, hi = percentile_ci(bootstrap_weights(th.size, n_boot, rng) @ th / th.size, confidence)
        put("top1_human", float(th.mean()) if th.size else nan), put("top1_human_ci_low", lo)
        put("top1_human_ci_high", hi)
        st, t1 = s.slot_test, s.top1
        for key, v in (("bias_v", st.cramers_v), ("bias_v_ci_low", st.cramers_v_ci_low),
                       ("bias_v_ci_high", st.cramers_v_ci_high), ("bias_pvalue", st.pvalue),
                       ("bias_design_effect", st.design_effect), ("n_slots", st.n_slots),
                       ("first_slot_share", st.shares[0]), ("first_slot_ci_low", st.share_ci_low[0]),
                       ("first_slot_ci_high", st.share_ci_high[0]), ("top1_flip", t1.flip),
                       ("top1_flip_ci_low", t1.flip_ci_low), ("top1_flip_ci_high", t1.flip_ci_high),
                       ("top1_flip_se", t1.flip_se),
                       ("top1_flip_certain", t1.flip_certain), ("top1_flip_possible", t1.flip_possible),
                       ("top1_tied", t1.tied),
                       ("swap_consistency", s.swap.consistency if s.swap is not None else nan),
                       ("forward_calls", s.cost["forward_calls"]), ("trie_tokens", s.cost["trie_tokens"]),
                       ("seconds", s.cost["seconds"])):
            put(key, v)
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in rows.items()}
    arrays["tau_groups_used"] = arrays["tau_groups_used"].astype(np.int64)
    arrays["n_slots"] = arrays["n_slots"].astype(np.int64)
    return ParadigmComparison(paradigms=tuple(names), bias_unit=tuple(s.slot_test.unit for s in summ),
                              group_names=names_g, n_items=int(g.size), reading=summ[0].reading,
                              temperature=summ[0].temperature, confidence_level=confidence, **arrays)
