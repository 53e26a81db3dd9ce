"""One clean run over an item's prompts that records what the lens, attention and linear probes read.

The item's shared prefix (text, instructions: everything before the first token where its sequences differ) is
run once and held as a :class:`~logitjudge.judge.prefix.PrefixKV`; the rows (each ordering's option lines, answer
prefix and the label tokens before the last) then run on top of it as one right-padded batch, through the same
backend as the scores (a backend that keeps no cache, ``plain``, runs the whole sequences instead), with the hook
points of :mod:`logitjudge.judge.hooks` recording the residual stream and the attention pattern.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..judge.head import group_reads
from ..judge.prefix import PrefixKV
from .prompts import ProbePrompt, common_prefix


@dataclass
class ItemCapture:
    lens_logprobs: np.ndarray  # (K, L, n): per layer, label log-probability (sum over the label's tokens)
    attention: np.ndarray | None  # (K, L, H, C): attention mass of the answer query on each span category
    hidden: np.ndarray | None  # (K, len(layers), 1 + n, d): answer position, then each line end (by position)


def _rows(prompts: list[ProbePrompt]):
    """(prompt index, token sequence, reads [(position, token, option)]); one row per distinct label prefix."""
    rows = []
    for k, pp in enumerate(prompts):
        by: dict[tuple, list] = {}
        for o, cont in enumerate(pp.encoded.continuation_ids):
            by.setdefault(tuple(cont[:-1]), []).append((o, cont))
        for pre, opts in by.items():
            reads = [(pp.answer + t, cont[t], o) for o, cont in opts for t in range(len(cont))]
            rows.append((k, list(pp.ids) + list(pre), reads))
    return rows


@torch.inference_mode()
def capture_item(backend, prompts: list[ProbePrompt], *, attention: bool = True,
                 hidden_layers=None) -> ItemCapture:
    """Lens log-probabilities, attention masses and hidden states of one item's prompts (see the module doc)."""
    L, n, K = backend.n_layers, len(prompts[0].order), len(prompts)
    rows = _rows(prompts)
    lp = common_prefix([r[1] for r in rows], cap=min(pp.answer for pp in prompts)) if backend.caches else 0
    want_hidden = hidden_layers is not None and len(hidden_layers) > 0
    first_row = {}
    for r, (k, _, _) in enumerate(rows):
        first_row.setdefault(k, r)
    pre_resid, pre = _prefix(backend, rows[0][1][:lp], keep_resid=want_hidden)
    B, S = len(rows), max(len(r[1]) for r in rows) - lp
    ids = torch.zeros((B, S), dtype=torch.long)
    for r, (_, seq, _) in enumerate(rows):
        ids[r, :len(seq) - lp] = torch.tensor(seq[lp:])
    resid: dict[int, torch.Tensor] = {}
    pattern: dict[int, torch.Tensor] = {}
    ans_rows = torch.tensor([first_row[k] for k in range(K)])
    ans_off = torch.tensor([prompts[k].answer - lp for k in range(K)])

    def keep_resid(layer):
        def fn(t):
            resid[layer] = t  # (B, S, d)
        return fn

    def keep_pattern(layer):
        def fn(t):
            pattern[layer] = t[ans_rows, :, ans_off].float()  # (K, H, lp + S)
        return fn

    fns = {f"blocks.{i}.hook_resid_post": keep_resid(i) for i in range(L)}
    if attention:
        fns.update({f"blocks.{i}.attn.hook_pattern": keep_pattern(i) for i in range(L)})
    with backend.hooks(fns):
        backend.forward(ids.to(backend.device), [(pre, B)], lengths=[len(r[1]) - lp for r in rows])
    lens = _lens(backend.head, rows, resid, lp, K, L, n)
    att = _masses(prompts, pattern, L, backend.n_heads) if attention else None
    hid = None
    if want_hidden:
        hid = np.stack([_hidden_at(pp, first_row[k], hidden_layers, resid, pre_resid, lp)
                        for k, pp in enumerate(prompts)])
    return ItemCapture(lens, att, hid)


def _prefix(backend, tokens, *, keep_resid: bool):
    """Run the shared prefix once: its cache, and (optionally) its residual stream per layer (lp, d)."""
    L = backend.n_layers
    if not tokens:
        return None, PrefixKV.empty(L)
    got: dict[int, torch.Tensor] = {}

    def keep(i):
        def fn(t):
            got[i] = t[0]  # (lp, d)
        return fn

    fns = {f"blocks.{i}.hook_resid_post": keep(i) for i in range(L)} if keep_resid else {}
    with backend.hooks(fns):
        _, captured = backend.forward(torch.tensor([tokens], device=backend.device), [(PrefixKV.empty(L), 1)],
                                      lengths=[len(tokens)], capture=True)
    return got, PrefixKV.empty(L).extend(captured, 0, len(tokens))


def _lens(head, rows, resid, lp, K, L, n) -> np.ndarray:
    """Teacher-forced lens log-probabilities (K, L, n): each label token read from every layer, one read row
    (one full-vocabulary log-sum-exp) per position and layer, its labels as columns."""
    points, toks, keys = group_reads(((r, pos - lp), tok, (k, o))
                                     for r, (k, _, reads) in enumerate(rows) for pos, tok, o in reads)
    rr, tt = [p[0] for p in points], [p[1] for p in points]
    h = torch.stack([resid[i][rr, tt] for i in range(L)], dim=1)  # (P, L, d)
    lp_all = head.read_lists(h.reshape(len(points) * L, -1), [t for t in toks for _ in range(L)], normed=False)
    lp_all = lp_all.reshape(len(points), L, -1)  # (P, L, M)
    out = np.zeros((K, L, n))
    for j, ks in enumerate(keys):
        for m, (k, o) in enumerate(ks):
            out[k, :, o] += lp_all[j, :, m]
    return out


def _masses(prompts, pattern, L, H) -> np.ndarray:
    """(K, L, H, C) attention mass of each prompt's answer query on each span category."""
    C = prompts[0].spans.n_categories
    out = np.zeros((len(prompts), L, H, C))
    for k, pp in enumerate(prompts):
        T = pp.answer + 1
        onehot = np.eye(C)[pp.spans.category[:T]]  # (T, C)
        for i in range(L):
            w = pattern[i][k, :, :T].double().cpu().numpy()  # (H, T); later keys are causally masked
            out[k, i] = w @ onehot
    return out


def _hidden_at(pp: ProbePrompt, row: int, layers, resid, pre_resid, lp) -> np.ndarray:
    """(len(layers), 1 + n, d) residual stream at the answer position and at each line end (by position)."""
    where = [pp.answer, *pp.spans.line_ends.tolist()]
    out = []
    for i in layers:
        vecs = [pre_resid[i][t] if t < lp else resid[i][row, t - lp] for t in where]
        out.append(torch.stack(vecs).float().cpu().numpy())
    return np.stack(out)
