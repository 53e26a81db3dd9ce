"""Picks that survive the order: rank each prompt's candidates from a score table, and say how likely a run with
other random orders picks the same one (``logitjudge rank``, ``logitjudge.rank``).

A group is one prompt's candidates: a pointwise table's items with one ``group`` (each candidate scored on the
rubric), a pairwise table's pairs of one group (Bradley-Terry on the order-debiased verdicts) or a listwise
table's row (the candidates' mean answer weights). Per group: every candidate's order-debiased score (its mean
over the table's pool of orders; pairwise: Bradley-Terry on the mean of both orientations) with a CI, its rank,
the pick (the top set), and the pick's hold probability for K = 1..budget random orders per run with the smallest
K that reaches ``stability`` (:mod:`logitjudge.stats.hold`: exact where the outcomes can be enumerated, else
Monte-Carlo with its SE). Across groups: the fragile picks (hold at K = 1 below ``stability``) and, with
``systems``, a leaderboard. The Markdown is :mod:`logitjudge.sections.picks`; the estimators are pure functions
on arrays in :mod:`logitjudge.stats.hold`.

Which random run: pointwise, each candidate draws its own K orders (``random:K`` per item; ``design='shared'``:
one draw for the whole group, for a table whose orders are shared); listwise, one draw of K orders for the list;
pairwise, K orientations per pair. Orders are drawn uniformly, with replacement, from the table's pool rows
(:func:`logitjudge.stats.expectation.random_rows`: every row, or a balanced+random table's random rows), so the
probabilities are exact for that pool ('all orders': exactly uniform random orders).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

from .candidates import POINTWISE, paradigm_of, table_candidates
from .errors import LogitJudgeError
from .stats import hold as hd
from .stats.expectation import random_rows
from .stats.readings import answer_weights, check_reading, read_scores
from .table import ScoreTable


class RankError(LogitJudgeError, ValueError):
    """A table or option that rank cannot use; the message names the problem and the fix."""


SCORE_NAMES = {
    ("pointwise", "expected"): "mean expected score",
    ("pointwise", "greedy"): "mean answered label's value",
    ("listwise", "sampled"): "mean choice probability",
    ("listwise", "greedy"): "mean answered share (ties split)",
    ("pairwise", "sampled"): "Bradley-Terry log-strength (verdict probabilities)",
    ("pairwise", "greedy"): "Bradley-Terry log-strength (answered verdicts)",
}


@dataclass(frozen=True)
class Ranking:
    """What :func:`rank` found: ``candidates`` (one row per group x candidate), ``groups`` (one row per group),
    ``holds`` (one row per group x K), ``leaderboard`` (one row per system, or None) and ``summary``."""

    candidates: pd.DataFrame
    groups: pd.DataFrame
    holds: pd.DataFrame
    leaderboard: pd.DataFrame | None
    summary: dict = field(default_factory=dict)

    def markdown(self) -> str:
        from .sections.picks import ranking_markdown

        return ranking_markdown(self)


@dataclass
class _Group:
    name: str
    ids: list[str]
    result: hd.HoldResult
    ci: tuple[np.ndarray, np.ndarray]
    sampler: object  # (k, n, rng) -> [n, candidates] scores of random runs, for the leaderboard


def _criterion(table: ScoreTable, criterion) -> int:
    names = list(table.criteria)
    if criterion is None:
        if len(names) > 1:
            raise RankError(f"the table has criteria {names}: pass criterion= (--criterion NAME), rank picks by one")
        return 0
    if criterion not in names:
        raise RankError(f"criterion {criterion!r} is not in the table; its criteria are {names}")
    return names.index(criterion)


def _row_ci(x: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """t interval of each column's mean over the rows (the orders) of ``x[rows, candidates]``."""
    r = x.shape[0]
    mean = x.mean(axis=0)
    if r < 2:
        return np.full(mean.shape, np.nan), np.full(mean.shape, np.nan)
    half = sps.t.ppf((1 + confidence) / 2, r - 1) * x.std(axis=0, ddof=1) / np.sqrt(r)
    return mean - half, mean + half


