"""Pointwise, pairwise or listwise: the three judging paradigms on the same items, one judge, one engine (issue 25).

For each data set (HANNA stories, SummEval summaries) the same groups' items are scored three times by the
built-in judge (gemma-3-270m, fp32, exact label probabilities through the token trie):

* ``pointwise``: each item on the data set's 1-5 rubric (one criterion), the 2n balanced option orders;
* ``pairwise``: every pair of a group's items in both orders, labels "A"/"B" (built-in ``pairwise`` template);
* ``listwise``: a group's items in one prompt, labels A..m, the 2m balanced candidate orders (``listwise``).

Then ``logitjudge compare`` on the three tables (:func:`logitjudge.sections.paradigms.compare_tables`, greedy
reading: the label a temperature-0 judge writes): Kendall tau-b with the human scores within each group (mean
over groups, bootstrap CI over groups), how often the judge's top-1 is a human-best item, the position bias of
the answered slot (bias-corrected Cramér's V, Rao-Scott p with the reordered unit as the cluster), top-1 flips
between orderings, pairwise swap consistency, and the cost (forward calls, trie tokens, seconds).

    python -m benchmarks.paradigms [--groups 4] [--per-group 4] [--threads auto] [--data-dir ../shared/data]
                                   [--datasets hanna,summeval] [--quick]

Prints one comparison table per data set and writes ``benchmarks/results/paradigms.json`` (``paradigms_quick``
with --quick: 2 groups of 3 items of the first data set; ``paradigms_summeval`` for ``--datasets summeval``)
with the machine, the settings and every comparison; score tables and plots go to
``benchmarks/results/paradigms[_quick]/``, and a rerun reuses the tables. Another ``--model`` adds its name to
both (``paradigms_qwen2.5-coder-1.5b-instruct``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
PARADIGMS = ("pointwise", "pairwise", "listwise")
# one criterion per data set, the one both the rubric and the human scores name
CRITERION = {"hanna": "Coherence", "summeval": "coherence"}


def spec(dataset: str, paradigm: str, args, folder: Path) -> dict:
    """The experiment spec of one data set under one paradigm: the same groups and items for all three."""
    return {"name": f"{dataset}-{paradigm}", "out": str(folder / f"{dataset}-{paradigm}"),
            "model": {"id": args.model, "dtype": "fp32", "threads": None if args.threads == "auto" else args.threads},
            "data": {"name": dataset, "dir": args.data_dir, "groups": args.groups, "per_group": args.per_group,
                     "criteria": [CRITERION[dataset]], "seed": args.seed},
            "prompts": {"paradigm": paradigm}, "orderings": {"options": "balanced", "seed": args.seed}}


def score_all(dataset: str, args, folder: Path, judge: dict) -> tuple[list, dict]:
    """The three score tables of one data set (reused when they hold these settings) and its human scores."""
    from logitjudge.experiment import open_experiment

    tables, human = [], None
    for paradigm in PARADIGMS:
        opened = open_experiment(spec(dataset, paradigm, args, folder), lm=judge.get("lm"))  # out/table.npz
        judge["lm"] = opened.judge()  # one model for every run: loaded by the first
        t0 = time.perf_counter()
        tables.append(opened.score(progress=not args.quiet))
        print(f"{dataset} {paradigm}: {tables[-1].shape[0]} rows scored or reused in "
              f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
        human = opened.exp.human
    return tables, human


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="hanna,summeval")
    ap.add_argument("--groups", type=int, default=4, help="groups drawn per data set (seeded)")
    ap.add_argument("--per-group", type=int, default=4, help="the first N items of each group")
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--threads", default="auto")
    ap.add_argument("--data-dir", default=os.environ.get("LOGITJUDGE_DATA", str(ROOT.parent.parent / "shared"
                                                                                 / "data")))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="2 groups of 3 items of the first data set")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    unknown = [d for d in datasets if d not in CRITERION]
    if unknown:
        ap.error(f"--datasets {unknown}: this study knows {sorted(CRITERION)}")
    if args.quick:
        datasets, args.groups, args.per_group = datasets[:1], 2, 3
    if args.threads != "auto":
        args.threads = int(args.threads)
    from benchmarks.judge_model import run_tag

    name = run_tag("paradigms_quick" if args.quick else "paradigms", args.model)
    json_name = name if datasets == ["hanna", "summeval"][:len(datasets)] else f"{name}_{'_'.join(datasets)}"
    folder = ROOT / "results" / name
    folder.mkdir(parents=True, exist_ok=True)

    import torch

    from logitjudge.gemm_rates import cpu_info, describe_cpu
    from logitjudge.report.compare import comparison_table, plot_comparison
    from logitjudge.sections.paradigms import compare_tables
    from logitjudge.stats import jsonable

    judge: dict = {}
    report = {"machine": {"cpu": describe_cpu(cpu_info()), "platform": platform.platform(),
                          "cpus": os.cpu_count()},
              "command": "python -m benchmarks.paradigms " + " ".join(sys.argv[1:] if argv is None else argv),
              "settings": {"groups": args.groups, "per_group": args.per_group, "model": args.model,
                           "threads": args.threads, "seed": args.seed, "n_boot": args.n_boot,
                           "reading": "greedy", "orderings": "balanced"},
              "datasets": {}}
    for ds in datasets:
        tables, human = score_all(ds, args, folder, judge)
        crit = CRITERION[ds]
        cmp = compare_tables(tables, human, criteria=[crit], reading="greedy", n_boot=args.n_boot,
                             rng=args.seed)[crit]
        print(f"\n## {ds}: {crit}, {args.groups} groups x {args.per_group} items, {args.model} (fp32)\n")
        print(comparison_table(cmp))
        plot = plot_comparison(cmp, folder / f"{ds}.png")
        report["datasets"][ds] = {"criterion": crit, "comparison": cmp.to_dict(), "plot": str(plot),
                                  "tables": [t.meta.get("fingerprint") for t in tables]}
    report["machine"]["torch_threads"] = torch.get_num_threads()
    out = ROOT / "results" / f"{json_name}.json"  # a run of other data sets does not replace this one
    out.write_text(json.dumps(jsonable(report), indent=2) + "\n", encoding="utf-8")
    print(f"machine: {report['machine']['cpu']}, {report['machine']['torch_threads']} torch threads")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
