"""Best-of-N cost: N candidates per prompt scored under K random orders each, on SummEval (16 systems per
article), the built-in judge.

For N = 4, 8, 16 candidates per article and K = 1, 3, 5 random orders per candidate (``random:K``), the
logitjudge run (:class:`logitjudge.runs.GroupedRun`: the candidates of one article on one token trie, so the
instructions and the article are computed once for all of them, and each candidate's summary once for its K
orders) against scoring each (candidate, order) prompt separately with batched transformers
(:func:`logitjudge.judge.baselines.batched_prompt_logprobs`, right-padded batches of 16, no prefix sharing).

Cost in forwarded tokens (logitjudge: the trie's tokens, each node once, counted from the encoded prompts without
the model, exact; the baseline: every prompt's tokens) and in seconds (wall clock of one run each, on a shared
machine: load-dependent, the token counts are not). The claim checked: on the text-first layout K = 3 and K = 5
orders cost less than 2x and 3x one order. Prints a table and writes JSON (``--json``).

    nice -n 10 .venv/bin/python -m benchmarks.best_of_n --articles 2 --threads 1 --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks.timing import best_of_interleaved


def _cpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        return next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")),
                    platform.processor())
    except OSError:
        return platform.processor()


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def _secs(x) -> str:
    return "not run" if x is None else f"{x:.1f}"


def items_for(dataset, n: int, articles: int) -> list:
    """The first ``n`` candidates (summaries, file order) of each of the first ``articles`` articles."""
    by_group: dict = {}
    for it in dataset.items:
        by_group.setdefault(it.group, []).append(it)
    groups = [g for g, its in by_group.items() if len(its) >= n][:articles]
    return [it for g in groups for it in by_group[g][:n]]


def measure(lm, items, rubric, k: int, *, run_baseline: bool, seed: int = 0) -> dict:
    from logitjudge.engine import Engine
    from logitjudge.judge.baselines import batched_prompt_logprobs
    from logitjudge.orderings import parse
    from logitjudge.runs import GroupedRun, planned_tokens

    orders = parse(f"random:{k}", rubric.n_options, n_items=len(items), seed=seed)
    run = GroupedRun(lm, items, rubric, orders, engine=Engine(lm, token_budget=1 << 15), progress=False)
    tokens = planned_tokens(run)
    prompts = [p for i in range(len(items)) for p in run.request_plan.prompts(i)]
    row = {"N": None, "K": k, "items": len(items), "prompts": len(prompts), "trie_tokens": tokens,
           "baseline_tokens": int(sum(len(p.prompt_ids) for p in prompts))}
    fns = {"logitjudge": run.execute}  # one run each (a run executes once): the wall clock of a single round
    if run_baseline:
        fns["baseline"] = lambda: batched_prompt_logprobs(lm.model, prompts, batch_size=16,
                                                          pad_id=lm.tokenizer.pad_token_id or 0)
    timed = best_of_interleaved(fns, 1)
    table, row["seconds"] = timed["logitjudge"].value, timed["logitjudge"].best
    if run_baseline:
        lps, row["baseline_seconds"] = timed["baseline"].value, timed["baseline"].best
        base = np.stack([np.exp(lp - np.logaddexp.reduce(lp)) for lp in lps]).reshape(table.probs.shape)
        row["max_abs_diff_vs_baseline"] = float(np.abs(base - table.probs).max())
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=None, help="data sets folder (unset: $LOGITJUDGE_DATA)")
    ap.add_argument("--articles", type=int, default=2, help="articles (prompts) per configuration")
    ap.add_argument("--ns", default="4,8,16", help="candidates per article")
    ap.add_argument("--ks", default="1,3,5", help="random orders per candidate")
    ap.add_argument("--criterion", default="coherence")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--baseline-ns", default="4",
                    help="the N whose batched-transformers runs are timed ('' none; its tokens are always counted)")
    ap.add_argument("--json", default="benchmarks/results/best_of_n.json")
    args = ap.parse_args(argv)

    import torch

    from benchmarks import workloads
    from logitjudge.data import load_dataset

    uptime_before = _uptime()
    ds = load_dataset("summeval", args.data_dir)
    rubric = ds.rubric.subset([args.criterion])
    lm, _ = workloads.load("gemma-3-270m", [], threads=args.threads)
    rows = []
    for n in (int(x) for x in args.ns.split(",")):
        items = items_for(ds, n, args.articles)
        for k in (int(x) for x in args.ks.split(",")):
            row = measure(lm, items, rubric, k, run_baseline=str(n) in args.baseline_ns.split(","))
            row["N"] = n
            rows.append(row)
            print(json.dumps(row), flush=True)
    one = {r["N"]: r for r in rows if r["K"] == 1}
    for r in rows:
        r["tokens_vs_k1"] = r["trie_tokens"] / one[r["N"]]["trie_tokens"] if r["N"] in one else None
        r["seconds_vs_k1"] = r["seconds"] / one[r["N"]]["seconds"] if r["N"] in one else None
        r["tokens_saved_vs_baseline"] = r["baseline_tokens"] / r["trie_tokens"]
    env = {"cpu": _cpu(), "threads": args.threads, "uptime_before": uptime_before, "torch": torch.__version__,
           "command": "nice -n 10 .venv/bin/python -m benchmarks.best_of_n "
           + " ".join(sys.argv[1:] if argv is None else argv)}
    print(f"\nSummEval {args.criterion}, {args.articles} articles per row, gemma-3-270m fp32, template text-first, "
          f"random:K orders per candidate; {env['cpu']}, {args.threads} thread(s); {_uptime()}\n")
    head = ["N", "K", "prompts", "trie tokens", "x K=1", "baseline tokens", "baseline/trie", "seconds", "x K=1",
            "baseline seconds"]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        print(f"| {r['N']} | {r['K']} | {r['prompts']} | {r['trie_tokens']:,} | {r['tokens_vs_k1']:.2f} | "
              f"{r['baseline_tokens']:,} | {r['tokens_saved_vs_baseline']:.1f} | {r['seconds']:.1f} | "
              f"{r['seconds_vs_k1']:.2f} | {_secs(r.get('baseline_seconds'))} |")
    env["uptime_after"] = _uptime()
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"env": env, "rows": rows}, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
