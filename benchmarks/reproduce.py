"""Paper-style reproduction on a small judge: the study's findings side by side with the numbers we get.

Runs five experiments (each a :mod:`logitjudge.experiment` spec, with its own report folder):

* ``hanna``: HANNA stories, 2 criteria, balanced orderings -> chi-square / Cramér's V, direction, human
  correlation and budget curves (gain at K=3 / K=5, BALANCED vs RANDOM at equal K);
* ``summeval``: SummEval summaries, the same measurements;
* ``mt_bench``: MT-Bench turn-1 answers of several models, bracketed template, 1-10 rubric -> position bias and
  the top-1 flip rate among the answers to a question;
* ``hanna_all``: HANNA stories again with all 5! = 120 option orders per story -> the same findings with RANDOM
  as its expectation over uniformly drawn permutations (exact where the draws' joint outcomes can be enumerated,
  else Monte-Carlo with its SE) and BALANCED read from the rotations inside the complete design;
* ``hanna_multi``: 3 HANNA criteria in one prompt, criteria order permuted -> criterion-position spread.

Every study is analysed twice from the same score table: with the study's reading (``greedy``: the label a
temperature-0 judge writes) and with ``expected`` (the probability-weighted score, the exact extension), both in
the findings table.

The subsets are sized from an estimate: the exact number of tokens the engine runs for a probe of each data set
(the token trie of its prompts, counted without a forward pass) times the number of groups, at the engine's
throughput measured on this machine first (a few seconds; or ``--tokens-per-s``), to fit ``--minutes``
(default 25) in total; each study has a minimum size, so a very slow machine can run over. ``--quick`` is a
smoke version of a few minutes at most: one small group per data set, 4 random orderings on MT-Bench.

    python -m benchmarks.reproduce [--quick] [--minutes 25] [--threads auto] [--data-dir ../shared/data]
                                   [--model gemma-3-270m|qwen2.5-coder-1.5b-instruct|FILE.gguf|ollama:NAME|ID]

Writes ``benchmarks/results/reproduce.json`` (``reproduce_quick.json`` with --quick; another ``--model`` adds its
name: ``reproduce_qwen2.5-coder-1.5b-instruct.json``) and prints the study table
(:mod:`findings`: one row per quantity, one column per study, notes under it) - the table of docs/study.md. Reports and
score tables go to ``benchmarks/results/reproduce[_quick]/<study>/``; a rerun reuses them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.findings import STUDIES, extract, findings, markdown, skipped  # the study table, a module of its own
from benchmarks.judge_model import DEFAULT as DEFAULT_MODEL
from benchmarks.judge_model import run_tag
from benchmarks.timing import best_of_interleaved
from logitjudge.design import prepare
from logitjudge.experiment import run_experiment
from logitjudge.stats import jsonable

ROOT = Path(__file__).resolve().parent
MT_MODELS = ["alpaca-13b", "claude-v1", "gpt-3.5-turbo", "gpt-4", "llama-13b", "vicuna-13b-v1.3"]
HANNA_OPTIONS = 5  # HANNA's rubric rates every criterion 1-5
def multi_slots(n_options: int, n_criteria: int) -> tuple[str, str]:
    """The slot mode of the multi-criteria study and why: exact marginal slots (every earlier answer summed over)
    when their label continuations per prompt fit the spec's continuation budget, else greedy slots."""
    from logitjudge.slots import marginal_cost
    from logitjudge.spec import PromptSpec

    cost, budget = marginal_cost(n_options, n_criteria), PromptSpec().max_continuations
    if cost <= budget:
        return "marginal", (f"marginal slots: exact, {cost} label continuations per prompt "
                            f"({n_criteria} criteria x {n_options} options, within the budget of {budget:,})")
    return "greedy", (f"greedy slots (earlier answers fixed at their most probable label): marginal slots would "
                      f"need {cost:,} label continuations per prompt, over the budget of {budget:,}")