def _check_groups(names: list[str], sizes: list[int]) -> None:
    if not names:
        raise RankError("the table has no groups: rank compares the candidates of one prompt; score texts with a "
                        "'group' field (or a candidates file)")
    small = [g for g, m in zip(names, sizes) if m < 2]
    if small:
        raise RankError(f"group {small[0]!r} has 1 candidate ({len(small)} such groups): rank needs >= 2 "
                        "candidates per group; drop those groups or add candidates")


def _pointwise(table, c, reading, opts) -> tuple[list[_Group], dict]:
    if reading == "sampled":
        raise RankError("rank reads a pointwise table as 'expected' or 'greedy' scores; a sampled reading is not "
                        "supported here (use --reading expected: its mean equals a T=1 sampling judge's)")
    if table.item_groups is None or not np.any(table.item_groups.astype(str) != ""):
        _check_groups([], [])
    rows, pool = random_rows(table.option_orders)
    if opts["design"] == "shared" and table.orders_per_item:
        raise RankError("design='shared' draws one set of orders for a whole group, but this table's orders differ "
                        "per item; use design='independent' (random:K per candidate)")
    s = read_scores(table.probs[:, c], table.values[c], reading=reading)[:, rows]  # [items, pool rows]
    g = table.item_groups.astype(str)
    ids = table.item_ids.astype(str)
    if np.any(g == ""):
        raise RankError(f"{int(np.sum(g == ''))} items have no group (e.g. {ids[g == ''][0]!r}): every candidate "
                        "needs the group of the prompt it answers")
    names = list(dict.fromkeys(g.tolist()))
    members = [np.flatnonzero(g == n) for n in names]
    _check_groups(names, [m.size for m in members])
    out = []
    for name, mem in zip(names, members):
        x = s[mem].T  # [rows, candidates]
        res = hd.hold_probability(x, ks=np.arange(1, opts["budget"] + 1) if opts["budget"] else None,
                                  design=opts["design"], **opts["hold"])
        out.append(_Group(name, ids[mem].tolist(), res, _row_ci(x, opts["confidence"]),
                          lambda k, n, rng, x=x: hd.sample_scores(x, k=k, n=n, design=opts["design"], rng=rng)))
    return out, {"pool": pool, "pool_rows": int(rows.size), "design": opts["design"]}


def _listwise(table, c, reading, opts) -> tuple[list[_Group], dict]:
    w = answer_weights(table.probs[:, c], reading=reading)  # [rows (groups), orderings, candidates] canonical
    cands = table_candidates(table)
    names = table.item_groups.astype(str).tolist() if table.item_groups is not None else table.item_ids.tolist()
    _check_groups(names, [len(x) for x in cands])
    out = []
    for r, name in enumerate(names):
        x = w[r]
        res = hd.hold_probability(x, ks=np.arange(1, opts["budget"] + 1) if opts["budget"] else None,
                                  design="shared", **opts["hold"])
        out.append(_Group(str(name), list(cands[r]), res, _row_ci(x, opts["confidence"]),
                          lambda k, n, rng, x=x: hd.sample_scores(x, k=k, n=n, design="shared", rng=rng)))
    return out, {"pool": "the table's candidate orders", "pool_rows": int(w.shape[1]), "design": "shared"}


def _bt_ci(v, ij, m, prior, n_boot, confidence, rng) -> tuple[np.ndarray, np.ndarray]:
    """Percentile CI of each candidate's debiased Bradley-Terry strength, resampling the group's pairs."""
    if not n_boot or len(ij) < 2:
        return np.full(m, np.nan), np.full(m, np.nan)
    from .stats._result import percentile_ci

    idx = rng.integers(0, len(ij), size=(n_boot, len(ij)))
    boot = np.stack([hd.bt_strengths(v[b].mean(axis=1), ij[b], m, prior) for b in idx])
    lo, hi = percentile_ci(boot, confidence)
    return np.asarray(lo), np.asarray(hi)


