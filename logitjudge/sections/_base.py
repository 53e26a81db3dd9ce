"""What every analysis section shares: the :class:`Context` it computes from and the :class:`Section` shape.

A section computes one result per criterion (``per_criterion``) or one for the whole table, renders it as
Markdown, a summary and a caption, and may draw a plot. ``compute`` raises :class:`Skip` (or a
:class:`~logitjudge.stats.StatsError` from the estimators) when it cannot answer; the analysis records the
reason under ``skipped`` and goes on with the other sections.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

import numpy as np

from .. import stats as st
from ..stats._result import BALANCED, AlignmentError, DesignError
from ..stats.readings import check_reading
from ..table import ScoreTable
from ._format import reading_note


class Skip(Exception):
    """A section (or a criterion of it) that cannot be computed; the message is the reason."""


@dataclass(frozen=True)
class Partial:
    """A result with some parts left out: ``skipped`` maps each part to the reason."""

    value: dict
    skipped: dict


def _check_ids(table: ScoreTable, mapping: dict, what: str) -> None:
    ids = set(table.item_ids.tolist())
    unknown = [k for k in mapping if str(k) not in ids]
    if unknown:
        raise AlignmentError(f"{len(unknown)} {what} ids are not in the table (e.g. {unknown[:3]}); they "
                             "must match the item ids of the scored texts")


def _labels_for(table: ScoreTable, mapping: dict | None, what: str) -> np.ndarray | None:
    """One label per table item ('' where missing); unknown ids are an error."""
    if not mapping:
        return None
    _check_ids(table, mapping, what)
    return np.asarray([str(mapping.get(i, "")) for i in table.item_ids])


@dataclass(frozen=True)
class Context:
    """Everything a section may read. ``groups``/``systems`` hold one label per item ('' where missing);
    ``reading`` is how a prompt's exact distribution becomes a score: 'greedy' (the judge answers its most
    probable label: the study's judges), 'sampled' (the exact mean of a judge sampling at temperature 1) or
    'expected' (the probability-weighted score, as in G-Eval); see :mod:`logitjudge.stats.readings`.

    Randomness: ``rng`` is the generator of the section being computed, :meth:`for_part` of ``seed`` and the
    section's and criterion's names, so that adding, removing or reordering sections (or criteria) leaves every
    other section's numbers unchanged.
    """

    table: ScoreTable
    design: str
    human: dict | None
    groups: np.ndarray | None
    systems: np.ndarray | None
    rng: np.random.Generator
    seed: int
    n_boot: int
    method: str
    n_draws: int
    reading: str = "expected"
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def build(cls, table: ScoreTable, *, human=None, groups=None, systems=None, rng=0, n_boot=1000,
              method="pearson", n_draws=100, reading="expected") -> Context:
        """Check the human scores, groups and systems against the table's items (AlignmentError)."""
        if groups is None and table.item_groups is not None:
            group_arr = np.asarray(table.item_groups).astype(str)
        else:
            group_arr = _labels_for(table, groups, "group")
        if human:
            _check_ids(table, human, "human-score")
            names = sorted({k for d in human.values() if isinstance(d, dict) for k in d})
            if not set(names) & set(table.criteria):
                raise AlignmentError(f"the human scores name criteria {names}, none of the table's "
                                     f"{list(table.criteria)}")
        reading = check_reading(reading)  # 'argmax' is the old name of 'greedy'
        return cls(table, st.detect_design(table.option_orders), human or None, group_arr,
                   _labels_for(table, systems, "system"), np.random.default_rng(rng),
                   int(np.random.default_rng(rng).integers(2**63)),
                   0 if table.n_items < 2 else n_boot,  # no bootstrap over a single item: point estimates
                   method, n_draws, reading)

    @property
    def criteria(self) -> list[str]:
        return list(self.table.criteria)

    def generator(self, *names: str) -> np.random.Generator:
        """A generator of its own for the part ``names`` (e.g. section and criterion) of the analysis."""
        key = hashlib.blake2b("/".join(names).encode(), digest_size=8).digest()
        return np.random.default_rng([self.seed, int.from_bytes(key, "little")])

    def for_part(self, *names: str) -> Context:
        """This context with ``rng`` = :meth:`generator` of ``names`` (the memo of shared scores is kept)."""
        return replace(self, rng=self.generator(*names), _memo=self._memo)

    def _cached(self, key, make):
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def human_scores(self, c: int) -> st.HumanScores:
        """Criterion ``c``'s human scores aligned with the table (AlignmentError when it has none)."""
        return st.align_human(self.table.item_ids, self.human or {}, self.criteria[c])

    def prompt_scores(self, c: int) -> np.ndarray:
        """``[items, orderings]``: each prompt's score of criterion ``c`` under ``reading``."""
        t = self.table
        return self._cached(("prompt", c), lambda: st.read_scores(t.probs[:, c], t.values[c], reading=self.reading))

    def strategy_scores(self, c: int) -> dict[str, np.ndarray]:
        """Per-item scores of criterion ``c``: 'fixed' (the canonical prompt; absent when per-item orders have no
        common canonical row, see :meth:`strategy_notes`), 'random' (the exact expectation of an item's mean
        score over orders drawn uniformly from its RANDOM pool, :meth:`random_pool`; the same for every K,
        :func:`~logitjudge.stats.random_item_scores`) and 'balanced' (the mean over the 2n balanced rotations,
        when the table holds them: balanced, all n! orders, balanced+random)."""
        return self._cached(("strategy", c), lambda: self._strategies(c))

    def random_pool(self) -> tuple[np.ndarray, str]:
        """``(rows, pool)``: the rows RANDOM draws from and what they are (:func:`~logitjudge.stats.random_rows`)."""
        return self._cached("random_pool", lambda: st.random_rows(self.table.option_orders))

    def budget_k(self) -> int:
        """The budget K at which RANDOM is compared with BALANCED: the number of BALANCED's rows (the 2n rotations,
        also when they sit inside all n! orders; every row of a balanced table) when the table holds them, else the
        rows of RANDOM's pool (the K the table was scored with)."""
        bal = st.balanced_rows(self.table.option_orders)  # the 2n rotations, also inside all n! orders
        return len(bal) if bal is not None else len(self.random_pool()[0])

    def random_correlation(self, c: int, method: str, *, grouped: bool = False) -> st.ExpectationResult:
        """RANDOM's expected correlation with criterion ``c``'s human scores at K=1 (each item scored by one
        prompt under an order drawn from its RANDOM pool), item level or (``grouped``) the mean within-group
        correlation: exact where the draws have at most 1e6 joint outcomes, else Monte-Carlo with its SE.
        Cached, with a generator of its own, so that every section prints the same estimate."""
        return self._cached(("random_k1", c, method, grouped), lambda: self._random_correlation(c, method, grouped))

    def _random_correlation(self, c: int, method: str, grouped: bool) -> st.ExpectationResult:
        hs = self.human_scores(c)
        idx, y, groups = hs.index, hs.scores, None
        if grouped:
            keep = self.groups[idx] != ""
            idx, y, groups = idx[keep], y[keep], self.groups[idx][keep]
        rows, _ = self.random_pool()
        t = self.table
        stat = st.CorrelationStatistic(y, method=method, groups=groups)
        return st.random_expectation(t.probs[idx, c][:, rows], t.values[c], stat, k=1, reading=self.reading,
                                     option_orders=t.option_orders[..., rows, :],
                                     rng=self.generator("random-k1", self.criteria[c], method, str(grouped)))

    def balanced_part(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(rows, orders)`` of the table's balanced design, or None: every row where the design is balanced
        (all n! orders included), else the 2n balanced rotations a balanced+random table holds at the same rows
        of every item, with their (K', n) orders. What PriDe estimates its prior from."""
        return self._cached("balanced_part", self._balanced_part)

    def _balanced_part(self):
        o = self.table.option_orders
        rows = np.arange(o.shape[-2]) if self.design == BALANCED else st.balanced_rows(o)
        if rows is None:
            return None
        part = o[..., rows, :]
        if part.ndim == 3:  # per-item orders: PriDe needs the same balanced rows in every item
            if not np.all(part == part[:1]):
                return None
            part = part[0]
        return rows, part

    def strategy_notes(self) -> tuple[str, ...]:
        """Why a strategy is missing from :meth:`strategy_scores` (the same for every criterion)."""
        return self._cached("strategy_notes", self._notes)

    def _notes(self) -> tuple[str, ...]:
        o, notes = self.table.option_orders, []
        try:
            st.canonical_index(o)
        except DesignError as e:
            notes.append(f"no FIXED scores: {e}")
        if st.balanced_rows(o) is None:
            notes.append("no BALANCED scores: the table holds no balanced rotations (score with balanced, all or "
                         "balanced+random:R)")
        notes.append(f"RANDOM draws orders uniformly from the table's {self.random_pool()[1]}: an item's expected "
                     "score is exact (closed form, the same for every K); a correlation is exact where the draws' "
                     "joint outcomes can be enumerated (at most 1e6), else a Monte-Carlo estimate ± its SE")
        return tuple(notes)

    def _strategies(self, c: int) -> dict[str, np.ndarray]:
        t, r = self.table, self.reading
        scores = self.prompt_scores(c)  # [items, orderings]
        out = {}
        try:
            out["fixed"] = scores[:, st.canonical_index(t.option_orders)]
        except DesignError:
            pass  # said in strategy_notes
        out["random"] = st.random_item_scores(t.probs[:, c][:, self.random_pool()[0]], t.values[c], reading=r)
        rows = st.balanced_rows(t.option_orders)
        if rows is not None:
            out["balanced"] = scores[:, rows].mean(axis=1)
        return out


NEEDS = {"human": "no human scores given", "groups": "no groups (pass groups or score grouped items)"}


class Section:
    """One analysis section. Subclasses set ``name`` (its key in the analysis dict), ``title``, ``CAPTION`` and
    ``NOTE`` (the caption and the line under the Markdown heading; ``{reading}`` is filled in), ``needs`` (the
    Context fields it cannot do without) and ``per_criterion``, and implement :meth:`compute` and
    :meth:`tables`; ``plot`` is None for a section without a figure."""

    name: str = ""
    title: str = ""
    CAPTION: str = ""
    NOTE: str = "Scores use the {reading}."
    needs: tuple[str, ...] = ()
    per_criterion: bool = True
    plot = None  # or a method (analysis, path) -> Path, None when there is nothing to draw

    def requires(self, ctx: Context) -> str | None:
        """Why the whole section cannot be computed from ``ctx`` (None when it can)."""
        return next((NEEDS[k] for k in self.needs if getattr(ctx, k) is None), None)

    def compute(self, ctx: Context, c: int | None = None):
        """The section's result for criterion ``c`` (or the table): a dict or Result, or :class:`Partial`."""
        raise NotImplementedError

    def markdown(self, analysis: dict) -> str:
        """The heading, the note saying how the numbers were read, and the tables ('' without results)."""
        res = self.results(analysis)
        if not res:
            return ""
        head = [f"## {self.title}", "", self.NOTE.format(reading=reading_note(analysis)), ""]
        return "\n".join(head + self.tables(res, analysis)).rstrip()

    def tables(self, res: dict, analysis: dict) -> list[str]:
        """Markdown lines of the results ``res`` (per criterion, or the whole-table result)."""
        raise NotImplementedError

    def summary(self, analysis: dict) -> list[str]:
        """Headline lines for the report, one per criterion."""
        return []

    def verdict(self, analysis: dict) -> list[str]:
        """Parts of the analysis's one-line verdict."""
        return []

    def caption(self, analysis: dict) -> str:
        return self.CAPTION.format(reading=reading_note(analysis))

    def results(self, analysis: dict) -> dict:
        """The computed per-criterion results (criteria that were skipped left out), or the whole-table result."""
        res = analysis.get(self.name) or {}
        return {k: v for k, v in res.items() if v is not None} if self.per_criterion else res
