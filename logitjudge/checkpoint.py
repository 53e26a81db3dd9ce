"""Crash-safe checkpoints: finished items of a run, appended to ``<out>.partial.jsonl`` in self-checking records.

Each line is one JSON object whose framing carries the item count, the payload's byte length and its CRC-32:

    {"lj":2,"items":3,"bytes":812,"crc32":"1a2b3c4d","data":{"items":[[id, probs, label_mass], ...],"by":{...}}}

An item's record is written by the run's codec: a score run's ``[id, probs, label_mass]`` (:data:`SCORES`), a
probe run's ``[id, {name: array}]`` with each array's dtype, shape and raw bytes in base64 (:data:`ARRAYS`).
``by`` is the record's writer and what its batch ran (:mod:`logitjudge.provenance`); a record without it (written
before records carried it) resumes as well, its writer unknown.

The payload is checked byte for byte against the length and checksum, so a record cut by a kill (the torn tail) is
recognised, reported with the number of items it costs and truncated before the run appends; a damaged record in
the middle is skipped and reported and every good record after it is kept. The first record (``items`` 0) holds
the run's fingerprint; it is written, to a temporary file renamed into place so it is never half there, together
with the first finished batch: a run that fails before finishing anything leaves no file behind. A file of a run
with other settings is replaced, with a warning (a failed run never blocks the corrected command). A record is one
``os.write`` on an ``O_APPEND`` descriptor followed by ``fsync``. JSON floats round-trip exactly, so a resumed table
equals an uninterrupted one bit for bit.

A lock (``<out>.lock``, ``flock`` where the OS has it, holding the writer's pid) refuses a second run on the same
``--out`` while the first runs; the lock of a killed run is recognised (no process holds it) and taken over.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import socket
import zlib
from pathlib import Path

import numpy as np

from . import faults, provenance
from .errors import LogitJudgeError

log = logging.getLogger("logitjudge")

FORMAT = 2
_FRAME = re.compile(rb'\{"lj":2,"items":(\d+),"bytes":(\d+),"crc32":"([0-9a-f]{8})","data":')
_FIX_FOREIGN = "move it away or delete it, or choose another --out"


class CheckpointError(LogitJudgeError, ValueError):
    """A checkpoint file cannot be used; the message names the file and the fix."""


class ScoreRecords:
    """A score run's item record: (probs, label_mass) arrays, written as nested lists (JSON floats round-trip
    exactly)."""

    @staticmethod
    def normalize(record) -> tuple:
        return tuple(np.asarray(x) for x in record)

    @staticmethod
    def encode(record) -> list:
        return [x.tolist() for x in record]

    @staticmethod
    def decode(fields: list) -> tuple:
        return tuple(np.asarray(x) for x in fields)


class ArrayRecords:
    """A probe run's item record: ``{name: array}`` of any dtype and shape (hidden states are large), written as
    each array's dtype, shape and raw bytes in base64 (exact, a third larger than the bytes)."""

    @staticmethod
    def normalize(record) -> dict:
        return {k: np.asarray(v) for k, v in record.items()}

    @staticmethod
    def encode(record) -> list:
        return [{k: [v.dtype.str, list(v.shape), base64.b64encode(np.ascontiguousarray(v).tobytes()).decode()]
                 for k, v in record.items()}]

    @staticmethod
    def decode(fields: list) -> dict:
        return {k: np.frombuffer(base64.b64decode(data), dtype=np.dtype(dt)).reshape(shape).copy()
                for k, (dt, shape, data) in fields[0].items()}


SCORES, ARRAYS = ScoreRecords(), ArrayRecords()


def frame(payload: dict, n_items: int) -> bytes:
    data = json.dumps(payload, separators=(",", ":"), allow_nan=False).encode()
    return b'{"lj":2,"items":%d,"bytes":%d,"crc32":"%08x","data":%s}\n' % (
        n_items, len(data), zlib.crc32(data), data)


def _line_of(problem: str) -> int:
    m = re.match(r"record on line (\d+)", problem)
    return int(m[1]) if m else 1 << 62  # the cut-off tail last


def parse_record(line: bytes) -> tuple[int | None, dict | None]:
    """(item count or None if unknown, payload or None if the record is damaged) of one line (without "\\n")."""
    m = _FRAME.match(line)
    if not m:
        return None, None
    n, size, crc = int(m[1]), int(m[2]), int(m[3], 16)
    data = line[m.end():m.end() + size]
    if len(data) != size or line[m.end() + size:] != b"}" or zlib.crc32(data) != crc:
        return n, None
    try:
        return n, json.loads(data)
    except ValueError:
        return n, None


def scan(path: Path) -> tuple[dict | None, list[dict], int, list[str]]:
    """Read a checkpoint file: (header, good payloads in order, byte length of the good part, problems).

    The good part ends after the last newline-terminated line; a tail without its newline is torn."""
    return _scan(path)[:4]


