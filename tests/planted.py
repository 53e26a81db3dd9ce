"""A tiny GPT-2 with a planted positional shortcut: one head of the last layer attends to the first option line
and writes the label of the option shown there.

Construction (d = 64; token embeddings live in dims 0-15, position embeddings in dims 16-47): every other
weight is zero, so block 0 and the MLPs pass the residual through and layer 1's head 1 adds nothing. Head 0 of
layer 1 has a constant query (its bias) equal to ``beta`` x the position embedding of the first option line's
first token, keys that read the position dims, values that read the token dims, and an output map that sends
the embedding of each option line's first token to the unembedding of that option's first label token. The
label tokens' embeddings are orthonormal and sum to zero over the dims, position embeddings are zero-sum and
of equal norm, so the layer norms only rescale them. The rubric-first template puts the first option line at
the same token position in every prompt.
"""

from __future__ import annotations

import numpy as np
import torch

from logitjudge.models import Judge
from logitjudge.prompts import builtin_template
from logitjudge.rubric import Criterion, Rubric, ScoreOption

TOK, POS = slice(0, 16), slice(16, 48)


def planted_rubric() -> Rubric:
    descs = ["the text is unclear", "the text is poor", "the text is fair", "the text is good",
             "the text is clear"]
    opts = tuple(ScoreOption(float(i + 1), str(i + 1), d) for i, d in enumerate(descs))
    return Rubric((Criterion("Quality", opts, "overall quality"),), "Rate the text below.")


def _zero_sum_orthonormal(k: int, dim: int, rng) -> np.ndarray:
    a = rng.standard_normal((dim, k))
    a -= a.mean(axis=0)
    q, _ = np.linalg.qr(a)
    return q.T  # (k, dim) orthonormal rows, each summing to 0


def planted_gpt2(tokenizer, line_pos: int, line_tokens: list[int], label_tokens: list[int], *,
                 beta: float = 3.0, gamma: float = 12.0, seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=len(tokenizer), n_embd=64, n_layer=2, n_head=2, n_positions=512,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=1, eos_token_id=2)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(cfg).eval()
    rng = np.random.default_rng(seed)
    special = sorted(set(line_tokens) | set(label_tokens))
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.fill_(1.0)
        wte = 0.02 * rng.standard_normal((len(tokenizer), 64))
        wte[:, 16:] = 0
        wte[:, TOK] -= wte[:, TOK].mean(axis=1, keepdims=True)
        wte[special, TOK] = _zero_sum_orthonormal(len(special), 16, rng)
        wpe = rng.standard_normal((512, 32))
        wpe -= wpe.mean(axis=1, keepdims=True)
        wpe *= 8.0 / np.linalg.norm(wpe, axis=1, keepdims=True)
        model.transformer.wte.weight[:] = torch.tensor(wte, dtype=torch.float32)
        model.transformer.wpe.weight[:, POS] = torch.tensor(wpe, dtype=torch.float32)
        attn = model.transformer.h[1].attn
        w, b = attn.c_attn.weight, attn.c_attn.bias  # (64, 192): x @ w + b -> [q | k | v], heads of 32
        b[0:32] = torch.tensor(beta * wpe[line_pos], dtype=torch.float32)  # head 0 query: the line's position
        w[16:48, 64:96] = torch.eye(32)  # head 0 keys: the position dims
        w[0:16, 128:144] = torch.eye(16)  # head 0 values: the token dims
        e = wte[line_tokens][:, TOK]  # (n, 16) line-start token embeddings (orthonormal)
        u = wte[label_tokens][:, TOK]  # (n, 16) label token embeddings
        m = u.T @ e  # (16, 16): e_o -> u_o
        attn.c_proj.weight[0:16, 0:16] = torch.tensor(gamma * m.T, dtype=torch.float32)
    return model


def planted_lm(tokenizer) -> tuple[Judge, Rubric, object]:
    """The planted model, its rubric and template, built from the prompts' own tokens."""
    from logitjudge import balanced
    from logitjudge.items import Item
    from logitjudge.requests import item_prompts

    rubric, template = planted_rubric(), builtin_template("rubric-first")
    config = type("C", (), {"max_position_embeddings": 512})()  # only the prompts are read: no weights yet
    probe_lm = Judge(tokenizer, config, "planted")
    from logitjudge.probing.prompts import probe_prompts

    item = Item("x", "The cat sat on the mat.")
    pps = probe_prompts(probe_lm, rubric, item, balanced(5), template)
    line_pos = int(np.flatnonzero(pps[0].spans.category == 0)[0])
    assert all(int(np.flatnonzero(pp.spans.category == 0)[0]) == line_pos for pp in pps)
    line_tokens = [0] * 5
    for pp in pps:
        line_tokens[int(pp.order[0])] = pp.ids[line_pos]
    labels = [c[0] for c in item_prompts(probe_lm, rubric, item, balanced(5)[:1], template)[0].continuation_ids]
    assert len(set(line_tokens)) == 5 and len(set(labels)) == 5
    model = planted_gpt2(tokenizer, line_pos, line_tokens, labels)
    return Judge.of(model, tokenizer, "planted-gpt2", dtype="fp32"), rubric, template
