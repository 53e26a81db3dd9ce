"""Shared benchmark workloads: the same prompts for every peer (``benchmarks/peers.py``, ``engine.py``).

API (all a caller needs)::

    from benchmarks import workloads       # from the root, as ``python -m benchmarks.x`` runs
    wl = workloads.build("8x350", lm)      # lm: anything with .tokenizer and .max_length (a Judge)
    wl.groups                              # list per item of EncodedPrompt (logitjudge.requests.item_prompts)
    wl.prompts                             # the same, flat (item-major)
    wl.plain_tokens, wl.padded_tokens(16), wl.trie_tokens, wl.n_reads   # token counts (below)
    workloads.NAMES                        # ("1x350", "8x350", "1x2000", "mtbench")
    lm, wls = workloads.load("gemma-3-270m", ["8x350"], threads=2)   # a script's judge and workloads at once

Workloads (``SPECS``):

* ``1x350`` / ``8x350``: 1 / 8 texts of ~350 tokens; ``default`` rubric (5 options, labels "1".."5"),
  ``text-first`` template, ``balanced(5)`` -> 10 orderings per text.
* ``1x2000``: 1 text of ~2,000 tokens, otherwise as ``1x350``.
* ``mtbench``: the first MT-Bench turn-1 answer of gpt-4 with >= 350 tokens, cut to ~350, with its question as
  context; ``mt_bench`` rubric (10 options "1".."10"), ``bracketed`` template (terminator "]]", so labels are
  several tokens), ``balanced(10)`` -> 20 orderings.

Texts: HANNA stories (``mtbench``: MT-Bench answers) from the shared data folder, concatenated with blank
lines in data-set order and cut at a word boundary; text i starts where text i-1's material ended, so texts
differ.
Without the data folder the demo texts (``logitjudge/demo/texts.jsonl``) are concatenated (cycled) instead;
``Workload.source`` says which. Documented counts, with ``tokenizer(text, add_special_tokens=False)``:
``target * (1 - TOKEN_TOLERANCE) <= text tokens <= target`` for every text (checked by
``tests/test_benchmarks_smoke.py``).

Token counts (what each peer must run through the model):

* ``plain_tokens``: one full forward per distinct (prompt + continuation[:-1]) sequence of each prompt, as in
  ``logitjudge.engine.plain_prompt_logprobs`` (single-token labels: the sum of the prompt lengths).
* ``padded_tokens(batch_size)``: rows x padded width of ``logitjudge.judge.baselines.batched_prompt_logprobs`` over
  all prompts (longest first, ``batch_size`` rows per batch); single-token labels only.
* ``trie_tokens``: distinct token prefixes of those sequences per item (a token trie's nodes): the tokens any
  exact method must process once. ``Engine(lm, min_shared=0).stats["tokens"]`` equals it; the default
  ``min_shared`` recomputes short shared runs once per branch, so the engine processes a few more.
* ``n_reads``: distinct (context, next label token) pairs whose log-probability is read out.
* ``trie_context(window)``: (query, key) pairs of one attention layer over the trie tokens (for a FLOP floor).
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from logitjudge.items import Item
from logitjudge.orderings import balanced, parse
from logitjudge.prompts import EncodedPrompt, Template, builtin_template
from logitjudge.requests import item_prompts
from logitjudge.rubric import Rubric, builtin_rubric

TOKEN_TOLERANCE = 0.05
ROOT = Path(__file__).resolve().parents[1]
DEMO_TEXTS = ROOT / "logitjudge" / "demo" / "texts.jsonl"
DATA_DIR = ROOT.parent / "shared" / "data"  # default data folder (else $LOGITJUDGE_DATA, else the demo texts)


@dataclass(frozen=True)
class Spec:
    n_texts: int
    text_tokens: int
    rubric: str
    template: str
    source: str  # data set the texts come from: "hanna" or "mt_bench"


SPECS: dict[str, Spec] = {
    "1x350": Spec(1, 350, "default", "text-first", "hanna"),
    "8x350": Spec(8, 350, "default", "text-first", "hanna"),
    "1x2000": Spec(1, 2000, "default", "text-first", "hanna"),
    "mtbench": Spec(1, 350, "mt_bench", "bracketed", "mt_bench"),
}
NAMES: tuple[str, ...] = tuple(SPECS)


@dataclass
class Workload:
    name: str
    rubric: Rubric
    template: Template
    orderings: np.ndarray  # (K, n), or (I, K, n) per item
    items: list[Item]
    groups: list[list[EncodedPrompt]]  # per item, K prompts (one criterion)
    text_tokens: list[int]  # per item
    source: str  # where the texts came from

    @property
    def prompts(self) -> list[EncodedPrompt]:
        return [p for g in self.groups for p in g]

    @property
    def single_token(self) -> bool:
        return all(len(c) == 1 for p in self.prompts for c in p.continuation_ids)

    @property
    def plain_tokens(self) -> int:
        return sum(len(s) for p in self.prompts for s in _sequences(p))

    def padded_tokens(self, batch_size: int = 16) -> int:
        lens = sorted((len(p.prompt_ids) for p in self.prompts), reverse=True)
        return sum(len(lens[s:s + batch_size]) * lens[s] for s in range(0, len(lens), batch_size))

    def _trie_depths(self):
        """The position (1-based) of every distinct token prefix of every item's sequences: one per trie node."""
        for g in self.groups:
            root: dict = {}
            for p in g:
                for s in _sequences(p):
                    node = root
                    for depth, t in enumerate(s, 1):
                        if t not in node:
                            node[t] = {}
                            yield depth
                        node = node[t]

    @property
    def trie_tokens(self) -> int:
        return sum(1 for _ in self._trie_depths())

    def trie_context(self, window: int | None = None) -> int:
        """Sum over the trie's tokens of the keys each attends to (its position + 1, at most ``window``): the
        attention work of one layer that any exact method must do, in units of (query, key) pairs."""
        return sum(d if window is None else min(d, window) for d in self._trie_depths())

    def attention_flops(self, heads: int, head_dim: int, layer_windows) -> int:
        """FLOPs of the attention QK and PV products over the trie's (query, key) pairs, summed over layers with
        their sliding windows (None = global): 4 x heads x head_dim per pair."""
        ctx = {w: self.trie_context(w) for w in set(layer_windows)}
        return sum(4 * heads * head_dim * ctx[w] for w in layer_windows)

    @property
    def n_reads(self) -> int:
        total = 0
        for g in self.groups:
            reads = {tuple(p.prompt_ids) + tuple(c[:t]) + (c[t],)
                     for p in g for c in p.continuation_ids for t in range(len(c))}
            total += len(reads)
        return total

    def summary(self) -> dict:
        return {"name": self.name, "items": len(self.items), "orderings": int(self.orderings.shape[-2]),
                "options": self.rubric.n_options, "prompts": len(self.prompts), "source": self.source,
                "text_tokens": self.text_tokens, "single_token_labels": self.single_token,
                "prompt_tokens_mean": float(np.mean([len(p.prompt_ids) for p in self.prompts])),
                "plain_tokens": self.plain_tokens, "trie_tokens": self.trie_tokens, "n_reads": self.n_reads,
                "padded_tokens_b16": self.padded_tokens(16) if self.single_token else None}

    # ---- (de)serialisation for benchmark worker processes -------------------------------------------------
    def to_json(self) -> dict:
        return {"name": self.name, "summary": self.summary(),
                "groups": [[{"prompt_ids": list(p.prompt_ids), "continuation_ids": [list(c) for c in
                                                                                   p.continuation_ids],
                             "prompt_text": p.prompt_text, "continuations": list(p.continuations)}
                            for p in g] for g in self.groups]}


