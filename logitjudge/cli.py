"""Command line: logitjudge score | analyze | run | probe | demo (also python -m logitjudge).

score and probe build a spec from their flags and run it as run runs a TOML spec; the flags, their choices,
defaults and help are the fields of logitjudge.spec. run takes the same --limit, --threads, --token-budget,
--dump-prompts and --quiet over its spec's values. A run prints one line when it starts (items, prompts, trie
tokens, batches) and a bar with tokens/s and an ETA (--quiet: neither).

exit codes: 0 done; 2 bad usage or bad input (one line naming the problem and the fix); 130 interrupted
(Ctrl-C or SIGTERM: the line says how many items are saved; run the same command again to continue); 1 internal
error (one line; the traceback with --debug).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from . import __version__
from .errors import LogitJudgeError
from .progress import Interrupted
from .spec import AnalysisSpec, DataSpec, ModelSpec, OrderingSpec, ProbeSpec, PromptSpec, Spec, add_flags

log = logging.getLogger("logitjudge")


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written; a flag's help ends in its default only where it has one (not on a required flag,
    nor where the default is None or a switch's False)."""

    def _get_help_string(self, action):
        help = action.help or ""
        if "%(default)" in help or "(default:" in help or action.required or not action.option_strings \
                or any(action.default is x for x in (None, False, argparse.SUPPRESS)):  # 0 is a default
            return help
        return help + " (default: %(default)s)"

    def _split_lines(self, text, width):
        import textwrap

        # flags stay whole: "--multi-criteria" is not broken after its hyphen
        return textwrap.wrap(self._whitespace_matcher.sub(" ", text).strip(), width, break_on_hyphens=False)


def _quiet(parser) -> None:
    parser.add_argument("--quiet", action="store_true", help="no start line, no progress bar: warnings only")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="logitjudge", description=__doc__, formatter_class=_Formatter)
    ap.add_argument("--version", action="version", version=f"logitjudge {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the traceback of an internal error")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help, parents=[common], formatter_class=_Formatter,
                              epilog="exit codes: 0 done, 2 bad usage or input, 130 interrupted, 1 internal error")

    s = command("score", "exact option distributions for texts under permuted rubrics")
    add_flags(s, ModelSpec, dest_prefix="model.")
    add_flags(s, DataSpec, dest_prefix="data.", one_of=("name", "texts"))
    add_flags(s, PromptSpec, dest_prefix="prompts.")
    add_flags(s, OrderingSpec, dest_prefix="orderings.")
    add_flags(s, Spec, required=("out",), helps={
        "out": "the score table to write (.npz); an interrupted run continues from OUT.partial.jsonl"})
    _quiet(s)

    a = command("analyze", "position bias, aggregation, human alignment, rank stability")
    a.add_argument("table", help="a score table (.npz) written by score or run")
    a.add_argument("--human", default=None, help="JSONL with id and human scores")
    a.add_argument("--group-by", default=None,
                   help="field of the --human file that groups items (needs --human; without it the table's own "
                        "groups are used)")
    fmt = a.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the analysis as JSON")
    fmt.add_argument("--markdown", action="store_true", help="print the analysis as Markdown (the default)")
    a.add_argument("--export", default=None, metavar="FILE",
                   help="write the table's long DataFrame (one row per item, criterion, ordering, option) to "
                        "FILE.parquet or FILE.csv instead of analysing it")
    a.add_argument("--scores", default=None, metavar="FILE",
                   help="also write one row per item and criterion (fixed, balanced, random, pride and human "
                        "scores under --reading, label mass) to FILE.csv or FILE.parquet")
    add_flags(a, AnalysisSpec, dest_prefix="analysis.")

    r = command("run", "run an experiment spec (.toml): score, analyse, report (and probe with [probe])")
    r.add_argument("spec", help="experiment spec (.toml); see experiments/")
    r.add_argument("--out", default=None, help="report folder (default: the spec's out)")
    # the flags run shares with score and probe, set over the spec's values; the spec names the data and design
    add_flags(r, ModelSpec, only=("threads", "token_budget"), dest_prefix="model.", defaults=False)
    add_flags(r, DataSpec, only=("dir", "limit"), dest_prefix="data.", defaults=False)
    add_flags(r, Spec, only=("dump_prompts",), defaults=False)
    _quiet(r)

    p = command("probe", "where position bias comes from inside the judge: logit lens, attention to option lines, "
                         "order-swap patching, linear probes")
    add_flags(p, ModelSpec, dest_prefix="model.")
    add_flags(p, DataSpec, dest_prefix="data.", one_of=("name", "texts"))
    add_flags(p, PromptSpec, only=("template",), dest_prefix="prompts.",
              helps={"template": "built-in template name or .toml file; unset: text-first"})
    add_flags(p, OrderingSpec, only=("options", "seed"), dest_prefix="orderings.")
    add_flags(p, ProbeSpec, dest_prefix="probe.", helps={"probes": "comma-separated probes to run: lens, attention, "
                                                             "patch, linear"})
    p.set_defaults(**{"probe.probes": "lens,attention,patch,linear"})
    add_flags(p, AnalysisSpec, only=("n_boot",), dest_prefix="analysis.")
    add_flags(p, Spec, required=("out",), helps={
        "out": "the probe table to write (.npz); an interrupted run continues from OUT.partial.jsonl",
        "dump_prompts": "write every probed prompt and continuation to this JSONL"})
    _quiet(p)

    d = command("demo", "score the built-in texts with the built-in rubric on gemma-3-270m")
    d.add_argument("--out", default="out/demo", help="report folder")
    d.add_argument("--model", default="gemma-3-270m", help="judge model id or folder")
    return ap


