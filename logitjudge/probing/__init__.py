"""Probing the judge's internals on the permuted prompts it scores, through the scores' backend.

Modules: ``spans`` (option-line token spans), ``prompts`` (the scored prompts with their spans), ``capture`` (one
clean run per item: lens, attention, hidden states), ``lens``, ``patching`` (order-swap patching with the clean
prefix computed once), ``steps`` (one item's probe step), ``table`` (ProbeTable .npz). The run around the step
(fingerprint, checkpoint, sharding, progress, save) is the scores' own: :class:`logitjudge.probing.run.ProbeRun`; the
hook points are the judge's (:mod:`logitjudge.judge.hooks`). The estimates on a ProbeTable's arrays (lens
position effect, attention and patching summaries, cross-validated linear probes) are pure statistics:
:mod:`logitjudge.stats.probing` and :mod:`logitjudge.stats.linear_probe`, used by the report page
(:mod:`logitjudge.report.probe`).
"""
