"""Whole command-line runs of two source trees, interleaved: is a change to the house slower end to end?

Each round runs every (tree, command) pair once, each in a fresh process (``python -m logitjudge ...`` with the
tree's ``logitjudge`` and ``kernels`` first on ``PYTHONPATH``), with the rounds interleaved and their order
reversed every other round (:func:`benchmarks.timing.best_of_interleaved`), so that load on a shared machine falls
on both trees alike. Commands:

* ``demo``: ``logitjudge demo`` (gemma-3-270m, the demo texts and report), as ``make demo`` runs it;
* ``multi``: ``logitjudge score`` with all of HANNA's criteria in one prompt (``--multi-criteria``, greedy slots),
  on the first ``--limit`` stories of ``--data-dir``'s HANNA, 2 balanced orderings.

Every run writes into its own temporary folder (a run never resumes another's table). Prints a table and writes
JSON: per command, each tree's best and spread and the ratio after / before.

    python -m benchmarks.cli_compare --before /tmp/before-tree [--after .] [--rounds 3] [--data-dir ../shared/data]
        [--commands demo,multi] [--out benchmarks/results/cli_compare.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.timing import best_of_interleaved


def command(name: str, out: Path, data_dir: str, limit: int) -> list[str]:
    """The logitjudge arguments of one named command, writing under ``out``."""
    if name == "demo":
        return ["demo", "--out", str(out / "demo")]
    if name == "multi":
        return ["score", "--model", "gemma-3-270m", "--dataset", "hanna", "--data-dir", data_dir, "--limit",
                str(limit), "--multi-criteria", "--orderings", "fixed:2", "--out", str(out / "multi.npz"),
                "--quiet"]
    raise SystemExit(f"unknown command {name!r}; use demo or multi")


def runner(tree: Path, args: list[str], scratch: Path):
    """A callable that runs ``logitjudge args`` from ``tree`` in a fresh process and a fresh output folder."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(tree / "kernels")]))
    count = [0]

    def run():
        count[0] += 1
        out = scratch / f"{tree.name}-{count[0]}"
        out.mkdir(parents=True)
        argv = [a.replace("{out}", str(out)) for a in args]
        done = subprocess.run([sys.executable, "-m", "logitjudge", *argv], env=env, cwd=out,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{tree}: logitjudge {' '.join(argv)} failed:\n{done.stderr[-2000:]}")

    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the source tree to compare against (a checkout)")
    ap.add_argument("--after", default=".")
    ap.add_argument("--commands", default="demo,multi")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limit", type=int, default=8, help="HANNA stories of the multi command")
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--out", default="benchmarks/results/cli_compare.json")
    a = ap.parse_args(argv)
    trees = {"before": Path(a.before).resolve(), "after": Path(a.after).resolve()}
    rows = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="cli-compare-") as tmp:
        for name in [c for c in a.commands.split(",") if c]:
            args = command(name, Path("{out}"), str(Path(a.data_dir).resolve()), a.limit)
            t = best_of_interleaved({k: runner(tree, args, Path(tmp) / name) for k, tree in trees.items()},
                                    rounds=a.rounds, warmup=True)  # compiled kernels and caches first
            rows.append({"command": name, "argv": ["logitjudge", *args],
                         **{k: {"best": t[k].best, "spread": t[k].spread, "times": t[k].times} for k in trees},
                         "after_over_before": t["after"].best / t["before"].best})
    print(f"{'command':<8} {'before (s)':>22} {'after (s)':>22} {'after/before':>13}")
    for r in rows:
        b, f = r["before"], r["after"]
        print(f"{r['command']:<8} {b['best']:>11.2f} (spread {b['spread']:.2f}) {f['best']:>11.2f} "
              f"(spread {f['spread']:.2f}) {r['after_over_before']:>13.3f}")
    out = {"trees": {k: str(v) for k, v in trees.items()}, "rounds": a.rounds, "rows": rows,
           "load_before": load_before, "load_after": os.getloadavg(), "date": time.strftime("%Y-%m-%d")}
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
