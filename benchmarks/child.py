"""A benchmark script's worker in a child process (``python -m benchmarks.NAME --worker ...``) with a time limit:
the child's crash or timeout comes back as one line for a table cell, never as the parent's exception, so the
other children's results stay.

    res = run_module("peers", ["--worker", "plain", ...], timeout=1800, env={"OMP_NUM_THREADS": "2"})
    res.ok, res.cell, res.stdout     # cell: None, "crashed: SIGSEGV", "timed out after 1800 s", "failed: <last line>"
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository root: ``-m benchmarks.NAME`` resolves from it


@dataclass(frozen=True)
class ChildResult:
    ok: bool
    cell: str | None  # why not ok, in a table cell's words
    stdout: str
    stderr: str


def describe_exit(returncode: int, stderr: str = "") -> str | None:
    """None for exit 0; "crashed: SIGSEGV" for a signal (subprocess reports it as -signum); else "failed: " and the
    last line of stderr (a Python traceback's last line names the exception)."""
    if returncode == 0:
        return None
    if returncode < 0:
        try:
            return f"crashed: {signal.Signals(-returncode).name}"
        except ValueError:
            return f"crashed: signal {-returncode}"
    last = next((line for line in reversed(stderr.strip().splitlines()) if line.strip()), "")
    return f"failed: {last.strip()[:200]}" if last else f"failed: exit status {returncode}"


def run_module(name: str, args: list[str], *, timeout: float, env: dict | None = None) -> ChildResult:
    """Run ``python -m benchmarks.<name> *args`` with the repository root on the child's ``PYTHONPATH`` (the
    caller's working folder stays the child's), at most ``timeout`` seconds (then it is killed). ``env``: set over
    this process's environment (a value None: left out of the child's)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", f"benchmarks.{name}", *args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env={k: v for k, v in {**os.environ, **(env or {}), "PYTHONPATH": path}.items()
                                if v is not None})
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return ChildResult(False, f"timed out after {timeout:g} s", out, err)
    cell = describe_exit(p.returncode, p.stderr)
    return ChildResult(cell is None, cell, p.stdout, p.stderr)
