"""Which processes wrote a table's rows: each checkpoint record carries its writer's provenance, and the finished
table's meta merges them, so that a resumed table says what computed every row.

A record's ``by`` (:func:`record_by`): the writer (:func:`writer`: pid, host, when it started, and its *setup*:
CPU model and ISA flags, torch threads, device, torch and logitjudge versions, GEMM route, kernel mode) and what
the batch ran: the kernel dispatcher's calls (``meta["kernels"]`` form, the delta over the batch) and the engine's
counters (``engine_stats``, the delta). The table's meta (:func:`merge_meta`):

* ``kernels`` and ``engine_stats``: the finishing process's own record plus the deltas of the records earlier
  processes wrote, so that a table resumed on the same machine and settings has the meta of an uninterrupted
  run: call counts and counters summed, each bucket's decision once (the latest writer's);
* ``provenance``: ``{"writers": [...], "mixed": ..., "unknown_items": n}``: each distinct writer with its setup,
  the number of rows it wrote and those rows as Python slices of the table's rows (``row_slices``, 0-based,
  end excluded); ``mixed`` is True where the writers' setups differ (another CPU, thread count, device ...: the
  rows were then not all computed alike, and each writer's own ``kernels`` are listed with it), False where one
  setup wrote every row, and "unknown" where some rows come from records written before records carried their
  writer (their writer is ``"unknown"``).
"""

from __future__ import annotations

import os
import socket
import time

SETUP = ("cpu", "isa", "threads", "device", "torch", "logitjudge", "gemm_route", "cpu_kernels")
IDENTITY = ("pid", "host", "started")
UNKNOWN = "unknown"
_NOT_COUNTERS = {"token_budget_after_oom"}  # engine_stats entries that are a state, not a count: the latest wins


def writer(device: str, gemm_route) -> dict:
    """This process as a writer of checkpoint records: who (pid, host, when) and its setup (:data:`SETUP`)."""
    import torch
    from logitjudge_kernels import dispatch
    from logitjudge_kernels._cbuild import cpu_model

    from . import __version__
    from .gemm_rates import isa_flags

    return {"pid": os.getpid(), "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "cpu": cpu_model(), "isa": isa_flags(), "threads": torch.get_num_threads(), "device": str(device),
            "torch": torch.__version__, "logitjudge": __version__, "gemm_route": gemm_route,
            "cpu_kernels": dispatch.mode()}


def snapshot(engine) -> tuple[dict, dict]:
    """What the engine and its kernels have run so far: (``kernels`` meta, ``engine_stats``)."""
    return engine.kernels(), dict(engine.stats)


def record_by(who: dict, before: tuple[dict, dict], after: tuple[dict, dict]) -> dict:
    """A checkpoint record's ``by``: its writer and what its batch ran (the deltas between two snapshots)."""
    return {"writer": who, "kernels": kernels_delta(after[0], before[0]),
            "engine_stats": stats_delta(after[1], before[1])}


def checked(by) -> dict | None:
    """A record's ``by`` read back, if it has the shape :func:`record_by` writes, else None (a record from
    before records carried their writer, or one of another shape: its writer is unknown)."""
    if not isinstance(by, dict) or not isinstance(by.get("writer"), dict):
        return None
    kernels, stats = by.get("kernels", {}), by.get("engine_stats", {})
    try:
        merge_kernels(kernels)
        merge_stats(stats)
    except (AttributeError, TypeError, ValueError):
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in stats.values()):
        return None
    return by


# ---- kernels meta: {kernel: {"ran": {impl: {"calls", "buckets": {bucket: calls}}}, "choices": {bucket: ...}}}
def kernels_delta(after: dict, before: dict) -> dict:
    """The calls in ``after`` not in ``before`` (both ``Recorder.as_meta`` forms), with the decisions of the
    buckets they ran in."""
    out = {}
    for kernel, k in after.items():
        old = before.get(kernel, {}).get("ran", {})
        ran = {}
        for impl, r in k.get("ran", {}).items():
            was = old.get(impl, {}).get("buckets", {})
            buckets = {b: n - was.get(b, 0) for b, n in r.get("buckets", {}).items() if n > was.get(b, 0)}
            if buckets:
                ran[impl] = {"calls": sum(buckets.values()), "buckets": buckets}
        if ran:
            used = {b for r in ran.values() for b in r["buckets"]}
            out[kernel] = {"ran": ran, "choices": {b: d for b, d in k.get("choices", {}).items() if b in used}}
    return out


