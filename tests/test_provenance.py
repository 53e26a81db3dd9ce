"""Issue 35: a resumed table's meta records every process that wrote its rows. Real `logitjudge score` processes
are killed (between records, inside one, after the last one before the save) and resumed: the finished table's
``meta["kernels"]`` and ``engine_stats`` equal an uninterrupted run's and ``meta["provenance"]`` lists the
writers; a resume at another thread count is flagged as mixed; a checkpoint written before records carried their
writer still resumes, its rows' writer "unknown".

Every process runs one thread and ``LOGITJUDGE_CPU_KERNELS=1`` (the C kernels forced, nothing measured), so that
each makes the same kernel choices and the metas can be compared whole."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from logitjudge.checkpoint import frame, parse_record, scan
from logitjudge.provenance import checked, kernels_delta, merge_kernels, merge_stats, stats_delta
from logitjudge.table import ScoreTable

sys.path.insert(0, str(Path(__file__).parent))
from conftest import fresh_tiny_lm  # noqa: E402
from test_cli import write_texts  # noqa: E402

N_ITEMS = 8
SCORE = ["score", "--orderings", "random:2", "--token-budget", "600", "--quiet"]  # 2 items a batch: 4 records
VARYING = ("timings", "provenance")  # what differs between any two runs: the clock, and who ran


def _cli(root: Path, out: Path, *, threads: int = 1, faults: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "LOGITJUDGE_CPU_KERNELS": "1", "LOGITJUDGE_FAULTS": faults}
    if not faults:
        env.pop("LOGITJUDGE_FAULTS")
    cmd = [sys.executable, "-m", "logitjudge.cli", *SCORE, "--threads", str(threads), "--model", str(root / "tiny"),
           "--texts", str(root / "texts.jsonl"), "--out", str(out)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """The tiny model in a folder, the texts, the table of one uninterrupted process, and the checkpoint of a
    process killed half way through its 3rd record (2 records whole, a torn one after them)."""
    root = tmp_path_factory.mktemp("provenance")
    lm = fresh_tiny_lm()
    lm.model.save_pretrained(root / "tiny")
    lm.tokenizer.save_pretrained(root / "tiny")
    write_texts(root / "texts.jsonl", N_ITEMS)
    res = _cli(root, root / "ref.npz")
    assert res.returncode == 0, res.stderr[-2000:]
    killed = root / "killed.npz"
    assert _cli(root, killed, faults="kill@record:3:0.5").returncode == -9
    return root, ScoreTable.load(root / "ref.npz"), Path(f"{killed}.partial.jsonl")


def _resume(root: Path, partial: Path, out: Path, **kw) -> ScoreTable:
    shutil.copy(partial, f"{out}.partial.jsonl")
    res = _cli(root, out, **kw)
    assert res.returncode == 0, res.stderr[-2000:]
    return ScoreTable.load(out)


def _without(meta: dict) -> dict:
    return {k: v for k, v in meta.items() if k not in VARYING}


def _bitwise(a: ScoreTable, b: ScoreTable) -> None:
    assert list(a.item_ids) == list(b.item_ids)
    assert np.array_equal(a.probs, b.probs) and np.array_equal(a.label_mass, b.label_mass)


@pytest.mark.parametrize("fault", ["kill@record:3:0.5", "kill@record:4"])
def test_a_resumed_tables_meta_equals_an_uninterrupted_runs(work, tmp_path, fault):
    """Killed inside a record (torn: its items are scored again, the two before it kept) or after the last one
    before the save (the resume scores nothing): the meta merges every writer's records."""
    root, ref, partial = work
    out = tmp_path / "t.npz"
    if fault == "kill@record:4":
        assert _cli(root, out, faults=fault).returncode == -9
    else:  # the fixture's
        shutil.copy(partial, f"{out}.partial.jsonl")
    saved = {i[0] for rec in scan(Path(f"{out}.partial.jsonl"))[1] for i in rec["items"]}
    assert 0 < len(saved) <= N_ITEMS and (fault != "kill@record:4" or len(saved) == N_ITEMS)
    res = _cli(root, out)
    assert res.returncode == 0, res.stderr[-2000:]
    table = ScoreTable.load(out)
    _bitwise(ref, table)
    assert table.meta["kernels"] and _without(table.meta) == _without(ref.meta)
    prov = table.meta["provenance"]
    assert prov["mixed"] is False and prov["unknown_items"] == 0
    assert sum(w["items"] for w in prov["writers"]) == N_ITEMS
    assert len(prov["writers"]) == (1 if len(saved) == N_ITEMS else 2)
    assert prov["writers"][0]["items"] == len(saved) and prov["writers"][0]["threads"] == 1
    assert ref.meta["provenance"]["mixed"] is False and len(ref.meta["provenance"]["writers"]) == 1