def study_specs(quick: bool, model: str, out: Path, n_boot: int) -> dict[str, dict]:
    """Specs of the four studies. ``_whole``: items per group in the data set (``limit`` counts whole groups);
    ``_size`` / ``_min_size``: items scored per group by default / at least (fewer than ``_whole`` trims each
    group with ``per_group`` when even the fewest groups do not fit); ``_groups``: (min, max) groups;
    ``_share``: the study's share of the time budget. The quick run has fixed small sizes."""
    # the study's judges answer one label: the greedy reading is its like-for-like counterpart
    analysis = {"n_boot": n_boot, "seed": 0, "n_draws": 30 if quick else 100, "reading": "greedy"}
    common = {"model": {"id": model}, "orderings": {"options": "balanced", "seed": 0}, "analysis": analysis}
    models = MT_MODELS[2:5] if quick else MT_MODELS
    multi_c = ["Coherence", "Relevance", "Empathy"][:2 if quick else 3]
    slots, slots_note = multi_slots(HANNA_OPTIONS, len(multi_c))
    specs = {
        "hanna": {"data": {"name": "hanna", "criteria": ["Coherence", "Relevance"][:1 if quick else 2]},
                  "prompts": {"template": "text-first"}, "_whole": 11, "_groups": (1, 1 if quick else 8),
                  "_size": 5 if quick else 11, "_min_size": 5, "_share": 0.22},
        # all n! orders: RANDOM becomes an exact expectation and BALANCED is read from the same table
        "hanna_all": {"data": {"name": "hanna", "criteria": ["Coherence", "Relevance"][:1 if quick else 2]},
                      "prompts": {"template": "text-first"}, "orderings": {"options": "all", "seed": 0},
                      "_whole": 11, "_groups": (1, 1 if quick else 3), "_size": 3 if quick else 11,
                      "_min_size": 3 if quick else 5, "_share": 0.24},
        "summeval": {"data": {"name": "summeval", "criteria": ["coherence", "relevance"][:1 if quick else 2]},
                     "prompts": {"template": "text-first"}, "_whole": 16, "_groups": (1, 1 if quick else 6),
                     "_size": 4 if quick else 16, "_min_size": 4 if quick else 6, "_share": 0.22},
        # balanced orders of 10 options are 20 prompts per answer; the quick run draws 4 random ones per answer
        # (the study's RANDOM; its chi-square needs >= 5 expected prompts per position, else it is skipped)
        "mt_bench": {"data": {"name": "mt_bench", "options": {"models": models, "turn": 1}},
                     "prompts": {"template": "bracketed"},
                     "orderings": {"options": "random:4" if quick else "balanced", "seed": 0},
                     "_whole": len(models), "_groups": (2, 2 if quick else 16), "_size": len(models),
                     "_min_size": 3, "_share": 0.22},
        "hanna_multi": {"data": {"name": "hanna", "criteria": multi_c},
                        "prompts": {"multi_criteria": True, "slots": slots},
                        "orderings": {"options": "fixed:1" if quick else "random:2", "criteria": "balanced",
                                      "seed": 0}, "_note": slots_note,
                        "_whole": 11, "_groups": (1, 1 if quick else 2), "_size": 4 if quick else 11,
                        "_min_size": 4, "_share": 0.1},
    }
    out_specs = {}
    for name, s in specs.items():
        spec = {**common, **{k: v for k, v in s.items() if not k.startswith("_")}}
        spec.update(name=f"reproduce-{name}", out=str(out / name))
        spec["data"] = {**spec["data"], "seed": 0}
        out_specs[name] = {"spec": spec, **{k: v for k, v in s.items() if k.startswith("_")}}
    return out_specs


def pick_threads(lm, candidates) -> int:
    """The torch thread count with the fastest plain forward of 256 tokens now: on a machine shared with other
    jobs, 2 OpenMP threads on 2 cores can run many times slower than 1 (threads wait for a busy core)."""
    import torch

    x = torch.randint(10, 1000, (1, 256), device=next(lm.model.parameters()).device)
    seconds = {}
    with torch.inference_mode():
        for n in candidates:  # one timed forward per count, after a 16-token warm-up at that count
            torch.set_num_threads(n)
            seconds[n] = best_of_interleaved({n: lambda: lm.model(input_ids=x)}, 1,
                                             warmup={n: lambda: lm.model(input_ids=x[:, :16])})[n].best
    best = min(candidates, key=seconds.get)
    torch.set_num_threads(best)
    return best


