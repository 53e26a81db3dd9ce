"""Readings: how one prompt's exact label distribution becomes the judge's score.

* ``greedy``: the label a temperature-0 judge writes, the argmax (the study's judges answer one label). An exact
  tie goes to the lowest canonical option (``numpy.argmax``); exact ties do not occur in real distributions.
* ``sampled``: the label a judge sampling at ``temperature`` T writes, drawn from p^(1/T) renormalised
  (T=1: the exact distribution). A statistic under this reading is its expectation over the judge's draws:
  exact where it is linear in the answers (the expected value of one answer is the tempered mean, so at T=1 a
  mean score equals the ``expected`` reading), else a Monte-Carlo estimate with its standard error.
* ``expected``: the probability-weighted score sum_o p(o) v(o) (G-Eval style), a deterministic extension that
  no sampling judge writes.

``argmax`` is accepted as the old name of ``greedy``; ``draw`` is one seeded realisation of ``sampled`` (one
answer drawn per prompt with ``rng``), the building block of the Monte-Carlo estimates.
"""

from __future__ import annotations

import numpy as np

from ._result import ShapeError, StatsError, as_float, as_rng, check_choice

READINGS = ("greedy", "sampled", "expected")
ALIASES = {"argmax": "greedy"}


def check_reading(reading: str, *, allow_draw: bool = False) -> str:
    """Canonical name of ``reading`` (``argmax`` -> ``greedy``); ``draw`` only where ``allow_draw``."""
    r = ALIASES.get(reading, reading)
    return check_choice("reading", r, READINGS + (("draw",) if allow_draw else ()))


def check_temperature(temperature: float) -> float:
    t = float(temperature)
    if not (np.isfinite(t) and t > 0):
        raise StatsError(f"temperature must be a positive number (1 = the exact distribution), got "
                         f"{temperature!r}; the greedy reading is temperature 0")
    return t


def tempered(probs, temperature: float = 1.0) -> np.ndarray:
    """``probs[..., option]`` raised to 1/T and renormalised (T=1 returns the distribution unchanged)."""
    p = as_float(probs, "probs")
    t = check_temperature(temperature)
    if t == 1.0:
        return p
    with np.errstate(divide="ignore"):
        z = np.log(p) / t
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def answer_probs(probs, *, reading: str, temperature: float = 1.0) -> np.ndarray:
    """``[..., option]`` probability that the judge's answer is each option: one-hot of the argmax under
    ``greedy``, the tempered distribution under ``sampled`` (``expected`` has no single answer)."""
    r = check_reading(reading)
    p = as_float(probs, "probs")
    if r == "greedy":
        return np.eye(p.shape[-1])[np.argmax(p, axis=-1)]
    if r == "sampled":
        return tempered(p, temperature)
    raise StatsError("the 'expected' reading is a probability-weighted score, not one answer; use greedy or "
                     "sampled for statistics on the answered label")


def answer_weights(probs, *, reading: str, temperature: float = 1.0, tol: float = 1e-12) -> np.ndarray:
    """``[..., label]`` weight of each label as the judge's answer: greedy: the argmax, an exact tie (within
    ``tol``) split equally between the tied labels (a first-index tie-break would itself favour label 0);
    sampled: the tempered distribution (the expected answer of a sampling judge)."""
    p = as_float(probs, "probs")
    reading = check_reading(reading)
    if reading == "greedy":
        top = (p >= p.max(axis=-1, keepdims=True) - tol).astype(np.float64)
        return top / top.sum(axis=-1, keepdims=True)
    if reading == "sampled":
        return tempered(p, temperature)
    raise StatsError("the 'expected' reading is a probability-weighted score, not one answer; use greedy or "
                     "sampled for answered labels")


def one_answer(probs, *, reading: str, temperature: float = 1.0, rng=None, tol: float = 1e-12) -> np.ndarray:
    """``[..., label]`` the answer of one run of the judge to each prompt: greedy: :func:`answer_weights` (exact
    ties split); sampled ('draw'): one-hot of one label drawn from the tempered distribution with ``rng`` (one
    seeded run of a sampling judge)."""
    reading = check_reading(reading, allow_draw=True)
    if reading == "greedy":
        return answer_weights(probs, reading="greedy", tol=tol)
    if reading == "expected":
        raise StatsError("an answered label needs reading='greedy' or 'sampled' (the 'expected' reading is a "
                         "probability-weighted score, not one answer)")
    p = as_float(probs, "probs")
    return np.eye(p.shape[-1])[draw_answers(tempered(p, temperature), rng)]


def draw_answers(probs, rng=None) -> np.ndarray:
    """One option index drawn from every distribution ``probs[..., option]`` -> ``[...]`` (inverse CDF)."""
    p = as_float(probs, "probs")
    u = as_rng(rng).random(p.shape[:-1] + (1,))
    return np.minimum((u > np.cumsum(p, axis=-1)).sum(axis=-1), p.shape[-1] - 1)


def read_scores(probs, values, *, reading: str = "expected", temperature: float = 1.0, rng=None) -> np.ndarray:
    """Score of each distribution ``probs[..., option]`` under a reading -> ``[...]``.

    ``greedy``: the value of the argmax label. ``sampled``: the *expected* value of a tempered draw (exact; its
    mean over prompts is the mean a sampling judge's answers converge to). ``expected``: sum_o p(o) v(o).
    ``draw``: the value of one answer drawn from the tempered distribution with ``rng`` (one realisation).
    """
    r = check_reading(reading, allow_draw=True)
    p, v = as_float(probs, "probs"), as_float(values, "values")
    if p.ndim < 1 or v.shape != p.shape[-1:]:
        raise ShapeError(f"values has shape {v.shape}, expected {p.shape[-1:]} (one value per option)")
    if r == "expected":
        return p @ v
    if r == "greedy":
        return v[np.argmax(p, axis=-1)]
    q = tempered(p, temperature)
    return q @ v if r == "sampled" else v[draw_answers(q, rng)]
