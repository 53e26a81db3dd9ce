"""Estimates on the arrays of a probe run (:class:`logitjudge.probing.table.ProbeTable`): where the position
preference appears along the layers (logit lens), which heads attend by position or follow the chosen content
(attention), which sites carry the choice (order-swap patching).

Pure functions on arrays (canonical option order on the last axis, ``option_orders[K, n]`` shared by the items
or ``[I, K, n]`` per item);
bootstrap CIs resample items (``rng``); bad input raises :class:`StatsError`. The linear probes are in
:mod:`.linear_probe`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._result import (
    Result,
    ShapeError,
    StatsError,
    as_array,
    as_rng,
    check_confidence,
    check_distributions,
    check_n_boot,
    check_orders,
    mean_over_units,
    need_items,
    percentile_ci,
)
from .position import fit_position_effect, position_chisquare, probs_by_position

SITE_KINDS = ("resid", "attn", "mlp", "head")  # ProbeTable.site_kind codes: a layer's output, attention, MLP, head


def _mean_ci(per_item: np.ndarray, n_boot: int, rng, confidence: float):
    """Mean over items (axis 0) and its percentile bootstrap CI (NaN without a bootstrap or with one item)."""
    mean = per_item.mean(axis=0)
    if not n_boot or per_item.shape[0] < 2:
        return mean, np.full_like(mean, np.nan), np.full_like(mean, np.nan)
    lo, hi = percentile_ci(mean_over_units(per_item, n_boot, rng), confidence)
    return mean, lo, hi


def _probs(probs, name: str, ndim: int, what: str) -> np.ndarray:
    p = as_array(probs, name, ndim, what)
    check_distributions(p, name)
    return p


def chosen_option(probs, option_orders) -> tuple[np.ndarray, np.ndarray]:
    """``(option, position)``, each (I, K): the canonical option each prompt ranks first in ``probs[I, K, n]``
    (argmax, first index on an exact tie) and the position it is shown at under ``option_orders``."""
    p = _probs(probs, "probs", 3, "[items, orderings, options]")
    orders = _per_item(check_orders(option_orders, p.shape[1], p.shape[2], n_items=p.shape[0]))
    opt = p.argmax(axis=-1)
    return opt, np.argmax(orders == opt[..., None], axis=-1)


def _per_item(orders: np.ndarray) -> np.ndarray:
    """(1, K, n) for shared orders, (I, K, n) per item: indexed the same way, broadcast over the items."""
    return orders[None] if orders.ndim == 2 else orders


# ---- logit lens --------------------------------------------------------------------------------------------
def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error control over the given tests)."""
    p = as_array(pvalues, "pvalues", 1, "p-values")
    if np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise StatsError("pvalues must lie in [0, 1]")
    m = len(p)
    order = np.argsort(p, kind="stable")
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adj
    return out


def preference_onset(pvalues, share_of_final, *, alpha: float = 0.05, fraction: float = 0.5) -> int | None:
    """The layer at which the position preference appears: the first layer l such that every layer from l on
    (a) rejects uniform choices after Holm's correction over the layers (adjusted p < ``alpha``) and (b) carries
    at least ``fraction`` of the last layer's position effect (``share_of_final >= fraction``). None when the
    last layer itself fails (a) (no preference at the output)."""
    p = holm(pvalues)
    s = as_array(share_of_final, "share_of_final", 1, "per-layer shares")
    if s.shape != p.shape or not len(p):
        raise ShapeError(f"pvalues {p.shape} and share_of_final {s.shape} must be the same non-empty (L,)")
    if not 0 < alpha < 1 or not 0 <= fraction <= 1:
        raise StatsError(f"alpha must lie in (0, 1) and fraction in [0, 1]; got {alpha}, {fraction}")
    ok = (p < alpha) & (s >= fraction)
    ok[-1] = p[-1] < alpha  # the last layer carries all of its own effect
    onset = None
    for layer in range(len(ok) - 1, -1, -1):
        if not ok[layer]:
            break
        onset = layer
    return onset