def measure_tokens_per_s(lm, exp) -> float:
    """Engine throughput on this machine: every ordering of one criterion of the probe's shortest item."""
    from logitjudge.engine import Engine
    from logitjudge.requests import item_prompts

    rubric = exp.rubric.subset([exp.rubric.criteria[0].name])
    item = min(exp.items, key=lambda it: len(it.text) + len(it.context))
    prompts = item_prompts(lm, rubric, item, exp.option_orders, exp.template)
    engine = Engine(lm, token_budget=exp.spec.model.token_budget)
    run = best_of_interleaved({"engine": lambda: engine.prompt_logprobs([prompts])}, 1)["engine"]
    return engine.stats["tokens"] / run.best


def item_tokens(lm, exp) -> float:
    """Mean tokens per item the engine runs (token trie of the item's prompts, labels included)."""
    from logitjudge import trie
    from logitjudge.engine import prompt_job
    from logitjudge.requests import orders_of

    counts = []
    for i, it in enumerate(exp.items):
        orders = orders_of(exp.option_orders, i)  # (K, n): shared, or this item's own
        if exp.spec.prompts.multi_criteria:
            from logitjudge.requests import encode, slot_request

            eps = [encode(lm, exp.template, exp.rubric, slot_request(it, oo, co))
                   for oo, co in zip(orders, exp.criterion_orders)]
            later = len(eps) * (exp.rubric.n_criteria - 1) * 12  # each later slot: answer + next slot prefix
        else:
            from logitjudge.requests import item_prompts

            eps, later = item_prompts(lm, exp.rubric, it, orders, exp.template), 0
        job = prompt_job(eps)
        counts.append(trie.count_tokens(trie.build(job.sequences, job.reads)) + later)
    return float(np.mean(counts))


def probe(lm, studies: dict, data_dir) -> tuple[dict, dict]:
    """Per study: the probe experiment (its first two groups) and its mean tokens per item."""
    probes, per_item = {}, {}
    for name, st in studies.items():
        spec = dict(st["spec"], data={**st["spec"]["data"], "limit": st["_whole"] * min(2, st["_groups"][1])})
        probes[name] = prepare(spec, data_dir=data_dir)
        per_item[name] = item_tokens(lm, probes[name])
    return probes, per_item


def size(studies: dict, names: list[str], per_item: dict, seconds: float, tps: float) -> list[dict]:
    """Set ``limit`` (and ``per_group``) of the named studies so that they share ``seconds`` at ``tps``."""
    budget_tokens = max(seconds, 0.0) * tps
    total_share = sum(studies[n]["_share"] for n in names)
    rows = []
    for name in names:
        st = studies[name]
        lo, hi = st["_groups"]
        share = st["_share"] / total_share * budget_tokens
        per_group = st["_size"]
        groups = int(min(hi, max(lo, math.floor(share / (per_item[name] * per_group)))))
        if groups == lo and lo * per_group * per_item[name] > share:  # trim the groups to fit
            per_group = int(max(st["_min_size"], min(per_group, math.floor(share / (lo * per_item[name])))))
        data = st["spec"]["data"]
        data["limit"] = groups * st["_whole"]
        data.pop("per_group", None)
        if per_group < st["_whole"]:
            data["per_group"] = per_group
        st["_n_items"] = groups * per_group
        tokens = per_item[name] * st["_n_items"]
        rows.append({"study": name, "groups": groups, "items": st["_n_items"],
                     "tokens_per_item": round(per_item[name]), "est_tokens": round(tokens),
                     "est_minutes": round(tokens / tps / 60, 1)})
    return rows


def _print_plan(rows: list[dict]) -> None:
    for r in rows:
        print(f"  {r['study']:<12} {r['items']:>4} items in {r['groups']:>2} groups, {r['tokens_per_item']:>6} "
              f"tokens/item, ~{r['est_minutes']:.1f} min")


