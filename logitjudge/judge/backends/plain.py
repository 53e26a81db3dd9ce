"""The ``plain`` backend: the model's own forward on whole sequences, no cache. Exact for any causal LM (the
reference every other backend is held to), with no shared work: the engine gives it one trie node per sequence."""

from __future__ import annotations

from ..features import FEATURES
from .base import Backend


class PlainBackend(Backend):
    name = "plain"
    supports = frozenset(FEATURES)
    caches = False

    def _forward(self, ids, groups, lengths, read, capture):
        out = self.model.get_decoder()(input_ids=ids, use_cache=False)  # right padding: causal, never seen
        return self.select(out.last_hidden_state, read), None
