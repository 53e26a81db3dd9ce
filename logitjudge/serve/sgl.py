"""``/v1/score`` on SGLang's request and response shape, read on the loaded judge's exact label log-probabilities.

SGLang (``TokenizerManager.score_request``) builds one prompt per item, ``query + item`` (``item + query`` with
``item_first``; text concatenated, then tokenized with the tokenizer's special tokens; token ids concatenated as
given), reads the next-token log-probability of each of ``label_token_ids`` after it, and answers per item the
probabilities in that order: ``exp(logprob)`` (each label's share of the whole vocabulary), or with
``apply_softmax`` the softmax over the labels' log-probabilities. Here each prompt is one job of the project's
engine (:meth:`logitjudge.engine.Engine.evaluate`, or a serving engine's): a read at the prompt's last position per
label token, as :func:`logitjudge.engine.label_reads` reads a one-token label, through the fp32 full-vocabulary
log-softmax of the engine's read-out.
"""

from __future__ import annotations

import numpy as np

from ..engine import Job
from ..errors import LogitJudgeError


class ScoreRefused(LogitJudgeError):
    """A /v1/score request that cannot be read: ``field`` names the request's field at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def _ids(tokenizer, value, field: str, vocab: int) -> list[int]:
    if isinstance(value, str):
        return list(tokenizer(value, add_special_tokens=True)["input_ids"])
    bad = [t for t in value if not 0 <= t < vocab]
    if bad:
        raise ScoreRefused(field, f"{field}: token id {bad[0]} is outside the judge's vocabulary (0..{vocab - 1})")
    return list(value)


def score_prompts(tokenizer, query, items, *, item_first: bool, vocab: int, max_length: int) -> list[list[int]]:
    """The token ids of each item's prompt, as SGLang builds them (module doc); refused in one line per field."""
    if items is None or (not isinstance(items, str) and len(items) == 0):
        raise ScoreRefused("items", "items is missing or empty; send one item text (or token-id list) or a list")
    if query is None:
        raise ScoreRefused("query", "query is missing; send the query text or its token ids")
    items = [items] if isinstance(items, str) else list(items)
    text = isinstance(query, str)
    if any(isinstance(it, str) != text for it in items):
        raise ScoreRefused("items", "query and items must both be text or both be token ids")
    prompts = []
    for n, item in enumerate(items):
        if text:
            ids = _ids(tokenizer, item + query if item_first else query + item, f"items[{n}]", vocab)
        else:
            q, i = _ids(tokenizer, query, "query", vocab), _ids(tokenizer, item, f"items[{n}]", vocab)
            ids = i + q if item_first else q + i
        if not ids:
            raise ScoreRefused(f"items[{n}]", f"items[{n}]: the prompt has no tokens; send a non-empty query or item")
        if len(ids) > max_length:
            raise ScoreRefused(f"items[{n}]", f"items[{n}]: the prompt is {len(ids):,} tokens but the judge's context "
                                              f"is {max_length:,}; shorten the query or the item")
        prompts.append(ids)
    return prompts


def check_labels(label_token_ids, vocab: int) -> list[int]:
    if not label_token_ids:
        raise ScoreRefused("label_token_ids", "label_token_ids is missing or empty; send the token ids to read, "
                                              "e.g. the ids of ' Yes' and ' No' in the judge's tokenizer")
    bad = [t for t in label_token_ids if not 0 <= t < vocab]
    if bad:
        raise ScoreRefused("label_token_ids", f"label_token_ids: {bad[0]} is outside the judge's vocabulary "
                                              f"(0..{vocab - 1})")
    return list(label_token_ids)


def label_logprobs(engine, prompts: list[list[int]], labels: list[int]) -> np.ndarray:
    """[items, labels]: log p(label | prompt) at each prompt's last position, one engine job per prompt (one
    sequence per label, as label_reads builds a one-token label's; the engine's trie runs the shared prompt once)."""
    jobs = [Job([list(p) for _ in labels], [[(len(p) - 1, t, (0, o, 0))] for o, t in enumerate(labels)])
            for p in prompts]
    res = engine.evaluate(jobs)
    return np.array([[r.logprobs[(0, o, 0)] for o in range(len(labels))] for r in res], dtype=np.float64)


def scores_of(logprobs: np.ndarray, apply_softmax: bool) -> list[list[float]]:
    """SGLang's scores: exp(logprob) per label, or the softmax over the labels."""
    if apply_softmax:
        w = np.exp(logprobs - logprobs.max(axis=1, keepdims=True))
        return (w / w.sum(axis=1, keepdims=True)).tolist()
    return np.exp(logprobs).tolist()
