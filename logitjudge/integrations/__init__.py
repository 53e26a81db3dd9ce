"""Scorers for the evaluation frameworks people already grade in (issue 54), on top of ``lj.score`` and ``logitjudge
serve``: ``promptfoo_assert`` (a promptfoo assertion, standard library only), ``inspect`` (inspect_ai scorers),
``deepeval`` (a DeepEval metric), ``_judging`` (the path the last two share: the service's answer, computed here or
asked of a service) and ``readings`` (G-Eval's and a regex grader's one-order readings, for the side-by-side of
docs/integrations.md). Nothing below this package imports it."""