@dataclass(frozen=True)
class LensPositionResult(Result):
    """Per layer of the logit lens (``lens_probs[item, ordering, layer, option]``):

    ``log_odds[l, p]``: the log-space position effect of :func:`fit_position_effect` (log-probability an option
    gains at position p over its average elsewhere; bootstrap CIs over items); ``chi2/pvalue/cramers_v/shares``:
    :func:`position_chisquare` (p with items as clusters, bias-corrected V) on the lens's chosen positions
    (argmax of each layer's option distribution);
    ``pvalue_holm``: Holm-adjusted over the layers; ``share_of_final[l]``: the projection of layer l's effect on
    the last layer's, ``<log_odds[l], log_odds[-1]> / |log_odds[-1]|^2`` (1: the output's preference in full,
    0: none of it, < 0: the opposite positions); ``emerges_at``: :func:`preference_onset` with ``alpha`` and
    ``fraction``."""

    log_odds: np.ndarray  # (L, n)
    log_odds_ci_low: np.ndarray
    log_odds_ci_high: np.ndarray
    chi2: np.ndarray  # (L,)
    pvalue: np.ndarray
    pvalue_holm: np.ndarray
    cramers_v: np.ndarray
    shares: np.ndarray  # (L, n) share of lens choices at each position
    share_of_final: np.ndarray
    emerges_at: int | None
    alpha: float
    fraction: float


def lens_position_effect(lens_probs, option_orders, *, alpha: float = 0.05, fraction: float = 0.5,
                         n_boot: int = 1000, confidence: float = 0.95, rng=None) -> LensPositionResult:
    """Position preference of each layer's lens, ``lens_probs[item, ordering, layer, option]`` (canonical)."""
    p = _probs(lens_probs, "lens_probs", 4, "[items, orderings, layers, options]")
    orders = check_orders(option_orders, p.shape[1], p.shape[3], n_items=p.shape[0])
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    rng = as_rng(rng)
    boot = n_boot if p.shape[0] >= 2 else 0
    rows = []
    for layer in range(p.shape[2]):
        pl = p[:, :, layer, :]
        eff = fit_position_effect(pl, orders, n_boot=boot, confidence=confidence, rng=rng)
        chi = position_chisquare(probs_by_position(pl, orders), orders, n_boot=0, alpha=alpha)
        rows.append((eff.log_odds, eff.log_odds_ci_low, eff.log_odds_ci_high, chi.statistic, chi.pvalue,
                     chi.cramers_v, chi.shares))
    lo, lo_l, lo_h, chi2, pv, v, sh = (np.array(x) for x in zip(*rows))
    last = lo[-1]
    norm = float(last @ last)
    share = lo @ last / norm if norm > 0 else np.zeros(len(lo))
    return LensPositionResult(lo, lo_l, lo_h, chi2, pv, holm(pv), v, sh, share,
                              preference_onset(pv, share, alpha=alpha, fraction=fraction), float(alpha),
                              float(fraction))


# ---- attention to option lines -----------------------------------------------------------------------------
@dataclass(frozen=True)
class AttentionSummary(Result):
    """Mean attention mass of the answer query (over items and orderings; CIs over items), per layer and head.

    ``by_position[L, H, p]``: on the whole option line shown at position p (line + its end); ``end_by_position``:
    on its last token only; ``by_option[L, H, o]``: on the line of canonical option o wherever it is shown;
    ``other[L, H, 3]``: instructions, text, rest. ``position_index[L, H]``: the largest mean over items of a
    position's share of the head's option-line mass, minus 1/n (0: no position favoured), CI over items of the
    same mean; ``top_position_index[L, H]`` that position, 0-based (a person's position is it + 1).
    ``follows_choice[L, H]``: mass on the chosen option's line minus the mean on the other lines (> 0: the head
    follows the content the model picks, in whatever position)."""

    by_position: np.ndarray
    by_position_ci: tuple
    end_by_position: np.ndarray
    by_option: np.ndarray
    other: np.ndarray
    position_index: np.ndarray
    position_index_ci: tuple
    top_position_index: np.ndarray
    follows_choice: np.ndarray
    follows_choice_ci: tuple


