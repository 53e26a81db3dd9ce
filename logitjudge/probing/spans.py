"""Which part of the prompt each token belongs to: the option lines (by position), their line ends, the
instructions, the judged text, the rest.

Every prompt token gets exactly one category (so attention masses over the categories sum to 1):

* ``line p``  (``0 <= p < n``): the tokens of the option line shown at position p, except its last token;
* ``end p``   (``n + p``): the last token of that line (its "line end", where a model can summarise the line);
* ``instructions`` (``2n``), ``text`` (``2n + 1``, the judged text and its context), ``rest`` (``2n + 2``:
  BOS, template words, the criterion header, the answer prefix, chat markup).

A token belongs to the category of the character it starts at (special tokens, which have no characters, are
``rest``). Character spans are found in the prompt exactly as rendered; a span that cannot be found is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ProbeError
from ..prompts import tokenize


def category_names(n: int) -> list[str]:
    return [f"line {p}" for p in range(n)] + [f"end {p}" for p in range(n)] + ["instructions", "text", "rest"]


@dataclass(frozen=True)
class Spans:
    """``category[t]`` of every prompt token t, and the token index of each option line's end (by position)."""

    category: np.ndarray  # (T,) int
    line_ends: np.ndarray  # (n,) int: token index of the last token of the line at position p

    @property
    def n_categories(self) -> int:
        return 2 * len(self.line_ends) + 3


def _find(text: str, needle: str, start: int, what: str) -> int:
    if not needle:
        return -1
    i = text.find(needle, start)
    if i < 0:
        raise ProbeError(f"cannot locate the {what} in the rendered prompt; is the template's text verbatim?")
    return i


def char_spans(prompt_text: str, template, criterion, instructions: str, text: str, context: str,
               option_order) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Character spans of the option lines (by position) and of [instructions, text, context]."""
    lines = [template.option_line.format(label=criterion.options[o].label,
                                         description=criterion.options[o].description, position=p + 1)
             for p, o in enumerate(option_order)]
    block = template.render_criterion(criterion, option_order)
    b = _find(prompt_text, block, 0, f"criterion block of {criterion.name!r}")
    start = _find(prompt_text, "\n".join(lines), b, "option lines")
    line_spans = []
    for ln in lines:
        line_spans.append((start, start + len(ln)))
        start += len(ln) + 1
    other = []
    for what, s in (("instructions", instructions), ("judged text", text), ("context", context)):
        i = _find(prompt_text, s.strip(), 0, what) if s and s.strip() else -1
        other.append((i, i + len(s.strip())) if i >= 0 else (0, 0))
    return line_spans, other


def token_spans(offsets, line_spans, other_spans) -> Spans:
    """Assign each token (character ``offsets`` (start, end)) to its category; see the module doc."""
    n = len(line_spans)
    T = len(offsets)
    cat = np.full(T, 2 * n + 2, dtype=np.int64)
    starts = np.array([s if e > s else -1 for s, e in offsets])

    def inside(span):
        a, b = span
        return (starts >= a) & (starts < b) & (starts >= 0)

    (ia, ib), (ta, tb), (ca, cb) = other_spans
    cat[inside((ia, ib))] = 2 * n
    cat[inside((ta, tb)) | inside((ca, cb))] = 2 * n + 1
    ends = np.zeros(n, dtype=np.int64)
    for p, span in enumerate(line_spans):
        idx = np.flatnonzero(inside(span))
        if idx.size == 0:
            raise ProbeError(f"option line at position {p} has no token of its own")
        cat[idx] = p
        ends[p] = idx[-1]
        cat[idx[-1]] = n + p
    return Spans(cat, ends)


def prompt_spans(tokenizer, encoded, template, criterion, instructions: str, text: str, context: str,
                 option_order, *, add_special_tokens: bool) -> Spans:
    """The :class:`Spans` of one encoded prompt (``encoded.prompt_ids`` re-derived with offsets and checked)."""
    full = encoded.prompt_text + encoded.continuations[0]
    ids, offsets, _ = tokenize(tokenizer, full, add_special_tokens=add_special_tokens)
    T = len(encoded.prompt_ids)
    if tuple(ids[:T]) != tuple(encoded.prompt_ids):
        raise ProbeError("re-tokenizing the prompt did not give the scored tokens; cannot assign token spans")
    lines, other = char_spans(encoded.prompt_text, template, criterion, instructions, text, context,
                              option_order)
    return token_spans(offsets[:T], lines, other)
