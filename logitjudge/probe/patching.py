"""Order-swap activation patching at the answer position, with the clean prefix computed once.

For a pair (source ordering a, target ordering b) of one item and a site (a layer's residual output, its
attention output, its MLP output, or one head), the site's activation at the target's answer position (the last
prompt token, which predicts the first label token) is replaced by the source's at its answer position, and the
target's exact option distribution is read (every label's probability, renormalised over the options).

Why it is cheap: a patch at the answer position changes nothing before it. So per item the shared prefix (text,
instructions: up to the first token where the orderings differ) runs once; each ordering's option lines run once
on top of it (that run also records the source activations at its last token); and each patch runs only the
answer token and the label tokens before the last (one token for one-token labels) on top of the target's
cache, all patches of a target (every source and site) as one batch, each row patched at its own site.
``patch_item_plain`` is the reference: one full forward per source prompt and per patch, the model's own forward
with hooks, as hook libraries do it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..forward import FORWARDS, PrefixKV
from ..stats.probing import SITE_KINDS, site_names
from .hooks import Architecture, ProbeError, hooks
from .lens import option_distribution, readout
from .prompts import ProbePrompt, common_prefix

KINDS = SITE_KINDS
POINTS = {0: "hook_resid_post", 1: "hook_attn_out", 2: "hook_mlp_out", 3: "attn.hook_z"}
PAIRS = ("reverse", "canonical", "all")
COPY_TOKENS = 1 << 14  # "copy" mode copies the target's prefix per row: rows x prefix length stays under this


@dataclass(frozen=True)
class Sites:
    """Patch sites: ``layer[s]``, ``kind[s]`` (index into KINDS) and ``head[s]`` (-1 unless a head)."""

    layer: np.ndarray
    kind: np.ndarray
    head: np.ndarray

    def __len__(self) -> int:
        return len(self.layer)

    def names(self) -> list[str]:
        return site_names(self.layer, self.kind, self.head)


def make_sites(n_layers: int, n_heads: int, kinds=("resid", "attn", "mlp", "head")) -> Sites:
    """Every layer's sites of the given kinds (heads: every head of every layer)."""
    bad = sorted(set(kinds) - set(KINDS))
    if bad:
        raise ProbeError(f"unknown patch site kinds {bad}; use {list(KINDS)}")
    rows = []
    for layer in range(n_layers):
        for k in kinds:
            if k == "head":
                rows += [(layer, 3, h) for h in range(n_heads)]
            else:
                rows.append((layer, KINDS.index(k), -1))
    a = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return Sites(a[:, 0], a[:, 1], a[:, 2])


def make_pairs(option_orders, kind: str = "reverse") -> np.ndarray:
    """(P, 2) [source, target] ordering indices. 'reverse': into each ordering from the ordering that lists
    the options in reverse (the next ordering if there is none); 'canonical': from ordering 0 into every other;
    'all': every ordered pair."""
    o = np.asarray(option_orders)
    K = len(o)
    if K < 2:
        raise ProbeError("order-swap patching needs at least 2 orderings")
    if kind == "reverse":
        out = []
        for b in range(K):
            rev = [a for a in range(K) if a != b and np.array_equal(o[a], o[b][::-1])]
            out.append((rev[0] if rev else (b + 1) % K, b))
    elif kind == "canonical":
        out = [(0, b) for b in range(1, K)]
    elif kind == "all":
        out = [(a, b) for b in range(K) for a in range(K) if a != b]
    else:
        raise ProbeError(f"unknown pairs {kind!r}; use one of {list(PAIRS)}")
    return np.array(out, dtype=np.int64)


def _slice(arch: Architecture, kind: int, head: int) -> slice:
    if kind != 3:
        return slice(None)
    return slice(head * arch.head_dim, (head + 1) * arch.head_dim)


