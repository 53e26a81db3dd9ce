"""Candidates compared in one prompt: the rows of a pairwise or listwise run and their orders.

An option list whose order is permuted is a candidate list whose order is permuted. A pairwise or listwise prompt
is a rubric prompt whose options are the candidates - the items of one group, shown with the group's context -
so it runs on the rubric's rails: the same requests, token trie, :class:`~logitjudge.runs.Run`, checkpoint,
``--dump-prompts`` format and exactness tests (:mod:`logitjudge.requests`, :mod:`logitjudge.paradigm_run`).

Rows (one row of a candidate table = one set of candidates shown together):

* ``pairwise``: one row per unordered pair (i, j) of a group's items, i before j in the item order; every pair
  of the group, or ``pairs`` = K pairs drawn per group without replacement (seed ``seed``; all of them where a
  group has K pairs or fewer). Both orders always: ``option_orders = [[0, 1], [1, 0]]``, order 0 shows i first
  (as "A"), order 1 shows j first.
* ``listwise``: one row per group, its m candidates (2..26, one letter each) in item order; the candidate orders
  come from ``--orderings`` over m (``balanced``: the 2m rotations; ``all``: m! orders, m <= 7; ``random:K``: K
  orders drawn per group; ...; :func:`logitjudge.orderings.parse`). A candidate table holds one m, so every
  group must have the same number of items (refused otherwise, with the fix: ``[data] per_group``).

Labels belong to *slots*, not to candidates: the candidate shown first is "A", the second "B", and so on. A tie
label (a pairwise template's ``tie_label``, e.g. FastChat's "C") is one more option after the candidates that is
never permuted: it stays at the last position (``n = m + 1``; ``option_orders = [[0, 1, 2], [1, 0, 2]]``) and is
not listed as a candidate. Listwise lists take no tie label.

What the table stores (a :class:`~logitjudge.table.ScoreTable` whose items are rows):
``probs[row, criterion, ordering, candidate]`` in canonical candidate order (the tie last): the exact probability
that the judge answers the letter of the slot the candidate is shown at (renormalised over the labels);
``option_orders[ordering, slot]`` (or per row ``[row, ordering, slot]``): the candidate shown at each slot, so
``probs_by_position`` gives the probability of each letter; ``values[criterion, candidate]`` = the candidate's
number 1..m within the row (0 for the tie): identifiers, not scores; ``item_ids``: the row ids
(:func:`pair_id`; a listwise row's id is its group); ``item_groups``: each row's group; ``meta["paradigm"]``,
``meta["candidates"][row]`` (the candidates' item ids in canonical order) and ``meta["tie_label"]`` ("" for
none).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from .errors import LogitJudgeError
from .items import Item
from .orderings import OrderingError, parse

PARADIGMS = ("pointwise", "pairwise", "listwise")
POINTWISE = "pointwise"
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
MAX_CANDIDATES = len(LETTERS)


class CandidateError(LogitJudgeError, ValueError):
    """Items that cannot be compared as asked; the message names the problem and the fix."""


@dataclass(frozen=True)
class Row:
    """One set of candidates shown together: ``candidates`` (items of ``group``, canonical order) with the
    group's ``context``."""

    id: str
    group: str
    context: str
    candidates: tuple[Item, ...]

    @property
    def item(self) -> Item:
        """The row as an Item on the run's rails (checkpoint key, progress): its id, context and group; no text
        of its own (the candidates' texts are the options)."""
        return Item(self.id, "", self.context, self.group)

    @property
    def candidate_ids(self) -> list[str]:
        return [c.id for c in self.candidates]


def pair_id(a: str, b: str) -> str:
    """A pairwise row's id: the JSON list of its two item ids (unique whatever the ids contain)."""
    return json.dumps([a, b], ensure_ascii=False)


def check_paradigm(paradigm: str) -> str:
    if paradigm not in PARADIGMS:
        raise CandidateError(f"unknown paradigm {paradigm!r}; use one of {list(PARADIGMS)}")
    return paradigm


def groups_of(items: list[Item]) -> dict[str, list[Item]]:
    """The items of each group in item order, groups in order of first appearance; every item needs a group,
    every group at least 2 items and one context (the candidates of a prompt share it)."""
    no_group = [it.id for it in items if not it.group]
    if no_group:
        raise CandidateError(f"{len(no_group)} items have no group (e.g. {no_group[:3]}); pairwise and listwise "
                             "prompts compare the items of one group: give every item a 'group' (the items "
                             "compared with each other, e.g. the answers to one question)")
    groups: dict[str, list[Item]] = {}
    for it in items:
        groups.setdefault(it.group, []).append(it)
    for g, members in groups.items():
        if len(members) < 2:
            raise CandidateError(f"group {g!r} has a single item ({members[0].id!r}): nothing to compare it "
                                 "with; give it more items or leave it out")
        contexts = {it.context for it in members}
        if len(contexts) > 1:
            raise CandidateError(f"group {g!r}: its items have {len(contexts)} different contexts, but one "
                                 "prompt shows the candidates with one context; give the items of a group the "
                                 "same context (the question, the source article)")
    return groups


