"""Synthetic judges with a known content model and a known positional prior, as ScoreTables.

log p(option | item, criterion, ordering) = content(item, criterion, option)
                                           + position_bias[position of option] + prompt noise + normaliser,
content = -content_scale * (value - quality)^2 / 2  (a discretised bell around the item's latent quality).

A planted criterion-position shift then moves each prompt's expected score by exactly ``shift[criterion,
position of the criterion]`` points (an exponential tilt of the distribution along the values, solved by
bisection). The latent qualities are kept in ``table.meta['planted']`` so that :func:`planted_human` can make
human scores.
"""

from __future__ import annotations

import numpy as np

from logitjudge import orderings as ords
from logitjudge.table import ScoreTable


def _softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def _option_orders(orderings, n: int, n_orderings: int | None, rng, n_items: int = 1) -> np.ndarray:
    if isinstance(orderings, str):
        if orderings == "balanced":
            return ords.balanced(n)
        if orderings == "random":  # one random set shared by every item
            return ords.shared_random(n, n_orderings or 2 * n, rng=rng)
        if orderings == "per-item-random":
            return ords.random(n, n_orderings or 2 * n, n_items, rng=rng)
        if orderings == "all":
            return ords.all_orders(n)
        if orderings == "fixed":
            return ords.fixed(n, n_orderings or 1)
        raise ValueError(f"orderings={orderings!r}: use 'balanced', 'all', 'random', 'per-item-random', "
                         "'fixed' or an array")
    return ords.validate(orderings, n, per_item=True)


def _tilt_to_mean(p: np.ndarray, v: np.ndarray, target: np.ndarray, iters: int = 80) -> np.ndarray:
    """p * exp(theta * v), renormalised, with theta per row chosen so that the mean of v equals target."""
    scale = v.max() - v.min()
    u = (v - v.min()) / scale
    t = (target - v.min()) / scale
    lo, hi = np.full(target.shape, -80.0), np.full(target.shape, 80.0)
    logp = np.log(p)
    for _ in range(iters):  # the tilted mean is increasing in theta: bisection always converges
        mid = (lo + hi) / 2
        m = (_softmax(logp + mid[..., None] * u) * u).sum(axis=-1)
        below = m < t
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return _softmax(logp + ((lo + hi) / 2)[..., None] * u)


def planted_table(n_items: int, n_options: int = 5, *, position_bias=None, criterion_position_shift=None,
                  orderings="balanced", n_criteria: int = 1, rng=0, content_scale: float = 1.0,
                  prompt_noise: float = 0.0, n_orderings: int | None = None, criterion_orderings=None,
                  n_groups: int | None = None, values=None) -> ScoreTable:
    """A ScoreTable from a planted judge.

    position_bias: log-space bias per position (length n_options), e.g. [0.7, 0, 0, 0, 0] plants a
        first-position log-odds of +0.7 (bias[p] minus the mean of the other positions).
    criterion_position_shift: points added to the expected score of a criterion shown at position q: shape
        (n_criteria,) for all criteria alike or (n_criteria criteria, n_criteria positions).
    orderings: 'balanced' | 'all' | 'random' (one set shared by every item) | 'per-item-random' | 'fixed' | an
        array of option orders ([K, n], or [items, K, n] per item with a single criterion). With several
        criteria, the option orders are crossed with the criterion orders (default: the n_criteria cyclic
        rotations).
    prompt_noise: sd of Gaussian noise added to every log-probability (a judge's per-prompt idiosyncrasy
        that is independent of position), so that argmax choices vary across prompts.
    n_groups: items are assigned round-robin to groups 'g0', 'g1', ... (``item_groups``).
    """
    gen = np.random.default_rng(rng)
    n, c = int(n_options), int(n_criteria)
    vals = np.arange(1.0, n + 1) if values is None else np.asarray(values, dtype=np.float64)
    opt = _option_orders(orderings, n, n_orderings, gen, n_items)
    if opt.ndim == 3 and c > 1:
        raise ValueError("per-item option orders are supported with a single criterion")
    if c > 1:
        crit = (np.asarray([np.roll(np.arange(c), -r) for r in range(c)]) if criterion_orderings is None
                else ords.validate(criterion_orderings, c))
        opt, crit = ords.cross(opt, crit)
    else:
        crit = np.zeros((opt.shape[-2], 1), dtype=np.int64)
    span = vals.max() - vals.min()
    quality = gen.uniform(vals.min() + 0.15 * span, vals.max() - 0.15 * span, size=(n_items, c))
    # [items, criteria, options]
    content = -content_scale * (vals[None, None, :] - quality[..., None]) ** 2 / 2
    bias = np.zeros(n) if position_bias is None else np.asarray(position_bias, dtype=np.float64)
    pos = ords.inverse(opt)  # [orderings, option] (or [items, orderings, option]) -> position
    logits = content[:, :, None, :] + (bias[pos][:, None] if opt.ndim == 3 else bias[pos][None, None])
    if prompt_noise:
        logits = logits + gen.normal(0.0, prompt_noise, size=logits.shape)
    probs = _softmax(logits)
    if criterion_position_shift is not None:
        shift = np.asarray(criterion_position_shift, dtype=np.float64)
        if shift.ndim == 1:
            shift = np.broadcast_to(shift, (c, c))
        cpos = ords.inverse(crit)  # [orderings, criterion] -> position
        add = shift[np.arange(c)[None, :], cpos].T  # [criteria, orderings]
        target = (probs * vals).sum(axis=-1) + add[None]
        eps = 1e-6 * span
        probs = _tilt_to_mean(probs, vals, np.clip(target, vals.min() + eps, vals.max() - eps))
    groups = None if n_groups is None else np.asarray([f"g{i % n_groups}" for i in range(n_items)])
    meta = {"planted": {"quality": quality.tolist(), "position_bias": bias.tolist(),
                        "criterion_position_shift": None if criterion_position_shift is None
                        else np.asarray(criterion_position_shift, dtype=float).tolist()}}
    return ScoreTable(probs, np.ones(probs.shape[:3]), opt, crit, np.tile(vals, (c, 1)),
                      np.asarray([f"item{i:05d}" for i in range(n_items)]), [f"C{j}" for j in range(c)],
                      groups, meta)


def planted_human(table: ScoreTable, *, noise: float = 0.3, rng=1) -> dict[str, dict[str, float]]:
    """Human scores = planted latent quality + Gaussian noise: item_id -> criterion -> score."""
    q = np.asarray(table.meta["planted"]["quality"])
    h = q + np.random.default_rng(rng).normal(0.0, noise, size=q.shape)
    return {iid: {name: float(h[i, j]) for j, name in enumerate(table.criteria)}
            for i, iid in enumerate(table.item_ids)}
