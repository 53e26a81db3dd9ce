"""Several criteria in one prompt: exact per-slot distributions under permuted criteria orders.

The judge answers one line per criterion, in the listed order (``Coherence: 4`` newline ``Empathy: 3``); each
line's prefix is forced. Slot j's distribution depends on the answers written before it:

* ``greedy``: earlier slots hold their most probable label (teacher forcing). Each slot is one extra pass over
  the short answer text on top of the cached prompt (the cache is cut back to the tokens the new context shares
  with it, so tokenizers that merge across the answer boundary stay exact).
* ``marginal``: the exact marginal of each slot, summing over every answer to earlier slots weighted by its
  probability (renormalised over the labels). All contexts form one token trie, so every common part is computed
  once, but their number grows as n^j for slot j: above ``max_continuations`` label continuations per prompt the
  run is refused. Use it for few criteria and options (e.g. 3 x 3, 4 x 5); use greedy for HANNA-sized rubrics.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import numpy as np

from .checkpoint import Checkpoint
from .engine import Engine, Job
from .items import Item
from .orderings import validate
from .prompts import EncodedPrompt, Template, encode_prompt, load_template, wrap_chat
from .rubric import Rubric
from .scoring import _progress, distribution, finish_run, run_fingerprint, run_meta, table_from_records
from .table import ScoreTable

SLOT_MODES = ("greedy", "marginal")


class MultiCriteriaError(ValueError):
    pass


def multi_context(template: Template, tokenizer, rubric: Rubric, item: Item, option_order, criteria_order,
                  answers: tuple[str, ...]) -> str:
    """Prompt + the answers written to the first slots + the forced prefix of the next slot."""
    body = template.render_body(rubric, item.text, item.context, option_order, criteria_order)
    prefix = template.answer_prefix.format(name="")
    head = wrap_chat(tokenizer, body, prefix) if template.chat else body + prefix
    for j, label in enumerate(answers):
        name = rubric.criteria[criteria_order[j]].name
        head += template.slot_line.format(name=name) + template.continuation(label) + template.slot_separator
    return head + template.slot_line.format(name=rubric.criteria[criteria_order[len(answers)]].name)


def encode_slot(lm, template, rubric, item, option_order, criteria_order, answers) -> EncodedPrompt:
    crit = rubric.criteria[criteria_order[len(answers)]]
    ctx = multi_context(template, lm.tokenizer, rubric, item, option_order, criteria_order, tuple(answers))
    return encode_prompt(lm.tokenizer, ctx, [template.continuation(o.label) for o in crit.options],
                         add_special_tokens=not template.chat, max_length=lm.max_length,
                         where=f"item {item.id!r}, slot {len(answers)} ({crit.name})")


def _label_reads(ep: EncodedPrompt, start: int, tag) -> tuple[list[list[int]], list[list[tuple]]]:
    """Sequences (prompt tokens from ``start`` + continuation[:-1]) and reads keyed (tag, option, token)."""
    seqs, reads = [], []
    base = len(ep.prompt_ids) - 1 - start
    for o, cont in enumerate(ep.continuation_ids):
        seqs.append(list(ep.prompt_ids[start:]) + list(cont[:-1]))
        reads.append([(base + t, cont[t], (tag, o, t)) for t in range(len(cont))])
    return seqs, reads


def _option_logprobs(logprobs: dict, ep: EncodedPrompt, tag) -> np.ndarray:
    return np.array([sum(logprobs[(tag, o, t)] for t in range(len(c))) for o, c in enumerate(ep.continuation_ids)])


def _greedy_item(engine: Engine, lm, template, rubric, item, option_orders, criterion_orders):
    K, C, n = len(option_orders), rubric.n_criteria, rubric.n_options
    probs, mass = np.zeros((C, K, n)), np.zeros((C, K))
    answers: list[list[str]] = [[] for _ in range(K)]
    cached: list = [None] * K  # (token ids, PrefixKV) of each ordering's context so far
    for j in range(C):
        eps = [encode_slot(lm, template, rubric, item, option_orders[k], criterion_orders[k], answers[k])
               for k in range(K)]
        if j == 0:  # one trie over all orderings: the text is shared by all of them
            seqs, reads, ends = [], [], []
            for k, ep in enumerate(eps):
                s, r = _label_reads(ep, 0, k)
                seqs += s + [list(ep.prompt_ids)]
                reads += r + [[]]
                ends += [None] * len(s) + [("ctx", k)]
            res = engine.run([Job(seqs, reads, keep=ends)])
            results = [res[0]] * K
        else:
            jobs = []
            for k, ep in enumerate(eps):
                toks, pkv = cached[k]
                m = _common_prefix(toks, ep.prompt_ids, limit=len(ep.prompt_ids) - 1)
                s, r = _label_reads(ep, m, k)
                jobs.append(Job(s + [list(ep.prompt_ids[m:])], r + [[]], prefix=pkv.truncate(m),
                                keep=[None] * len(s) + [("ctx", k)]))
            results = engine.run(jobs)
        for k, ep in enumerate(eps):
            c = criterion_orders[k][j]
            p, m_ = distribution(_option_logprobs(results[k].logprobs, ep, k))
            probs[c, k], mass[c, k] = p, m_
            answers[k].append(rubric.criteria[c].options[int(np.argmax(p))].label)
            cached[k] = (list(ep.prompt_ids), results[k].caches[("ctx", k)])
    return probs, mass


def _common_prefix(a, b, *, limit: int) -> int:
    m = 0
    for x, y in zip(a, b):
        if x != y or m >= limit:
            break
        m += 1
    return m


def marginal_cost(n_options: int, n_criteria: int) -> int:
    """Label continuations per prompt in marginal mode: n * sum_j n^j."""
    return n_options * sum(n_options ** j for j in range(n_criteria))


def _marginal_item(engine: Engine, lm, template, rubric, item, option_orders, criterion_orders):
    K, C, n = len(option_orders), rubric.n_criteria, rubric.n_options
    seqs, reads, eps = [], [], {}
    for k in range(K):
        for j in range(C):
            for path in itertools.product(range(n), repeat=j):
                labels = [rubric.criteria[criterion_orders[k][i]].options[a].label for i, a in enumerate(path)]
                ep = encode_slot(lm, template, rubric, item, option_orders[k], criterion_orders[k], labels)
                eps[(k, path)] = ep
                s, r = _label_reads(ep, 0, (k, path))
                seqs += s
                reads += r
    lps = engine.run([Job(seqs, reads)])[0].logprobs
    probs, mass = np.zeros((C, K, n)), np.zeros((C, K))
    for k in range(K):
        weight = {(): 1.0}  # P(path) under the renormalised slot distributions
        for j in range(C):
            c = criterion_orders[k][j]
            nxt = {}
            for path, w in weight.items():
                p, m_ = distribution(_option_logprobs(lps, eps[(k, path)], (k, path)))
                probs[c, k] += w * p
                mass[c, k] += w * m_
                for a in range(n):
                    nxt[path + (a,)] = w * p[a]
            weight = nxt
    return probs, mass


def score_multi(lm, items: list[Item], rubric: Rubric, option_orders, criterion_orders, *, template=None,
                engine: Engine | None = None, out: str | Path | None = None, slots: str = "greedy",
                max_continuations: int = 20000, progress: bool = True, meta: dict | None = None) -> ScoreTable:
    """Per-slot distributions, indexed by the canonical criterion: ``probs[item, criterion, ordering, option]``.

    ``option_orders`` and ``criterion_orders`` are aligned (K rows each); use ``orderings.cross`` to combine
    every option order with every criteria order.
    """
    if slots not in SLOT_MODES:
        raise MultiCriteriaError(f"unknown slot mode {slots!r}; use greedy or marginal")
    template = load_template(template or "multi-criteria")
    rubric.validate(need_descriptions=template.needs_descriptions and "{description}" in template.option_line)
    n, C = rubric.n_options, rubric.n_criteria
    option_orders = validate(option_orders, n)
    criterion_orders = validate(criterion_orders, C)
    if len(option_orders) != len(criterion_orders):
        raise MultiCriteriaError(f"{len(option_orders)} option orders but {len(criterion_orders)} criteria orders; "
                                 "they must be aligned row by row (use orderings.cross to combine them)")
    if slots == "marginal" and marginal_cost(n, C) > max_continuations:
        raise MultiCriteriaError(
            f"marginal mode needs {marginal_cost(n, C):,} label continuations per prompt for {C} criteria x {n} "
            f"options (n * sum n^j), above the budget of {max_continuations:,}; use --slots greedy, fewer criteria "
            "per prompt, or raise --max-continuations")
    engine = engine or Engine(lm)
    fp = run_fingerprint(lm, rubric, items, np.concatenate([option_orders, criterion_orders], 1), template,
                         {"mode": "multi", "slots": slots})
    ckpt = Checkpoint(out, fp)
    fn = _greedy_item if slots == "greedy" else _marginal_item
    t0 = time.perf_counter()
    bar = _progress(len(items), sum(it.id in ckpt.done for it in items), progress)
    try:
        for it in items:
            if it.id in ckpt.done:
                continue
            probs, mass = fn(engine, lm, template, rubric, it, option_orders, criterion_orders)
            ckpt.add(it.id, probs, mass)
            bar.update(1)
    except BaseException:
        ckpt.close()  # keep the finished items for a resume; release the lock
        raise
    bar.close()
    table = table_from_records(ckpt.done, items, rubric, option_orders, criterion_orders,
                               run_meta(lm, rubric, template, engine, time.perf_counter() - t0,
                                        {"multi_criteria": True, "slots": slots, **(meta or {})}))
    finish_run(table, out, ckpt)
    return table


def dump_multi_prompts(lm, items, rubric, option_orders, criterion_orders, template, path) -> Path:
    """JSONL of the first-slot prompt of every (item, ordering) with its continuations (later slots extend it
    with the answers written before them)."""
    template = load_template(template or "multi-criteria")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8") as f:
        for it in items:
            for k, (oo, co) in enumerate(zip(option_orders, criterion_orders)):
                ep = encode_slot(lm, template, rubric, it, oo, co, [])
                f.write(json.dumps({"item_id": it.id, "ordering": k, "option_order": list(map(int, oo)),
                                    "criteria_order": [rubric.criteria[c].name for c in co], "slot": 0,
                                    "prompt": ep.prompt_text, "prompt_tokens": len(ep.prompt_ids),
                                    "continuations": list(ep.continuations)}, ensure_ascii=False) + "\n")
    return p
