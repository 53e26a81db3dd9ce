"""Pointwise scoring whose items of one group share one token trie: best-of-N candidates (or an RL policy's
completions) answering one prompt are scored with the prompt (the items' ``context``) computed once.

A :class:`~logitjudge.run.Run` whose batches put the items of one ``group`` (else each item alone) into one
trie (:func:`logitjudge.steps.trie_groups`, as a pairwise run shares a group's context). The trie merges only
identical token prefixes, so every number is the per-item run's up to fp32 reassociation (a batch split); the
parity test against the plain forward is in ``tests/test_reward.py``. :func:`planned_tokens` counts, without
running the model, the tokens the run forwards (each trie node once): the exact cost.
"""

from __future__ import annotations

from .run import Run


class GroupedRun(Run):
    """A pointwise :class:`~logitjudge.run.Run` whose items of one group run as one token trie."""

    def trie_keys(self, idx: list[int]) -> list:
        return [self.items[i].group or f"\0{self.items[i].id}" for i in idx]


def score_grouped(lm, items, rubric, option_orders=None, *, template=None, engine=None, out=None,
                  progress: bool = True, meta: dict | None = None):
    """:func:`logitjudge.scoring.score` with the items of one group on one token trie (module doc)."""
    return GroupedRun(lm, items, rubric, option_orders, template=template, engine=engine, out=out,
                      progress=progress, meta=meta).execute()


def planned_tokens(run: Run) -> int:
    """The tokens ``run`` will forward (each trie node's segment once, as its batches plan them), counted from
    the encoded prompts without the model."""
    total = 0
    for batch in run.batches(list(range(len(run.items))), {}):
        total += run.engine.planned_tokens(batch.jobs())
    return total
