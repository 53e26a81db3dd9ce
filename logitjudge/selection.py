"""What a spec selects, before any model loads: its items and rubric, and the orders they are scored in.

:func:`load_items` resolves ``[data]`` (a data set or a texts file, subsets, criteria); :func:`plan_orders`
resolves ``[prompts]``/``[orderings]`` into the option orders (and, with several criteria in one prompt, the
aligned criterion orders) or, for pairwise/listwise prompts, the candidate rows and their orders. Every problem
is a :class:`logitjudge.spec.SpecError` naming the spec key or flag it comes from.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .items import Item, read_items
from .orderings import OrderingError, cross, parse
from .rubric import Rubric, RubricError, load_rubric
from .spec import Spec, SpecError, relative

__all__ = ["load_items", "option_orders", "plan_orders"]


def load_items(spec: Spec, data_dir, *, items: list[Item] | None = None,
               rubric: Rubric | None = None) -> tuple[list[Item], Rubric, dict]:
    """The spec's items (a data set or a texts file, subset by limit/groups/per_group), its rubric (subset by
    criteria) and a description of the data for the report; every problem a :class:`SpecError` naming the key.
    ``items``/``rubric``: already made (the Python API's data and Rubric), in place of the texts file and the
    rubric the spec names; ``[data] texts`` then names the file they were read from, if any."""
    from .data import DataError, load_dataset, subset_items

    d, base = spec.data, spec.base
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
            path = relative(d.texts, base) if d.texts is not None else None
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
            rubric = load_rubric(relative(d.rubric, base))
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


def option_orders(spec: Spec, rubric: Rubric, n_items: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The option orders ((K, n) shared, or (I, K, n) per item for random:K / all-per-item designs) and
    (multi-criteria) the aligned criteria orders, shared by every item: every option order crossed with every
    criteria order, the criteria orders drawn with seed + 1 so that they are not the option orders' draws."""
    od = spec.orderings
    try:
        option_orders = parse(od.options, rubric.n_options, seed=od.seed, n_items=n_items)
    except OrderingError as e:
        raise SpecError(f"{spec.where('orderings', 'options')}: {e}") from None
    if not spec.prompts.multi_criteria:
        return option_orders, None
    try:
        criterion_orders = parse(od.criteria, rubric.n_criteria, seed=od.seed + 1)
    except OrderingError as e:
        raise SpecError(f"{spec.where('orderings', 'criteria')}: {e} (criteria orders are shared by every "
                        "item: balanced, all, shared-random:K or fixed:K)") from None
    return cross(option_orders, criterion_orders)


def plan_orders(spec: Spec, items: list[Item], rubric: Rubric, template) -> tuple:
    """(rows, option orders, criterion orders) of a spec: pointwise, no rows (:func:`option_orders`); pairwise or
    listwise, the rows and candidate orders of :func:`logitjudge.candidates.plan` (the candidates of a group are
    the options) and no criterion orders."""
    from .candidates import CandidateError, plan

    pr, od = spec.prompts, spec.orderings
    if pr.paradigm == "pointwise":
        if pr.pairs is not None:
            raise SpecError(f"{spec.where('prompts', 'pairs')}: pairs applies to --paradigm pairwise only")
        return (None, *option_orders(spec, rubric, len(items)))
    if pr.multi_criteria:
        raise SpecError(f"{spec.where('prompts', 'multi_criteria')}: several criteria in one prompt are rubric "
                        f"(pointwise) prompts; {pr.paradigm} prompts ask one criterion each")
    key = "pairs" if pr.pairs is not None and pr.paradigm != "pairwise" else "paradigm"
    try:
        rows, orders = plan(items, pr.paradigm, pairs=pr.pairs, orderings=od.options, seed=od.seed,
                            tie_label=template.tie_label)
    except CandidateError as e:
        where = spec.where("orderings", "options") if "orderings" in str(e) else spec.where("prompts", key)
        raise SpecError(f"{where}: {e}") from None
    return rows, orders, None
