"""The ``shared`` backend: transformers' own forward, with the prefix held once on the trie.

Suffix rows attend to the shared prefix (:class:`~logitjudge.judge.prefix.PrefixKV`, per layer one key and one
value tensor (Hkv, L, D), never copied per row) through an attention function registered with transformers'
``AttentionInterface``; a linear-attention layer (Gated DeltaNet, :mod:`.linear_attention`) continues its
recurrent state at the prefix's end instead. Exact for every family whose attention goes through the interface:
sinks, soft-capping, sliding windows and linear-attention layers included.

The last layer is pruned to the read positions (:func:`install_last_layer_pruning`): its keys and values are
computed for every position (later tokens need them), its queries, attention, output projection, MLP and the
final norm only where a hidden state is read. Not where the last layer is a linear-attention layer, nor under
hooks (the probe reads every position), nor when every position is read.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field

import torch
from logitjudge_kernels import shared_prefix_attention

from ...errors import ModeError
from ..features import linear_layer_indices
from ..prefix import PrefixKV
from .base import Backend
from .linear_attention import install_linear_attention, linear_support

ATTN_NAME = "logitjudge_shared_prefix"
PREFIX_KWARG = "logitjudge_prefix"


@dataclass
class _PrefixState:
    prefix: PrefixKV
    capture: bool
    lengths: list[int] | None = None  # each row's real length (rows are right-padded); None: all full
    captured: dict = field(default_factory=dict)
    patterns: bool = False  # return the attention probabilities (a pattern hook is set)
    read: tuple | None = None  # (rows, offsets): prune the last layer to these positions; None: no pruning
    stage: str | None = None  # inside the pruned last layer: "kv" (keys/values of all positions) or "read"
    kv: tuple | None = None  # the last layer's (keys, values) (B, Hkv, S, D) of all positions, from stage "kv"


class _KeysValuesDone(Exception):
    """Raised by the attention function in stage "kv": the last layer's keys and values are recorded, so the rest
    of the layer (attention, output projection, MLP) is not run on every position."""


def _shared_prefix_attention_hf(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                                sliding_window=None, softcap=None, **kwargs):
    """transformers attention function: suffix rows attend to the shared prefix plus their own causal suffix."""
    state: _PrefixState | None = kwargs.pop(PREFIX_KWARG, None)
    if state is None:  # not a logitjudge call: the implementation the model was loaded with, unchanged
        extra = {} if softcap is None else {"softcap": softcap}
        return _base_attention(module)(module, query, key, value, attention_mask, dropout=dropout,
                                       scaling=scaling, sliding_window=sliding_window, **extra, **kwargs)
    sinks = kwargs.pop("s_aux", None)  # GPT-OSS attention sinks, (Hq,)
    layer = module.layer_idx
    kp, vp = state.prefix.layer(layer, key)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    if state.stage == "read":  # the pruned last layer's read positions, one query each (R, Hq, 1, D)
        return attend_reads(query, kp, vp, *state.kv, *state.read, scale=scale, window=sliding_window,
                            softcap=softcap, sinks=sinks), None
    if state.capture:
        state.captured[layer] = (key, value)
    if state.stage == "kv":
        state.kv = (key, value)
        raise _KeysValuesDone
    out = shared_prefix_attention(query, kp, vp, key, value, scale=scale, sliding_window=sliding_window,
                                  softcap=softcap, sinks=sinks)  # (B, Hq, S, D)
    probs = None
    if state.patterns:  # for a pattern hook only: the kernel never materialises them
        from ..hooks import attention_probs

        probs = attention_probs(query, kp, key, scale=scale, window=sliding_window, softcap=softcap, sinks=sinks)
    return out.transpose(1, 2).contiguous(), probs


def attend_reads(query, k_prefix, v_prefix, k, v, rows, offs, *, scale: float, window: int | None = None,
                 softcap: float | None = None, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of R single queries ``query`` (R, Hq, 1, D): query r is row ``rows[r]`` at suffix offset
    ``offs[r]``; it sees the shared prefix (Hkv, L, D) (never copied per query) and its row's suffix keys
    ``k``/``v`` (B, Hkv, S, D) up to that offset, with the window, soft-cap and sinks of the full path; fp32
    inside. Returns (R, 1, Hq, D), the layout attention functions return."""
    R, Hq, _, D = query.shape
    Hkv, L, _ = k_prefix.shape
    S = k.shape[2]
    G = Hq // Hkv
    q = query[:, :, 0].float().reshape(R, Hkv, G, D)
    ks, vs = k[rows].float(), v[rows].float()  # (R, Hkv, S, D): the rows' suffixes (short), gathered
    scores = torch.cat([torch.einsum("rhgd,hld->rhgl", q, k_prefix.float()),
                        torch.einsum("rhgd,rhsd->rhgs", q, ks)], dim=-1) * scale  # (R, Hkv, G, L + S)
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    qpos = (L + offs)[:, None]  # (R, 1) absolute positions
    kpos = torch.arange(L + S, device=query.device)[None, :]
    visible = kpos <= qpos
    if window is not None:
        visible = visible & (qpos - kpos < window)
    scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
    if sinks is not None:  # one extra logit per query head in the denominator, no value
        scores = torch.cat([scores, sinks.float().reshape(1, Hkv, G, 1).expand(R, Hkv, G, 1)], dim=-1)
    p = torch.softmax(scores, dim=-1)
    out = torch.einsum("rhgl,hld->rhgd", p[..., :L], v_prefix.float()) + \
        torch.einsum("rhgs,rhsd->rhgd", p[..., L:L + S], vs)
    return out.reshape(R, 1, Hq, D).to(query.dtype)


