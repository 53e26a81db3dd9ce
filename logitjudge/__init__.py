"""logitjudge: exact, position-debiased rubric scoring from a judge LLM's next-token probabilities."""

from . import _openmp  # noqa: F401  (first: it sets OpenMP's wait policy before anything loads torch)
from .api import Report, Result, analyze, load_judge, score
from .orderings import balanced, fixed, is_balanced
from .orderings import random as random_orders
from .orderings import shared_random as shared_random_orders
from .rubric import Criterion, Rubric, ScoreOption, builtin_rubric, load_rubric
from .table import ScoreTable

__version__ = "0.1.0"

__all__ = [
    # the top-level API: lj.load_judge, lj.score, lj.analyze (logitjudge.api), lj.run, lj.probe, lj.compare
    # (logitjudge.commands), lj.rank (logitjudge.picks), lj.reward (logitjudge.rlaif)
    "Report", "Result", "analyze", "compare", "load_judge", "probe", "rank", "reward", "run", "score",
    # the building blocks (the submodules are the long form)
    "Criterion", "Rubric", "ScoreOption", "ScoreTable", "balanced", "builtin_rubric", "fixed", "is_balanced",
    "load_rubric", "random_orders", "shared_random_orders", "__version__",
]

_LAZY = {"rank": ("picks", "rank"), "reward": ("rlaif", "reward"), "run": ("commands", "run"),
         "probe": ("commands", "probe"), "compare": ("commands", "compare")}  # pandas, scipy, torch load on first use


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(f".{module}", __name__), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
