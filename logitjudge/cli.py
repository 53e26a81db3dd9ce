"""Command line: ``logitjudge score | analyze | run | demo``."""

from __future__ import annotations

import argparse
import json
import sys

from .engine import EngineError
from .models import ModelError
from .probe import cli as probe_cli


class CLIError(Exception):
    pass


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="gemma-3-270m", help="HF model id, local folder, or gemma-3-270m (built-in)")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (accelerate device_map)")
    p.add_argument("--quantize", choices=["4bit", "8bit"], default=None, help="bitsandbytes, CUDA only")
    p.add_argument("--token-budget", type=int, default=4096, help="rows x padded tokens per forward batch")
    p.add_argument("--prefix-mode", default="auto", choices=["auto", "native", "shared", "copy"],
                   help="auto: the native Gemma-3 step function where supported, else shared")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: the CPUs this process may run on)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="logitjudge", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("score", help="exact option distributions for texts under permuted rubrics")
    _add_model_args(s)
    s.add_argument("--rubric", default="default", help="rubric .toml/.json file or built-in name")
    s.add_argument("--texts", required=True, help="JSONL with id, text and optional context, group")
    s.add_argument("--orderings", default="balanced", help="balanced | random:K | fixed:K")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--template", default=None, help="built-in template name or .toml file")
    s.add_argument("--criteria", default=None, help="comma-separated subset of the rubric's criteria")
    s.add_argument("--multi-criteria", action="store_true", help="all criteria in one prompt")
    s.add_argument("--slots", default="greedy", choices=["greedy", "marginal"])
    s.add_argument("--criteria-orderings", default="balanced", help="balanced | random:K | fixed:K")
    s.add_argument("--max-continuations", type=int, default=20000, help="marginal-mode budget per prompt")
    s.add_argument("--out", required=True, help="output table .npz (resumes if interrupted)")
    s.add_argument("--dump-prompts", default=None, help="write every prompt and continuation to this JSONL")
    s.add_argument("--quiet", action="store_true")

    a = sub.add_parser("analyze", help="position bias, aggregation, human alignment, rank stability")
    a.add_argument("table")
    a.add_argument("--human", default=None, help="JSONL with id and human scores")
    a.add_argument("--group-by", default=None, help="field of the human file that groups items")
    fmt = a.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--markdown", action="store_true")
    a.add_argument("--n-boot", type=int, default=1000)
    a.add_argument("--seed", type=int, default=0)

    r = sub.add_parser("run", help="run an experiment spec (.toml): score, analyse, report")
    r.add_argument("spec")
    r.add_argument("--data-dir", default=None)
    r.add_argument("--out", default=None, help="report folder (default from the spec)")

    d = sub.add_parser("demo", help="score the built-in texts with the built-in rubric on gemma-3-270m")
    d.add_argument("--out", default="out/demo")
    d.add_argument("--model", default="gemma-3-270m")
    probe_cli.add_parser(sub)
    return ap


def cmd_score(args) -> int:
    from .engine import Engine
    from .items import read_items
    from .models import load_model, set_threads
    from .orderings import parse
    from .prompts import load_template
    from .rubric import load_rubric

    rubric = load_rubric(args.rubric)
    if args.criteria:
        rubric = rubric.subset([c.strip() for c in args.criteria.split(",")])
    items = read_items(args.texts)
    orders = parse(args.orderings, rubric.n_options, seed=args.seed)
    from .distributed import current, rank_device

    device = rank_device(args.device, current(args.device))  # under torchrun: one GPU per rank
    set_threads(args.threads)
    lm = load_model(args.model, dtype=args.dtype, device=device, quantize=args.quantize)
    engine = Engine(lm, token_budget=args.token_budget, prefix_mode=args.prefix_mode)
    if args.multi_criteria:
        from .multi import score_multi
        from .orderings import cross

        # every option order with every criteria order; use --orderings fixed:1 to permute criteria only
        orders, corders = cross(orders, parse(args.criteria_orderings, rubric.n_criteria, seed=args.seed + 1))
        template = load_template(args.template or "multi-criteria")
        if args.dump_prompts:
            from .multi import dump_multi_prompts

            dump_multi_prompts(lm, items, rubric, orders, corders, template, args.dump_prompts)
        table = score_multi(lm, items, rubric, orders, corders, template=template, engine=engine, out=args.out,
                            slots=args.slots, max_continuations=args.max_continuations,
                            progress=not args.quiet, meta={"orderings": args.orderings,
                                                           "criteria_orderings": args.criteria_orderings})
    else:
        from .scoring import dump_prompts, score

        template = load_template(args.template)
        if args.dump_prompts:
            dump_prompts(lm, items, rubric, orders, template, args.dump_prompts)
        table = score(lm, items, rubric, orders, template=template, engine=engine, out=args.out,
                      progress=not args.quiet, meta={"orderings": args.orderings, "seed": args.seed})
    print(f"wrote {args.out}: {table.shape[0]} items x {table.shape[1]} criteria x {table.shape[2]} orderings "
          f"x {table.shape[3]} options")
    return 0


def cmd_analyze(args) -> int:
    from .analysis import analyze, format_markdown, read_human_scores
    from .table import ScoreTable

    table = ScoreTable.load(args.table)
    human = groups = None
    if args.human:
        human, groups = read_human_scores(args.human, group_by=args.group_by)
    res = analyze(table, human=human, groups=groups or None, rng=args.seed, n_boot=args.n_boot)
    print(json.dumps(res, indent=2) if args.json else format_markdown(res))
    return 0


def cmd_run(args) -> int:
    from .experiment import run_experiment

    res = run_experiment(args.spec, data_dir=args.data_dir, out=args.out)
    print(res["verdict"])
    print(f"report: {res['report']}")
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(args.out, model=args.model)


COMMANDS = {"score": cmd_score, "analyze": cmd_analyze, "run": cmd_run, "demo": cmd_demo,
            "probe": probe_cli.cmd_probe}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.cmd](args)
    except KeyboardInterrupt:
        print("\ninterrupted: finished items are saved; run the same command again to continue", file=sys.stderr)
        return 130
    except (ValueError, OSError, CLIError, ModelError, EngineError) as e:
        # the errors logitjudge raises itself say what is wrong and how to fix it; anything else is a bug
        print(f"logitjudge {args.cmd}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