_BASE_ATTR = "_logitjudge_base_attn"


def _base_attention(module):
    """The attention function ``module`` had before :func:`install_shared_attention` (eager: its own module's)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    base = getattr(module.config, _BASE_ATTR, None) or "sdpa"
    if base == "eager":
        return sys.modules[type(module).__module__].eager_attention_forward
    return ALL_ATTENTION_FUNCTIONS[base]


def install_shared_attention(model) -> None:
    """Route the model's attention through the shared-prefix function; calls without a prefix state (the
    model used as usual) run the implementation it was loaded with, with that implementation's masks (the
    shared function builds its own). Gated DeltaNet layers are routed too."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    base = model.config.get_text_config()._attn_implementation or "sdpa"
    if base.startswith(ATTN_NAME):  # installed before
        return
    name = f"{ATTN_NAME}_{base}"  # one name per base: its mask function serves the plain calls
    AttentionInterface.register(name, _shared_prefix_attention_hf)
    if name not in ALL_MASK_ATTENTION_FUNCTIONS:
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[base])
    for m in model.modules():  # every (sub-)config the attention modules read (a saved config may carry an old one)
        cfg = getattr(m, "config", None)
        impl = getattr(cfg, "_attn_implementation", None) or base
        if cfg is not None and not impl.startswith(ATTN_NAME):
            setattr(cfg, _BASE_ATTR, impl)
    model.set_attn_implementation(name)
    if linear_layer_indices(model):
        install_linear_attention(model, PREFIX_KWARG)


_PRUNED = "_logitjudge_unpruned_forward"


def install_last_layer_pruning(model) -> bool:
    """Wrap the last decoder layer so that a shared forward with read positions (``_PrefixState.read``) runs it
    in two stages: (1) the layer on every position up to its attention function, which records the keys and
    values and stops the layer (:class:`_KeysValuesDone`); (2) the layer on the read positions only, each a
    sequence of one token whose attention (:func:`attend_reads`) sees the prefix and its row's keys from (1).
    Every per-position operation (norms, projections, MLP, MoE routing) is the layer's own, so this is exact for
    every family whose attention goes through the shared function. The layer returns zeros at the positions
    not read (the decoder's final norm keeps them finite; nobody reads them). Other calls run the layer as it
    was. False (nothing wrapped) where the last layer is a linear-attention layer: its output at a position
    depends on a recurrence over all earlier ones, which this does not split."""
    decoder = model.get_decoder()
    layers = next((getattr(decoder, n) for n in ("layers", "h", "blocks") if hasattr(decoder, n)), None)
    if not isinstance(layers, torch.nn.ModuleList) or not len(layers):
        return False  # no layer list found: run unpruned
    last = len(layers) - 1
    if last in linear_layer_indices(model):
        return False
    layer = layers[last]
    if hasattr(layer, _PRUNED):
        return True
    original = layer.forward
    setattr(layer, _PRUNED, original)

    def forward(*args, **kwargs):
        state = kwargs.get(PREFIX_KWARG)
        if state is None or state.read is None:
            return original(*args, **kwargs)
        return _pruned_layer(original, state, args, kwargs)

    layer.forward = forward
    return True


