"""A spec's [probe] section checked without the model: the keyword arguments of
:class:`~logitjudge.probing.run.ProbeRun` it makes, or None where it probes nothing. Checked when the spec is
prepared (:func:`logitjudge.design.prepare`), before any model is read, and read again by the probe run."""

from __future__ import annotations

from ..errors import ProbeError
from ..spec import Experiment, SpecError
from .patching import KINDS
from .steps import PROBES, check_probe_args

__all__ = ["probe_settings"]


def probe_settings(exp: Experiment) -> dict | None:
    """The keyword arguments of :class:`ProbeRun` for the spec's [probe] section (None: off),
    checked without the model: probe names, sites, pairs, layers, the criterion and a design that moves the
    options."""
    p = exp.spec.probe
    if not p.probes:
        return None
    names = [c.name for c in exp.rubric.criteria]
    if p.criterion is not None and p.criterion not in names:
        raise SpecError(f"{exp.spec.where('probe', 'criterion')}: {p.criterion!r} is not one of the rubric's "
                        f"criteria {names}")
    if exp.criterion_orders is not None:
        raise SpecError("spec [probe]: probing reads one criterion per prompt; run it without multi_criteria")
    if exp.rows is not None:
        raise SpecError(f"spec [probe]: probing reads rubric prompts; run it with paradigm = \"pointwise\" (this "
                        f"spec is {exp.spec.prompts.paradigm})")
    kinds = tuple(p.sites or KINDS)
    for key, given, known in (("probes", p.probes, PROBES), ("sites", kinds, KINDS)):  # named as the caller set them
        bad = sorted(set(given) - set(known))
        if bad:
            raise SpecError(f"{exp.spec.where('probe', key)}: unknown {'probes' if key == 'probes' else 'patch sites'} "
                            f"{bad}; use a subset of {','.join(known)}")
    try:
        probes = check_probe_args(p.probes, exp.option_orders, pairs=p.pairs, kinds=kinds)
    except ProbeError as e:
        raise SpecError(f"{'' if exp.spec.from_flags else 'spec [probe]: '}{e}") from None
    return {"probes": probes, "criterion": names.index(p.criterion) if p.criterion else 0, "pairs": p.pairs,
            "kinds": kinds, "hidden_layers": p.layers}
