"""Baselines the engine is measured against (benchmarks) and checked against (tests).

* :func:`logitjudge.engine.plain_prompt_logprobs`: one full forward per prompt, the reference path.
* :func:`batched_prompt_logprobs`: all prompts of a batch padded together, no prefix sharing, logits only at the
  last real position of each row (single-token labels only: it is the "what a careful user writes" baseline).
"""

from __future__ import annotations

import numpy as np
import torch

from ..prompts import EncodedPrompt


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
