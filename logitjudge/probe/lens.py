"""Logit lens: the label distribution read from each layer's residual stream, and where position preference
appears along the layers.

The lens of layer l applies the model's own read-out to the residual stream after block l: the final norm, the
unembedding (with the family's logit scale) and the final soft-cap, then the full-vocabulary log-softmax in fp32
(:func:`readout`, the engine's read-out). Applied after the last block it *is* the model's output, so the last
layer's lens equals the engine's probabilities.

Multi-token labels are read under teacher forcing: the lens log-probability of an option at layer l is the sum,
over the label's tokens, of the layer-l lens log-probability of that token at the position that predicts it, with
the real model's run over the earlier label tokens (the later positions see the full model's states, only the
read-out is the layer's). Single-token labels reduce to the lens at the answer position.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from logitjudge_kernels import label_logprobs

from ..forward import head_params
from ..stats import fit_position_effect, position_chisquare
from ..stats.position import probs_by_position


@torch.inference_mode()
def readout(model, arch, resid: torch.Tensor, tokens: torch.Tensor, *, normed: bool = False) -> torch.Tensor:
    """log p(tokens[r, m]) when the residual ``resid[r]`` (R, d) is read as the model's last state: (R, M).

    ``normed``: the final norm is already applied (the decoder's ``last_hidden_state``)."""
    weight, scale, softcap = head_params(model)
    h = resid if normed else arch.final_norm(resid)
    h = h.float()
    if scale != 1.0:
        h = h * scale
    chunk = max(8192, min(weight.shape[0], (1 << 27) // max(1, h.shape[0])))
    return label_logprobs(h, weight.float(), tokens.to(h.device), softcap=softcap, chunk=chunk).label_logprobs


def option_distribution(logprobs: np.ndarray) -> np.ndarray:
    """Renormalise label log-probabilities over the options (last axis): the option distribution."""
    lp = np.asarray(logprobs, dtype=np.float64)
    w = np.exp(lp - lp.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1, keepdims=True)


@dataclass(frozen=True)
class LensPositionResult:
    """Per layer: the log-space position effect (``fit_position_effect``: ``log_odds[l, p]`` = log-probability
    an option gains at position p over its average elsewhere, with bootstrap CIs over items) and the χ² test of
    the lens's chosen positions (argmax reading: the position of the option each layer's lens ranks first).

    ``emerges_at``: the first layer from which the χ² test rejects uniform choices at ``alpha`` at that layer
    and every later one (None if the last layer does not reject)."""

    log_odds: np.ndarray  # (L, n)
    log_odds_ci_low: np.ndarray
    log_odds_ci_high: np.ndarray
    chi2: np.ndarray  # (L,)
    pvalue: np.ndarray
    cramers_v: np.ndarray
    shares: np.ndarray  # (L, n) share of lens choices at each position
    emerges_at: int | None
    alpha: float


def lens_position_effect(lens_probs, option_orders, *, alpha: float = 0.05, n_boot: int = 1000, rng=None
                         ) -> LensPositionResult:
    """Position preference of each layer's lens, ``lens_probs[item, ordering, layer, option]`` (canonical)."""
    p = np.asarray(lens_probs, dtype=np.float64)
    rng = np.random.default_rng(rng)
    rows = []
    for layer in range(p.shape[2]):
        pl = p[:, :, layer, :]
        eff = fit_position_effect(pl, option_orders, n_boot=n_boot, rng=rng)
        chi = position_chisquare(probs_by_position(pl, option_orders), option_orders, n_boot=0, alpha=alpha)
        rows.append((eff.log_odds, eff.log_odds_ci_low, eff.log_odds_ci_high, chi.statistic, chi.pvalue,
                     chi.cramers_v, chi.shares))
    lo, lo_l, lo_h, chi2, pv, v, sh = (np.array(x) for x in zip(*rows))
    emerges = None
    for layer in range(len(pv) - 1, -1, -1):
        if not pv[layer] < alpha:
            break
        emerges = layer
    return LensPositionResult(lo, lo_l, lo_h, chi2, pv, v, sh, emerges, float(alpha))
