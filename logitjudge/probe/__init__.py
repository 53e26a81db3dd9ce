"""Probing the judge's internals on the permuted prompts it scores.

Modules (imported on use; this package imports nothing heavy so the CLI can register ``probe`` cheaply):
``hooks`` (named hook points on any transformers causal LM), ``spans`` (option-line token spans), ``prompts``
(the scored prompts with their spans), ``capture`` (one clean run per item: lens, attention, hidden states),
``lens``, ``patching`` (order-swap patching with the clean prefix computed once), ``linear`` (cross-validated
probes), ``table`` (ProbeTable .npz, resumable), ``summary`` (estimates), ``run`` (:func:`run.probe`), ``cli``.
"""
