"""``logitjudge rank``: the command's flags and what it runs (:mod:`logitjudge.cli` adds it as a subcommand).

``logitjudge rank TABLE`` ranks a score table's groups; without TABLE it first scores, with the flags of
``logitjudge score`` (``--texts``/``--dataset``, ``--orderings``, ``--paradigm``, ``--out`` the table to write),
then ranks what it wrote. Every rank option is checked before any model loads or any file is written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .errors import LogitJudgeError

OUTPUTS = (("per_candidate", "--per-candidate", "one row per group x candidate"),
           ("per_group", "--per-group", "one row per group: the pick, its hold probability at K=1, the smallest K"),
           ("per_k", "--per-k", "one row per group x K: the hold probability (exact or with its SE)"),
           ("leaderboard", "--leaderboard", "one row per system (needs --systems)"))


class RankUsageError(LogitJudgeError, ValueError):
    """Flags of rank that cannot be used; one line with the fix."""


def add_rank_flags(p) -> None:
    from .flags import add_flags
    from .spec import DataSpec, ModelSpec, OrderingSpec, PromptSpec, Spec

    p.add_argument("table", nargs="?", default=None,
                   help="a score table (.npz) of grouped candidates (pointwise with groups, pairwise or listwise); "
                        "unset: score first with the score flags below and --out")
    p.add_argument("--criterion", default=None, help="the criterion to pick by (needed when the table has several)")
    p.add_argument("--reading", default="expected", choices=["expected", "greedy", "sampled"],
                   help="pointwise: expected score or the answered label's value (greedy); pairwise/listwise: "
                        "answered verdicts (greedy) or their probabilities (sampled; expected reads as sampled)")
    p.add_argument("--stability", type=float, default=0.95,
                   help="the hold probability a pick must reach; a pick below it at K=1 is fragile")
    p.add_argument("--budget", type=int, default=None,
                   help="the largest K (orders per run) to report; unset: the table's pool of orders (pairwise: 2)")
    p.add_argument("--design", default="independent", choices=["independent", "shared"],
                   help="pointwise: each candidate draws its own K orders (random:K) or one draw for the group")
    p.add_argument("--systems", default=None,
                   help="leaderboard: a JSONL of {\"id\", \"system\"}, or 'id-suffix' (the part of each id after its "
                        "last '/', e.g. SummEval's doc/system)")
    p.add_argument("--method", default="auto", choices=["auto", "exact", "mc"],
                   help="exact enumeration where it fits (auto), always (exact: refused where it does not) or "
                        "Monte-Carlo")
    p.add_argument("--n-draws", type=int, default=20000, help="Monte-Carlo draws where a hold is not enumerated")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for the CIs")
    p.add_argument("--mc-seed", type=int, default=0, help="seed of the Monte-Carlo draws and the bootstraps")
    for dest, flag, what in OUTPUTS:
        p.add_argument(flag, dest=dest, default=None, metavar="FILE", help=f"write {what} to FILE.csv or .parquet")
    p.add_argument("--markdown", default=None, metavar="FILE", help="write the Markdown here (unset: print it)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the summary and the rows as JSON")
    add_flags(p, ModelSpec, dest_prefix="model.")
    add_flags(p, DataSpec, dest_prefix="data.")
    add_flags(p, PromptSpec, dest_prefix="prompts.")
    add_flags(p, OrderingSpec, dest_prefix="orderings.")
    add_flags(p, Spec, helps={"out": "without TABLE: the score table to write (.npz), then ranked"})
    p.add_argument("--quiet", action="store_true", help="no start line, no progress bar: warnings only")
    p.add_argument("--force", action="store_true", help="replace an existing file of another kind at an output path")


def _check_options(args) -> dict:
    from .stats._result import StatsError
    from .stats.hold import check_stability

    try:
        check_stability(args.stability)
    except StatsError as e:
        raise RankUsageError(f"--stability {args.stability}: {e}") from None
    for flag, value, low in (("--budget", args.budget, 1), ("--n-draws", args.n_draws, 2), ("--n-boot", args.n_boot, 0),
                             ("--mc-seed", args.mc_seed, 0)):
        if value is not None and value < low:
            raise RankUsageError(f"{flag} {value}: must be an integer >= {low}")
    if args.leaderboard and not args.systems:
        raise RankUsageError("--leaderboard needs --systems (a JSONL of id and system, or id-suffix)")
    return {"criterion": args.criterion, "reading": args.reading, "stability": args.stability,
            "budget": args.budget, "design": args.design, "method": args.method, "n_draws": args.n_draws,
            "n_boot": args.n_boot, "rng": args.mc_seed}


def _check_outputs(args, inputs: list[str]) -> list[tuple[str, Path]]:
    outs = []
    for dest, flag, _ in OUTPUTS:
        v = getattr(args, dest)
        if v is not None:
            if Path(v).suffix not in (".csv", ".parquet"):
                raise RankUsageError(f"{flag} {v}: the file must end in .csv or .parquet")
            outs.append((flag, Path(v)))
    for flag in ("markdown", "json"):
        if getattr(args, flag):
            outs.append((f"--{flag}", Path(getattr(args, flag))))
    seen: dict = {}
    ins = {Path(x).resolve() for x in inputs if x}
    for flag, p in outs:
        r = p.resolve()
        if r in ins:
            raise RankUsageError(f"{flag} {p} is an input of this command; write to another path")
        if r in seen:
            raise RankUsageError(f"{flag} and {seen[r]} name the same file {p}; give each its own")
        seen[r] = flag
        if p.is_dir():
            raise RankUsageError(f"{flag} {p} is a folder; give a file path")
        if p.exists() and p.stat().st_size and not args.force and not _ours(flag, p):
            raise RankUsageError(f"{flag} {p} exists and is not a file rank writes there; give another path or "
                                 "--force")
    return outs


def _ours(flag: str, p: Path) -> bool:
    """Whether an existing file looks like one rank wrote: CSV/Markdown/JSON by its first bytes, Parquet by its
    magic number."""
    head = p.open("rb").read(64)
    if p.suffix == ".parquet":
        return head[:4] == b"PAR1"
    text = head.decode("utf-8", "replace")
    return {"--markdown": text.startswith("# Picks that survive"), "--json": text.startswith('{\n  "summary"')
            }.get(flag, text.startswith(("group,", "system,", "rank,")))


def _systems(value: str | None):
    from .picks import id_suffix

    if value is None or value == "id-suffix":
        return None if value is None else id_suffix
    out = {}
    for n, line in enumerate(Path(value).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            out[str(d["id"])] = str(d["system"])
        except (ValueError, KeyError, TypeError):
            raise RankUsageError(f"--systems {value}:{n}: each line must be a JSON object with 'id' and "
                                 "'system'") from None
    return out


def cmd_rank(args) -> int:
    from .picks import rank, write_frame

    opts = _check_options(args)
    texts = getattr(args, "data.texts")
    if args.table is not None and (texts or getattr(args, "data.name") or args.out):
        raise RankUsageError("give either TABLE (rank a scored table) or --texts/--dataset with --out (score, then "
                             "rank), not both")
    outs = _check_outputs(args, [args.table, texts, args.out])
    systems = _systems(args.systems) if args.systems else None
    if args.table is None:
        table = _score_first(args)
    else:
        table = args.table
        if not Path(table).is_file():
            raise RankUsageError(f"table {table}: no such file; give a score table written by logitjudge score")
    res = rank(table, systems=systems, **opts)
    frames = {"--per-candidate": res.candidates, "--per-group": res.groups, "--per-k": res.holds,
              "--leaderboard": res.leaderboard}
    md = res.markdown()
    for flag, path in outs:
        if flag == "--markdown":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(md + "\n", encoding="utf-8")
        elif flag == "--json":
            _write_json(res, path)
        else:
            write_frame(frames[flag], path)
        print(f"wrote {path}", file=sys.stderr)
    if not args.markdown:
        print(md)
    return 0


def _write_json(res, path: Path) -> None:
    from .stats import jsonable

    d = {"summary": res.summary, "groups": res.groups.astype(object).where(res.groups.notna(), None).to_dict("records"),
         "candidates": res.candidates.to_dict("records"), "holds": res.holds.to_dict("records")}
    if res.leaderboard is not None:
        d["leaderboard"] = res.leaderboard.to_dict("records")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(jsonable(d), indent=2) + "\n", encoding="utf-8")


def _score_first(args) -> str:
    from .experiment import open_experiment
    from .flags import from_flags

    if not args.out:
        raise RankUsageError("without TABLE, rank scores first: give --out TABLE.npz (and --texts or --dataset)")
    run = open_experiment(from_flags(args), force=args.force)  # everything but the weights is checked here
    run.score(progress=not args.quiet)
    return str(run.exp.table_path)