def attention_summary(attention, option_orders, probs, *, n_boot: int = 1000, confidence: float = 0.95,
                      rng=None) -> AttentionSummary:
    """``attention[I, K, L, H, C]`` (C = 2n + 3 span categories: n lines by position, n line ends, instructions,
    text, rest) and the model's ``probs[I, K, n]`` (for the chosen option)."""
    a = as_array(attention, "attention", 5, "[items, orderings, layers, heads, categories]")
    p = _probs(probs, "probs", 3, "[items, orderings, options]")
    n = p.shape[2]
    if a.shape[:2] != p.shape[:2] or a.shape[4] != 2 * n + 3:
        raise ShapeError(f"attention {a.shape} must be (I, K, L, H, 2n + 3) for probs {p.shape}")
    orders = check_orders(option_orders, p.shape[1], n, n_items=p.shape[0])
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    rng = as_rng(rng)
    lines = a[..., :n] + a[..., n:2 * n]  # (I, K, L, H, n) by position
    inv = np.argsort(_per_item(orders), axis=-1)  # (1 or I, K, n): position of canonical option o
    by_opt = np.take_along_axis(lines, inv[:, :, None, None, :], axis=-1)
    opt, _ = chosen_option(p, orders)
    on_chosen = np.take_along_axis(by_opt, opt[:, :, None, None, None], axis=-1)[..., 0]
    follows = on_chosen - (by_opt.sum(-1) - on_chosen) / (n - 1)  # (I, K, L, H)
    per_item = lines.mean(1)  # (I, L, H, n)
    pos_mean, pos_lo, pos_hi = _mean_ci(per_item, n_boot, rng, confidence)
    # the index and its CI are one estimator: the mean over items of each item's share of the top position
    item_share = per_item / np.maximum(per_item.sum(-1, keepdims=True), 1e-300)  # (I, L, H, n)
    share = item_share.mean(0)  # (L, H, n)
    top = share.argmax(-1)  # (L, H)
    at_top = np.take_along_axis(item_share, top[None, ..., None], axis=-1)[..., 0] - 1.0 / n  # (I, L, H)
    _, idx_lo, idx_hi = _mean_ci(at_top, n_boot, rng, confidence)
    fol, fol_lo, fol_hi = _mean_ci(follows.mean(1), n_boot, rng, confidence)
    return AttentionSummary(pos_mean, (pos_lo, pos_hi), a[..., n:2 * n].mean((0, 1)), by_opt.mean((0, 1)),
                            a[..., 2 * n:].mean((0, 1)), share.max(-1) - 1.0 / n, (idx_lo, idx_hi), top, fol,
                            (fol_lo, fol_hi))


# ---- order-swap patching -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PatchSummary(Result):
    """Per site (``names``: ``L{layer}.{kind}``, heads ``L{layer}.head{h}``), patched from the source ordering of
    each pair into its target:

    ``to_source``: 1 − TV(patched, source) / TV(target, source), over pairs whose source and target differ
    (TV > ``tol``) — 1: the target now answers like the source, 0: no effect (CI over items);
    ``follows_content``: share of those patched runs whose top option is the source's top option;
    ``follows_position``: share whose top option is the one the target shows at the position of the source's
    top option; ``keeps_target``: share that keep the target's top option. ``preferred_position_index``: the
    position the model favours, 0-based (largest mean probability by position over every item and ordering of
    ``clean``);
    ``preference_drop``: mean over items and all pairs of P_target(option at that position) −
    P_patched(option at that position) (> 0: the site's output in the target carried part of its preference
    for that position; CI over items)."""

    names: list
    layer: np.ndarray
    kind: np.ndarray
    head: np.ndarray
    to_source: np.ndarray
    to_source_ci: tuple
    follows_content: np.ndarray
    follows_position: np.ndarray
    keeps_target: np.ndarray
    n_pairs: int
    preferred_position_index: int
    preference_drop: np.ndarray
    preference_drop_ci: tuple

    def ranked(self, kind: str = "head", by: str = "preference_drop") -> np.ndarray:
        """Indices of the sites of one kind, largest ``by`` first."""
        sel = np.flatnonzero(self.kind == SITE_KINDS.index(kind))
        return sel[np.argsort(-getattr(self, by)[sel], kind="stable")]


