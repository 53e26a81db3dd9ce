"""The read-out every caller shares: the model's unembedding (weight, logit scale, final soft-cap, and for the
logit lens the final norm) and the exact fp32 full-vocabulary log-probabilities of label tokens.

One read row is one hidden state; every label token read at that position is a column of the same row, so the
full-vocabulary log-sum-exp is computed once per position however many labels are read there
(:meth:`Head.read_lists`). The engine, the logit lens and order-swap patching all read through it.
"""

from __future__ import annotations

import contextlib
import inspect

import numpy as np
import torch
from logitjudge_kernels import label_logprobs

from ..errors import ModeError
from .features import text_config

READ_CHUNK_ELEMS = 1 << 27  # 512 MiB of fp32 logits at most


class Head:
    """``weight`` (V, d) fp32 (made once), ``scale`` (applied to the hidden state first) and ``softcap`` (final
    logit soft-cap or None) of a causal LM's unembedding; exact for bias-free linear heads (every family tested)."""

    def __init__(self, model, recording=None):
        head = model.get_output_embeddings()
        if not isinstance(head, torch.nn.Linear) or head.bias is not None:
            raise ModeError(f"the output head {type(head).__name__} is not a bias-free Linear")
        cfg = text_config(model)
        scale = 1.0
        if getattr(cfg, "logits_scaling", None):  # Granite: logits / logits_scaling
            scale /= float(cfg.logits_scaling)
        if getattr(cfg, "logit_scale", None):  # Cohere: logits * logit_scale
            scale *= float(cfg.logit_scale)
        softcap = getattr(cfg, "final_logit_softcapping", None)
        if softcap is not None and not _forward_reads(type(model), "final_logit_softcapping"):
            softcap = None  # e.g. Gemma3ForConditionalGeneration: its text config has one, its forward never applies it
        w = head.weight
        self.weight = w if w.dtype == torch.float32 else w.float()  # the fp32 read-out, made once
        self.scale, self.softcap = scale, softcap
        self._model = model
        self._norm = None
        # the backend's kernel record (Backend.recording): the read-out's kernel is recorded with its forwards
        self._recording = recording or contextlib.nullcontext

    @property
    def norm(self) -> torch.nn.Module:
        """The final norm (found on first use: only the logit lens applies it to a residual stream)."""
        if self._norm is None:
            from .hooks import architecture

            self._norm = architecture(self._model).final_norm
        return self._norm

    def read(self, hidden: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """log p(tokens[r, m]) under the full-vocabulary softmax at hidden[r] (after the final norm), fp32:
        (R, d), (R, M) -> (R, M)."""
        h = hidden.float()
        if self.scale != 1.0:
            h = h * self.scale
        # one GEMM over the whole vocabulary while (R, V) stays under READ_CHUNK_ELEMS, else chunked over V
        chunk = max(8192, min(self.weight.shape[0], READ_CHUNK_ELEMS // max(1, h.shape[0])))
        with self._recording():
            res = label_logprobs(h, self.weight, tokens.to(h.device), softcap=self.softcap, chunk=chunk)
        return res.label_logprobs

    def read_lists(self, hidden: torch.Tensor, tokens: list[list[int]], *, normed: bool = True) -> np.ndarray:
        """``out[r, m]`` = log p(tokens[r][m]) at hidden[r], float64 (R, max M); unused slots are meaningless.
        ``normed=False``: ``hidden`` is a residual stream, read through the final norm first (the logit lens)."""
        if not tokens:
            return np.zeros((0, 0))
        width = max(len(t) for t in tokens)
        toks = torch.zeros((len(tokens), max(width, 1)), dtype=torch.long)  # (R, M); unused slots read token 0
        for r, lst in enumerate(tokens):
            toks[r, :len(lst)] = torch.tensor(lst, dtype=torch.long)
        h = hidden if normed else self.norm(hidden)
        return self.read(h, toks).double().cpu().numpy()


def group_reads(reads) -> tuple[list, list[list[int]], list[list]]:
    """Reads ``(point, token, key)`` grouped by point (e.g. (row, position)), in order of first appearance:
    (points, tokens per point, keys per point): one read row per point, its labels as columns."""
    at: dict = {}
    for point, tok, key in reads:
        at.setdefault(point, []).append((tok, key))
    points = list(at)
    return points, [[t for t, _ in at[p]] for p in points], [[k for _, k in at[p]] for p in points]


def _forward_reads(cls, name: str) -> bool:
    """Whether ``cls.forward``'s source mentions ``name`` (what the model's own forward applies is the truth)."""
    try:
        return name in inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return True
