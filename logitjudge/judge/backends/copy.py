"""The ``copy`` backend: the prefix copied into a per-row ``DynamicCache`` and transformers' forward on top.

The generic fallback for attention that does not go through transformers' ``AttentionInterface`` (or adds
ALiBi biases): any causal LM whose cache is a ``DynamicCache`` runs exactly, at the cost of one copy of the
prefix per row.
"""

from __future__ import annotations

import torch

from ..features import cache_keyword
from .base import Backend


class CopyBackend(Backend):
    name = "copy"
    supports = frozenset({"sinks", "softcap", "sliding_window", "alibi", "no_attention_interface"})
    copies_prefix = True

    def _forward(self, ids, groups, lengths, read, capture):
        from transformers import DynamicCache

        prefix = groups[0][0]
        B, S = ids.shape
        L = prefix.length
        cache = DynamicCache()
        for i in range(self.n_layers):
            if L == 0:
                break
            k, v = prefix.layer(i)
            cache.update(k.unsqueeze(0).expand(B, -1, -1, -1).contiguous(),
                         v.unsqueeze(0).expand(B, -1, -1, -1).contiguous(), i)
        pos = torch.arange(L, L + S, device=ids.device).unsqueeze(0).expand(B, S)
        decoder = self.model.get_decoder()
        mask = torch.ones(B, L + S, dtype=torch.long, device=ids.device)
        out = decoder(input_ids=ids, position_ids=pos, use_cache=True, attention_mask=mask,
                      **{cache_keyword(decoder): cache if L else DynamicCache()})
        captured = None
        if capture:
            c = out.past_key_values
            # copies of the suffix part: views would keep every row's copy of the prefix alive
            captured = [(layer.keys[:, :, L:].contiguous(), layer.values[:, :, L:].contiguous()) for layer in c.layers]
        return self.select(out.last_hidden_state, read), captured
