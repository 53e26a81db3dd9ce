"""Logit lens: the label distribution read from each layer's residual stream (where the position preference
appears along the layers is estimated from it by :func:`logitjudge.stats.lens_position_effect`).

The lens of layer l applies the model's own read-out to the residual stream after block l: the final norm, the
unembedding (with the family's logit scale) and the final soft-cap, then the full-vocabulary log-softmax in fp32
(the engine's read-out, :meth:`Head.read_lists <logitjudge.judge.head.Head.read_lists>`, one log-sum-exp per read
position whatever the number of labels read there). Applied after the last block it *is* the model's output, so
the last layer's lens equals the engine's probabilities.

Multi-token labels are read under teacher forcing: the lens log-probability of an option at layer l is the sum,
over the label's tokens, of the layer-l lens log-probability of that token at the position that predicts it, with
the real model's run over the earlier label tokens (the later positions see the full model's states, only the
read-out is the layer's). Single-token labels reduce to the lens at the answer position.
"""

from __future__ import annotations

import numpy as np


def option_distribution(logprobs: np.ndarray) -> np.ndarray:
    """Renormalise label log-probabilities over the options (last axis): the option distribution."""
    lp = np.asarray(logprobs, dtype=np.float64)
    w = np.exp(lp - lp.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1, keepdims=True)
