"""What every judging paradigm shares: the position bias of the answered *slot* with the cluster (the thing
that is reordered: an item, a pair, a group) as the unit.

A slot is a place an answer points at: the position of a rubric option (pointwise), the label "A" or "B"
(pairwise), a letter of a candidate list (listwise). People read slots from 1 (slot 1 = "A" = the first
shown); arrays index them from 0.

Position test of the answered slot (:func:`slot_chisquare`)
-----------------------------------------------------------
Input: ``answered[prompt, slot]``, the weight of the slot each prompt answered (one-hot; the greedy reading
splits an exact tie at the top equally; a row sums to less than 1 when the prompt answered no slot, e.g. the tie
label of a pairwise template) or ``answered[prompt] = slot_index`` with ``n_slots``; ``clusters[prompt]``, the
unit whose prompts are correlated. With N the answered weight, p_s the pooled share of slot s and k slots:

* ``statistic``, ``statistic_corrected``, ``pvalue`` (the verdict's p), ``design_effect``,
  ``pvalue_per_prompt`` (every prompt independent; printed for comparison, never the verdict): Pearson's X² of
  the pooled shares against uniform and its Rao-Scott second-order correction with the clusters as the unit,
  referred to F(d, d (C - 1)) - :func:`logitjudge.stats.rao_scott_chisquare`, whose module
  (:mod:`logitjudge.stats.clustered`) defines them. ``dof`` here is the corrected d (``dof_corrected`` of the
  :class:`~logitjudge.stats.RaoScottResult`), ``n_clusters`` is C.
* ``cramers_v``: the bias-corrected Cramér's V of :func:`logitjudge.stats.cramers_v_corrected`,
  sqrt(max(0, X^2 - (k-1) deff) / ((k-1) (N - deff))): near 0 for a judge without position bias (its interval
  can reach 0) and 1 when every prompt answered one slot. ``cramers_v_uncorrected`` = sqrt(X^2 / (N (k-1))).
  Intervals: percentile bootstrap over clusters (the correction recomputed on every resample).
* ``label``, ``label_reason``, ``favoured_index``: :func:`logitjudge.stats.position_label` on the shares,
  their cluster-bootstrap lower bounds, the cluster-robust p and the design effect, as in the rubric test:
  the favoured slots are those whose share's lower bound lies above 1/k (without a bootstrap: above 1/k and
  not significantly below the largest share). The reason numbers the slots from 1 and, given ``slot_names``,
  names them: "slots [1 (A)] have a share whose CI lies above 1/2; counts by slot [A: 54, B: 26]".

Top-1 stability under reordering, the paradigms' other shared measure, is
:func:`logitjudge.stats.top1_stability` (in :mod:`logitjudge.stats.top1`, beside the rubric's top-1 flips).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._result import (
    Result,
    ShapeError,
    StatsError,
    as_float,
    as_rng,
    check_confidence,
    check_n_boot,
)
from .clustered import bootstrap_v_and_shares, cramers_v_corrected, cramers_v_gof, rao_scott_chisquare
from .direction import direction
from .readings import check_reading


# ---- the slot test on answered prompts ----------------------------------------------------------------------
@dataclass(frozen=True)
class SlotTestResult(Result):
    """Position bias of the answered slot with clusters as the unit (definitions in the module doc).

    ``counts[slot]`` / ``shares[slot]``: answered weight and share of each slot (slot 1 first), with percentile
    bootstrap CIs over clusters; ``label`` / ``label_reason`` as in the rubric position test;
    ``favoured_index`` (0-based: slot 1 is index 0): the slots the label rests on (module doc). ``reading``
    names how the prompts' answers were read; ``unit`` what a cluster is.
    """

    statistic: float
    statistic_corrected: float
    pvalue: float
    dof: float
    design_effect: float
    pvalue_per_prompt: float
    cramers_v: float
    cramers_v_ci_low: float
    cramers_v_ci_high: float
    cramers_v_uncorrected: float
    counts: np.ndarray
    shares: np.ndarray
    share_ci_low: np.ndarray
    share_ci_high: np.ndarray
    n: float
    n_prompts: int
    n_clusters: int
    n_slots: int
    label: str
    label_reason: str
    favoured_index: tuple
    reading: str
    unit: str
    alpha: float
    confidence_level: float


def _answered(answered, n_slots) -> np.ndarray:
    a = np.asarray(answered)
    if a.ndim == 1:
        if n_slots is None or int(n_slots) != n_slots or n_slots < 2:
            raise StatsError("answered slot indices (1-D) need n_slots >= 2 (how many slots each prompt had)")
        if not np.issubdtype(a.dtype, np.integer) or a.min(initial=0) < 0 or a.max(initial=0) >= n_slots:
            raise StatsError(f"answered slot indices must be integers in [0, {n_slots}), got {a[:5].tolist()}")
        return np.eye(int(n_slots))[a]
    w = as_float(a, "answered")
    if w.ndim != 2 or w.shape[1] < 2:
        raise ShapeError(f"answered must be [prompts, slots] weights (>= 2 slots) or 1-D slot indices, "
                         f"got shape {w.shape}")
    if n_slots is not None and w.shape[1] != n_slots:
        raise ShapeError(f"answered has {w.shape[1]} slots, n_slots={n_slots}")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or np.any(w.sum(axis=1) > 1 + 1e-9):
        raise StatsError("answered weights must be finite, non-negative and sum to at most 1 per prompt")
    return w


def slot_chisquare(answered, clusters, *, n_slots: int | None = None, reading: str = "greedy",
                   unit: str = "item", slot_names=None, alpha: float = 0.05, n_boot: int = 1000,
                   confidence: float = 0.95, rng=None) -> SlotTestResult:
    """Cluster-robust test that the answered slots are uniform, with the bias-corrected Cramér's V and
    bootstrap CIs over clusters (see the module doc). ``reading`` ('greedy' or 'sampled': one seeded run of a
    sampling judge) and ``unit`` are recorded; ``slot_names`` (e.g. ``("A", "B")``) label the slots in the
    reason."""
    w = _answered(answered, n_slots)
    cl = np.asarray(clusters).astype(str)
    if cl.shape != (w.shape[0],):
        raise ShapeError(f"clusters must give one id per prompt ({w.shape[0]}), got shape {cl.shape}")
    reading = check_reading(reading, allow_draw=True)
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    if not 0 < float(alpha) < 1:
        raise StatsError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    _, inv = np.unique(cl, return_inverse=True)
    y = np.zeros((inv.max() + 1, w.shape[1]))
    np.add.at(y, inv.ravel(), w)
    rs = rao_scott_chisquare(y)
    k = w.shape[1]
    counts = y.sum(axis=0)
    shares = counts / rs.n
    v = float(cramers_v_corrected(rs.statistic, rs.n, k, design_effect=rs.design_effect))
    v_raw = float(cramers_v_gof(rs.statistic, rs.n, k))
    v_lo, v_hi, s_lo, s_hi = bootstrap_v_and_shares(y, n_boot, confidence, as_rng(rng))
    label, why, fav = direction(shares, s_lo, rs.pvalue, float(alpha), counts=counts,
                                design_effect=rs.design_effect, noun="slot", names=slot_names)
    return SlotTestResult(rs.statistic, rs.statistic_corrected, rs.pvalue, rs.dof_corrected, rs.design_effect,
                          rs.pvalue_per_prompt, v, v_lo, v_hi, v_raw, counts, shares, s_lo, s_hi, rs.n,
                          w.shape[0], y.shape[0], k, label, why, fav, reading, str(unit), float(alpha), confidence)