def _label_rows(pp: ProbePrompt):
    """Distinct label prefixes of a prompt: [(tokens after the answer token, [(offset, token, option)])]."""
    by: dict[tuple, list] = {}
    for o, cont in enumerate(pp.encoded.continuation_ids):
        by.setdefault(tuple(cont[:-1]), []).append((o, cont))
    return [(list(pre), [(t, c[t], o) for o, c in opts for t in range(len(c))]) for pre, opts in by.items()]


def _patch_fns(arch: Architecture, sites: Sites, plan: list, pos) -> dict:
    """Hooks that write ``plan`` = [(row, site index, vector)] at row's position ``pos[row]``."""
    by_point: dict[str, list] = {}
    for row, s, vec in plan:
        name = f"blocks.{int(sites.layer[s])}.{POINTS[int(sites.kind[s])]}"
        by_point.setdefault(name, []).append((row, _slice(arch, int(sites.kind[s]), int(sites.head[s])), vec))

    def make(items):
        def fn(t):
            t = t.clone()
            for row, sl, vec in items:
                t[row, pos[row], sl] = vec.to(t.dtype)
            return t
        return fn
    return {name: make(items) for name, items in by_point.items()}


def _record_fns(layers: int, rows, pos, store: dict) -> dict:
    """Hooks that keep every hook point's vector at (rows[j], pos[j]): store[name] (J, X)."""
    def make(name):
        def fn(t):
            store[name] = t[rows, pos].clone()
        return fn
    return {f"blocks.{i}.{p}": make(f"blocks.{i}.{p}") for i in range(layers) for p in POINTS.values()}


def _site_vector(store: dict, sites: Sites, arch: Architecture, s: int, j: int) -> torch.Tensor:
    name = f"blocks.{int(sites.layer[s])}.{POINTS[int(sites.kind[s])]}"
    return store[name][j, _slice(arch, int(sites.kind[s]), int(sites.head[s]))]


