"""Exactness audit: before a run goes on, recompute a few random prompts with the plain path and compare.

The engine's fast paths are held to the plain forward by parity tests per model family
(:data:`logitjudge.judge.TESTED_MODEL_TYPES`). A model outside them may do something no config declares
(an attention bias of its own, a new cache layout); the audit runs the engine on whole items (so the trie's
sharing is exercised as in the run) and the plain path (:func:`logitjudge.engine.plain_prompt_logprobs`: one
full forward per prompt and label, no cache, fp32 full-vocabulary softmax) on ``n`` prompts drawn at random
from them, and stops the run if any option probability differs by more than ``tol``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .engine import EngineError, plain_prompt_logprobs
from .errors import LogitJudgeError
from .tolerance import DEFAULT_TOL

# a serving engine's table unless --verify N: its rows were not compared with the plain forward in this run
NOT_AUDITED = ("not audited: the serving engine's rows were not compared with the plain forward (--verify N "
               "loads the same weights in transformers and compares N prompts)")


class ExactnessError(EngineError):
    """The fast path differs from the plain forward on the audited prompts."""


class AuditError(LogitJudgeError, ValueError):
    """Audit settings that cannot be used."""


@dataclass(frozen=True)
class AuditResult:
    """``max_abs_diff``: the largest |p_engine - p_plain| over the audited prompts' option probabilities
    (each prompt's label probabilities normalised over its options, as the table stores them)."""

    n_prompts: int
    max_abs_diff: float
    tol: float
    prefix_mode: str
    prompts: tuple  # (group index, prompt index) audited

    def meta(self) -> dict:
        return {"exactness_audit": {"n_prompts": self.n_prompts, "max_abs_prob_diff": self.max_abs_diff,
                                    "tol": self.tol, "prefix_mode": self.prefix_mode,
                                    "reference": "plain forward per prompt (plain_prompt_logprobs)"}}


def _normalised(lp: np.ndarray) -> np.ndarray:
    p = np.exp(lp - lp.max())
    return p / p.sum()


def verify_exactness(engine, groups: list, n: int, *, rng=0, tol: float = DEFAULT_TOL) -> AuditResult:
    """Audit ``n`` random prompts of ``groups`` (lists of EncodedPrompt, one per item) against the plain path.

    The engine scores every group that holds an audited prompt, in one run (as a real run would); the plain
    path scores only the audited prompts. Raises :class:`ExactnessError` naming the worst prompt if any option
    probability differs by more than ``tol``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise AuditError(f"the number of audited prompts must be an integer >= 0, got {n!r}")
    if not (isinstance(tol, float) and tol > 0):
        raise AuditError(f"tol must be a positive float, got {tol!r}")
    pairs = [(g, p) for g, group in enumerate(groups) for p in range(len(group))]
    if n == 0 or not pairs:
        return AuditResult(0, 0.0, tol, engine.prefix_mode, ())
    gen = np.random.default_rng(rng)
    chosen = sorted(tuple(pairs[i]) for i in gen.choice(len(pairs), size=min(n, len(pairs)), replace=False))
    used = sorted({g for g, _ in chosen})
    fast = dict(zip(used, engine.prompt_logprobs([groups[g] for g in used])))
    model = engine.reference()  # the same weights in transformers, in this process
    worst, where = 0.0, None
    for g, p in chosen:
        ref = plain_prompt_logprobs(model, [groups[g][p]])[0]
        diff = float(np.abs(_normalised(fast[g][p]) - _normalised(ref)).max())
        if diff > worst or where is None:
            worst, where = diff, (g, p)
    if not worst <= tol:
        raise ExactnessError(
            f"exactness audit failed: prefix mode {engine.prefix_mode!r} differs from the plain forward by "
            f"{worst:.3g} in an option probability (item {where[0]}, prompt {where[1]}; tolerance {tol:g}). This "
            "model does something the fast path does not compute; run with --prefix-mode plain (exact, slower) "
            "and report the architecture")
    return AuditResult(len(chosen), worst, tol, engine.prefix_mode, tuple(chosen))


def audit_run(engine, lm, items, rubric, option_orders, template, n: int | None, *, rng=0,
              tol: float | None = None) -> AuditResult:
    """The audit before a run: ``n`` prompts (None: :func:`~logitjudge.judge.default_audit_prompts`)
    drawn from up to ``n`` random items' single-criterion prompts (``template``: a Template, a name or None for
    the default); the result goes to ``engine.record_audit`` (the table's meta). ``n`` / ``tol`` None: the
    engine's ``audit_defaults()`` (the native engine's tolerance: :func:`default_tol`). Raises
    :class:`ExactnessError` when it fails."""
    from .prompts import load_template
    from .requests import RequestPlan

    plan = RequestPlan(lm, load_template(template), rubric, items, option_orders, max_length=lm.max_length_on(engine))
    return audit_plan(engine, plan, n, rng=rng, tol=tol)


def audit_plan(engine, plan, n: int | None, *, rng=0, tol: float | None = None) -> AuditResult:
    """:func:`audit_run` on a run's :class:`~logitjudge.requests.RequestPlan` (its items, or the candidate rows of
    a pairwise / listwise run): ``n`` prompts drawn from up to ``n`` random units, read from the plan (and kept
    there for the run)."""
    n_default, tol_default = engine.audit_defaults()  # the engine's: none for a served engine unless asked
    n = n_default if n is None else n
    gen = np.random.default_rng(rng)
    picked = sorted(gen.choice(len(plan), size=min(n, len(plan)), replace=False)) if n else []
    groups = [plan.prompts(i) for i in picked]
    res = verify_exactness(engine, groups, n, rng=gen, tol=tol_default if tol is None else tol)
    engine.record_audit(res)
    return res
