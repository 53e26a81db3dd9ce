"""A probe run: the judge's internals read on the scored prompts (lens, attention, patching, linear probes), on
the rails of a score run (:class:`~logitjudge.runs.Run`: fingerprint, checkpoint, sharding, progress, save) in the
probe mode (:class:`ProbeSteps`), and a spec's [probe] section run through it (:func:`probe_experiment`)."""

from __future__ import annotations

import numpy as np

from ..checkpoint import ARRAYS
from ..engines.base import Engine
from ..errors import ProbeError
from ..modes import Batch, Steps
from ..requests import RequestPlan, orders_of
from ..runs import Run
from ..spec import Experiment, SpecError
from .patching import KINDS, make_sites
from .prompts import probe_prompts
from .settings import probe_settings
from .steps import PROBES, check_probe_args, item_pairs, probe_item
from .table import ProbeTable

__all__ = ["ProbeRun", "ProbeSteps", "probe_experiment", "probe_settings"]


class ProbeSteps(Steps):
    """The probe mode: ``probes`` (lens, attention, patch, linear) of one criterion (index ``criterion``) under
    every ordering, patching ``pairs`` and site ``kinds``, ``hidden_layers`` exported for the linear probes
    (default all); a step probes one item through the engine's backend (its read-out)."""

    label = "probing"
    codec = ARRAYS  # an item's record: its arrays
    table_class = ProbeTable

    def __init__(self, probes=PROBES, criterion: int = 0, pairs: str = "reverse", kinds=KINDS, hidden_layers=None):
        self.given_probes, self.criterion, self.pair_kind, self.kinds = probes, criterion, pairs, tuple(kinds)
        self.given_layers = hidden_layers

    def attach(self, run, request_plan) -> None:
        """The probes checked against the run's orderings and the judge's layers; the patching pairs and sites."""
        super().attach(run, request_plan)
        self.probes = check_probe_args(self.given_probes, run.option_orders, pairs=self.pair_kind, kinds=self.kinds)
        backend = self.backend = run.engine.internals()
        if backend is None:
            raise ProbeError(f"probing reads the judge's internals, which the {run.engine.name} engine does "
                             "not expose; probe with the native engine")
        L = backend.n_layers
        self.layers = list(range(L)) if self.given_layers is None else sorted(int(x) for x in self.given_layers)
        if any(not 0 <= x < L for x in self.layers):
            raise ProbeError(f"hidden layers {self.layers} outside 0..{L - 1}")
        patch = "patch" in self.probes
        self.pairs = item_pairs(run.option_orders, self.pair_kind) if patch else np.zeros((0, 2), np.int64)
        self.sites = make_sites(L, backend.n_heads, self.kinds if patch else ())

    def settings(self) -> dict:
        return {"mode": "probe", "probes": list(self.probes), "criterion": self.criterion, "pairs": self.pair_kind,
                "kinds": list(self.kinds), "hidden_layers": self.layers if "linear" in self.probes else []}

    def check_record(self, item_id: str, record) -> str | None:
        """Why a probe checkpoint record read back does not fit this run (None: it does): an item the run does
        not have, other arrays than the probes make, or arrays whose leading dimensions are not the run's."""
        run = self.run
        if item_id not in {it.id for it in run.items}:
            return "not an item of this run"
        b, K, n = self.backend, run.option_orders.shape[-2], run.rubric.n_options
        want = {"probs": (K, n)}
        if "lens" in self.probes:
            want["lens_logprobs"] = (K, b.n_layers, n)
        if "attention" in self.probes:
            want["attention"] = (K, b.n_layers, b.n_heads)
        if "linear" in self.probes:
            want["hidden"] = (K, len(self.layers), 1 + n)
        if "patch" in self.probes:
            want.update(clean=(K, n), patched=(len(self.pairs), len(self.sites.layer), n))
        if set(record) != set(want):
            return f"arrays {sorted(record)} where this run's are {sorted(want)}"
        for name, shape in want.items():
            if record[name].shape[:len(shape)] != shape:
                return f"{name} of shape {record[name].shape} where this run's starts {shape}"
        return None

    def batches(self, owned: list[int], done: dict, *, keep: bool = False):
        """One :class:`Batch` per item not yet done (the prompts are made in the step: nothing to keep); the
        probes reach the backend directly, so the bar moves per item."""
        run = self.run
        K = run.option_orders.shape[-2]
        for i in owned:
            if run.items[i].id not in done:
                yield Batch([i], self._probe_step, K)

    def _probe_step(self, idx: list[int]) -> list[dict]:
        run, i = self.run, idx[0]
        prompts = probe_prompts(run.lm, run.rubric, run.items[i], orders_of(run.option_orders, i), run.template,
                                criterion=self.criterion)
        return [probe_item(self.backend, prompts, self.probes, pairs=self.pairs, sites=self.sites,
                           hidden_layers=self.layers, token_budget=run.engine.token_budget)]

    def token_plan(self) -> RequestPlan:
        """The first item's prompts (a probe run keeps no request plan: its prompts are made in the step)."""
        run = self.run
        return RequestPlan(run.lm, run.template, run.rubric, run.items[:1], orders_of(run.option_orders, 0))

    def table_meta(self, elapsed: float) -> dict:
        return {"n_layers": self.backend.n_layers, "n_heads": self.backend.n_heads, "probes": list(self.probes),
                "pairs": self.pair_kind, "criterion": self.run.rubric.criteria[self.criterion].name,
                "timings": {"probe_seconds": elapsed}}

    def table(self, done: dict, meta: dict) -> ProbeTable:
        """The ProbeTable of finished records ``{item_id: {name: array}}``, in the items' order."""
        items, crit = self.run.items, self.run.rubric.criteria[self.criterion]
        stack = {k: np.stack([done[it.id][k] for it in items]) for k in done[items[0].id]}
        return ProbeTable([it.id for it in items], self.run.option_orders, [o.label for o in crit.options],
                          crit.name, stack.pop("probs"),
                          hidden_layers=np.array(self.layers if "linear" in self.probes else [], dtype=np.int64),
                          pairs=self.pairs, site_layer=self.sites.layer, site_kind=self.sites.kind,
                          site_head=self.sites.head, meta=meta, **stack)