def _pairwise(table, c, reading, opts) -> tuple[list[_Group], dict]:
    from .sections.paradigms import items_of, pairwise_arrays
    from .stats.pairwise import pair_verdicts

    ids, groups = items_of(table)
    index = {x: i for i, x in enumerate(ids.tolist())}
    pair_probs, pairs = pairwise_arrays(table, c, index)
    v = pair_verdicts(pair_probs, reading=reading)  # [P, 2, 3]
    names = list(dict.fromkeys(groups.tolist()))
    members = [np.flatnonzero(groups == n) for n in names]
    _check_groups(names, [m.size for m in members])
    out = []
    gen = np.random.default_rng(opts["seed"])
    for name, mem in zip(names, members):
        local = {int(i): j for j, i in enumerate(mem)}
        rows = np.flatnonzero(np.isin(pairs[:, 0], mem))
        ij = np.array([[local[int(a)], local[int(b)]] for a, b in pairs[rows]], dtype=np.int64)
        kw = {k: opts["hold"][k] for k in ("stability", "method", "tol", "rng")}
        res = hd.pairwise_hold(v[rows], ij, mem.size, ks=np.arange(1, (opts["budget"] or 2) + 1),
                               prior=opts["prior"], **kw)
        ci = _bt_ci(v[rows], ij, mem.size, opts["prior"], min(opts["n_boot"], 200), opts["confidence"], gen)
        out.append(_Group(name, ids[mem].tolist(), res, ci,
                          lambda k, n, rng, vv=v[rows], ij=ij, m=mem.size: hd.sample_pairwise(
                              vv, ij, m, k=k, n=n, prior=opts["prior"], rng=rng)))
    return out, {"pool": "both orientations of every pair", "pool_rows": 2, "design": "pairwise"}


def _systems_of(systems, ids: list[str]) -> list[str]:
    if callable(systems):
        return [str(systems(x)) for x in ids]
    missing = [x for x in ids if x not in systems]
    if missing:
        raise RankError(f"no system for candidate {missing[0]!r} ({len(missing)} missing): the systems mapping "
                        "must name every candidate's system")
    return [str(systems[x]) for x in ids]


def id_suffix(item_id: str) -> str:
    """The system of an id like SummEval's ``doc_id/model_id``: the part after the last '/'."""
    return str(item_id).rsplit("/", 1)[-1]


def _leaderboard(groups: list[_Group], systems, opts, gen) -> tuple[pd.DataFrame, dict]:
    names = sorted({s for g in groups for s in _systems_of(systems, g.ids)})
    col = {s: j for j, s in enumerate(names)}
    deb = np.full((len(groups), len(names)), np.nan)
    n = int(opts["leaderboard_draws"])
    rep = np.full((n, len(groups), len(names)), np.nan)
    for r, g in enumerate(groups):
        sy = _systems_of(systems, g.ids)
        if len(set(sy)) != len(sy):
            raise RankError(f"group {g.name!r} has two candidates of one system ({sy}); a leaderboard needs at "
                            "most one candidate per system and prompt")
        cols = [col[s] for s in sy]
        deb[r, cols] = g.result.debiased
        rep[:, r, cols] = g.sampler(1, n, gen)
    lb = hd.leaderboard(deb, replicates=rep, tol=opts["hold"]["tol"], n_boot=opts["n_boot"],
                        confidence=opts["confidence"], rng=gen)
    frame = pd.DataFrame({"system": names, "mean_score": lb.score, "mean_score_ci_low": lb.score_ci_low,
                          "mean_score_ci_high": lb.score_ci_high, "win_rate": lb.win_rate,
                          "win_rate_ci_low": lb.win_rate_ci_low, "win_rate_ci_high": lb.win_rate_ci_high,
                          "prompts": lb.n_prompts})
    frame.insert(0, "rank", sps.rankdata(-np.round(lb.score, 9), method="min").astype(int))
    frame = frame.sort_values(["rank", "system"]).reset_index(drop=True)
    info = {"top_systems": [names[j] for j in lb.top_index], "top_change": lb.top_change,
            "top_change_se": lb.top_change_se, "top_change_draws": lb.n_draws}
    return frame, info


