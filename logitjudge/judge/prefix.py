"""The cache of a shared token prefix, held once on the trie: :class:`PrefixKV` (per layer the prefix's keys and
values, (Hkv, L, D)) and, for a linear-attention layer, its :class:`RecurrentState` at the prefix's end.

Every backend continues and captures these objects in the same way (:meth:`Backend.forward
<logitjudge.judge.backends.base.Backend.forward>`), so the engine and the probe never see how a family computes
them.
"""

from __future__ import annotations

import torch

from ..errors import ModeError


class RecurrentState:
    """A linear-attention layer's state at the end of a prefix: ``state`` (Hv, Dk, Dv) fp32 and ``conv``
    (C, K - 1), or batched (B, ...) per row while captured."""

    __slots__ = ("state", "conv", "lengths")

    def __init__(self, state: torch.Tensor, conv: torch.Tensor, lengths: list[int] | None = None):
        self.state, self.conv, self.lengths = state, conv, lengths

    def row(self, r: int, n: int) -> RecurrentState:
        """Row r's state after its first n tokens: only its end exists (a recurrence cannot be rewound)."""
        if self.lengths is not None and n != self.lengths[r]:
            raise ModeError(f"a linear-attention state exists only at the end of a row ({self.lengths[r]} "
                             f"tokens), not after {n}: prefixes of hybrid models cannot be cut inside a segment")
        return RecurrentState(self.state[r], self.conv[r])


class PrefixKV:
    """The KV cache of a shared token prefix: per layer one key and one value tensor of shape (Hkv, L, D).

    A prefix is a chain: its parent (None for a root) followed by its own segment, ``seg_keys[layer]`` /
    ``seg_values[layer]`` (Hkv, n, D), usually views into the batch that computed them. A trie child's context
    is its parent's plus one segment, so nothing is copied when the trie branches; :meth:`layer` joins the
    chain for one layer when it is used and the join is dropped after that layer. A linear-attention layer's
    entry is instead a :class:`RecurrentState` (``seg_keys[layer]``; its value entry is None): the state at the
    end of this segment, which already summarises the parents.
    """

    __slots__ = ("seg_keys", "seg_values", "length", "parent")

    def __init__(self, keys: list, values: list, length: int = 0, parent: PrefixKV | None = None):
        self.seg_keys, self.seg_values = keys, values
        self.length = int(length)
        self.parent = parent if parent is not None and parent.length > 0 else None

    @classmethod
    def empty(cls, n_layers: int) -> PrefixKV:
        return cls([None] * n_layers, [None] * n_layers, 0)

    @property
    def n_layers(self) -> int:
        return len(self.seg_keys)

    def recurrent(self, i: int) -> RecurrentState | None:
        """Linear-attention layer i's state at the end of the prefix (None for an empty prefix)."""
        return None if self.length == 0 else self.seg_keys[i]

    def layer(self, i: int, like: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values (Hkv, L, D) of the whole prefix at layer i (``like``: a (B, Hkv, S, D) tensor that
        gives the shape of an empty prefix)."""
        if self.length == 0:  # an empty prefix: (Hkv, 0, D)
            z = like.new_zeros((like.shape[1], 0, like.shape[3]))
            return z, z
        k, v = self.seg_keys[i], self.seg_values[i]
        if self.parent is None:
            return k, v
        pk, pv = self.parent.layer(i)
        return torch.cat([pk, k], dim=1), torch.cat([pv, v], dim=1)

    @property
    def keys(self) -> list[torch.Tensor]:
        return [self.layer(i)[0] for i in range(self.n_layers)]

    @property
    def values(self) -> list[torch.Tensor]:
        return [self.layer(i)[1] for i in range(self.n_layers)]

    def extend(self, captured: list, row: int, n: int) -> PrefixKV:
        """This prefix followed by the first n tokens of one captured suffix row (views, no copy)."""
        if n == 0:
            return self
        keys, values = [], []
        for c in captured:
            if isinstance(c, RecurrentState):
                keys.append(c.row(row, n))
                values.append(None)
            else:
                keys.append(c[0][row, :, :n])
                values.append(c[1][row, :, :n])
        return PrefixKV(keys, values, self.length + n, self)

    def truncate(self, n: int) -> PrefixKV:
        """The cache of the first n tokens (views, no copy)."""
        if not 0 <= n <= self.length:
            raise ModeError(f"cannot truncate a prefix of {self.length} tokens to {n}")
        if n == self.length:
            return self
        if n == 0:
            return PrefixKV.empty(self.n_layers)
        start = self.parent.length if self.parent is not None else 0
        if n <= start:
            return self.parent.truncate(n)
        own = n - start
        if any(isinstance(k, RecurrentState) for k in self.seg_keys):
            raise ModeError("a prefix of a model with linear-attention layers cannot be cut inside a segment "
                             "(the recurrent state exists only at its end): multi-criteria slot caches are not "
                             "supported for this model")
        return PrefixKV([k[:, :own] for k in self.seg_keys], [v[:, :own] for v in self.seg_values], n, self.parent)