def merge_kernels(*records: dict) -> dict:
    """Kernel records summed in order: calls per implementation and bucket added, each bucket's decision the
    latest record's."""
    out: dict = {}
    for rec in records:
        for kernel, k in (rec or {}).items():
            into = out.setdefault(kernel, {"ran": {}, "choices": {}})
            for impl, r in k.get("ran", {}).items():
                buckets = into["ran"].setdefault(impl, {"calls": 0, "buckets": {}})["buckets"]
                for b, n in r.get("buckets", {}).items():
                    buckets[b] = buckets.get(b, 0) + n
            into["choices"].update(k.get("choices", {}))
    for k in out.values():  # the order as_meta gives
        k["ran"] = {impl: {"calls": sum(r["buckets"].values()), "buckets": dict(sorted(r["buckets"].items()))}
                    for impl, r in sorted(k["ran"].items())}
        k["choices"] = dict(sorted(k["choices"].items()))
    return dict(sorted(out.items()))


def stats_delta(after: dict, before: dict) -> dict:
    return {k: v - before.get(k, 0) if k not in _NOT_COUNTERS else v for k, v in after.items()
            if k in _NOT_COUNTERS or v != before.get(k, 0)}


def merge_stats(*records: dict) -> dict:
    """Engine counters summed in order (a state such as the budget after an out-of-memory retry: the latest)."""
    out: dict = {}
    for rec in records:
        for k, v in (rec or {}).items():
            out[k] = v if k in _NOT_COUNTERS else out.get(k, 0) + v
    return out


# ---- the table's meta ------------------------------------------------------------------------------------
def _key(who: dict | None) -> tuple:
    return (UNKNOWN,) if not isinstance(who, dict) else tuple(str(who.get(k)) for k in IDENTITY)


def _setup(who: dict) -> tuple:
    return tuple(str(who.get(k)) for k in SETUP)


def _slices(rows: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for r in sorted(rows):
        if out and out[-1][1] == r:
            out[-1][1] = r + 1
        else:
            out.append([r, r + 1])
    return out


def merge_meta(meta: dict, item_ids: list[str], written_by: dict, earlier: list[dict], me: dict) -> dict:
    """``meta`` (the finishing process's, from :func:`logitjudge.runs.run_meta`) with ``kernels`` and
    ``engine_stats`` merged over the records ``earlier`` processes wrote (their ``by``; None for a record
    without one) and ``provenance`` added. ``written_by``: item id -> the writer of the record that holds it
    (None: unknown); ``me``: this process as a writer."""
    meta = dict(meta)
    own = meta.get("kernels", {})
    known = [b for b in earlier if isinstance(b, dict)]
    meta["kernels"] = merge_kernels(*(b.get("kernels") for b in known), own)
    meta["engine_stats"] = merge_stats(*(b.get("engine_stats") for b in known), meta.get("engine_stats", {}))
    rows: dict = {}
    writers: dict = {}
    for row, item in enumerate(item_ids):
        who = written_by.get(item)
        rows.setdefault(_key(who), []).append(row)
        writers.setdefault(_key(who), who if isinstance(who, dict) else UNKNOWN)
    setups = {_setup(w) for w in writers.values() if w != UNKNOWN}
    unknown = len(rows.get((UNKNOWN,), []))
    mixed = len(setups) > 1 or (UNKNOWN if unknown else False)
    listed = []
    for key, who in sorted(writers.items(), key=lambda kw: "" if kw[1] == UNKNOWN else str(kw[1].get("started"))):
        entry = {"writer": UNKNOWN} if who == UNKNOWN else dict(who)
        entry.update(items=len(rows[key]), row_slices=_slices(rows[key]))
        if mixed is True and who != UNKNOWN:  # which rows ran on which kernels
            entry["kernels"] = merge_kernels(*(b.get("kernels") for b in known if _key(b.get("writer")) == key),
                                             own if key == _key(me) else {})
        listed.append(entry)
    meta["provenance"] = {"writers": listed, "mixed": mixed, "unknown_items": unknown}
    return meta
