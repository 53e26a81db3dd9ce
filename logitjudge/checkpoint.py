"""The checkpoint of a run: finished batches, one atomic record each, in ``<out><tag>.partial.jsonl``.

The first line names the run (its fingerprint); each later line holds every item of one batch, so a batch is
either wholly saved or scored again, and a resumed run forms exactly the batches of an uninterrupted one. JSON
floats round-trip exactly, so a resumed table equals an uninterrupted one bit for bit. The file is created with
the first finished batch: a run that fails before finishing anything leaves nothing behind.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)


class Checkpoint:
    """Finished items of one run (identified by its fingerprint): ``done[item_id] = (probs, label_mass)``."""

    def __init__(self, out: str | Path | None, fingerprint: str, *, tag: str = ""):
        self.path = None if out is None else Path(f"{out}{tag}.partial.jsonl")
        self.fingerprint = fingerprint
        self.done: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if self.path is None or not self.path.exists():
            return
        lines = self.path.read_text(encoding="utf-8").splitlines()
        try:
            head = json.loads(lines[0]) if lines else {}
        except json.JSONDecodeError:
            head = {}
        if not isinstance(head, dict) or head.get("fingerprint") != fingerprint:
            log.warning("%s holds an unfinished run with other settings; it is replaced by this run", self.path)
            self.path.unlink()
            return
        for line in lines[1:]:
            try:
                batch = json.loads(line)["batch"]
            except (json.JSONDecodeError, KeyError, TypeError):
                break  # a record cut by the interruption: that batch is scored again
            self.done.update({k: (np.asarray(p), np.asarray(m)) for k, (p, m) in batch.items()})

    def add_batch(self, records: dict) -> None:
        """Save one batch ``{item_id: (probs, label_mass)}`` as one record (one line, written and synced)."""
        records = {k: (np.asarray(p), np.asarray(m)) for k, (p, m) in records.items()}
        if self.path is not None:
            line = json.dumps({"batch": {k: [p.tolist(), m.tolist()] for k, (p, m) in records.items()}}) + "\n"
            if not self.path.exists():
                self.path.parent.mkdir(parents=True, exist_ok=True)
                line = json.dumps({"fingerprint": self.fingerprint}) + "\n" + line
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        self.done.update(records)

    def finish(self) -> None:
        """The run is saved: drop the checkpoint."""
        if self.path is not None and self.path.exists():
            self.path.unlink()