def _scan(path: Path) -> tuple[dict | None, list[dict], int, list[str], list[int]]:
    """:func:`scan` and the line number of each good payload (a record that does not fit the run is named by it)."""
    raw = path.read_bytes()
    if not raw:
        return None, [], 0, ["the file is empty"], []
    lines = raw.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    head = parse_record(lines[0])[1] if lines else None
    problems: list[str] = []
    if not isinstance(head, dict) or "fingerprint" not in head:
        _refuse_head(path, raw, len(lines) - 1)
        return None, [], 0, ["its first record was cut off"], []
    good, where, end = [], [], len(lines[0]) + 1
    for i, line in enumerate(lines[1:], 2):
        n, rec = parse_record(line)
        if rec is None:
            count = "an unknown number of items" if n is None else f"{n} item{'s' * (n != 1)}"
            problems.append(f"record on line {i} is damaged ({count}); skipped, its items are scored again")
        else:
            good.append(rec)
            where.append(i)
        end += len(line) + 1
    if tail:
        n, rec = parse_record(tail)
        if rec is not None:  # whole but for its newline: kept (the newline is added before appending)
            good.append(rec)
            where.append(len(lines) + 1)
            end += len(tail)
        else:
            count = "an unknown number of items" if n is None else f"{n} item{'s' * (n != 1)}"
            problems.append(f"the last record was cut off by an interruption ({count}); truncated, its items "
                            "are scored again")
    return head, good, end, problems, where


def _refuse_head(path: Path, start: bytes, after: int) -> None:
    """Refuse a file whose first record (the run's settings) is not readable, unless nothing was saved after it
    (a run killed while writing it: started again). ``start``: the file's first bytes; ``after``: the number of
    records after the first."""
    if not start.startswith(b'{"lj":2,'):
        raise CheckpointError(f"{path} is not a logitjudge checkpoint (format {FORMAT}); it may be from an "
                              f"older logitjudge or another program: {_FIX_FOREIGN}")
    if after > 0:
        raise CheckpointError(f"{path}: its first record (the run's settings) is damaged, so the {after} "
                              f"record{'s' * (after != 1)} after it cannot be matched to this run; move it away or "
                              "delete it to score those items again, or choose another --out")


def check_file(path: Path) -> None:
    """Before the model loads: refuse (:class:`CheckpointError`) a checkpoint at ``path`` that a run could not
    resume, a file that is not a checkpoint or one whose first record (the run's settings) is damaged with
    records after it, reading its first record and counting its lines (not checking every record, as a run
    does). Nothing there, an empty file or a good first record: nothing to say here."""
    if not path.is_file():
        return
    with path.open("rb") as f:
        first = f.readline()
        if not first:
            return
        head = parse_record(first.rstrip(b"\n"))[1]
        if isinstance(head, dict) and "fingerprint" in head:
            return
        after = 0  # the whole records after the first, as a run's scan counts them (a cut-off tail is not one)
        while chunk := f.read(1 << 24):
            after += chunk.count(b"\n")
    _refuse_head(path, first, after)


class RunLock:
    """One writer per ``--out``: ``flock`` on ``<out>.lock`` (released by the OS when the writer dies), which
    holds the writer's pid and host for the messages."""

    def __init__(self, path: Path, out):
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            old = _take(self.fd, out)
        except CheckpointError:
            os.close(self.fd)
            raise
        if len(old) >= 2:
            log.warning("%s: taking over the lock of a run that ended without releasing it (pid %s on %s)",
                        path, old[0], old[1])
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self.fd)  # closing drops the flock
            self.fd = None


def _take(fd: int, out) -> list[str]:
    """Lock ``fd`` (a lock file) for this process, or refuse in one line naming the run that holds it; returns what
    the file says of its last writer (pid, host)."""
    old = os.read(fd, 200).decode(errors="replace").split()
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        who = f"pid {old[0]} on {old[1]}" if len(old) >= 2 else "another process"
        raise CheckpointError(f"another logitjudge run ({who}) is writing {out} now; wait for it to finish "
                              "or choose another --out") from None
    except ImportError:  # no flock (Windows): the pid decides
        if len(old) >= 2 and old[1] == socket.gethostname() and _alive(int(old[0])):
            raise CheckpointError(f"another logitjudge run (pid {old[0]}) is writing {out} now; wait for it "
                                  "to finish or choose another --out") from None
    return old