def sizes(record: dict) -> list[str]:
    """One phrase per study: items, groups and orders (from the plan), for the table's notes."""
    plan = {**{r["study"]: r for r in record.get("plan", [])},
            **{r["study"]: r for rows in record.get("replans", []) for r in rows}}
    out = []
    for name, st in record["studies"].items():
        if "spec" not in st or name not in plan:
            continue
        orders = st["spec"].get("orderings", {}).get("options", "balanced")
        crits = (st["spec"]["data"].get("criteria") or ["one criterion"])
        g = plan[name]["groups"]
        out.append(f"{name}: {plan[name]['items']} items in {g} group{'' if g == 1 else 's'}, {orders} orders, "
                   f"{', '.join(crits)}")
    return out


def reanalysed(spec: dict, data_dir, reading: str) -> dict:
    """The numbers of a finished study's table analysed under ``reading`` (no scoring, no model)."""
    from logitjudge.experiment import analyze_experiment
    from logitjudge.table import ScoreTable

    spec = dict(spec, analysis={**spec["analysis"], "reading": reading})
    exp = prepare(spec, data_dir=data_dir)
    return extract(analyze_experiment(exp, ScoreTable.load(exp.table_path)))


def table_only(json_path: Path, data_dir) -> int:
    """Re-analyse the score tables of the run recorded in ``json_path`` with this code and print its study table
    (the sizes and timings stay those of the run)."""
    record = json.loads(json_path.read_text(encoding="utf-8"))
    for st in record["studies"].values():
        if "spec" in st:
            st["numbers"] = reanalysed(st["spec"], data_dir, st["spec"]["analysis"]["reading"])
            st["numbers_expected"] = reanalysed(st["spec"], data_dir, "expected")
    record["findings"] = findings(record["studies"])
    record["findings_expected"] = findings(record["studies"], "numbers_expected")
    json_path.write_text(json.dumps(jsonable(record), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(markdown(record["findings"], record["findings_expected"], record["model"], sizes(record),
                   skipped(record["studies"])))
    print(f"\nre-analysed the tables of {json_path} ({record['total_seconds'] / 60:.1f} min run)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="~2-minute smoke version")
    ap.add_argument("--minutes", type=float, default=None, help="time budget (default 25, --quick 2)")
    ap.add_argument("--tokens-per-s", type=float, default=None,
                    help="engine throughput for sizing (default: measured on this machine first); given, the plan "
                         "depends on the flags alone, the same on a busy machine")
    ap.add_argument("--threads", default="auto",
                    help="torch CPU threads, or auto: the fastest of 1..cores measured first (default)")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--no-multi", action="store_true", help="skip the multi-criteria study")
    ap.add_argument("--studies", default=None,
                    help="comma-separated subset of hanna,hanna_all,summeval,mt_bench,hanna_multi (default: all); "
                         "the time budget is shared among these")
    ap.add_argument("--n-boot", type=int, default=None, help="bootstrap resamples (default 1000, --quick 200)")
    ap.add_argument("--json", default=None, help="output JSON (default benchmarks/results/reproduce[_quick].json)")
    ap.add_argument("--table-only", action="store_true",
                    help="no scoring: re-analyse the tables of the last run (its JSON) and print the study table")
    args = ap.parse_args(argv)
    chosen = set(args.studies.split(",")) if args.studies else set(STUDIES)
    if chosen - set(STUDIES):  # before the model loads
        ap.error(f"--studies {sorted(chosen - set(STUDIES))}: the studies are {', '.join(STUDIES)}")
    tag = run_tag("reproduce_quick" if args.quick else "reproduce", args.model)
    if args.table_only:
        return table_only(Path(args.json) if args.json else ROOT / "results" / f"{tag}.json", args.data_dir)
    import torch

    from logitjudge.models import load_model

    if args.threads != "auto":
        torch.set_num_threads(int(args.threads))
    minutes = args.minutes if args.minutes is not None else (2.0 if args.quick else 25.0)
    n_boot = args.n_boot if args.n_boot is not None else (200 if args.quick else 1000)
    out = ROOT / "results" / tag
    json_path = Path(args.json) if args.json else ROOT / "results" / f"{tag}.json"
    t_start = time.perf_counter()
    lm = load_model(args.model)
    if args.threads == "auto":
        pick_threads(lm, list(range(1, (os.cpu_count() or 1) + 1)))
    threads = torch.get_num_threads()
    studies = study_specs(args.quick, args.model, out, n_boot)
    record: dict = {"model": args.model, "quick": args.quick, "minutes": minutes, "threads": threads,
                    "studies": {}}
    if args.no_multi:
        chosen.discard("hanna_multi")
    for name in [n for n in studies if n not in chosen]:
        studies.pop(name)
        record["studies"][name] = {"skipped_reason": "--no-multi" if name == "hanna_multi" and args.no_multi
                                   else "not in --studies"}
    probes, per_item = probe(lm, studies, args.data_dir)
    tps = args.tokens_per_s or measure_tokens_per_s(lm, next(iter(probes.values())))
    usable = minutes * 60 * 0.85  # 15% for loading, analysis and reports
    if not args.tokens_per_s:  # measured: the time spent so far comes out of the budget; given: the plan
        usable -= time.perf_counter() - t_start  # depends on the flags alone (same sizes on a busy machine)
    rows = size(studies, list(studies), per_item, usable, tps)
    record.update(plan=rows, tokens_per_s_planned=tps, tokens_per_s_measured=args.tokens_per_s is None)
    print(f"plan ({minutes:g} min at {tps:.0f} tokens/s ({'given' if args.tokens_per_s else 'measured'}), "
          f"{threads} threads):")
    _print_plan(rows)
    done_tokens = done_secs = 0.0
    for i, (name, st) in enumerate(studies.items()):
        rest = list(studies)[i:]
        if i and not args.tokens_per_s and done_secs > 0:  # re-plan the rest at the throughput observed so far
            before = [studies[n]["_n_items"] for n in rest]
            rows = size(studies, rest, per_item, usable - (time.perf_counter() - t_start), done_tokens / done_secs)
            if before != [studies[n]["_n_items"] for n in rest]:
                print(f"\nre-planned at the observed {done_tokens / done_secs:.0f} tokens/s:")
                _print_plan(rows)
                record.setdefault("replans", []).append(rows)
        t0 = time.perf_counter()
        print(f"\n[{name}] {st['spec']['data']['name']}: {st['_n_items']} items", flush=True)
        table = Path(st["spec"]["out"]) / "table.npz"
        stamp = table.stat().st_mtime_ns if table.exists() else None
        res = run_experiment(st["spec"], data_dir=args.data_dir, lm=lm, progress=sys.stderr.isatty())
        reused = stamp is not None and table.stat().st_mtime_ns == stamp
        meta = json.loads((Path(res["report"]) / "results.json").read_text(encoding="utf-8"))["table_meta"]
        secs, toks = meta["timings"]["score_seconds"], meta["engine_stats"]["tokens"]
        done_tokens, done_secs = done_tokens + toks, done_secs + secs
        record["studies"][name] = {"spec": st["spec"], "report": res["report"], "seconds": time.perf_counter() - t0,
                                   "score_seconds": secs, "tokens": toks, "table_reused": reused,
                                   "tokens_per_s": toks / secs if secs else None, "numbers": extract(res["results"]),
                                   "numbers_expected": reanalysed(st["spec"], args.data_dir, "expected"),
                                   **({"note": st["_note"]} if st.get("_note") else {})}
        print(f"[{name}] {res['verdict']}")
        print(f"[{name}] {'reused the scores of an earlier run: ' if reused else ''}scored {toks} tokens in "
              f"{secs:.0f} s ({toks / max(secs, 1e-9):.0f} tokens/s); report {res['report']}/report.html")
    record["findings"] = findings(record["studies"])
    record["findings_expected"] = findings(record["studies"], "numbers_expected")
    record["total_seconds"] = time.perf_counter() - t_start
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(jsonable(record), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\n## Findings: the study vs {args.model} ({'quick' if args.quick else 'full'} run, "
          f"{record['total_seconds'] / 60:.1f} min)\n")
    print(markdown(record["findings"], record["findings_expected"], args.model, sizes(record),
                   skipped(record["studies"])))
    print(f"\nwrote {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
