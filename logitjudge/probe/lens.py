"""Logit lens: the label distribution read from each layer's residual stream (where the position preference
appears along the layers is estimated from it by :func:`logitjudge.stats.lens_position_effect`).

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

import numpy as np
import torch
from logitjudge_kernels import label_logprobs

from ..forward import head_params


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
