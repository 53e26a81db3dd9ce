"""Estimates on a ProbeTable: where position preference appears (lens), which heads attend by position or by
content (attention), which sites carry the choice (patching), where the choice is decodable (linear probes).

Pure functions of the table's arrays; bootstrap CIs resample items (``rng``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..stats.position import probs_by_position
from .lens import LensPositionResult, lens_position_effect
from .linear import ProbeResult, probe_accuracy
from .patching import KINDS
from .table import ProbeTable


def _boot_mean(per_item: np.ndarray, n_boot: int, rng, confidence: float = 0.95):
    """Mean over items (axis 0) and its percentile bootstrap CI over items."""
    mean = per_item.mean(axis=0)
    if not n_boot or per_item.shape[0] < 2:
        nan = np.full_like(mean, np.nan)
        return mean, nan, nan
    idx = rng.integers(0, per_item.shape[0], size=(n_boot, per_item.shape[0]))
    boot = np.stack([per_item[i].mean(axis=0) for i in idx])
    a = (1 - confidence) / 2
    return mean, np.quantile(boot, a, axis=0), np.quantile(boot, 1 - a, axis=0)


def chosen(table: ProbeTable) -> tuple[np.ndarray, np.ndarray]:
    """(I, K) canonical option the model ranks first, and the position it is shown at."""
    opt = table.probs.argmax(axis=-1)
    pos = np.argmax(table.option_orders[None] == opt[..., None], axis=-1)
    return opt, pos


def lens_summary(table: ProbeTable, *, n_boot: int = 1000, rng=None) -> LensPositionResult:
    return lens_position_effect(table.lens_probs, table.option_orders, n_boot=n_boot, rng=rng)


@dataclass(frozen=True)
class AttentionSummary:
    """Mean attention mass of the answer query (over items and orderings; CIs over items), per layer and head.

    ``by_position[L, H, p]``: on the whole option line shown at position p (line + its end); ``end_by_position``:
    on its last token only; ``by_option[L, H, o]``: on the line of canonical option o wherever it is shown;
    ``other[L, H, 3]``: instructions, text, rest. ``position_index[L, H]``: the largest share of a position among
    the head's option-line mass minus 1/n (0: no position favoured), ``top_position`` the position.
    ``follows_choice[L, H]``: mass on the chosen option's line minus the mean on the other lines (> 0: the head
    follows the content the model picks, in whatever position)."""

    by_position: np.ndarray
    by_position_ci: tuple
    end_by_position: np.ndarray
    by_option: np.ndarray
    other: np.ndarray
    position_index: np.ndarray
    top_position: np.ndarray
    follows_choice: np.ndarray
    follows_choice_ci: tuple


def attention_summary(table: ProbeTable, *, n_boot: int = 1000, rng=None) -> AttentionSummary:
    rng = np.random.default_rng(rng)
    a = table.attention  # (I, K, L, H, C)
    n = table.option_orders.shape[1]
    lines = a[..., :n] + a[..., n:2 * n]  # (I, K, L, H, n) by position
    inv = np.argsort(table.option_orders, axis=1)  # (K, n): position of canonical option o
    by_opt = np.take_along_axis(lines, inv[None, :, None, None, :], axis=-1)
    opt, _ = chosen(table)
    on_chosen = np.take_along_axis(by_opt, opt[:, :, None, None, None], axis=-1)[..., 0]
    follows = on_chosen - (by_opt.sum(-1) - on_chosen) / (n - 1)  # (I, K, L, H)
    pos_mean, pos_lo, pos_hi = _boot_mean(lines.mean(1), n_boot, rng)
    fol, fol_lo, fol_hi = _boot_mean(follows.mean(1), n_boot, rng)
    share = pos_mean / np.maximum(pos_mean.sum(-1, keepdims=True), 1e-300)
    return AttentionSummary(pos_mean, (pos_lo, pos_hi), a[..., n:2 * n].mean((0, 1)), by_opt.mean((0, 1)),
                            a[..., 2 * n:].mean((0, 1)), share.max(-1) - 1.0 / n, share.argmax(-1), fol,
                            (fol_lo, fol_hi))


@dataclass(frozen=True)
class PatchSummary:
    """Per site (``names``), over items and pairs whose source and target distributions differ (TV > ``tol``):

    ``to_source``: 1 − TV(patched, source) / TV(target, source) — 1: the patch makes the target answer like the
    source, 0: no effect (CI over items); ``follows_content``: share of patched runs whose top option is the
    source's top option; ``follows_position``: share whose top option is the one the target shows at the position
    of the source's top option; ``keeps_target``: share that keep the target's top option."""

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


def patch_summary(table: ProbeTable, *, tol: float = 1e-3, n_boot: int = 1000, rng=None) -> PatchSummary:
    rng = np.random.default_rng(rng)
    src, tgt = table.pairs[:, 0], table.pairs[:, 1]
    clean, pat = table.clean, table.patched  # (I, K, n), (I, P, S, n)
    ps, pt = clean[:, src], clean[:, tgt]  # (I, P, n)
    tv = 0.5 * np.abs(ps - pt).sum(-1)  # (I, P)
    moved = 1 - 0.5 * np.abs(pat - ps[:, :, None]).sum(-1) / np.maximum(tv, 1e-300)[..., None]  # (I, P, S)
    ok = tv > tol
    w = ok / np.maximum(ok.sum(1, keepdims=True), 1)
    keep_items = ok.any(1)
    per_item = (moved * w[..., None]).sum(1)[keep_items]  # (I', S)
    m, lo, hi = _boot_mean(per_item, n_boot, rng)
    top = pat.argmax(-1)  # (I, P, S)
    s_top, t_top = ps.argmax(-1), pt.argmax(-1)  # (I, P)
    pos_s = np.argmax(table.option_orders[src][None] == s_top[..., None], axis=-1)  # position in the source
    at_pos = table.option_orders[tgt][np.arange(len(tgt))[None], pos_s]  # target's option at that position

    def share(x):
        return (x * ok[..., None]).sum((0, 1)) / max(ok.sum(), 1)
    names = [f"L{int(ly)}.{KINDS[k]}" + (f"{int(h)}" if k == 3 else "")
             for ly, k, h in zip(table.site_layer, table.site_kind, table.site_head)]
    return PatchSummary(names, table.site_layer, table.site_kind, table.site_head, m, (lo, hi),
                        share(top == s_top[..., None]), share(top == at_pos[..., None]),
                        share(top == t_top[..., None]), int(ok.sum()))


@dataclass(frozen=True)
class LinearSummary:
    """Per exported layer and feature site ('answer': the answer position; 'line ends': every option line's end,
    concatenated by position), the held-out accuracy of a linear probe for each label."""

    layers: np.ndarray
    results: dict  # (label, site) -> list[ProbeResult] by layer


def linear_summary(table: ProbeTable, *, n_boot: int = 1000, rng=None, l2: float = 1.0) -> LinearSummary:
    rng = np.random.default_rng(rng)
    h = table.hidden  # (I, K, Lh, 1 + n, d)
    I, K, Lh, _, d = h.shape
    n = table.option_orders.shape[1]
    opt, pos = chosen(table)
    groups = np.repeat(np.arange(I), K)
    labels = {"chosen position": pos.ravel(), "chosen option": opt.ravel()}
    results: dict[tuple, list[ProbeResult]] = {}
    for name, y in labels.items():
        for site in ("answer", "line ends"):
            res = []
            for layer in range(Lh):
                x = h[:, :, layer, 0] if site == "answer" else h[:, :, layer, 1:].reshape(I, K, n * d)
                res.append(probe_accuracy(x.reshape(I * K, -1), y, groups, n_classes=n, n_boot=n_boot,
                                          rng=rng, l2=l2))
            results[(name, site)] = res
    return LinearSummary(table.hidden_layers, results)


def position_preference(table: ProbeTable) -> np.ndarray:
    """(n,) mean probability of each position of the model's own output (for the page's headline)."""
    return probs_by_position(table.probs, table.option_orders).mean(axis=(0, 1))