class ProbeRun(Run):
    """Probe the judge's internals on ``items``' prompts for one criterion (index ``criterion``) under every
    ordering, on the rails of a :class:`Run` and through the scores' engine (its backend and read-out):
    ``probes`` (lens, attention, patch, linear), patching ``pairs`` and site ``kinds``, ``hidden_layers``
    exported for the linear probes (default all). ``option_orders``: (K, n) shared or (I, K, n) per item."""

    def __init__(self, lm, items, rubric, option_orders=None, *, probes=PROBES, criterion: int = 0,
                 pairs: str = "reverse", kinds=KINDS, hidden_layers=None, template=None,
                 engine: Engine | None = None, out=None, progress: bool = True, meta: dict | None = None):
        if not 0 <= criterion < rubric.n_criteria:
            raise ProbeError(f"criterion index {criterion} outside the rubric's {rubric.n_criteria} criteria")
        super().__init__(lm, items, rubric, option_orders, template=template, engine=engine, out=out,
                         progress=progress, meta=meta, steps=ProbeSteps(probes, criterion, pairs, kinds, hidden_layers))


def probe_experiment(exp: Experiment, lm, engine: Engine, *, progress: bool = True, dump: bool = False):
    """Probe the spec's items (a run spec: the first ``[probe] limit`` scored items) into the probe table
    (resumable, :class:`ProbeRun`) on ``engine`` (the scores' own, or one made and audited for the probe command)
    and write the probe page (a run spec: ``<out>/probe/``; the probe command: ``--report``). Returns (ProbeTable,
    the page or None). ``dump``: write the ``dump_prompts`` JSONL of the probed prompts (the probe command; a run
    spec's dump holds its scored prompts)."""
    from ..report.probe import write_probe_report
    from ..requests import dump_prompts
    from ..rubric import Rubric

    settings = probe_settings(exp)
    if settings is None:
        raise SpecError("nothing to probe: set [probe] probes (e.g. probes = [\"lens\", \"patch\"])")
    limit = exp.spec.probe.limit
    items, orders = exp.items[:limit], exp.option_orders[:limit] if exp.option_orders.ndim == 3 else exp.option_orders
    if dump and exp.spec.dump_prompts:
        crit = exp.rubric.criteria[settings["criterion"]]
        one = Rubric((crit,), exp.rubric.instructions, exp.rubric.name)
        dump_prompts(RequestPlan(lm, exp.template, one, items, orders), exp.spec.dump_prompts)
    od = exp.spec.orderings
    meta = {"run": exp.spec.name, "orderings": od.options, "seed": od.seed}
    table = ProbeRun(lm, items, exp.rubric, orders, template=exp.template, engine=engine, out=exp.probe_path,
                     progress=progress, meta=meta, **settings).execute()
    folder = exp.spec.probe.report if exp.spec.from_flags else exp.out / "probe"
    if folder is None:
        return table, None
    a = exp.spec.analysis
    return table, write_probe_report(table, folder, n_boot=a.n_boot, rng=a.seed)