def _pruned_layer(original, state: _PrefixState, args: tuple, kwargs: dict):
    hidden = args[0] if args else kwargs["hidden_states"]  # (B, S, d)
    B, S = hidden.shape[:2]
    state.stage = "kv"
    try:
        original(*args, **kwargs)
    except _KeysValuesDone:
        pass
    else:  # the layer never reached the shared attention function: it cannot be pruned through it
        raise ModeError("the last layer did not run through logitjudge's shared-prefix attention; use "
                        "prefix_mode='copy' or 'plain' for this model")
    rows, offs = state.read
    if len(rows) == 0:  # nothing read in this batch: the keys and values were all the last layer had to give
        state.stage = None
        return hidden.new_zeros(hidden.shape)

    def at_reads(t):  # (B, S, ...) -> (R, 1, ...): every read position a one-token sequence
        return t[rows, offs].unsqueeze(1)

    kw = {}
    for name, val in kwargs.items():
        if name == "attention_mask":
            val = None  # the shared function builds its own visibility; the full-length mask does not fit
        elif name == "position_embeddings":
            val = tuple(at_reads(t) for t in val)
        elif name == "hidden_states" or (torch.is_tensor(val) and val.dim() >= 2 and tuple(val.shape[:2]) == (B, S)):
            val = at_reads(val)
        kw[name] = val
    state.stage = "read"
    try:
        out = original(*((at_reads(hidden), *args[1:]) if args else ()), **kw)
    finally:
        state.stage = None
    h = out[0] if isinstance(out, tuple) else out  # (R, 1, d)
    full = h.new_zeros((B, S, h.shape[-1]))
    full[rows, offs] = h[:, 0]
    return (full, *out[1:]) if isinstance(out, tuple) else full


class SharedBackend(Backend):
    """transformers' forward with the prefix K/V (or recurrent state) held once, read through the shared-prefix
    attention function (installed on the model when the backend is made)."""

    name = "shared"
    supports = frozenset({"sinks", "softcap", "sliding_window", "linear_attention"})

    @classmethod
    def refuses(cls, model, features: dict) -> str | None:
        return linear_support(model) if "linear_attention" in features else None

    def __init__(self, model):
        super().__init__(model)
        install_shared_attention(model)
        self.prunes = install_last_layer_pruning(model)  # the last layer only at the read positions
        self._patterns = False
        self._hooked = False  # hooks see every position: no pruning under them

    def _forward(self, ids, groups, lengths, read, capture):
        prefix = groups[0][0]
        B, S = ids.shape
        pos = torch.arange(prefix.length, prefix.length + S, device=ids.device).unsqueeze(0).expand(B, S)
        # prune where it saves work: read positions given, not all of them, no hooks watching every position
        prune = self.prunes and read is not None and not self._hooked and len(read[0]) < B * S
        state = _PrefixState(prefix, capture, None if lengths is None else [int(n) for n in lengths],
                             patterns=self._patterns, read=read if prune else None)
        out = self.model.get_decoder()(input_ids=ids, position_ids=pos, use_cache=False, **{PREFIX_KWARG: state})
        captured = None
        if capture:
            missing = [i for i in range(self.n_layers) if i not in state.captured]
            if missing:  # a layer that never called the shared function would have run without the prefix
                raise ModeError(f"layers {missing} did not run through logitjudge's shared-prefix attention; use "
                                 "prefix_mode='copy' or 'plain' for this model")
            captured = [state.captured[i] for i in range(self.n_layers)]
        return self.select(out.last_hidden_state, read), captured

    @contextlib.contextmanager
    def hooks(self, fns: dict):
        """The module hooks; a pattern hook makes the shared attention function return the probabilities."""
        from ..hooks import module_hooks

        self._patterns = any(name.endswith("hook_pattern") for name in fns)
        self._hooked = bool(fns)
        try:
            with module_hooks(self.model, fns):
                yield
        finally:
            self._patterns = self._hooked = False