def cmd_score(args) -> int:
    from .experiment import check_labels, load_judge, prepare, score_experiment
    from .spec import from_flags

    exp = prepare(from_flags(args))  # everything but the model is checked here
    check_labels(exp)  # the tokenizer alone
    table = score_experiment(exp, load_judge(exp.spec), progress=not args.quiet)
    print(f"wrote {exp.table_path}: {table.shape[0]} items x {table.shape[1]} criteria x {table.shape[2]} "
          f"orderings x {table.shape[3]} options")
    return 0


def cmd_probe(args) -> int:
    from .experiment import check_labels, load_judge, prepare, probe_experiment
    from .spec import from_flags

    exp = prepare(from_flags(args, name="probe"))  # everything but the model is checked here
    check_labels(exp)
    table, page = probe_experiment(exp, load_judge(exp.spec), progress=not args.quiet)
    print(f"wrote {exp.probe_path}: {len(table.item_ids)} items x {table.probs.shape[1]} orderings, probes "
          f"{','.join(table.meta['probes'])}")
    if page is not None:
        print(f"report: {page}")
    return 0


def cmd_analyze(args) -> int:
    import json

    from .analysis import analyze, format_markdown, read_human_scores
    from .table import ScoreTable

    if args.group_by and not args.human:
        raise UsageError("--group-by names a field of the --human file; give --human too (without --human the "
                         "table's own item groups are used)")
    table = ScoreTable.load(args.table)
    if args.export:
        return _export(table, Path(args.export))
    human = groups = None
    if args.human:
        human, groups = read_human_scores(args.human, group_by=args.group_by)
    a = {k.split(".", 1)[1]: v for k, v in vars(args).items() if k.startswith("analysis.")}
    if args.scores:  # one row per item and criterion
        from .sections.scores import item_scores, write_item_scores

        path = Path(args.scores)
        if path.suffix not in (".parquet", ".csv"):
            raise UsageError(f"--scores {path}: the file must end in .csv or .parquet")
        frame = write_item_scores(item_scores(table, reading=a["reading"], human=human, groups=groups or None),
                                  path)
        print(f"wrote {path}: {len(frame)} rows (one per item and criterion)", file=sys.stderr)
    res = analyze(table, human=human, groups=groups or None, rng=a["seed"], n_boot=a["n_boot"], method=a["method"],
                  n_draws=a["n_draws"], reading=a["reading"])
    print(json.dumps(res, indent=2) if args.json else format_markdown(res))
    return 0


def _export(table, path: Path) -> int:
    if path.suffix not in (".parquet", ".csv"):
        raise UsageError(f"--export {path}: the file must end in .parquet or .csv")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        table.to_parquet(path)
    else:
        table.to_dataframe().to_csv(path, index=False)
    print(f"wrote {path}: {table.probs.size} rows")
    return 0


def cmd_run(args) -> int:
    from .experiment import run_experiment

    over = {"model": {"threads": getattr(args, "model.threads"), "token_budget": getattr(args, "model.token_budget")},
            "data": {"dir": getattr(args, "data.dir"), "limit": getattr(args, "data.limit")},
            "": {"dump_prompts": args.dump_prompts}}
    res = run_experiment(args.spec, out=args.out, overrides=over, progress=not args.quiet)
    print(res["verdict"])
    print(f"report: {res['report']}")
    if "probe_report" in res:
        print(f"probe page: {res['probe_report']}")
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(args.out, model=args.model)


COMMANDS = {"score": cmd_score, "analyze": cmd_analyze, "run": cmd_run, "demo": cmd_demo, "probe": cmd_probe}


class UsageError(LogitJudgeError, ValueError):
    """Flags that do not go together."""


def _sigterm(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING if getattr(args, "quiet", False) else logging.INFO,
                        format="logitjudge: %(message)s", stream=sys.stderr, force=True)
    previous = signal.signal(signal.SIGTERM, _sigterm) if _main_thread() else None
    try:
        return COMMANDS[args.cmd](args)
    except KeyboardInterrupt as e:
        if isinstance(e, Interrupted):  # a run counted what its checkpoint holds
            print(f"interrupted: {e}", file=sys.stderr)
        else:
            print("\ninterrupted while no batch was being scored: the items saved before are kept; run the same "
                  "command to continue", file=sys.stderr)
        return 130
    except (LogitJudgeError, OSError) as e:
        # the errors logitjudge raises itself say what is wrong and how to fix it
        if args.debug:
            raise
        print(f"logitjudge {args.cmd}: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - anything else is a bug: one line, the traceback under --debug
        if args.debug:
            raise
        print(f"logitjudge {args.cmd}: internal error: {type(e).__name__}: {e} (run with --debug for the "
              "traceback)", file=sys.stderr)
        return 1
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


if __name__ == "__main__":
    sys.exit(main())