def plan_pairs(items: list[Item], *, pairs: int | None = None, seed: int = 0) -> list[Row]:
    """Pairwise rows: every pair of each group, or ``pairs`` random pairs per group (module doc)."""
    if pairs is not None and (isinstance(pairs, bool) or int(pairs) != pairs or pairs < 1):
        raise CandidateError(f"pairs must be a positive number of pairs per group, got {pairs!r}")
    rows = []
    for j, (g, members) in enumerate(groups_of(items).items()):
        ij = [(a, b) for a in range(len(members)) for b in range(a + 1, len(members))]
        if pairs is not None and pairs < len(ij):
            # one generator per group (seed, group index): a group's draw does not depend on the other groups
            pick = np.random.default_rng([int(seed), j]).choice(len(ij), size=int(pairs), replace=False)
            ij = [ij[k] for k in sorted(pick)]
        rows += [Row(pair_id(members[a].id, members[b].id), g, members[a].context, (members[a], members[b]))
                 for a, b in ij]
    return rows


def plan_lists(items: list[Item]) -> list[Row]:
    """Listwise rows: one per group, all its items as candidates (module doc)."""
    groups = groups_of(items)
    sizes = {g: len(m) for g, m in groups.items()}
    big = {g: s for g, s in sizes.items() if s > MAX_CANDIDATES}
    if big:
        raise CandidateError(f"groups {sorted(big)[:3]} have more than {MAX_CANDIDATES} items (one letter each): "
                             "keep at most 26 per group ([data] per_group = 26)")
    if len(set(sizes.values())) > 1:
        raise CandidateError(f"listwise groups differ in size ({dict(sorted(sizes.items())[:4])}...): a candidate "
                             "table holds lists of one length (slot 3 of a 5-list and of an 11-list are not the "
                             f"same position); keep the same number per group, e.g. [data] per_group = "
                             f"{min(sizes.values())}")
    return [Row(g, g, members[0].context, tuple(members)) for g, members in groups.items()]


def pair_orders(tie: bool) -> np.ndarray:
    """Both orders of a pair: [[0, 1], [1, 0]], with the tie label last and fixed when there is one."""
    o = np.array([[0, 1], [1, 0]], dtype=np.int64)
    return np.concatenate([o, np.full((2, 1), 2)], axis=1) if tie else o


def plan(items: list[Item], paradigm: str, *, pairs: int | None = None, orderings: str = "balanced",
         seed: int = 0, tie_label: str = "") -> tuple[list[Row], np.ndarray]:
    """(rows, option orders) of a pairwise or listwise run (module doc): pairwise (2, 2 [+1 tie]) orders shared
    by every pair; listwise the ``orderings`` design over the m candidates ((K, m) shared or (rows, K, m))."""
    check_paradigm(paradigm)
    if paradigm == POINTWISE:
        raise CandidateError("pointwise scoring has no candidate rows; score the items with the rubric")
    if paradigm == "pairwise":
        if orderings.strip().lower() != "balanced":
            raise CandidateError(f"pairwise prompts always show each pair in both orders; orderings "
                                 f"{orderings!r} does not apply (leave it at balanced)")
        return plan_pairs(items, pairs=pairs, seed=seed), pair_orders(bool(tie_label))
    if pairs is not None:
        raise CandidateError("pairs (random pairs per group) applies to pairwise prompts only")
    if tie_label:
        raise CandidateError(f"a listwise prompt names one of its candidates; the template's tie label "
                             f"{tie_label!r} applies to pairwise templates only")
    rows = plan_lists(items)
    m = len(rows[0].candidates)
    try:
        orders = parse(orderings, m, seed=seed, n_items=len(rows))
    except OrderingError as e:
        raise CandidateError(f"candidate orders of {m} candidates per group: {e}") from None
    return rows, orders


def candidate_ids(rows: list[Row]) -> list[str]:
    """Every candidate's item id once, in order of first appearance."""
    return list(dict.fromkeys(c for r in rows for c in r.candidate_ids))


# ---- a table's paradigm (meta written by logitjudge.paradigm_run) -------------------------------------------
def paradigm_of(table) -> str:
    """The paradigm of a score table: ``meta["paradigm"]``, or pointwise (every table before the candidates)."""
    return check_paradigm(str(table.meta.get("paradigm") or POINTWISE))


def table_candidates(table) -> list[list[str]]:
    """``[row][candidate]`` item ids of a pairwise or listwise table (canonical candidate order)."""
    cands = table.meta.get("candidates")
    rows, n = table.probs.shape[0], table.probs.shape[3] - bool(table.meta.get("tie_label"))
    if not isinstance(cands, list) or len(cands) != rows or any(len(c) != n for c in cands):
        raise CandidateError(f"the {paradigm_of(table)} table does not record its {rows} rows' {n} candidates "
                             "(meta['candidates']); score it again with logitjudge score --paradigm")
    return [[str(x) for x in c] for c in cands]


def known_ids(table) -> list[str]:
    """The item ids a table scores: its items (pointwise) or its rows' candidates."""
    if paradigm_of(table) == POINTWISE:
        return [str(x) for x in table.item_ids]
    return list(dict.fromkeys(x for c in table_candidates(table) for x in c))
