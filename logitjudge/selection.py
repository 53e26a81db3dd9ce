"""What a spec selects, before any model loads: its items and rubric, and the orders they are scored in.

:func:`make_selection` runs the two and checks the result. :func:`load_items` resolves ``[data]`` (a data set or a
texts file, subsets, criteria); :func:`plan_orders` resolves ``[prompts]``/``[orderings]`` into the option orders
(and, with several criteria in one prompt, the aligned criterion orders) or, for pairwise/listwise prompts, the
candidate rows and their orders. Every problem is a :class:`logitjudge.spec.SpecError` naming the spec key or flag
it comes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import LogitJudgeError
from .items import Item, human_and_systems, read_items
from .orderings import OrderingError, check_memory, cross, parse, validate
from .rubric import Rubric, RubricError, load_rubric
from .slots import check_slots
from .spec import Paths, Spec, SpecError

__all__ = ["Selection", "candidate_plan", "load_items", "make_selection", "plan_orders"]


@dataclass(frozen=True)
class Selection:
    """What a spec selects: its items and rubric, their human scores and systems, a description of the data, and
    the orders they are scored in (pointwise: ``rows`` None) or the candidate rows and their orders."""

    items: list[Item]
    rubric: Rubric
    info: dict
    rows: list | None
    option_orders: np.ndarray
    criterion_orders: np.ndarray | None
    human: dict | None
    systems: dict | None


def make_selection(spec: Spec, paths: Paths, template, data_dir, *, items: list[Item] | None = None,
                   rubric: Rubric | None = None, orders=None) -> Selection:
    """The spec's :class:`Selection` (:func:`load_items`, :func:`plan_orders`), checked: the rubric against the
    template (descriptions it shows, 2+ criteria for several in one prompt), the table the orders make against
    memory, and the slot mode. ``orders``: the Python API's option-order array, in place of the spec's design."""
    items, rubric, info = load_items(spec, paths, data_dir, items=items, rubric=rubric)
    pr = spec.prompts
    if pr.paradigm == "pointwise":
        rubric.validate(need_descriptions=template.shows_descriptions)
    if pr.multi_criteria and rubric.n_criteria < 2:
        raise SpecError(f"{spec.where('prompts', 'multi_criteria')}: the rubric has a single criterion "
                        f"({rubric.criteria[0].name!r}); set multi_criteria = false or choose 2+ criteria")
    rows, option_orders, criterion_orders = plan_orders(spec, items, rubric, template, given=orders)
    units = len(items) if rows is None else len(rows)
    k, n = option_orders.shape[-2], option_orders.shape[-1]
    try:  # the scores table (and its label mass) the orders make, before a batch is scored
        check_memory(f"{spec.where('orderings', 'options')}: a table of {units:,} items x "
                     f"{rubric.n_criteria} criteria x {k:,} orderings x {n} options would",
                     units * rubric.n_criteria * k * (n + 1) * 8, "use fewer orderings or items")
    except OrderingError as e:
        raise SpecError(str(e)) from None
    if pr.multi_criteria:
        check_slots(pr.slots, rubric.n_options, rubric.n_criteria, pr.max_continuations)
    return Selection(items, rubric, info, rows, option_orders, criterion_orders, *human_and_systems(items))


def load_items(spec: Spec, paths: Paths, data_dir, *, items: list[Item] | None = None,
               rubric: Rubric | None = None) -> tuple[list[Item], Rubric, dict]:
    """The spec's items (a data set or a texts file, subset by limit/groups/per_group), its rubric (subset by
    criteria) and a description of the data for the report; every problem a :class:`SpecError` naming the key.
    ``items``/``rubric``: already made (the Python API's data and Rubric), in place of the texts file and the
    rubric the spec names; ``[data] texts`` then names the file they were read from, if any."""
    from .data import DataError, load_dataset, subset_items

    d = spec.data
    given_rubric = rubric
    data_dir = data_dir if data_dir is not None else d.dir
    data_where = spec.where("data", "texts") if spec.from_flags else "spec [data]"
    try:
        if d.name is not None:
            ds = load_dataset(d.name, data_dir, limit=d.limit, groups=d.groups, seed=d.seed, **d.options)
            items, rubric = list(ds.items), ds.rubric
            info = {"name": ds.name, "description": ds.description, "source": ds.source, "path": ds.path,
                    "options": ds.options}
        else:
            if d.options:
                raise SpecError("spec [data] options: loader options apply to data sets (name = ...), not to "
                                "a texts file; remove them")
            path = paths.texts
            items = subset_items(read_items(path) if items is None else items, limit=d.limit, groups=d.groups,
                                 seed=d.seed)
            rubric = load_rubric("default")
            info = {"name": f"texts:{Path(path).name if path else 'data'}", "description": "",
                    "source": path or "data given in Python", "path": path,
                    "options": {"limit": d.limit, "groups": d.groups, "seed": d.seed}}
    except (DataError, OSError) as e:
        raise SpecError(f"{data_where}: {e}") from None
    except ValueError as e:
        if isinstance(e, SpecError):
            raise
        raise SpecError(f"{spec.where('data', 'texts')}: {e}") from None
    try:
        if given_rubric is not None:
            rubric = given_rubric
        elif d.rubric is not None:
            rubric = load_rubric(paths.rubric)
        if d.criteria is not None:
            rubric = rubric.subset(d.criteria)
    except RubricError as e:
        key = "criteria" if d.criteria is not None and "no criterion named" in str(e) else "rubric"
        raise SpecError(f"{spec.where('data', key)}: {e}") from None
    if d.per_group is not None:
        seen: dict[str, int] = {}
        kept = []
        for it in items:
            key = it.group or f"\0{it.id}"
            seen[key] = seen.get(key, 0) + 1
            if seen[key] <= d.per_group:
                kept.append(it)
        items = kept
        info["options"] = dict(info["options"], per_group=d.per_group)
    if not items:
        raise SpecError("spec [data]: no items selected; raise limit or check groups")
    info.update(n_items=len(items), n_groups=len({it.group for it in items if it.group}),
                criteria=[c.name for c in rubric.criteria], rubric=rubric.name)
    return items, rubric, info


def plan_orders(spec: Spec, items: list[Item], rubric: Rubric, template, *, given=None) -> tuple:
    """(rows, option orders, criterion orders) of a spec. Pairwise or listwise: the candidate rows and their orders
    (:func:`candidate_plan`), no criterion orders. Pointwise: no rows; the option orders, (K, n) shared or (I, K, n)
    per item for random:K / all-per-item designs (``given``: the Python API's order array, checked against the
    rubric) and, with several criteria in one prompt, the aligned criteria orders, shared by every item: every
    option order crossed with every criteria order, drawn with seed + 1 so that they are not the option orders'
    draws."""
    pr, od = spec.prompts, spec.orderings
    if pr.paradigm != "pointwise":
        return (*candidate_plan(spec, items, template), None)
    if pr.pairs is not None:
        raise SpecError(f"{spec.where('prompts', 'pairs')}: pairs applies to --paradigm pairwise only")
    try:
        orders = parse(od.options, rubric.n_options, seed=od.seed, n_items=len(items)) if given is None else \
            validate(given, rubric.n_options, per_item=True, n_items=len(items))
    except OrderingError as e:
        if given is not None:
            raise LogitJudgeError(f"lj.score(orderings=...): {e}") from None
        raise SpecError(f"{spec.where('orderings', 'options')}: {e}") from None
    if not pr.multi_criteria:
        return None, orders, None
    try:
        criterion_orders = parse(od.criteria, rubric.n_criteria, seed=od.seed + 1)
    except OrderingError as e:
        raise SpecError(f"{spec.where('orderings', 'criteria')}: {e} (criteria orders are shared by every "
                        "item: balanced, all, shared-random:K or fixed:K)") from None
    return (None, *cross(orders, criterion_orders))


def candidate_plan(spec: Spec, items: list[Item], template) -> tuple[list, np.ndarray]:
    """The pairwise or listwise rows of a spec and their candidate orders (:func:`logitjudge.candidates.plan`: the
    candidates of a group are the options)."""
    from .candidates import CandidateError, plan

    pr, od = spec.prompts, spec.orderings
    if pr.multi_criteria:
        raise SpecError(f"{spec.where('prompts', 'multi_criteria')}: several criteria in one prompt are rubric "
                        f"(pointwise) prompts; {pr.paradigm} prompts ask one criterion each")
    key = "pairs" if pr.pairs is not None and pr.paradigm != "pairwise" else "paradigm"
    try:
        return plan(items, pr.paradigm, pairs=pr.pairs, orderings=od.options, seed=od.seed,
                    tie_label=template.tie_label)
    except CandidateError as e:
        where = spec.where("orderings", "options") if "orderings" in str(e) else spec.where("prompts", key)
        raise SpecError(f"{where}: {e}") from None