@torch.inference_mode()
def patch_item(model, arch: Architecture, prompts: list[ProbePrompt], pairs, sites: Sites, *,
               mode: str = "shared", max_rows: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Clean (K, n) and patched (P, S, n) option distributions of one item (see the module doc).

    ``mode``: the forward that continues a cache, "shared" (prefix held once; needs
    ``forward.install_shared_attention(model)``) or "copy" (any causal LM; the prefix is copied per row, so a
    batch holds at most ``COPY_TOKENS`` copied prefix tokens). ``max_rows``: patch rows per forward call."""
    forward = FORWARDS[mode]
    device = next(model.parameters()).device
    L, K = arch.n_layers, len(prompts)
    lp = common_prefix([pp.ids for pp in prompts], cap=min(pp.answer for pp in prompts))
    root = PrefixKV.empty(L)
    if lp:
        _, cap = forward(model, torch.tensor([list(prompts[0].ids[:lp])], device=device), root, capture=True)
        root = root.extend(cap, 0, lp)
    # each ordering's option lines + answer token on the shared prefix; records the source activations
    S = max(len(pp.ids) for pp in prompts) - lp
    ids = torch.zeros((K, S), dtype=torch.long)
    for k, pp in enumerate(prompts):
        ids[k, :len(pp.ids) - lp] = torch.tensor(pp.ids[lp:])
    last = [pp.answer - lp for pp in prompts]
    src: dict = {}
    with hooks(model, _record_fns(L, list(range(K)), last, src), arch):
        _, cap = forward(model, ids.to(device), root, capture=True)
    targets = [root.extend(cap, k, last[k]) if last[k] else root for k in range(K)]
    clean = np.zeros((K, len(prompts[0].order)))
    patched = np.zeros((len(pairs), len(sites), len(prompts[0].order)))
    for b in range(K):
        if mode == "copy":
            max_rows = max(1, min(max_rows, COPY_TOKENS // max(1, targets[b].length)))
        jobs = [(None, None)] + [(p, s) for p in np.flatnonzero(pairs[:, 1] == b) for s in range(len(sites))]
        for start in range(0, len(jobs), max_rows):
            dists = _run_target(model, arch, forward, prompts[b], targets[b], jobs[start:start + max_rows],
                                pairs, sites, src, device)
            for (p, s), d in zip(jobs[start:start + max_rows], dists):
                if p is None:
                    clean[b] = d
                else:
                    patched[p, s] = d
    return clean, patched


def _run_target(model, arch, forward, pp: ProbePrompt, prefix: PrefixKV, jobs, pairs, sites, src, device):
    """One batch: rows = jobs x distinct label prefixes, each patched at its own site; option distributions."""
    labels = _label_rows(pp)
    width = 1 + max(len(pre) for pre, _ in labels)
    rows = [(j, pre, reads) for j in range(len(jobs)) for pre, reads in labels]
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    plan, sel_r, sel_t, toks, keys = [], [], [], [], []
    for r, (j, pre, reads) in enumerate(rows):
        ids[r, :1 + len(pre)] = torch.tensor([pp.ids[-1], *pre])
        p, s = jobs[j]
        if p is not None:
            plan.append((r, s, _site_vector(src, sites, arch, s, int(pairs[p, 0]))))
        for t, tok, o in reads:
            sel_r.append(r)
            sel_t.append(t)
            toks.append(tok)
            keys.append((j, o))
    with hooks(model, _patch_fns(arch, sites, plan, [0] * len(rows)), arch):
        hidden, _ = forward(model, ids.to(device), prefix, capture=False,
                            select=(torch.tensor(sel_r, device=device), torch.tensor(sel_t, device=device)))
    lps = readout(model, arch, hidden, torch.tensor(toks).unsqueeze(1), normed=True)[:, 0].double().cpu().numpy()
    out = np.zeros((len(jobs), len(pp.order)))
    for (j, o), v in zip(keys, lps):
        out[j, o] += v
    return option_distribution(out)


@torch.inference_mode()
def patch_item_plain(model, arch: Architecture, prompts: list[ProbePrompt], pairs, sites: Sites, *,
                     logits: str = "all") -> tuple[np.ndarray, np.ndarray]:
    """Reference: one full forward per source prompt and per (pair, site, label prefix), no cache.

    ``logits="all"`` computes the vocabulary logits at every position, as a hook library's forward does;
    ``"read"`` only at the positions read (``logits_to_keep``), the cheaper way a careful user would call it.
    The numbers are the same either way."""
    if logits not in ("all", "read"):
        raise ValueError(f"logits={logits!r}: use 'all' or 'read'")
    device = next(model.parameters()).device
    L = arch.n_layers
    src: dict = {}
    acts = []
    for pp in prompts:
        keep = {"logits_to_keep": 1} if logits == "read" else {}
        with hooks(model, _record_fns(L, [0], [pp.answer], src), arch):
            model(input_ids=torch.tensor([list(pp.ids)], device=device), **keep)
        acts.append(dict(src))

    def run(pp: ProbePrompt, plan_vec) -> np.ndarray:
        out = np.zeros(len(pp.order))
        for pre, reads in _label_rows(pp):
            plan = [] if plan_vec is None else [(0, plan_vec[0], plan_vec[1])]
            ids = list(pp.ids) + pre
            first = pp.answer if logits == "read" else 0  # the first position whose logits are kept
            keep = {"logits_to_keep": len(ids) - first} if logits == "read" else {}
            with hooks(model, _patch_fns(arch, sites, plan, [pp.answer]), arch):
                out_logits = model(input_ids=torch.tensor([ids], device=device), **keep).logits[0]  # (T', V)
            logp = torch.log_softmax(out_logits.float(), dim=-1)
            for t, tok, o in reads:
                out[o] += float(logp[pp.answer - first + t, tok])
        return option_distribution(out)

    clean = np.stack([run(pp, None) for pp in prompts])
    patched = np.zeros((len(pairs), len(sites), len(prompts[0].order)))
    for p, (a, b) in enumerate(pairs):
        for s in range(len(sites)):
            patched[p, s] = run(prompts[b], (s, _site_vector(acts[a], sites, arch, s, 0)))
    return clean, patched
