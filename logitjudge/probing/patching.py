"""Order-swap activation patching at the answer position, with the clean prefix computed once.

For a pair (source ordering a, target ordering b) of one item and a site (a layer's residual output, its
attention output, its MLP output, or one head), the site's activation at the target's answer position (the last
prompt token, which predicts the first label token) is replaced by the source's at its answer position, and the
target's exact option distribution is read (every label's probability, renormalised over the options).

Why it is cheap: a patch at the answer position changes nothing before it. So per item the shared prefix (text,
instructions: up to the first token where the orderings differ) runs once; each ordering's option lines run once
on top of it (up to the answer token: the target caches); the clean run of each ordering (the answer token and
the label tokens before the last, on its cache) records the source activations at the answer position; and each
patch runs only those few tokens on the target's cache, the patches of a target (every source and site) in
batches of the token budget, each row patched at its own site. All of it goes through the scores' backend
(``plain``, which keeps no cache, runs each row's whole sequence instead). ``patch_item_plain`` is the reference
(:class:`PlainPatcher`): one full forward per source prompt and per patch, the model's own forward with hooks, as
hook libraries do it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ProbeError
from ..judge.head import group_reads
from ..judge.prefix import PrefixKV
from ..stats.probing import SITE_KINDS, site_names
from .lens import option_distribution
from .prompts import ProbePrompt, common_prefix

KINDS = SITE_KINDS
POINTS = {0: "hook_resid_post", 1: "hook_attn_out", 2: "hook_mlp_out", 3: "attn.hook_z"}
PAIRS = ("reverse", "canonical", "all")


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


def _slice(head_dim: int, kind: int, head: int) -> slice:
    if kind != 3:
        return slice(None)
    return slice(head * head_dim, (head + 1) * head_dim)


def _label_rows(pp: ProbePrompt):
    """Distinct label prefixes of a prompt: [(tokens after the answer token, [(offset, token, option)])]."""
    by: dict[tuple, list] = {}
    for o, cont in enumerate(pp.encoded.continuation_ids):
        by.setdefault(tuple(cont[:-1]), []).append((o, cont))
    return [(list(pre), [(t, c[t], o) for o, c in opts for t in range(len(c))]) for pre, opts in by.items()]


def _point(sites: Sites, s: int) -> str:
    return f"blocks.{int(sites.layer[s])}.{POINTS[int(sites.kind[s])]}"


def _patch_fns(head_dim: int, sites: Sites, plan: list, pos) -> dict:
    """Hooks that write ``plan`` = [(row, site index, vector)] at row's position ``pos[row]``."""
    by_point: dict[str, list] = {}
    for row, s, vec in plan:
        by_point.setdefault(_point(sites, s), []).append(
            (row, _slice(head_dim, int(sites.kind[s]), int(sites.head[s])), vec))

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


def _site_vector(store: dict, sites: Sites, head_dim: int, s: int, j: int) -> torch.Tensor:
    return store[_point(sites, s)][j, _slice(head_dim, int(sites.kind[s]), int(sites.head[s]))]


