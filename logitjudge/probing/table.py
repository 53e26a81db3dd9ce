"""ProbeTable: everything a probe run measured, one ``.npz`` (made resumable by the run's checkpoint, like a
ScoreTable: :class:`logitjudge.probing.run.ProbeRun`).

Arrays (I items, K orderings, n options, L layers, H heads, C = 2n + 3 span categories, P pairs, S sites):

* ``option_orders[K, n]`` shared by every item, or ``[I, K, n]`` per item (``random:K``);
* ``probs[I, K, n]``: the model's exact option distribution (canonical option order);
* ``lens_logprobs[I, K, L, n]``: per layer, the lens log-probability of each label (see :mod:`.lens`);
* ``attention[I, K, L, H, C]``: attention mass of the answer query on each span category (:mod:`.spans`);
* ``hidden[I, K, len(hidden_layers), 1 + n, d]`` (fp32): residual stream after the listed layers at the answer
  position, then at each option line's end by position;
* ``pairs[P, 2]`` (source, target ordering), ``site_layer/site_kind/site_head[S]``, ``clean[I, K, n]`` and
  ``patched[I, P, S, n]``: option distributions of each target with the site patched from the source.

Probes not run are stored as empty arrays.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from ..table import TableError
from .lens import option_distribution

ITEM_FIELDS = ("probs", "lens_logprobs", "attention", "hidden", "clean", "patched")  # one row per item


@dataclass
class ProbeTable:
    item_ids: list
    option_orders: np.ndarray
    labels: list
    criterion: str
    probs: np.ndarray
    lens_logprobs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    attention: np.ndarray = field(default_factory=lambda: np.zeros(0))
    hidden: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    hidden_layers: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    pairs: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    site_layer: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    site_kind: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    site_head: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    clean: np.ndarray = field(default_factory=lambda: np.zeros(0))
    patched: np.ndarray = field(default_factory=lambda: np.zeros(0))
    meta: dict = field(default_factory=dict)

    def has(self, name: str) -> bool:
        return getattr(self, name).size > 0

    @property
    def lens_probs(self) -> np.ndarray:
        """[I, K, L, n] option distribution read from each layer."""
        return option_distribution(self.lens_logprobs)

    def save(self, path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        arrays = {f.name: getattr(self, f.name) for f in fields(self)
                  if f.name not in ("item_ids", "labels", "criterion", "meta")}
        tmp = p.with_name(p.name + ".tmp.npz")
        np.savez_compressed(tmp, item_ids=np.array(self.item_ids, dtype=str), labels=np.array(self.labels, str),
                            criterion=np.array(self.criterion), meta=np.array(json.dumps(self.meta, default=str)),
                            **arrays)
        tmp.replace(p)
        return p

    @classmethod
    def load(cls, path) -> ProbeTable:
        try:
            with np.load(path, allow_pickle=False) as z:
                kw = {f.name: z[f.name] for f in fields(cls) if f.name in z.files}
            kw["item_ids"] = kw["item_ids"].tolist()
            kw["labels"] = kw["labels"].tolist()
            kw["criterion"] = str(kw["criterion"])
            kw["meta"] = json.loads(str(kw["meta"]))
            return cls(**kw)
        except Exception as e:  # noqa: BLE001 - a damaged or foreign archive fails in zipfile, numpy or json
            raise TableError(f"{path} is not a readable probe table ({type(e).__name__}: {str(e)[:120]}); "
                             "probe again with --out pointing to it") from None
