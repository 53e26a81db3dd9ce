"""Single-criterion scoring: the batch plan and the per-batch step that a :class:`logitjudge.run.Run` drives.

Every (criterion, ordering) of an item is one prompt; an item's prompts form one token trie, and the items of a
batch run through the engine together. Batches are formed within fixed windows of the item list, from the
prompts' lengths alone, so an interrupted run that resumes forms exactly the batches it would have formed.
"""

from __future__ import annotations

import numpy as np

from .engine import Engine, distribution
from .prompts import EncodedPrompt

WINDOW = 64  # items encoded at once: huge data sets never hold every prompt in memory


def plan_batches(prompts: list[list[EncodedPrompt]], budget: int) -> list[list[int]]:
    """Positions in ``prompts`` grouped so a batch's top-level tokens stay near the budget; longest first."""
    lengths = [max(len(p.prompt_ids) for p in g) for g in prompts]
    order = sorted(range(len(prompts)), key=lambda i: -lengths[i])  # stable: ties keep the item order
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


def score_batch(engine: Engine, prompts: list[list[EncodedPrompt]], n_criteria: int) -> list[tuple]:
    """(probs[C, K, n], mass[C, K]) of each item of a batch from its criterion-major prompts (c * K + k)."""
    out = []
    for item_lps in engine.prompt_logprobs(prompts):
        K = len(item_lps) // n_criteria
        dists = [distribution(lp) for lp in item_lps]
        probs = np.stack([p for p, _ in dists]).reshape(n_criteria, K, -1)  # (C, K, n)
        mass = np.array([m for _, m in dists]).reshape(n_criteria, K)  # (C, K)
        out.append((probs, mass))
    return out


def score(lm, items, rubric, option_orders=None, *, template=None, engine: Engine | None = None, out=None,
          progress: bool = True, meta: dict | None = None):
    """Exact option distributions of every (item, criterion, ordering) in one ScoreTable.

    ``option_orders``: (K, n) shared by every item or (I, K, n) per item (default: the canonical order once).
    With ``out``, finished batches are checkpointed and the table is saved there; an interrupted run started
    again with the same ``out`` continues where it stopped. A :class:`logitjudge.run.Run`.
    """
    from .run import Run

    return Run(lm, items, rubric, option_orders, template=template, engine=engine, out=out, progress=progress,
               meta=meta).execute()
