"""Baselines the engine is measured against (benchmarks) and checked against (tests).

* :func:`logitjudge.engine.plain_prompt_logprobs`: one full forward per prompt, the reference path.
* :func:`batched_prompt_logprobs`: all prompts of a batch padded together, no prefix sharing, logits only at the
  last real position of each row (single-token labels only: it is the "what a careful user writes" baseline).
* :func:`prefix_cache_prompt_logprobs`: transformers with its own prefix cache: an item's shared prefix once, its
  cache repeated for batched suffix rows (what a careful user writes with ``past_key_values``).
"""

from __future__ import annotations

import numpy as np
import torch

from ..prompts import EncodedPrompt
from .features import cache_keyword


@torch.inference_mode()
def batched_prompt_logprobs(model, prompts: list[EncodedPrompt], *, batch_size: int = 16,
                            pad_id: int = 0) -> list[np.ndarray]:
    """Right-padded batches of whole prompts; the unembedding only at each row's last real token."""
    if any(len(c) != 1 for ep in prompts for c in ep.continuation_ids):
        raise ValueError("the batched baseline reads one next-token distribution per prompt; it needs "
                         "single-token labels")
    device = next(model.parameters()).device
    out: list[np.ndarray] = [None] * len(prompts)  # type: ignore[list-item]
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i].prompt_ids))
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        T = max(len(prompts[i].prompt_ids) for i in idx)
        ids = torch.full((len(idx), T), pad_id, dtype=torch.long)
        mask = torch.zeros((len(idx), T), dtype=torch.long)
        for r, i in enumerate(idx):
            n = len(prompts[i].prompt_ids)
            ids[r, :n] = torch.tensor(prompts[i].prompt_ids)
            mask[r, :n] = 1
        last = mask.sum(1) - 1
        hidden = model.get_decoder()(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        h = hidden[torch.arange(len(idx)), last.to(device)]  # (B, d)
        logits = model.get_output_embeddings()(h).float()
        softcap = getattr(model.config.get_text_config(), "final_logit_softcapping", None)
        if softcap:
            logits = softcap * torch.tanh(logits / softcap)
        logp = torch.log_softmax(logits, dim=-1)
        for r, i in enumerate(idx):
            toks = [c[0] for c in prompts[i].continuation_ids]
            out[i] = logp[r, toks].double().cpu().numpy()
    return out


@torch.inference_mode()
def prefix_cache_prompt_logprobs(model, groups: list[list[EncodedPrompt]], *, batch_size: int = 16,
                                 pad_id: int = 0, stats: dict | None = None) -> list[list[np.ndarray]]:
    """transformers with its own prefix cache, the method a careful user writes: per group (an item's prompts)
    the prompts' longest common token prefix runs once with ``past_key_values`` (a ``DynamicCache``); every
    context that needs a next-token distribution (prompt + label[:t], so multi-token labels too) continues it
    as a suffix row: rows sorted by length, right-padded batches of ``batch_size`` with an attention mask, the
    prefix cache repeated for the rows of each batch; the head only at each row's last real token. Returns per
    group and prompt the log-probability of each whole label. ``stats["tokens"]`` counts prefix + padded
    suffix tokens run."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    cache_kw = cache_keyword(decoder)
    softcap = getattr(model.config.get_text_config(), "final_logit_softcapping", None)
    out = []
    for group in groups:
        need: dict[tuple, set] = {}  # context -> the label tokens read after it
        for ep in group:
            for c in ep.continuation_ids:
                for t in range(len(c)):
                    need.setdefault(tuple(ep.prompt_ids) + tuple(c[:t]), set()).add(c[t])
        ctxs = sorted(need, key=len)
        P = min(len(c) for c in ctxs) - 1  # keep >= 1 suffix token per row: its logits are the read
        for c in ctxs[1:]:
            P = min(P, next((i for i, (a, b) in enumerate(zip(ctxs[0], c)) if a != b), P))
        # a config-less cache keeps every prefix token in every layer (the masks apply the sliding windows)
        pre = decoder(input_ids=torch.tensor([ctxs[0][:P]], device=device), use_cache=True,
                      **{cache_kw: DynamicCache()}).past_key_values if P else None
        got: dict[tuple, np.ndarray] = {}
        for s in range(0, len(ctxs), batch_size):
            rows = ctxs[s:s + batch_size]
            S = max(len(c) for c in rows) - P
            ids = torch.full((len(rows), S), pad_id, dtype=torch.long)
            mask = torch.zeros((len(rows), P + S), dtype=torch.long)
            mask[:, :P] = 1
            for r, c in enumerate(rows):
                ids[r, :len(c) - P] = torch.tensor(c[P:])
                mask[r, P:len(c)] = 1
            cache = DynamicCache()
            for i, layer in enumerate(pre.layers if pre is not None else ()):  # the prefix, repeated per row
                cache.update(layer.keys.expand(len(rows), -1, -1, -1), layer.values.expand(len(rows), -1, -1, -1), i)
            pos = torch.arange(P, P + S).unsqueeze(0).expand(len(rows), S)
            hidden = decoder(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=pos.to(device),
                             use_cache=True, **{cache_kw: cache}).last_hidden_state
            last = torch.tensor([len(c) - P - 1 for c in rows], device=device)
            logits = head(hidden[torch.arange(len(rows), device=device), last]).float()
            if softcap:
                logits = softcap * torch.tanh(logits / softcap)
            logp = torch.log_softmax(logits, dim=-1).double().cpu().numpy()
            got.update({c: logp[r] for r, c in enumerate(rows)})
            if stats is not None:
                stats["tokens"] = stats.get("tokens", 0) + len(rows) * S
        if stats is not None:
            stats["tokens"] = stats.get("tokens", 0) + P
        out.append([np.array([sum(got[tuple(ep.prompt_ids) + tuple(c[:t])][c[t]] for t in range(len(c)))
                              for c in ep.continuation_ids]) for ep in group])
    return out
