"""Command line: logitjudge score | analyze | run | probe | compare | rank | serve | demo (also python -m logitjudge).

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
from .flags import add_flags
from .progress import Interrupted
from .spec import AnalysisSpec, DataSpec, ModelSpec, OrderingSpec, ProbeSpec, PromptSpec, Spec

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
    parser.add_argument("--verbose", action="store_true",
                        help="also the kernels' own route measurements (which route each kernel takes, and why)")


FORCE_HELP = ("replace an existing file at an output path even when it is not a file this command writes there "
              "(an input of the run is never replaced)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="logitjudge", description=__doc__, formatter_class=_Formatter)
    ap.add_argument("--version", action="version", version=f"logitjudge {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true",
                        help="add the traceback to an error's line (the exit status stays the same)")
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
    s.add_argument("--force", action="store_true", help=FORCE_HELP)

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
    a.add_argument("--force", action="store_true", help=FORCE_HELP)

    r = command("run", "run an experiment spec (.toml): score, analyse, report (and probe with [probe])")
    r.add_argument("spec", help="experiment spec (.toml); see experiments/")
    r.add_argument("--out", default=None, help="report folder (default: the spec's out)")
    # the flags run shares with score and probe, set over the spec's values; the spec names the data and design
    add_flags(r, ModelSpec, only=("threads", "token_budget"), dest_prefix="model.", defaults=False)
    add_flags(r, DataSpec, only=("dir", "limit"), dest_prefix="data.", defaults=False)
    add_flags(r, Spec, only=("dump_prompts",), defaults=False)
    add_flags(r, PromptSpec, only=("paradigm", "pairs", "chat"), dest_prefix="prompts.", defaults=False)
    _quiet(r)
    r.add_argument("--force", action="store_true", help=FORCE_HELP)

    p = command("probe", "where position bias comes from inside the judge: logit lens, attention to option lines, "
                         "order-swap patching, linear probes")
    add_flags(p, ModelSpec, dest_prefix="model.")
    add_flags(p, DataSpec, dest_prefix="data.", one_of=("name", "texts"))
    add_flags(p, PromptSpec, only=("template", "chat"), dest_prefix="prompts.",
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
    p.add_argument("--force", action="store_true", help=FORCE_HELP)

    c = command("compare", "pointwise, pairwise and listwise tables of the same items side by side: agreement with "
                           "humans, position bias of the answered slot, top-1 stability and cost")
    c.add_argument("tables", nargs="+", help="score tables (.npz) of the same items, one per paradigm")
    src = c.add_mutually_exclusive_group(required=True)
    src.add_argument("--human", default=None, help="JSONL with id and human scores (as analyze takes it)")
    src.add_argument("--dataset", default=None, help="read the human scores of this data set (hanna, summeval, ...)")
    c.add_argument("--data-dir", default=None, help="the data sets folder (with --dataset; unset: $LOGITJUDGE_DATA)")
    c.add_argument("--criteria", default=None, help="comma-separated criteria; unset: every one the tables share")
    # analyze's reading and default (the spec's): expected, which a choice between candidates reads as sampled
    add_flags(c, AnalysisSpec, only=("reading",), helps={
        "reading": "greedy: each prompt's answered label; sampled: a judge sampling at T=1 (exact expectations); "
                   "expected: as analyze reads it, which for a choice between candidates is sampled"})
    c.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for confidence intervals")
    c.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and of sampled answers")
    c.add_argument("--plot", default="compare.png",
                   help="the PNG to write (several criteria: one per criterion, NAME-<criterion>.png)")
    c.add_argument("--json", default=None, metavar="FILE", help="also write the comparisons to FILE as JSON")

    from .rank_cli import add_rank_flags  # the rank command's flags live with it

    add_rank_flags(command("rank", "rank each prompt's candidates from a score table and the probability that the "
                                   "pick holds under random orders; leaderboards (--systems)"))

    from .serve import add_serve_flags  # the service's flags live with it

    add_serve_flags(command("serve", "serve the judge over HTTP: /v1/judge (order-averaged exact scores), /v1/score "
                                     "(SGLang's shape), /health, /v1/models (docs/integrations.md)"))

    d = command("demo", "score the built-in texts with the built-in rubric on gemma-3-270m")
    d.add_argument("--out", default="out/demo", help="report folder")
    d.add_argument("--model", default="gemma-3-270m", help="judge: model id (ORG/NAME[@REVISION]), folder, "
                   "FILE.gguf, ollama:NAME[:TAG] or a built-in")
    return ap


def cmd_score(args) -> int:
    from .experiment import open_experiment
    from .flags import from_flags

    run = open_experiment(from_flags(args), force=args.force)  # everything but the weights is checked here
    exp, table = run.exp, run.score(progress=not args.quiet)
    rows = {"pairwise": "pairs", "listwise": "lists"}.get(exp.spec.prompts.paradigm, "items")
    labels = "options" if rows == "items" else "labels"
    print(f"wrote {exp.table_path}: {table.shape[0]} {rows} x {table.shape[1]} criteria x {table.shape[2]} "
          f"orderings x {table.shape[3]} {labels}")
    return 0


def cmd_probe(args) -> int:
    from .experiment import open_experiment
    from .flags import from_flags

    run = open_experiment(from_flags(args, name="probe"), force=args.force)  # all but the weights checked here
    exp, (table, page) = run.exp, run.probe(progress=not args.quiet)
    print(f"wrote {exp.probe_path}: {len(table.item_ids)} items x {table.probs.shape[1]} orderings, probes "
          f"{','.join(table.meta['probes'])}")
    if page is not None:
        print(f"report: {page}")
    return 0


def cmd_analyze(args) -> int:
    import json

    from .api import analyze
    from .table import ScoreTable

    if args.group_by and not args.human:
        raise UsageError("--group-by names a field of the --human file; give --human too (without --human the "
                         "table's own item groups are used)")
    a = _analysis_flags(args)
    _check_analyze_outputs(args)
    table = ScoreTable.load(args.table)  # refused unless every probability is finite, >= 0 and sums to 1
    if args.export:
        return _export(table, Path(args.export))
    report = analyze(table, human=args.human, group_by=args.group_by, **a)  # lj.analyze
    if args.scores:  # one row per item and criterion
        from .sections.scores import write_item_scores

        path = Path(args.scores)
        frame = write_item_scores(report.scores, path)
        print(f"wrote {path}: {len(frame)} rows (one per item and criterion)", file=sys.stderr)
    print(json.dumps(report.results, indent=2) if args.json else report.to_markdown())
    return 0


def _analysis_flags(args) -> dict:
    """The [analysis] flags, checked as the spec checks them (minimums: --n-boot 0, --n-draws 2, --seed 0)."""
    from dataclasses import fields

    from .spec import check_value, flag_of

    given = vars(args)
    return {f.name: check_value(f, given[f"analysis.{f.name}"], flag_of(f), flag=True)
            for f in fields(AnalysisSpec) if f"analysis.{f.name}" in given}


def _check_analyze_outputs(args) -> None:
    """--scores and --export: the right suffix, and never the table, the --human file or a file of another kind
    (:mod:`logitjudge.outputs`), before anything is read or written."""
    from .outputs import Output, OutputError, check_outputs

    outs = []
    for flag, value, kind in (("--export", args.export, "export"), ("--scores", args.scores, "scores")):
        if value is None:
            continue
        if Path(value).suffix not in (".parquet", ".csv"):
            raise UsageError(f"{flag} {value}: the file must end in .parquet or .csv")
        outs.append(Output(Path(value), flag, kind=kind))
    try:
        check_outputs(outs, [("table", args.table), ("--human", args.human)], force=args.force)
    except OutputError as e:
        raise UsageError(str(e)) from None


def _export(table, path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        table.to_parquet(path)
    else:
        table.to_dataframe().to_csv(path, index=False)
    print(f"wrote {path}: {table.probs.size} rows")
    return 0


def cmd_run(args) -> int:
    from .commands import run

    res = run(args.spec, out=args.out, threads=getattr(args, "model.threads"),
              token_budget=getattr(args, "model.token_budget"), data_dir=getattr(args, "data.dir"),
              limit=getattr(args, "data.limit"), dump_prompts=args.dump_prompts,
              paradigm=getattr(args, "prompts.paradigm"), pairs=getattr(args, "prompts.pairs"),
              chat=getattr(args, "prompts.chat"), force=args.force, progress=not args.quiet)
    print(res.verdict)
    print(f"report: {res.report}")
    if res.probe_report is not None:
        print(f"probe page: {res.probe_report}")
    return 0


def cmd_compare(args) -> int:
    import json

    from .commands import compare
    from .report.compare import comparison_table, plot_comparison
    from .stats import jsonable

    res = compare(args.tables, human=args.human, dataset=args.dataset, data_dir=args.data_dir,
                  criteria=args.criteria, reading=args.reading, n_boot=args.n_boot, seed=args.seed)
    plot = Path(args.plot)
    if plot.suffix.lower() != ".png":
        raise UsageError(f"--plot {plot}: the plot is a PNG; give a file name ending in .png")
    for name, cmp in res.items():
        path = plot if len(res) == 1 else plot.with_name(f"{plot.stem}-{name}{plot.suffix}")
        print(f"## {name}\n\n{comparison_table(cmp)}")
        print(f"wrote {plot_comparison(cmp, path)}", file=sys.stderr)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(jsonable({k: v for k, v in res.items()}), indent=2) + "\n",
                                   encoding="utf-8")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(args.out, model=args.model)


def cmd_serve(args) -> int:
    from .serve import cmd_serve as run_serve

    return run_serve(args)


def cmd_rank(args) -> int:
    from .rank_cli import cmd_rank as run_rank

    return run_rank(args)


COMMANDS = {"score": cmd_score, "analyze": cmd_analyze, "run": cmd_run, "demo": cmd_demo, "probe": cmd_probe,
            "compare": cmd_compare, "rank": cmd_rank, "serve": cmd_serve}


class UsageError(LogitJudgeError, ValueError):
    """Flags that do not go together."""


def _sigterm(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING if getattr(args, "quiet", False) else logging.INFO,
                        format="logitjudge: %(message)s", stream=sys.stderr, force=True)
    # the kernels measure and choose their routes themselves: the screen shows that only when asked
    logging.getLogger("logitjudge_kernels").setLevel(logging.DEBUG if getattr(args, "verbose", False)
                                                     else logging.WARNING)
    previous = signal.signal(signal.SIGTERM, _sigterm) if _main_thread() else None
    try:
        return COMMANDS[args.cmd](args)
    except KeyboardInterrupt as e:
        if isinstance(e, Interrupted):  # a run counted what its checkpoint holds
            return _fail(args, e, 130, f"interrupted: {e}")
        return _fail(args, e, 130, "\ninterrupted while no batch was being scored: the items saved before are "
                                   "kept; run the same command to continue")
    except (LogitJudgeError, OSError) as e:
        # the errors logitjudge raises itself say what is wrong and how to fix it
        return _fail(args, e, 2, f"logitjudge {args.cmd}: error: {e}")
    except Exception as e:  # noqa: BLE001 - anything else is a bug: one line, the traceback under --debug
        return _fail(args, e, 1, f"logitjudge {args.cmd}: internal error: {type(e).__name__}: {e}"
                                 + ("" if args.debug else " (run with --debug for the traceback)"))
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _fail(args, e: BaseException, status: int, line: str) -> int:
    """Every failure leaves here: its one line on stderr and its exit status; ``--debug`` adds the traceback
    before the line and never changes the status (2 bad usage or input, 130 interrupted, 1 internal error)."""
    if getattr(args, "debug", False):
        import traceback

        traceback.print_exception(e, file=sys.stderr)
    print(line, file=sys.stderr)
    return status


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


if __name__ == "__main__":
    sys.exit(main())
