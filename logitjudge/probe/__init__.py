"""Probing the judge's internals on the permuted prompts it scores.

Modules (imported on use; this package imports nothing heavy so the CLI can register ``probe`` cheaply):
``hooks`` (named hook points on any transformers causal LM), ``spans`` (option-line token spans), ``prompts``
(the scored prompts with their spans), ``capture`` (one clean run per item: lens, attention, hidden states),
``lens``, ``patching`` (order-swap patching with the clean prefix computed once), ``table`` (ProbeTable .npz,
resumable), ``run`` (:func:`run.probe`), ``cli``. The estimates on a ProbeTable's arrays (lens position effect,
attention and patching summaries, cross-validated linear probes) are pure statistics: :mod:`logitjudge.stats.probing`
and :mod:`logitjudge.stats.linear_probe`, used by the report page (:mod:`logitjudge.report.probe`).
"""