def test_a_resume_at_another_thread_count_is_mixed(work, tmp_path):
    root, ref, partial = work
    table = _resume(root, partial, tmp_path / "t.npz", threads=2)
    prov = table.meta["provenance"]
    assert prov["mixed"] is True and [w["threads"] for w in prov["writers"]] == [1, 2]
    first, second = prov["writers"]
    assert first["items"] == 4 and second["items"] == 4 and first["pid"] != second["pid"]
    rows = sorted(r for w in prov["writers"] for s in w["row_slices"] for r in range(*s))
    assert rows == list(range(N_ITEMS))
    # each writer's own kernels, and their sum in meta["kernels"] as in an uninterrupted run
    assert merge_kernels(first["kernels"], second["kernels"]) == table.meta["kernels"]
    # the same calls per kernel and bucket: under LOGITJUDGE_CPU_KERNELS=1 no route is measured, so none depends
    # on the thread count (the MLP runs whole, its GEMMs on the same rows)
    assert _calls(table.meta["kernels"]) == _calls(ref.meta["kernels"])


def _calls(kernels: dict) -> dict:
    out: dict = {}
    for name, k in kernels.items():
        for r in k["ran"].values():
            for bucket, n in r["buckets"].items():
                out.setdefault(name, {})[bucket] = out.get(name, {}).get(bucket, 0) + n
    return out


def test_a_checkpoint_from_before_provenance_resumes(work, tmp_path):
    """Records without their writer (the format before this change): resumed, their rows' writer unknown."""
    root, ref, partial = work
    lines = partial.read_bytes().split(b"\n")
    old = [lines[0]]
    for line in filter(None, lines[1:]):
        n, payload = parse_record(line)
        if payload is None:  # the torn record: left as it is
            old.append(line)
            continue
        assert payload.pop("by")["writer"]["threads"] == 1
        old.append(frame(payload, n).rstrip(b"\n"))
    stripped = tmp_path / "old.partial.jsonl"
    stripped.write_bytes(b"\n".join(old) + b"\n")
    table = _resume(root, stripped, tmp_path / "t.npz")
    _bitwise(ref, table)
    prov = table.meta["provenance"]
    assert prov["mixed"] == "unknown" and prov["unknown_items"] == 4
    assert [w["writer"] if "pid" not in w else w["items"] for w in prov["writers"]] == ["unknown", 4]
    unknown = prov["writers"][0]
    assert sum(b - a for a, b in unknown["row_slices"]) == 4


def test_deltas_and_merges_add_back_up():
    """Record-by-record deltas of a growing kernel record and engine counters sum back to the whole."""
    def rec(calls: dict) -> dict:
        return {k: {"ran": {"C": {"calls": sum(b.values()), "buckets": b}},
                    "choices": {x: {"choice": "C", "why": k} for x in b}} for k, b in calls.items()}

    a = rec({"attention": {"1": 2}})
    b = rec({"attention": {"1": 3, "2": 1}, "readout": {"8": 4}})
    assert kernels_delta(b, a) == rec({"attention": {"1": 1, "2": 1}, "readout": {"8": 4}})
    assert merge_kernels(kernels_delta(a, {}), kernels_delta(b, a)) == b
    s1, s2 = {"tokens": 10, "reads": 2}, {"tokens": 25, "reads": 2, "oom_retries": 1, "token_budget_after_oom": 300}
    assert merge_stats(stats_delta(s1, {}), stats_delta(s2, s1)) == s2
    # a record's provenance of another shape is read as unknown, never merged
    who = {"writer": {"pid": 1}}
    assert checked({**who, "kernels": b, "engine_stats": s1}) is not None
    for bad in ({"kernels": {"attention": 1}}, {"kernels": {"a": {"ran": {"C": {"buckets": {"1": "x"}}}}}},
                {"engine_stats": {"tokens": "10"}}, {"engine_stats": {"tokens": True}}):
        assert checked({**who, **bad}) is None, bad
    assert checked({"kernels": b}) is None and checked([1]) is None