def check_unlocked(out, *, tag: str = "") -> None:
    """Refuse now, before the model loads, the run :class:`RunLock` would refuse when it starts: another run
    writing ``out``. Nothing is written; the lock stays the run's own check when it starts."""
    path = Path(f"{out}{tag}.lock")
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, IsADirectoryError):
        return
    try:
        _take(fd, out)  # closing the descriptor below drops the lock taken here
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Checkpoint:
    """Append-only record of finished items for one run (identified by its fingerprint), score or probe.

    ``done[item_id]`` = the item's record as ``codec`` reads it back (:data:`SCORES`: ``(probs, label_mass)``;
    :data:`ARRAYS`: ``{name: array}``), exact. ``check(item_id, record)``: why a record read back does not fit
    the run (an item it does not have, arrays of other shapes), or None; a record that does not fit, or cannot be
    decoded, is skipped with a warning like a damaged one (its checksum only says it was written whole).
    ``add`` / ``add_batch`` append one durable record; ``finish`` removes the file and the lock after the table
    is saved; ``close`` releases the lock and keeps the file (an interrupted or failed run).

    Provenance (:mod:`logitjudge.provenance`): ``written_by[item_id]`` = the writer of the record holding the
    item (None: a record without one); ``earlier`` = the ``by`` of each record read from the file (None where
    it has none), in the file's order.
    """

    def __init__(self, out: str | Path | None, fingerprint: str, *, tag: str = "", codec=SCORES, check=None):
        self.path = None if out is None else Path(f"{out}{tag}.partial.jsonl")
        self.fingerprint = fingerprint
        self.codec = codec
        self.check = check
        self.done: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.written_by: dict[str, dict | None] = {}
        self.earlier: list[dict | None] = []
        self._lock = None
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = RunLock(Path(f"{out}{tag}.lock"), out)
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    def _open(self) -> None:
        if not self.path.exists():
            return
        head, good, end, problems, lines = _scan(self.path)
        if head is None:  # empty or a header cut off: no item was saved, nothing is lost
            log.warning("%s: %s (a run stopped before it saved any item); starting it again", self.path, problems[0])
            self.path.unlink()
            return
        if head.get("fingerprint") != self.fingerprint:
            log.warning("%s holds an unfinished run with other settings (model, rubric, orderings, template or "
                        "texts); this run replaces it", self.path)
            self.path.unlink()
            return
        for rec, line in zip(good, lines):
            entries, why = self._read(rec)
            if why is None:
                self.done.update(entries)
                by = provenance.checked(rec.get("by"))
                self.earlier.append(by)
                self.written_by.update(dict.fromkeys(entries, None if by is None else by["writer"]))
            else:
                n = len(rec["items"]) if isinstance(rec, dict) and isinstance(rec.get("items"), list) else None
                count = "an unknown number of items" if n is None else f"{n} item{'s' * (n != 1)}"
                problems.append(f"record on line {line} does not fit this run ({why}; {count}); skipped, its "
                                "items are scored again")
        for p in sorted(problems, key=_line_of):
            log.warning("%s: %s", self.path, p)
        if end < self.path.stat().st_size:
            os.truncate(self.path, end)
        with self.path.open("rb+") as f:
            if f.seek(0, os.SEEK_END) and (f.seek(-1, os.SEEK_END), f.read(1))[1] != b"\n":
                f.write(b"\n")

    def _read(self, rec) -> tuple[dict, str | None]:
        """The items of a checksummed record, or why they cannot be used (a record forged or written by another
        version can pass its checksum and still hold arrays of other shapes)."""
        try:
            entries = {}
            for entry in rec["items"]:
                item_id, *fields = entry
                if not isinstance(item_id, str):
                    return {}, f"an item id {item_id!r} that is not a string"
                entries[item_id] = self.codec.decode(fields)
        except Exception as e:  # noqa: BLE001 - any malformed payload: JSON of another shape, bad base64 ...
            return {}, f"it cannot be decoded: {type(e).__name__}: {str(e)[:100]}"
        for item_id, record in entries.items():
            why = self.check(item_id, record) if self.check is not None else None
            if why:
                return {}, f"item {item_id!r}: {why}"
        return entries, None

    def _write_header(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("wb") as f:
            f.write(frame({"fingerprint": self.fingerprint, "format": FORMAT}, 0))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def add(self, item_id: str, *record) -> None:
        self.add_batch({item_id: record if len(record) > 1 else record[0]})

    def add_batch(self, results: dict, by: dict | None = None) -> None:
        """One record for several items: ``{item_id: record}`` (a score run's ``(probs, label_mass)``); ``by``:
        its writer and what the batch ran (:func:`logitjudge.provenance.record_by`)."""
        recs = {i: self.codec.normalize(r) for i, r in results.items()}
        if self.path is not None:
            if not self.path.exists():
                self._write_header()
            armed = faults.hit("record")  # fault injection (tests): a kill inside, or after, this record
            payload = {"items": [[i, *self.codec.encode(r)] for i, r in recs.items()]}
            if by is not None:
                payload["by"] = by
            self._append(frame(payload, len(recs)), faults.cut(armed))
            faults.trace(recs)
            faults.after_record(armed)
        self.done.update(recs)
        self.written_by.update(dict.fromkeys(recs, None if by is None else by.get("writer")))

    def _append(self, line: bytes, cut: float | None = None) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            if cut is not None:  # fault injection: die part way through this record
                os.write(fd, line[:int(len(line) * cut)])
                os.fsync(fd)
                faults.kill_now()
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Release the lock; the file stays for a resume."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def finish(self) -> None:
        """The table is saved: drop the file and the lock."""
        if self.path is not None and self.path.exists():
            self.path.unlink()
        self.close()

    def __del__(self):
        if getattr(self, "_lock", None) is not None:
            self.close()