def engine_tokens(engine, groups) -> int:
    """Tokens ``engine`` (a ``logitjudge.engine.Engine``) runs for these prompts: the nodes of each item's trie, as
    it builds them (its ``min_shared``)."""
    from logitjudge.engine import prompt_job
    from logitjudge.trie import build as build_trie
    from logitjudge.trie import count_tokens

    total = 0
    for g in groups:
        job = prompt_job(g)
        total += count_tokens(build_trie(job.sequences, job.reads, min_shared=engine.min_shared))
    return total


def groups_from_json(d: dict) -> list[list[EncodedPrompt]]:
    """The prompt groups of :meth:`Workload.to_json` (workers need no tokenizer)."""
    return [[EncodedPrompt(tuple(p["prompt_ids"]), tuple(tuple(c) for c in p["continuation_ids"]),
                           p["prompt_text"], tuple(p["continuations"])) for p in g] for g in d["groups"]]


def _sequences(p: EncodedPrompt) -> list[tuple[int, ...]]:
    """Distinct sequences a full forward must run for one prompt: prompt + continuation[:-1]."""
    return sorted({tuple(p.prompt_ids) + tuple(c[:-1]) for c in p.continuation_ids})


# ---- texts -------------------------------------------------------------------------------------------------
def _count(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def trim_to_tokens(tokenizer, text: str, target: int) -> str:
    """The longest word-boundary prefix of ``text`` with at most ``target`` tokens (whole text if shorter)."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if len(enc["input_ids"]) <= target:
        return text
    cut = enc["offset_mapping"][target][0]
    while True:
        space = text.rfind(" ", 0, cut)
        piece = text[:space if space > 0 else cut].rstrip()
        if _count(tokenizer, piece) <= target or space <= 0:
            return piece
        cut = space


def _source_texts(source: str, data_dir) -> tuple[list[tuple[str, str]], str]:
    """[(text, context)] in data-set order, and a description of where they came from."""
    try:
        from logitjudge.data import DataError, load_dataset

        if data_dir is None and not os.environ.get("LOGITJUDGE_DATA") and DATA_DIR.is_dir():
            data_dir = DATA_DIR
        try:
            if source == "mt_bench":
                ds = load_dataset("mt_bench", data_dir, models=["gpt-4"])
            else:
                ds = load_dataset(source, data_dir)
            return [(it.text, it.context) for it in ds.items if it.text.strip()], f"{source} ({ds.path})"
        except DataError:
            pass
    except ImportError:
        pass
    demo = [json.loads(line)["text"] for line in DEMO_TEXTS.read_text(encoding="utf-8").splitlines() if line]
    return [(t, "") for t in demo], "demo texts (data folder absent)"


def make_texts(tokenizer, n: int, target: int, source: str = "hanna",
               data_dir=None) -> tuple[list[Item], str]:
    """``n`` items without context whose texts have ``target`` tokens (within TOKEN_TOLERANCE, never more)."""
    pool, where = _source_texts(source, data_dir)
    fallback = where.startswith("demo texts")
    items, cursor = [], 0
    for i in range(n):
        if fallback:  # a few short texts: item i starts at text i, so that no two items repeat each other
            cursor = i
        parts, tokens = [], 0
        # concatenate material (cycled) until it is long enough, then cut at a word boundary
        for text, _ in itertools.islice(itertools.cycle(pool), cursor % len(pool), None):
            parts.append(text.strip())
            cursor += 1
            tokens += _count(tokenizer, text) + 1
            if tokens > target * 1.1 + 16:
                break
        text = trim_to_tokens(tokenizer, "\n\n".join(parts), target)
        items.append(Item(f"{source}-{target}-{i}", text))
    return items, where


def mt_bench_items(tokenizer, n: int, target: int, data_dir=None) -> tuple[list[Item], str]:
    """The first ``n`` MT-Bench answers (gpt-4, turn 1) of at least ``target`` tokens, cut to ``target``, with
    their question as context; without the data, :func:`make_texts` on the demo texts."""
    pool, where = _source_texts("mt_bench", data_dir)
    long = [(t, c) for t, c in pool if c and _count(tokenizer, t) >= target][:n]
    if len(long) < n:
        return make_texts(tokenizer, n, target, "mt_bench", data_dir)
    return [Item(f"mt_bench-{target}-{i}", trim_to_tokens(tokenizer, t, target), c)
            for i, (t, c) in enumerate(long)], where


def build(name: str, lm, *, data_dir=None, orderings: str = "balanced", seed: int = 0) -> Workload:
    """The workload ``name`` (one of NAMES) encoded with ``lm``'s tokenizer (``lm.max_length`` is checked).
    ``orderings``: an ``orderings.parse`` spec (default balanced; per-item specs draw every text's own orders)."""
    if name not in SPECS:
        raise ValueError(f"unknown workload {name!r}; choose from {list(NAMES)}")
    spec = SPECS[name]
    rubric = builtin_rubric(spec.rubric)
    template = builtin_template(spec.template)
    make = mt_bench_items if spec.source == "mt_bench" else \
        (lambda tok, n, t, d: make_texts(tok, n, t, spec.source, d))
    items, where = make(lm.tokenizer, spec.n_texts, spec.text_tokens, data_dir)
    orders = balanced(rubric.n_options) if orderings == "balanced" else \
        parse(orderings, rubric.n_options, seed=seed, n_items=len(items))
    groups = [item_prompts(lm, rubric, it, orders[i] if orders.ndim == 3 else orders, template)
              for i, it in enumerate(items)]
    counts = [_count(lm.tokenizer, it.text) for it in items]
    return Workload(name, rubric, template, orders, items, groups, counts, where)


def load(model: str, names, *, dtype: str = "fp32", device: str = "cpu", threads: int | None = None,
         data_dir=None, orderings: str = "balanced") -> tuple:
    """The benchmarks' one judge-and-workload loader: ``model`` through ``logitjudge.models.load_model`` (torch's
    CPU threads set to ``threads`` first where given, else left at torch's choice) and each workload of ``names``
    (a list, or comma-separated) built on its tokenizer. Returns (lm, {name: Workload}) in ``names``' order."""
    from logitjudge.models import load_model, set_threads

    if threads:
        set_threads(threads)
    lm = load_model(model, dtype=dtype, device=device)
    names = [n for n in (names.split(",") if isinstance(names, str) else names) if n]
    return lm, {name: build(name, lm, data_dir=data_dir, orderings=orderings) for name in names}
