"""The demo (``make demo`` / ``logitjudge demo``): the built-in texts scored with the built-in rubric under
balanced orderings, the distributions by position printed, then the analysis and the report folder.

It is an experiment like any other (:mod:`logitjudge.experiment`), run step by step so that the scores can be
printed before the analysis.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .experiment import analyze_experiment, open_experiment
from .report.experiment import write_experiment_report

TEXTS = Path(__file__).parent / "demo" / "texts.jsonl"


def demo_spec(out="out/demo", model: str = "gemma-3-270m", *, n_boot: int = 1000) -> dict:
    """The demo as an experiment spec."""
    return {"name": "demo", "out": str(out),
            "description": "12 short texts of mixed quality (news, science, story) under the built-in rubric",
            "model": {"id": str(model)}, "data": {"texts": str(TEXTS), "rubric": "default"},
            "prompts": {"template": "text-first"}, "orderings": {"options": "balanced", "seed": 0},
            "analysis": {"n_boot": n_boot, "seed": 0}}


def format_distributions(table, items) -> str:
    """Per text and criterion: the mean probability of the option shown at each position (over the
    orderings) and the expected score (the mean over orderings of the probability-weighted score)."""
    pbp = table.probs_by_position().mean(axis=2)  # [items, criteria, positions]
    exp = table.expected_score().mean(axis=2)  # [items, criteria]
    n = table.n_options
    lines = []
    for c, name in enumerate(table.criteria):
        head = f"{'text':<6}{'group':<9}{'snippet':<34}" + "".join(f"{'pos ' + str(p + 1):>7}" for p in range(n))
        lines += [f"{name}: mean probability by position over {table.shape[2]} orderings, expected score "
                  f"({table.values[c].min():g}-{table.values[c].max():g})", head + f"{'E[score]':>10}",
                  "-" * (len(head) + 10)]
        for i, it in enumerate(items):
            snippet = " ".join(it.text.split())
            snippet = snippet[:30] + "..." if len(snippet) > 33 else snippet
            lines.append(f"{it.id:<6}{it.group:<9}{snippet:<34}"
                         + "".join(f"{x:7.3f}" for x in pbp[i, c]) + f"{exp[i, c]:10.2f}")
        lines.append(f"{'all':<49}" + "".join(f"{x:7.3f}" for x in pbp[:, c].mean(axis=0))
                     + f"{float(np.mean(exp[:, c])):10.2f}")
        lines.append("")
    return "\n".join(lines).rstrip()


def run_demo(out="out/demo", model: str = "gemma-3-270m", *, lm=None, n_boot: int = 1000,
             progress: bool = True) -> int:
    """Score the built-in texts, print their distributions by position, analyse, write the report folder,
    print the verdict and the report's path. ``lm`` is a preloaded model (tests). Returns 0."""
    run = open_experiment(demo_spec(out, model, n_boot=n_boot), lm=lm)
    exp = run.exp
    print(f"logitjudge demo: {len(exp.items)} texts x {len(exp.option_orders)} balanced orderings of the "
          f"{exp.rubric.n_options} options of the built-in rubric '{exp.rubric.name}', judge {model}")
    table = run.score(progress=progress)
    print()
    print(format_distributions(table, exp.items))
    print()
    results = analyze_experiment(exp, table)
    folder = write_experiment_report(exp, table, results)
    print(f"verdict: {results['verdict']}")
    print(f"report: {folder / 'report.html'} (and report.md, results.json, plots/ in {folder})")
    return 0
