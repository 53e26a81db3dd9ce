"""The slot modes of several criteria in one prompt, and the check that needs no model: which modes exist and
how many label continuations a prompt of marginal mode reads (the steps themselves: :mod:`logitjudge.steps`).
It sits low so that a spec's slots are checked while the spec is prepared, before any model loads."""

from __future__ import annotations

from .errors import LogitJudgeError

SLOT_MODES = ("greedy", "marginal")


class MultiCriteriaError(LogitJudgeError, ValueError):
    pass


def marginal_cost(n_options: int, n_criteria: int) -> int:
    """Label continuations per prompt in marginal mode: n * sum_j n^j."""
    return n_options * sum(n_options ** j for j in range(n_criteria))


def check_slots(slots: str, n_options: int, n_criteria: int, max_continuations: int) -> None:
    """Refuse an unknown slot mode, or marginal mode past its continuation budget, before any model work."""
    if slots not in SLOT_MODES:
        raise MultiCriteriaError(f"unknown slot mode {slots!r}; use greedy or marginal")
    if slots == "marginal" and marginal_cost(n_options, n_criteria) > max_continuations:
        raise MultiCriteriaError(
            f"marginal mode needs {marginal_cost(n_options, n_criteria):,} label continuations per prompt for "
            f"{n_criteria} criteria x {n_options} options (n * sum n^j), above the budget of "
            f"{max_continuations:,}; use --slots greedy, fewer criteria per prompt, or raise --max-continuations")
