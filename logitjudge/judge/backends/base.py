"""The one interface to a judge model's forward pass: :class:`Backend`.

A backend is one way of computing a family group's hidden states on the shared-prefix trie. It says whether it
computes a given model exactly and why not (:meth:`Backend.refusal`), runs the forward with one calling
convention (:meth:`Backend.forward`), gives the unembedding (:attr:`Backend.head`), provides the named hook
points the probe reads and patches (:meth:`Backend.hooks`) and reports which kernels it ran
(:meth:`Backend.kernels`). The engine, the exactness audit, the run's meta and the probe use nothing else.
"""

from __future__ import annotations

import contextlib
from typing import ClassVar

import torch

from ...errors import ModeError
from ..features import FEATURES, attention_shape, n_layers
from ..head import Head
from ..prefix import PrefixKV


class Backend:
    """Subclasses set ``name`` (the prefix mode users name), ``supports`` (the attention features of
    :data:`~logitjudge.judge.features.FEATURES` it computes exactly) and implement :meth:`_forward`.

    ``mixes_prefixes``: one call may hold rows that continue different prefixes (else the engine batches rows
    of one prefix per call). ``caches``: it can continue a prefix cache and capture one (``plain`` cannot: every
    sequence runs from its first token). ``copies_prefix``: every row holds its own copy of the prefix, so a
    batch costs the prefix once per row. ``route``: how its GEMMs run (for the meta)."""

    name: ClassVar[str] = ""
    _kernel_record = None  # the dispatcher's Recorder, made at the first recording()
    supports: ClassVar[frozenset] = frozenset()
    mixes_prefixes: ClassVar[bool] = False
    caches: ClassVar[bool] = True
    copies_prefix: ClassVar[bool] = False
    route: str = "transformers"
    # the most rows x padded tokens per forward call at which this backend's kernels keep their speed: the engine
    # cuts a token budget's batch into calls of at most this many (None: no limit of its own)
    batch_tokens: int | None = None

    # ---- (a) exact or refused -----------------------------------------------------------------------------
    @classmethod
    def refusal(cls, model, features: dict) -> str | None:
        """None if this backend computes ``model`` exactly, else why not (one line). ``features``:
        :func:`~logitjudge.judge.features.model_features` of the model."""
        missing = [f for f in features if f not in cls.supports]
        if missing:
            return "; ".join(f"{FEATURES[f]} ({features[f]})" for f in missing) + f" not supported by '{cls.name}'"
        return cls.refuses(model, features)

    @classmethod
    def refuses(cls, model, features: dict) -> str | None:
        """A family-specific reason beyond the feature table (None: none)."""
        return None

    def __init__(self, model):
        self.model = model
        self.n_layers = n_layers(model)
        self.n_heads, self.head_dim = attention_shape(model)
        self.head = Head(model, self.recording)  # (c) the unembedding and its soft-cap; its read-out is recorded too
        self.device = next(model.parameters()).device

    # ---- (b) the forward ----------------------------------------------------------------------------------
    def forward(self, ids: torch.Tensor, groups: list[tuple[PrefixKV, int]], *, lengths=None, read=None,
                capture: bool = False):
        """Rows ``ids`` (B, S), right-padded (``lengths``: each row's real length; None: all S), continuing the
        prefixes of ``groups`` = [(PrefixKV, number of rows)] in row order (one group unless
        ``mixes_prefixes``). ``read`` = (rows, offsets): the positions whose final hidden state (after the final
        norm) is returned, (R, d); None: all, (B, S, d). ``capture``: also return each layer's suffix keys and
        values (B, Hkv, S, D) (a linear-attention layer: its recurrent state at each row's end), for
        :meth:`PrefixKV.extend`; else None."""
        B = ids.shape[0]
        if sum(n for _, n in groups) != B:
            raise ModeError(f"prefix groups cover {sum(n for _, n in groups)} rows, the batch has {B}")
        if len(groups) > 1 and not self.mixes_prefixes:
            raise ModeError(f"prefix mode {self.name!r} runs the rows of one prefix per call, got {len(groups)}")
        if not self.caches and (capture or any(p.length for p, _ in groups)):
            raise ModeError(f"prefix mode {self.name!r} runs whole sequences: it cannot continue or keep a "
                             "prefix cache")
        with self.recording():
            return self._forward(ids, groups, lengths, read, capture)

    def _forward(self, ids, groups, lengths, read, capture):
        raise NotImplementedError

    # ---- (d) the kernels it ran ---------------------------------------------------------------------------
    def recording(self):
        """Where the kernels this backend runs are recorded: every forward and every read-out of its
        :attr:`head` runs inside this context, which records into the kernel dispatcher's recorder
        (``logitjudge_kernels.dispatch``) that this backend keeps over its life (re-entering it counts a call
        once)."""
        from logitjudge_kernels import dispatch

        if self._kernel_record is None:
            self._kernel_record = dispatch.Recorder()
        return dispatch.recording(self._kernel_record)

    def kernels(self) -> dict:
        """What ran, for the table's meta, as the kernels' dispatcher recorded it in this backend's forwards and
        read-outs: per kernel (attention, readout, rms_norm, residual_rms_norm, qk_norm_rope; the native step's
        linear, gate_up and mlp_rows) the implementations that ran (C, aten, torch, triton; packed or plain
        GEMMs) with their shape buckets and call counts, and the decision behind each bucket (measured rates, or
        why it was forced). Nothing is re-derived, so a kernel that did not run (e.g. attention inside
        transformers' own modules) is absent; empty when this backend ran nothing yet (a resumed run whose
        batches were all saved)."""
        return {} if self._kernel_record is None else self._kernel_record.as_meta()

    # ---- hook points (the probe) --------------------------------------------------------------------------
    @contextlib.contextmanager
    def hooks(self, fns: dict):
        """Context in which every forward calls ``{hook name: fn(tensor) -> replacement or None}``
        (:mod:`logitjudge.judge.hooks`). Here: on the transformers modules; a pattern hook switches the model
        to its eager attention for the context (the attention kernels do not materialise probabilities)."""
        from ..hooks import attn_implementation, module_hooks

        eager = any(name.endswith("hook_pattern") for name in fns)
        with attn_implementation(self.model, "eager") if eager else contextlib.nullcontext():
            with module_hooks(self.model, fns):
                yield

    def select(self, hidden: torch.Tensor, read) -> torch.Tensor:
        return hidden if read is None else hidden[read[0], read[1]]
