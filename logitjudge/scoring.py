"""Score items under a rubric and a set of orderings into a ScoreTable; resumable after an interruption.

Finished batches are appended as self-checking records to ``<out>.partial.jsonl`` (:mod:`logitjudge.checkpoint`);
a run started again with the same ``--out`` and the same settings skips them. Batches are planned from the whole
item list (fixed windows), so a resumed run computes every item in the same batch as an uninterrupted one and the
tables are equal bit for bit.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from . import distributed
from .checkpoint import Checkpoint
from .engine import Engine, EngineError, NonFiniteError
from .items import Item
from .orderings import fixed, validate
from .prompts import EncodedPrompt, PromptError, Template, encode_prompt, load_template, wrap_chat
from .rubric import Rubric
from .table import ScoreTable


def render_prompt(template: Template, tokenizer, rubric: Rubric, item: Item, criterion_index: int,
                  option_order) -> str:
    """The prompt text for one criterion of a rubric under one option order (up to the answer)."""
    crit = rubric.criteria[criterion_index]
    single = Rubric((crit,), rubric.instructions, rubric.name)
    body = template.render_body(single, item.text, item.context, option_order)
    prefix = template.answer_prefix.format(name=crit.name)
    return wrap_chat(tokenizer, body, prefix) if template.chat else body + prefix


def item_prompts(lm, rubric: Rubric, item: Item, option_orders, template: Template) -> list[EncodedPrompt]:
    """Prompts of one item, criterion-major: index c * K + k."""
    if not item.text.strip():
        raise PromptError(f"item {item.id!r}: the text is empty")
    out = []
    for c, crit in enumerate(rubric.criteria):
        conts = [template.continuation(o.label) for o in crit.options]
        for k, order in enumerate(option_orders):
            prompt = render_prompt(template, lm.tokenizer, rubric, item, c, order)
            out.append(encode_prompt(lm.tokenizer, prompt, conts, add_special_tokens=not template.chat,
                                     max_length=lm.max_length,
                                     where=f"item {item.id!r}, criterion {crit.name!r}, ordering {k}"))
    return out


def distribution(logprobs: np.ndarray) -> tuple[np.ndarray, float]:
    """Renormalised option probabilities and the label mass (total probability of all labels)."""
    lp = np.asarray(logprobs, dtype=np.float64)
    m = lp.max()
    w = np.exp(lp - m)
    return w / w.sum(), float(np.exp(m) * w.sum())


def run_fingerprint(lm, rubric: Rubric, items: list[Item], option_orders, template: Template,
                    extra: dict | None = None) -> str:
    h = hashlib.sha256()
    for part in (lm.model_id, lm.revision, lm.dtype, json.dumps(rubric.to_dict(), sort_keys=True),
                 json.dumps(asdict(template), sort_keys=True), np.asarray(option_orders).tobytes(),
                 json.dumps(extra or {}, sort_keys=True, default=str)):
        h.update(str(part).encode() if not isinstance(part, bytes) else part)
    for it in items:
        h.update(json.dumps([it.id, it.text, it.context]).encode())
    return h.hexdigest()[:16]


PLAN_WINDOW = 64  # items encoded at once; batches never cross a window


def batch_plan(lm, rubric: Rubric, items: list[Item], indices: list[int], option_orders, template: Template,
               budget: int, done=()):
    """Batches ``[(item index, prompts), ...]`` fixed by the whole item list, the same in a resumed run: windows
    of PLAN_WINDOW consecutive items, grouped inside a window by prompt length (``_batches``). Prompts are
    encoded one window at a time so that huge data sets do not hold every prompt in memory."""
    for start in range(0, len(indices), PLAN_WINDOW):
        window = indices[start:start + PLAN_WINDOW]
        if all(items[i].id in done for i in window):
            continue
        prompts = {i: item_prompts(lm, rubric, items[i], option_orders, template) for i in window}
        for batch in _batches(prompts, budget):
            yield [(i, prompts[i]) for i in batch]


def item_distributions(item_lps, C: int, K: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """probs (C, K, n) and label mass (C, K) of one item from its prompts' label log-probabilities."""
    probs = np.zeros((C, K, n))
    mass = np.zeros((C, K))
    for p, lp in enumerate(item_lps):
        probs[p // K, p % K], mass[p // K, p % K] = distribution(lp)
    return probs, mass


def _logprobs(engine: Engine, groups, ids: list[str], rubric: Rubric, K: int):
    """The engine's log-probabilities; non-finite logits are reported with the item, criterion and ordering."""
    try:
        return engine.prompt_logprobs(groups)
    except NonFiniteError as e:
        c, k = divmod(e.key[0], K)
        raise EngineError(f"the model returned non-finite logits ({e.value}) for item {ids[e.job]!r}, criterion "
                          f"{rubric.criteria[c].name!r}, ordering {k}; nothing was written for it. Check the "
                          "model's weights, or run in fp32 (--dtype fp32) if it overflows in half precision"
                          ) from None


def _batches(prompts: dict, budget: int) -> list[list[int]]:
    """Indices of items grouped so a batch's top-level tokens stay near the budget; longest first."""
    lengths = {i: max(len(p.prompt_ids) for p in prompts[i]) for i in prompts}
    order = sorted(lengths, key=lambda i: -lengths[i])
    out, cur, tot = [], [], 0
    for i in order:
        if cur and tot + lengths[i] > budget:
            out.append(cur)
            cur, tot = [], 0
        cur.append(i)
        tot += lengths[i]
    if cur:
        out.append(cur)
    return out


def score(lm, items: list[Item], rubric: Rubric, option_orders=None, *, template=None, engine: Engine | None = None,
          out: str | Path | None = None, progress: bool = True, meta: dict | None = None) -> ScoreTable:
    """Exact option distributions of every (item, criterion, ordering) in one ScoreTable.

    With ``out``, finished items are checkpointed and the table is saved there; an interrupted run started
    again with the same ``out`` continues where it stopped.
    """
    template = load_template(template)
    rubric.validate(need_descriptions=template.needs_descriptions and "{description}" in template.option_line)
    n = rubric.n_options
    option_orders = validate(fixed(n) if option_orders is None else option_orders, n)
    if not items:
        raise ValueError("no items to score")
    ids = [it.id for it in items]
    if len(set(ids)) != len(ids):
        raise ValueError("item ids must be unique")
    engine = engine or Engine(lm)
    world = distributed.current(lm.device)
    fp = run_fingerprint(lm, rubric, items, option_orders, template, {"mode": "single"})
    ckpt = Checkpoint(out, fp, tag=f".rank{world.rank}" if world.active else "")
    K, C = len(option_orders), rubric.n_criteria
    mine = [i for i in range(len(items)) if world.owns(i)]
    t0 = time.perf_counter()
    bar = _progress(len(mine), sum(items[i].id in ckpt.done for i in mine), progress and world.rank == 0)
    try:
        for batch in batch_plan(lm, rubric, items, mine, option_orders, template, engine.token_budget,
                                ckpt.done):
            todo = [i for i, _ in batch if items[i].id not in ckpt.done]
            if not todo:
                continue
            prompts = dict(batch)
            lps = _logprobs(engine, [prompts[i] for i in todo], [items[i].id for i in todo], rubric, K)
            ckpt.add_batch({items[i].id: item_distributions(lp, C, K, n) for i, lp in zip(todo, lps)})
            bar.update(len(todo))
    except BaseException:
        ckpt.close()  # keep the finished batches for a resume; release the lock
        raise
    bar.close()
    elapsed = time.perf_counter() - t0
    done = distributed.gather_records(ckpt.done, world)
    table = table_from_records(done, items, rubric, option_orders, np.tile(np.arange(C), (K, 1)),
                               run_meta(lm, rubric, template, engine, elapsed,
                                        {"world_size": world.size, **(meta or {})}))
    finish_run(table, out, ckpt, world)
    return table


def table_from_records(done: dict, items: list[Item], rubric: Rubric, option_orders, criterion_orders,
                       meta: dict) -> ScoreTable:
    """The ScoreTable of finished checkpoint records, in the items' order."""
    return ScoreTable(np.stack([np.asarray(done[it.id]["probs"]) for it in items]),
                      np.stack([np.asarray(done[it.id]["label_mass"]) for it in items]),
                      option_orders, criterion_orders, np.array([c.values for c in rubric.criteria]),
                      [it.id for it in items], [c.name for c in rubric.criteria],
                      [it.group for it in items] if any(it.group for it in items) else None, meta)


def finish_run(table: ScoreTable, out, ckpt: Checkpoint, world=None) -> None:
    """Save the table (rank 0 only under torch.distributed), then drop the checkpoint."""
    if out is None:
        return
    world = world or distributed.World()
    try:
        if world.rank == 0:
            try:
                table.save(out)
            except OSError as e:
                raise OSError(e.errno, f"{e.strerror}; the finished items are kept in {ckpt.path}: free space "
                                       "and run the same command again to save the table without scoring again"
                              ) from None
        distributed.barrier(world)
    except BaseException:
        ckpt.close()
        raise
    ckpt.finish()


def run_meta(lm, rubric, template, engine, elapsed, extra=None) -> dict:
    import torch
    import transformers

    from . import __version__

    return {"model_id": lm.model_id, "revision": lm.revision, "dtype": lm.dtype, "device": lm.device,
            "model_source": lm.info, "rubric": rubric.to_dict(), "template": asdict(template),
            "prefix_mode": engine.prefix_mode, "token_budget": engine.token_budget,
            "torch_threads": torch.get_num_threads(), "row_kernels": _row_kernels(lm, engine),
            "versions": {"logitjudge": __version__, "torch": torch.__version__,
                         "transformers": transformers.__version__, "numpy": np.__version__},
            "timings": {"score_seconds": elapsed}, "engine_stats": dict(engine.stats), **(extra or {})}


def _row_kernels(lm, engine) -> str | None:
    """Which RMSNorm/RoPE row kernels the native path ran: the C ones, or the PyTorch references and why."""
    if engine.prefix_mode != "native":
        return None
    if lm.device != "cpu":
        return "PyTorch reference (the C kernels are CPU only)"
    from logitjudge_kernels.cpu_norm import cpu_kernels_status

    status = cpu_kernels_status()
    return "C" if status is None else f"PyTorch reference ({status})"


def _progress(total: int, done: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, disable=not enabled, unit="item", desc="scoring")


def dump_prompts(lm, items: list[Item], rubric: Rubric, option_orders, template, path: str | Path) -> Path:
    """JSONL, one line per prompt: item id, criterion, ordering index and order, the prompt exactly as it is
    tokenized, its token count, and each option's continuation string (label + terminator, plus any prompt
    tail that tokenizes together with the label), so anyone can audit the numbers with a plain forward pass."""
    template = load_template(template)
    option_orders = validate(option_orders, rubric.n_options)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    K = len(option_orders)
    with p.open("w", encoding="utf-8") as f:
        for it in items:
            for idx, ep in enumerate(item_prompts(lm, rubric, it, option_orders, template)):
                c, k = divmod(idx, K)
                f.write(json.dumps({
                    "item_id": it.id, "criterion": rubric.criteria[c].name, "ordering": k,
                    "option_order": option_orders[k].tolist(), "prompt": ep.prompt_text,
                    "prompt_tokens": len(ep.prompt_ids), "add_special_tokens": not template.chat,
                    "continuations": list(ep.continuations),
                    "labels": rubric.criteria[c].labels}, ensure_ascii=False) + "\n")
    return p
