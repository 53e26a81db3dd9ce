"""Score items under a rubric and a set of orderings into a ScoreTable; resumable after an interruption.

Finished items are appended, one JSON line each and flushed, to ``<out>.partial.jsonl``; a run started again with
the same ``--out`` and the same settings skips them. JSON floats round-trip exactly, so a resumed table equals
an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from . import distributed
from .engine import Engine
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


class Checkpoint:
    """Append-only record of finished items for one run (identified by its fingerprint)."""

    def __init__(self, out: str | Path | None, fingerprint: str, *, tag: str = ""):
        self.path = None if out is None else Path(f"{out}{tag}.partial.jsonl")
        self.fingerprint = fingerprint
        self.done: dict[str, dict] = {}
        if self.path is None:
            return
        if self.path.exists():
            lines = self.path.read_text(encoding="utf-8").splitlines()
            head = json.loads(lines[0]) if lines else {}
            if head.get("fingerprint") != fingerprint:
                raise ValueError(f"{self.path} holds a run with other settings (model, rubric, orderings, "
                                   "template or texts); delete it or choose another --out")
            for line in lines[1:]:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    break  # a line cut by the interruption: that item is scored again
                self.done[rec["id"]] = rec
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"fingerprint": fingerprint}) + "\n", encoding="utf-8")

    def add(self, item_id: str, probs, mass) -> None:
        rec = {"id": item_id, "probs": np.asarray(probs).tolist(), "label_mass": np.asarray(mass).tolist()}
        self.done[item_id] = rec
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(rec) + "\n")
                f.flush()
                os.fsync(f.fileno())

    def finish(self) -> None:
        if self.path is not None and self.path.exists():
            self.path.unlink()


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
    todo = [i for i, it in enumerate(items) if world.owns(i) and it.id not in ckpt.done]
    t0 = time.perf_counter()
    mine = sum(world.owns(i) for i in range(len(items)))
    bar = _progress(mine, mine - len(todo), progress and world.rank == 0)
    pending = list(todo)
    while pending:
        # encode lazily in windows so that huge data sets do not hold every prompt in memory
        window = pending[:64]
        pending = pending[64:]
        prompts = {i: item_prompts(lm, rubric, items[i], option_orders, template) for i in window}
        for batch in _batches(prompts, engine.token_budget):
            lps = engine.prompt_logprobs([prompts[i] for i in batch])
            for i, item_lps in zip(batch, lps):
                probs = np.zeros((C, K, n))
                mass = np.zeros((C, K))
                for p, lp in enumerate(item_lps):
                    probs[p // K, p % K], mass[p // K, p % K] = distribution(lp)
                ckpt.add(items[i].id, probs, mass)
                bar.update(1)
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
    if world.rank == 0:
        table.save(out)
    distributed.barrier(world)
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
            "timings": {"score_seconds": elapsed}, "engine_stats": dict(engine.stats),
            **getattr(engine, "mode_meta", {}), **(extra or {})}


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
