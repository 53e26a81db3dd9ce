"""Cost of multi-criteria scoring (all criteria in one prompt) against the plain path, on gemma-3-270m.

HANNA-shaped: 6 criteria x 5 options, one story of ~350 tokens. Greedy mode: 6 slots per ordering; plain path =
one full forward per slot with the earlier greedy answers written out. Marginal mode is exact over every
earlier answer: 6 x 5 needs n * sum_j n^j = 19,530 label continuations per prompt (3,906 contexts), so its plain
path (one forward per context) is measured on the 3-criterion subset and the 6 x 5 engine run is timed alone.

    .venv/bin/python -m benchmarks.multi [--orderings 2] [--quick] [--out benchmarks/results/multi.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

from benchmarks import workloads
from benchmarks.timing import best_of_interleaved
from logitjudge import orderings
from logitjudge.engine import Engine, distribution, plain_prompt_logprobs
from logitjudge.prompts import builtin_template
from logitjudge.requests import encode, slot_request
from logitjudge.rubric import builtin_rubric
from logitjudge.runs import score_multi
from logitjudge.slots import marginal_cost


def plain_greedy(lm, tpl, rub, item, oo, co):
    """Plain path for greedy: per ordering, per slot, one full forward with the earlier answers written."""
    probs = np.zeros((rub.n_criteria, len(oo), rub.n_options))
    for k in range(len(oo)):
        answers = []
        for c in co[k]:
            ep = encode(lm, tpl, rub, slot_request(item, oo[k], co[k], answers))
            p = distribution(plain_prompt_logprobs(lm.model, [ep])[0])[0]
            probs[c, k] = p
            answers.append(rub.criteria[c].options[int(np.argmax(p))].label)
    return probs


def plain_marginal(lm, tpl, rub, item, oo, co):
    """Plain path for marginal: one full forward per context (every combination of earlier answers)."""
    n, C = rub.n_options, rub.n_criteria
    probs = np.zeros((C, len(oo), n))
    for k in range(len(oo)):
        slot = {}
        for j in range(C):
            for path in itertools.product(range(n), repeat=j):
                labels = [rub.criteria[co[k][i]].options[a].label for i, a in enumerate(path)]
                ep = encode(lm, tpl, rub, slot_request(item, oo[k], co[k], labels))
                slot[path] = distribution(plain_prompt_logprobs(lm.model, [ep])[0])[0]
        for j in range(C):
            for path in itertools.product(range(n), repeat=j):
                w = np.prod([slot[path[:i]][path[i]] for i in range(j)]) if j else 1.0
                probs[co[k][j], k] += w * slot[path]
    return probs


def fmt(x, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--orderings", type=int, default=2, help="criteria orders (balanced rotations) to score")
    ap.add_argument("--quick", action="store_true", help="one ordering; skip the 6 x 5 marginal run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/results/multi.json")
    args = ap.parse_args(argv)
    lm, _ = workloads.load("gemma-3-270m", [], threads=args.threads)
    tpl = builtin_template("multi-criteria")
    hanna = builtin_rubric("hanna")
    item = workloads.make_texts(lm.tokenizer, 1, 350, "hanna")[0][0]
    K = 1 if args.quick else args.orderings
    rows = []

    def run(label, rub, slots, plain_fn):
        C = rub.n_criteria
        co = orderings.balanced(C)[:K]
        oo = orderings.fixed(rub.n_options, K)
        eng = Engine(lm)
        # one run each (minutes long): the engine, then the plain path
        t = best_of_interleaved({"engine": lambda: score_multi(lm, [item], rub, oo, co, template=tpl, engine=eng,
                                                               slots=slots, max_continuations=10 ** 6,
                                                               progress=False)}, 1)["engine"]
        table, t_eng = t.value, t.best
        row = {"case": label, "mode": slots, "criteria": C, "options": rub.n_options, "orderings": K,
               "continuations_per_prompt": rub.n_options * C if slots == "greedy"
               else marginal_cost(rub.n_options, C),
               "engine_s": t_eng, "engine_tokens": eng.stats["tokens"], "plain_s": None, "speedup": None,
               "max_abs_diff": None}
        if plain_fn is not None:
            t = best_of_interleaved({"plain": lambda: plain_fn(lm, tpl, rub, item, oo, co)}, 1)["plain"]
            ref, t_plain = t.value, t.best
            row.update(plain_s=t_plain, speedup=t_plain / t_eng,
                       max_abs_diff=float(np.abs(table.probs[0] - ref).max()))
        rows.append(row)
        plain = "-" if row["plain_s"] is None else f"{row['plain_s']:7.1f} s"
        print(f"{label:28s} {slots:8s} engine {t_eng:7.1f} s  plain {plain}", flush=True)

    run("HANNA 6x5", hanna, "greedy", plain_greedy)
    small = hanna.subset([c.name for c in hanna.criteria[:3]])
    run("HANNA 3x5 (first 3 criteria)", small, "marginal", plain_marginal)
    if not args.quick:
        run("HANNA 6x5", hanna, "marginal", None)
    print()
    print("| case | mode | continuations / prompt | engine s | engine tokens | plain s | speed-up | max abs diff |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['mode']} | {r['continuations_per_prompt']:,} | {r['engine_s']:.1f} | "
              f"{r['engine_tokens']:,} | {fmt(r['plain_s'], '.1f')} | {fmt(r['speedup'], '.1f')} | "
              f"{fmt(r['max_abs_diff'], '.1e')} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"orderings": K, "text_tokens": len(lm.tokenizer(item.text).input_ids),
                               "threads": args.threads, "rows": rows}, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