def site_names(site_layer, site_kind, site_head) -> list[str]:
    """``L{layer}.{kind}`` (heads ``L{layer}.head{h}``) for each patch site."""
    return [f"L{int(ly)}.{SITE_KINDS[k]}" + (f"{int(h)}" if k == 3 else "")
            for ly, k, h in zip(site_layer, site_kind, site_head)]


def patch_summary(clean, patched, pairs, option_orders, *, site_layer, site_kind, site_head, tol: float = 1e-3,
                  n_boot: int = 1000, confidence: float = 0.95, rng=None) -> PatchSummary:
    """``clean[I, K, n]`` (each ordering's distribution), ``patched[I, P, S, n]`` (the target of ``pairs[P] =
    (source, target)`` with site s patched from the source); sites described by ``site_layer/kind/head[S]``."""
    c = _probs(clean, "clean", 3, "[items, orderings, options]")
    pat = _probs(patched, "patched", 4, "[items, pairs, sites, options]")
    I, K, n = c.shape
    pr = np.asarray(pairs)
    layer, kind, head = (np.asarray(x, dtype=np.int64) for x in (site_layer, site_kind, site_head))
    if pr.ndim != 2 or pr.shape[1] != 2 or pat.shape[:2] != (I, len(pr)) or pat.shape[3] != n or \
            not layer.shape == kind.shape == head.shape == (pat.shape[2],):
        raise ShapeError(f"patched {pat.shape} must be (I, P, S, n) for clean {c.shape}, pairs {pr.shape} (P, 2) "
                         f"and {len(layer)} sites")
    if pr.size and (pr.min() < 0 or pr.max() >= K) or np.any((kind < 0) | (kind >= len(SITE_KINDS))):
        raise StatsError(f"pairs must index the {K} orderings and site_kind the kinds {list(SITE_KINDS)}")
    orders = check_orders(option_orders, K, n, n_items=I)
    n_boot, confidence = check_n_boot(n_boot), check_confidence(confidence)
    need_items(I, 1, "patch_summary")
    rng = as_rng(rng)
    src, tgt = pr[:, 0], pr[:, 1]
    ps, pt = c[:, src], c[:, tgt]  # (I, P, n)
    tv = 0.5 * np.abs(ps - pt).sum(-1)  # (I, P)
    moved = 1 - 0.5 * np.abs(pat - ps[:, :, None]).sum(-1) / np.maximum(tv, 1e-300)[..., None]  # (I, P, S)
    ok = tv > tol
    w = ok / np.maximum(ok.sum(1, keepdims=True), 1)
    per_item = (moved * w[..., None]).sum(1)[ok.any(1)]  # (I', S)
    m, lo, hi = _mean_ci(per_item, n_boot, rng, confidence) if len(per_item) else \
        (np.full(len(layer), np.nan),) * 3
    top = pat.argmax(-1)  # (I, P, S)
    s_top, t_top = ps.argmax(-1), pt.argmax(-1)  # (I, P)
    o3 = _per_item(orders)  # (1 or I, K, n)
    pos_s = np.argmax(o3[:, src] == s_top[..., None], axis=-1)  # position in the source
    at_pos = np.take_along_axis(o3[:, tgt], pos_s[..., None], axis=-1)[..., 0]  # target's option at that position

    def share(x):
        return (x * ok[..., None]).sum((0, 1)) / max(ok.sum(), 1)

    pref = int(probs_by_position(c, orders).mean((0, 1)).argmax())
    opt_at_pref = o3[:, tgt, pref]  # (1 or I, P) canonical option each target shows at the preferred position
    at_pref = opt_at_pref[:, :, None, None]
    drop = np.take_along_axis(pt[:, :, None], at_pref, -1) - np.take_along_axis(pat, at_pref, -1)  # (I, P, S, 1)
    drop = drop[..., 0]
    d, d_lo, d_hi = _mean_ci(drop.mean(1), n_boot, rng, confidence)  # drop: (I, P, S)
    return PatchSummary(site_names(layer, kind, head), layer, kind, head, m, (lo, hi),
                        share(top == s_top[..., None]), share(top == at_pos[..., None]),
                        share(top == t_top[..., None]), int(ok.sum()), pref, d, (d_lo, d_hi))
