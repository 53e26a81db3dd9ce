"""Listwise judging: one prompt shows a group's candidates (up to 26, lettered) in a candidate order and the
judge names the best; the exact probability of each letter under several orders per group.

Arrays (the contract the engine fills; see also :mod:`logitjudge.stats.paradigms`). Groups may differ in size
and in their number of orders, so every argument is a sequence of G per-group arrays (a 3-D array is the
equal-size case):

* ``choice_probs[g][ordering, slot]`` float, [K_g, m_g]: the exact probability that the judge answers the
  letter of slot s (slot 0 = "A", shown first) when group g is shown in that ordering; renormalised over the
  m_g letters.
* ``orders[g][ordering, slot]`` int, [K_g, m_g]: the candidate index (0-based within the group) shown at each
  slot: a permutation per row, the convention of :mod:`logitjudge.orderings`.
* ``candidates[g][candidate]`` int, [m_g]: the item index (row of the items shared by every paradigm) of each
  candidate.

Canonical view (:func:`choice_by_candidate`): ``by_candidate[g][ordering, candidate]`` = the probability of
choosing that candidate.

Readings of one prompt's answer: ``greedy`` (the argmax letter, an exact tie split equally) and ``sampled`` (the
tempered distribution; T = 1: the exact one). A candidate's **score** is its mean answer weight over the
group's orderings: greedy, the share of orderings whose answer is that candidate; sampled, the expected share of
a sampling judge's answers (at T = 1 the mean choice probability over orders). Per ordering the same weights are
the scores that top-1 stability compares.
Under greedy only each prompt's winner is seen: every candidate that never wins an ordering scores 0, so a
greedy list ranks the top and ties the rest (a low Kendall tau by construction, not by disagreement).

``debias=True`` first divides every prompt's letter distribution by a slot prior and renormalises (PriDe's
model: observed(slot, candidate) proportional to prior(slot) x debiased(candidate)), then reads it. The prior
is softmax of the slot effects of :func:`logitjudge.stats.fit_position_effect` (the least-squares fit of
log p = content(candidate) + bias(slot) + normaliser(ordering); PriDe's closed form on balanced orders), pooled
over the groups of one list length (one prior per length: the same judge on lists of one length). It is in-
sample (estimated on the groups it debiases; PriDe holds items out), so it removes a shared slot preference but
can also absorb a content preference that happens to line up with slots when a group has few orders.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..orderings import OrderingError, inverse, is_balanced, validate
from ._result import (
    BALANCED,
    FIXED,
    PER_ITEM_RANDOM,
    DesignError,
    InsufficientDataError,
    Result,
    ShapeError,
    StatsError,
    as_rng,
    check_distributions,
    detect_design,
    group_score_list,
)
from .position import _check_design, fit_position_effect
from .readings import answer_weights, check_reading, one_answer
from .slots import SlotTestResult, slot_chisquare

MAX_CANDIDATES = 26  # one letter each


def _seq(x, name: str, kind: str) -> list[np.ndarray]:
    if isinstance(x, np.ndarray) and x.dtype != object:
        return list(x)
    try:
        return [np.asarray(a) for a in x]
    except TypeError:
        raise StatsError(f"{name} must be a sequence of per-group {kind} arrays") from None


def check_listwise(choice_probs, orders, candidates=None):
    """Validated per-group (choice_probs [K, m] float, orders [K, m] int[, candidates [m] int]) lists."""
    probs = group_score_list(choice_probs, "choice_probs")
    ords = _seq(orders, "orders", "[orderings, slots]")
    if len(ords) != len(probs):
        raise ShapeError(f"orders has {len(ords)} groups, choice_probs {len(probs)}")
    out_o = []
    for g, (p, o) in enumerate(zip(probs, ords)):
        if o.shape != p.shape:
            raise ShapeError(f"group {g}: orders has shape {o.shape}, choice_probs {p.shape}")
        if not 2 <= p.shape[1] <= MAX_CANDIDATES:
            raise ShapeError(f"group {g} has {p.shape[1]} candidates; a list has 2..{MAX_CANDIDATES} (letters)")
        check_distributions(p, f"choice_probs of group {g}")
        try:
            out_o.append(validate(o))
        except (OrderingError, TypeError, ValueError) as e:
            raise StatsError(f"orders of group {g}: {e}") from None
    if candidates is None:
        return probs, out_o
    cands = _seq(candidates, "candidates", "[candidates]")
    if len(cands) != len(probs):
        raise ShapeError(f"candidates has {len(cands)} groups, choice_probs {len(probs)}")
    out_c = []
    for g, (p, c) in enumerate(zip(probs, cands)):
        if c.shape != (p.shape[1],) or not np.issubdtype(c.dtype, np.integer) or c.min() < 0:
            raise ShapeError(f"candidates of group {g} must be {p.shape[1]} item indices, got {c!r}")
        out_c.append(c.astype(np.int64))
    flat = np.concatenate(out_c)
    if np.unique(flat).size != flat.size:
        raise StatsError("an item is a candidate twice (in one list or in two groups)")
    return probs, out_o, out_c


def choice_by_candidate(choice_probs, orders) -> list[np.ndarray]:
    """Canonical view: ``by_candidate[g][ordering, candidate]`` = P(choose that candidate | ordering)."""
    probs, ords = check_listwise(choice_probs, orders)
    return [np.take_along_axis(p, inverse(o), axis=1) for p, o in zip(probs, ords)]


def listwise_design(orders) -> str:
    """The candidate-order design over groups, as :func:`logitjudge.stats.detect_design` names it for items:
    'balanced' (every group shows each candidate at each slot equally often), 'fixed' (every group one order),
    'random' (equal-size groups sharing one unbalanced set: content and slot confounded when candidate indices
    mean the same thing across groups) or 'per-item random'."""
    ords = []
    for g, o in enumerate(_seq(orders, "orders", "[orderings, slots]")):
        try:
            ords.append(validate(o))
        except (OrderingError, TypeError, ValueError) as e:
            raise StatsError(f"orders of group {g}: {e}") from None
    if not ords:
        raise InsufficientDataError("orders has no groups")
    if len({o.shape for o in ords}) == 1:
        return detect_design(np.stack(ords))
    if all(is_balanced(o) for o in ords):
        return BALANCED
    if all(np.all(o == o[0]) for o in ords):
        return FIXED
    return PER_ITEM_RANDOM


def slot_prior(choice_probs, orders, *, floor: float = 1e-12) -> list[np.ndarray]:
    """Per group the slot prior ``prior[slot]`` (sums to 1) of PriDe's model, fitted by
    :func:`logitjudge.stats.fit_position_effect` pooled over the groups of the same (orderings, length)
    (module doc). Groups whose orders never move a candidate (a fixed design) cannot be fitted (DesignError)."""
    probs, ords = check_listwise(choice_probs, orders)
    out: list = [None] * len(probs)
    shapes = sorted({p.shape for p in probs})
    for shape in shapes:
        idx = [g for g, p in enumerate(probs) if p.shape == shape]
        canon = np.stack([np.take_along_axis(probs[g], inverse(ords[g]), axis=1) for g in idx])
        try:
            fit = fit_position_effect(canon, np.stack([ords[g] for g in idx]), n_boot=0, floor=floor)
        except DesignError as e:
            raise DesignError(f"no slot prior for the lists of {shape[1]} candidates: {e}") from None
        for g in idx:
            out[g] = fit.prior
    return out


@dataclass(frozen=True)
class ListwiseRankingResult(Result):
    """Every candidate's score (module doc) as ``scores[item]`` (NaN for items in no list) and per group
    ``by_ordering[g][ordering, candidate]`` (the per-ordering answer weights; canonical candidate order),
    ``candidates[g]`` their item indices; ``debiased`` whether a slot prior was divided out."""

    scores: np.ndarray
    by_ordering: tuple
    candidates: tuple
    debiased: bool
    reading: str
    temperature: float


def listwise_ranking(choice_probs, orders, candidates, n_items: int, *, reading: str = "sampled",
                     temperature: float = 1.0, debias: bool = False) -> ListwiseRankingResult:
    """Candidate scores per group: the mean answer weight over orderings (module doc)."""
    probs, ords, cands = check_listwise(choice_probs, orders, candidates)
    reading = check_reading(reading)
    if int(n_items) != n_items or n_items < 1 or max(int(c.max()) for c in cands) >= n_items:
        raise StatsError(f"n_items={n_items!r} must exceed every candidate's item index")
    if debias:
        priors = slot_prior(probs, ords)
        probs = [p / pr[None, :] / (p / pr[None, :]).sum(axis=1, keepdims=True) for p, pr in zip(probs, priors)]
    scores = np.full(int(n_items), np.nan)
    by_ordering = []
    for p, o, c in zip(probs, ords, cands):
        a = np.take_along_axis(answer_weights(p, reading=reading, temperature=temperature), inverse(o), axis=1)
        by_ordering.append(a)
        scores[c] = a.mean(axis=0)
    return ListwiseRankingResult(scores, tuple(by_ordering), tuple(cands), bool(debias), reading,
                                 float(temperature))


def listwise_slot_test(choice_probs, orders, *, reading: str = "greedy", temperature: float = 1.0,
                       allow_confounded: bool = False, alpha: float = 0.05, n_boot: int = 1000,
                       confidence: float = 0.95, rng=None) -> SlotTestResult:
    """Position bias of the answered letter with groups as clusters (:func:`logitjudge.stats.slot_chisquare`).
    Needs lists of one length (the slots must mean the same thing). 'greedy': the argmax letter (ties split);
    'sampled': one seeded run of a judge sampling at ``temperature`` (``rng``). As for rubric options, a fixed
    order or one random set shared by every group confounds content with slot (DesignError /
    ConfoundedDesignError unless ``allow_confounded``); per-group random orders need an expected count of 5 per
    slot."""
    probs, ords = check_listwise(choice_probs, orders)
    reading = check_reading(reading)
    if reading == "expected":
        raise StatsError("the slot test counts answered letters: reading='greedy' or 'sampled'")
    if len({p.shape[1] for p in probs}) != 1:
        raise ShapeError("the slot test needs lists of one length (slot s of a 5-list and of an 11-list are "
                         "not the same position); test each length separately")
    design = listwise_design(ords)
    m = probs[0].shape[1]
    _check_design(design, allow_confounded, "the listwise slot test", n_prompts=sum(p.shape[0] for p in probs),
                  n_places=m, unit="group", things="candidates", place="slot")
    rng = as_rng(rng)
    a = one_answer(np.concatenate(probs), reading=reading, temperature=temperature, rng=rng)
    cl = np.repeat(np.arange(len(probs)), [p.shape[0] for p in probs])
    return slot_chisquare(a, cl, reading=reading, unit="group", slot_names=tuple(chr(65 + j) for j in range(m)),
                          alpha=alpha, n_boot=n_boot, confidence=confidence, rng=rng)