def score_candidates(items, judge, *, rubric="default", orderings: str = "balanced", seed: int = 0,
                     template=None, progress: bool = False) -> ScoreTable:
    """Score grouped candidates pointwise for :func:`rank`: ``items`` (:class:`~logitjudge.items.Item` or dicts
    with ``id``, ``text``, ``context``, ``group``) with ``judge`` (a loaded model or a model id) on ``rubric`` under
    ``orderings`` (``balanced``, ``all``, ``random:K``...), a group's candidates on one token trie
    (:class:`logitjudge.runs.GroupedRun`)."""
    from .items import Item, items_from_data
    from .orderings import parse
    from .rubric import Rubric, load_rubric
    from .runs import score_grouped

    # dicts (or a DataFrame, or a file) are checked as every other input of items is (one line naming the row)
    its = list(items) if all(isinstance(x, Item) for x in items) else items_from_data(items)[0]
    if isinstance(judge, str):
        from .models import load_model

        judge = load_model(judge)
    if not isinstance(rubric, Rubric):
        rubric = load_rubric(rubric)  # a file, or a built-in by name
    orders = parse(orderings, rubric.n_options, seed=seed, n_items=len(its))
    return score_grouped(judge, its, rubric, orders, template=template, progress=progress)


def rank(table, *, criterion: str | None = None, reading: str = "expected", stability: float = 0.95,
         budget: int | None = None, design: str = "independent", systems=None, method: str = "auto",
         n_draws: int = 20_000, leaderboard_draws: int = 2000, max_outcomes: int = 1_000_000, prior: float = 0.1,
         n_boot: int = 1000, confidence: float = 0.95, rng: int = 0, judge=None, score: dict | None = None
         ) -> Ranking:
    """Rank every group's candidates in ``table`` (a :class:`~logitjudge.table.ScoreTable` or its path) and the
    hold probability of each pick (module doc). ``reading``: pointwise 'expected' (default) or 'greedy'; pairwise
    and listwise read answers, 'greedy' or 'sampled' ('expected' is read as 'sampled'). ``budget``: the largest K
    (default: the pool's rows; pairwise 2). ``systems``: a mapping item id -> system or a callable (e.g.
    :func:`id_suffix`) for the leaderboard. ``rng``: the seed of every Monte-Carlo draw and bootstrap. ``table``
    may also be a list of candidates, scored first with ``judge`` (:func:`score_candidates`; ``score`` holds its
    keyword arguments: rubric, orderings, seed, template)."""
    if isinstance(table, (list, tuple)):
        if judge is None:
            raise RankError("rank(items) scores the candidates first: pass judge= (a loaded model or a model id)")
        table = score_candidates(table, judge, **(score or {}))
    t = table if isinstance(table, ScoreTable) else ScoreTable.load(table)
    stability = _checked(hd.check_stability, stability)
    if budget is not None and (int(budget) != budget or budget < 1):
        raise RankError(f"budget must be a positive number of orders per run, got {budget!r}")
    if design not in hd.DESIGNS:
        raise RankError(f"design={design!r} is not one of {list(hd.DESIGNS)}")
    paradigm = paradigm_of(t)
    r = _checked(check_reading, reading)
    if paradigm != POINTWISE:
        r = "greedy" if r == "greedy" else "sampled"
    if t.probs.shape[2] < 2:
        raise RankError("the table has one ordering: rank measures what another order changes; score with "
                        "--orderings balanced, all or random:K")
    c = _criterion(t, criterion)
    gen = np.random.default_rng(rng)
    opts = {"design": design, "budget": budget, "confidence": confidence, "prior": prior, "n_boot": n_boot,
            "seed": rng, "leaderboard_draws": leaderboard_draws,
            "hold": {"stability": stability, "method": method, "tol": 1e-9, "max_outcomes": max_outcomes,
                     "n_draws": n_draws, "rng": gen}}
    build = {"pairwise": _pairwise, "listwise": _listwise}.get(paradigm, _pointwise)
    groups, info = _checked(build, t, c, r, opts)
    score_name = SCORE_NAMES[(paradigm, "expected" if paradigm == POINTWISE and r == "expected" else r)]
    frames = _frames(groups, systems, score_name, r)
    summary = {"paradigm": paradigm, "criterion": t.criteria[c], "reading": r, "score": score_name,
               "stability": stability, "groups": len(groups), "confidence": confidence, **info,
               "fragile": int((frames[1]["hold_k1"] < stability - 1e-12).sum()),
               "not_within_budget": int(frames[1]["min_k"].isna().sum()), "seed": rng}
    board = None
    if systems is not None:
        board, lb = _checked(_leaderboard, groups, systems, opts, gen)
        summary.update(lb)
    return Ranking(*frames, board, summary)