@torch.inference_mode()
def patch_item(backend, prompts: list[ProbePrompt], pairs, sites: Sites, *,
               token_budget: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Clean (K, n) and patched (P, S, n) option distributions of one item (see the module doc).

    ``backend``: the scores' :class:`~logitjudge.judge.backends.base.Backend`. ``token_budget``: rows x tokens of
    one patch batch (a backend that copies the prefix per row counts the prefix in every row)."""
    L, K, n = backend.n_layers, len(prompts), len(prompts[0].order)
    device = backend.device
    lp = common_prefix([pp.ids for pp in prompts], cap=min(pp.answer for pp in prompts)) if backend.caches else 0
    root = PrefixKV.empty(L)
    if lp:
        _, cap = backend.forward(torch.tensor([list(prompts[0].ids[:lp])], device=device), [(root, 1)],
                                 lengths=[lp], capture=True)
        root = root.extend(cap, 0, lp)
    # each ordering's option lines up to the answer token, on the shared prefix: the target caches; a backend
    # without a cache runs each row's whole context instead (``tails``)
    ctx = [list(pp.ids[lp:pp.answer]) for pp in prompts]
    targets, tails = [root] * K, [[] for _ in range(K)]
    if not backend.caches:
        tails = ctx
    elif max(len(c) for c in ctx):
        ids = torch.zeros((K, max(len(c) for c in ctx)), dtype=torch.long)
        for k, c in enumerate(ctx):
            ids[k, :len(c)] = torch.tensor(c, dtype=torch.long)
        _, cap = backend.forward(ids.to(device), [(root, K)], lengths=[len(c) for c in ctx], capture=True)
        targets = [root.extend(cap, k, len(c)) for k, c in enumerate(ctx)]
    # the clean run of each ordering, recording every hook point at its answer position (the sources)
    clean = np.zeros((K, n))
    src = []
    for k, pp in enumerate(prompts):
        store: dict = {}
        clean[k] = _run_target(backend, pp, targets[k], tails[k], [(None, None)], pairs, sites, src, store)[0]
        src.append(store)
    patched = np.zeros((len(pairs), len(sites), n))
    for b in range(K):
        jobs = [(p, s) for p in np.flatnonzero(pairs[:, 1] == b) for s in range(len(sites))]
        width = len(tails[b]) + 1 + max(len(pre) for pre, _ in _label_rows(prompts[b]))
        cost = width + (targets[b].length if backend.copies_prefix else 0)
        rows = max(1, token_budget // (cost * len(_label_rows(prompts[b]))))  # jobs per batch
        for start in range(0, len(jobs), rows):
            chunk = jobs[start:start + rows]
            dists = _run_target(backend, prompts[b], targets[b], tails[b], chunk, pairs, sites, src)
            for (p, s), d in zip(chunk, dists):
                patched[p, s] = d
    return clean, patched


def _run_target(backend, pp: ProbePrompt, prefix: PrefixKV, tail: list, jobs, pairs, sites, src, record=None):
    """One batch on a target's cache: rows = jobs x distinct label prefixes, each row ``tail`` (context the
    cache does not hold) + the answer token + a label prefix, patched at its own site at the answer token
    (``record``: keep every hook point there instead, from the first row); option distributions per job."""
    labels = _label_rows(pp)
    a = len(tail)  # the answer token's offset in every row
    rows = [(j, pre, reads) for j in range(len(jobs)) for pre, reads in labels]
    ids = torch.zeros((len(rows), a + 1 + max(len(pre) for pre, _ in labels)), dtype=torch.long)
    plan, reads = [], []
    for r, (j, pre, rd) in enumerate(rows):
        seq = [*tail, pp.ids[pp.answer], *pre]
        ids[r, :len(seq)] = torch.tensor(seq, dtype=torch.long)
        p, s = jobs[j]
        if p is not None:
            plan.append((r, s, _site_vector(src[int(pairs[p, 0])], sites, backend.head_dim, s, 0)))
        reads += [((r, a + t), tok, (j, o)) for t, tok, o in rd]
    points, toks, keys = group_reads(reads)  # one read row per position, its labels as columns
    fns = _patch_fns(backend.head_dim, sites, plan, [a] * len(rows))
    if record is not None:
        fns.update(_record_fns(backend.n_layers, [0], [a], record))
    device = backend.device
    read = (torch.tensor([p[0] for p in points], device=device), torch.tensor([p[1] for p in points], device=device))
    with backend.hooks(fns):
        hidden, _ = backend.forward(ids.to(device), [(prefix, len(rows))],
                                    lengths=[a + 1 + len(pre) for _, pre, _ in rows], read=read)
    lps = backend.head.read_lists(hidden, toks)  # (points, labels read there)
    out = np.zeros((len(jobs), len(pp.order)))
    for i, ks in enumerate(keys):
        for m, (j, o) in enumerate(ks):
            out[j, o] += lps[i, m]
    return option_distribution(out)


class PlainPatcher:
    """The reference way, one forward at a time, as hook libraries do it: the model's own forward with the hook
    points on its modules (the ``plain`` backend's), no cache. Built on one item's prompts, it records each
    ordering's activations at its answer position (one full forward per prompt); :meth:`clean` and
    :meth:`patched` then run one full forward per label prefix of the target.

    ``logits="all"`` computes the vocabulary logits at every position, as a hook library's forward does;
    ``"read"`` only at the positions read (``logits_to_keep``), the cheaper way a careful user would call it.
    The numbers are the same either way."""

    @torch.inference_mode()
    def __init__(self, model, prompts: list[ProbePrompt], sites: Sites, *, logits: str = "all"):
        from ..judge.backends import PlainBackend

        if logits not in ("all", "read"):
            raise ProbeError(f"logits={logits!r}: use 'all' or 'read'")
        self.model, self.prompts, self.sites, self.logits = model, prompts, sites, logits
        self.hooked = PlainBackend(model)
        self.acts = []
        for pp in prompts:
            src: dict = {}
            keep = {"logits_to_keep": 1} if logits == "read" else {}
            with self.hooked.hooks(_record_fns(self.hooked.n_layers, [0], [pp.answer], src)):
                model(input_ids=torch.tensor([list(pp.ids)], device=self.hooked.device), **keep)
            self.acts.append(src)

    @torch.inference_mode()
    def _run(self, pp: ProbePrompt, plan: list) -> np.ndarray:
        out = np.zeros(len(pp.order))
        for pre, reads in _label_rows(pp):
            ids = list(pp.ids) + pre
            first = pp.answer if self.logits == "read" else 0  # the first position whose logits are kept
            keep = {"logits_to_keep": len(ids) - first} if self.logits == "read" else {}
            with self.hooked.hooks(_patch_fns(self.hooked.head_dim, self.sites, plan, [pp.answer])):
                out_logits = self.model(input_ids=torch.tensor([ids], device=self.hooked.device), **keep).logits[0]
            logp = torch.log_softmax(out_logits.float(), dim=-1)  # (T', V)
            for t, tok, o in reads:
                out[o] += float(logp[pp.answer - first + t, tok])
        return option_distribution(out)

    def clean(self, target: int) -> np.ndarray:
        """The option distribution of ordering ``target``, unpatched."""
        return self._run(self.prompts[target], [])

    def patched(self, source: int, target: int, s: int) -> np.ndarray:
        """Ordering ``target``'s option distribution with site ``s`` taken from ordering ``source``."""
        vec = _site_vector(self.acts[source], self.sites, self.hooked.head_dim, s, 0)
        return self._run(self.prompts[target], [(0, s, vec)])


def patch_item_plain(model, prompts: list[ProbePrompt], pairs, sites: Sites, *,
                     logits: str = "all") -> tuple[np.ndarray, np.ndarray]:
    """Reference for :func:`patch_item`: (clean [ordering, option], patched [pair, site, option]) by
    :class:`PlainPatcher`, one full forward per source prompt and per (pair, site, label prefix)."""
    plain = PlainPatcher(model, prompts, sites, logits=logits)
    clean = np.stack([plain.clean(b) for b in range(len(prompts))])
    patched = np.zeros((len(pairs), len(sites), len(prompts[0].order)))
    for p, (a, b) in enumerate(pairs):
        for s in range(len(sites)):
            patched[p, s] = plain.patched(int(a), int(b), s)
    return clean, patched