def _checked(fn, *args):
    """``fn(*args)`` with a statistics error turned into this module's one-line error."""
    from .stats._result import StatsError

    try:
        return fn(*args)
    except StatsError as e:
        raise RankError(str(e)) from None


def _frames(groups: list[_Group], systems, score_name: str, reading: str):
    cand, per_group, holds = [], [], []
    for g in groups:
        res = g.result
        order = sps.rankdata(-np.round(res.debiased, 9), method="min").astype(int)
        sy = _systems_of(systems, g.ids) if systems is not None else [None] * len(g.ids)
        for j, x in enumerate(g.ids):
            cand.append({"group": g.name, "candidate": j + 1, "item_id": x, "system": sy[j], "reading": reading,
                         "score_name": score_name, "score": res.debiased[j], "score_ci_low": g.ci[0][j],
                         "score_ci_high": g.ci[1][j], "rank": int(order[j]), "pick": bool(j in res.pick_index)})
        for k, h, se, ex, n in zip(res.ks, res.hold, res.hold_se, res.exact, res.outcomes):
            holds.append({"group": g.name, "k": int(k), "hold": h, "hold_se": 0.0 if ex else se, "exact": bool(ex),
                          "outcomes_or_draws": int(n)})
        per_group.append({"group": g.name, "candidates": len(g.ids),
                          "pick": "|".join(g.ids[j] for j in res.pick_index),
                          "pick_candidate": "|".join(str(j + 1) for j in res.pick_index),
                          "pick_score": float(res.debiased[res.pick_index].mean()), "score_name": score_name,
                          "hold_k1": float(res.hold[0]), "hold_k1_se": 0.0 if res.exact[0] else float(res.hold_se[0]),
                          "hold_k1_exact": bool(res.exact[0]),
                          "min_k": np.nan if res.min_k is None else res.min_k, "budget": int(res.ks.max()),
                          "design": res.design})
    cols = pd.DataFrame(cand)
    if systems is None:
        cols = cols.drop(columns="system")
    gframe = pd.DataFrame(per_group)
    gframe["min_k"] = gframe["min_k"].astype("Int64")
    return cols, gframe, pd.DataFrame(holds)


def write_frame(frame: pd.DataFrame, path: str | Path) -> Path:
    """``frame`` to ``path`` (.csv or .parquet)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.suffix == ".parquet":
        frame.to_parquet(p, index=False)
    else:
        frame.to_csv(p, index=False)
    return p
