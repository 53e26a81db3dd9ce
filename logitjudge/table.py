"""ScoreTable: exact option distributions of every (item, criterion, ordering), saved as one .npz."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import LogitJudgeError
from .orderings import inverse, orders_per_item, validate


class TableError(LogitJudgeError, ValueError):
    pass


@dataclass
class ScoreTable:
    """``probs[item, criterion, ordering, option]`` in canonical option order (renormalised over the labels).

    ``label_mass[item, criterion, ordering]`` is the total probability of all labels before renormalising.
    ``option_orders[ordering, position]`` (shared by every item) or ``option_orders[item, ordering, position]``
    (one ordering set per item: per-item random designs) / ``criterion_orders[ordering, position]`` give the
    canonical index shown at each position. ``values[criterion, option]`` are the numeric scores.
    """

    probs: np.ndarray
    label_mass: np.ndarray
    option_orders: np.ndarray
    criterion_orders: np.ndarray
    values: np.ndarray
    item_ids: np.ndarray
    criteria: list[str]
    item_groups: np.ndarray | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        self.probs = np.asarray(self.probs, dtype=np.float64)
        self.label_mass = np.asarray(self.label_mass, dtype=np.float64)
        self.values = np.asarray(self.values, dtype=np.float64)
        self.item_ids = np.asarray(self.item_ids).astype(str)
        if self.item_groups is not None:
            self.item_groups = np.asarray(self.item_groups).astype(str)
        if self.probs.ndim != 4:
            raise TableError(f"probs must be 4-D [items, criteria, orderings, options], got {self.probs.shape}")
        i, c, k, n = self.probs.shape
        self.option_orders = validate(self.option_orders, n, per_item=True)
        self.criterion_orders = validate(self.criterion_orders, c)
        want_orders = (i, k, n) if self.option_orders.ndim == 3 else (k, n)
        checks = [("label_mass", self.label_mass.shape, (i, c, k)),
                  ("option_orders", self.option_orders.shape, want_orders),
                  ("criterion_orders", self.criterion_orders.shape, (k, c)), ("values", self.values.shape, (c, n)),
                  ("item_ids", self.item_ids.shape, (i,))]
        if self.item_groups is not None:
            checks.append(("item_groups", self.item_groups.shape, (i,)))
        for name, got, want in checks:
            if tuple(got) != want:
                raise TableError(f"{name} has shape {tuple(got)}, expected {want} "
                                 f"for probs of shape {self.probs.shape}")
        if len(self.criteria) != c:
            raise TableError(f"{len(self.criteria)} criterion names for {c} criteria")

    # ---- shape ---------------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int, int, int]:
        return self.probs.shape  # (items, criteria, orderings, options)

    @property
    def n_items(self) -> int:
        return self.probs.shape[0]

    @property
    def n_options(self) -> int:
        return self.probs.shape[3]

    @property
    def orders_per_item(self) -> bool:
        """True when every item has its own ordering set (``option_orders`` is [items, orderings, positions])."""
        return self.option_orders.ndim == 3

    def item_option_orders(self) -> np.ndarray:
        """[items, orderings, positions] option orders (a broadcast view when they are shared)."""
        return orders_per_item(self.option_orders, self.n_items)

    # ---- views ---------------------------------------------------------------------------------------------
    def probs_by_position(self) -> np.ndarray:
        """[items, criteria, orderings, positions]: probability of the option shown at each position."""
        idx = np.broadcast_to(self.item_option_orders()[:, None], self.probs.shape)
        return np.take_along_axis(self.probs, idx, axis=3)

    def expected_score(self) -> np.ndarray:
        """[items, criteria, orderings]: probability-weighted score (G-Eval style)."""
        return np.einsum("icko,co->ick", self.probs, self.values)

    def argmax_score(self) -> np.ndarray:
        """[items, criteria, orderings]: the score of the most probable option."""
        best = self.probs.argmax(axis=3)
        return np.take_along_axis(np.broadcast_to(self.values[None, :, None, :], self.probs.shape),
                                  best[..., None], axis=3)[..., 0]

    def criterion_positions(self) -> np.ndarray:
        """[orderings, criteria]: the position at which each canonical criterion is shown."""
        return inverse(self.criterion_orders)

    def select_items(self, index) -> ScoreTable:
        index = np.asarray(index)
        orders = self.option_orders[index] if self.orders_per_item else self.option_orders
        return ScoreTable(self.probs[index], self.label_mass[index], orders, self.criterion_orders,
                          self.values, self.item_ids[index], list(self.criteria),
                          None if self.item_groups is None else self.item_groups[index], dict(self.meta))

    def select_orderings(self, index) -> ScoreTable:
        index = np.asarray(index)
        orders = self.option_orders[:, index] if self.orders_per_item else self.option_orders[index]
        return ScoreTable(self.probs[:, :, index], self.label_mass[:, :, index], orders,
                          self.criterion_orders[index], self.values, self.item_ids, list(self.criteria),
                          self.item_groups, dict(self.meta))

    # ---- files ---------------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        arrays = dict(probs=self.probs, label_mass=self.label_mass, option_orders=self.option_orders,
                      criterion_orders=self.criterion_orders, values=self.values, item_ids=self.item_ids,
                      criteria=np.asarray(self.criteria, dtype=str),
                      meta=np.asarray(json.dumps(self.meta, default=str)))
        if self.item_groups is not None:
            arrays["item_groups"] = self.item_groups
        tmp = p.with_name(p.name + ".tmp.npz")
        try:
            np.savez(tmp, **arrays)
            tmp.replace(p)  # atomic: a killed save never leaves a half-written table
        except OSError as e:  # a full disk, a read-only folder: the previous table stays as it was
            tmp.unlink(missing_ok=True)
            kept = f"the previous table {p} is unchanged" if p.exists() else f"{p} was not written"
            raise OSError(e.errno, f"could not save the score table ({e.strerror or e}); {kept}") from None
        return p

    @classmethod
    def load(cls, path: str | Path) -> ScoreTable:
        p = Path(path)
        if not p.exists():
            raise TableError(f"score table {p} does not exist; create it with `logitjudge score ... --out {p}`")
        fix = f"point to a table written by `logitjudge score --out`, or score again with --out {p}"
        with p.open("rb") as f:
            magic = f.read(4)
        if magic != b"PK\x03\x04":  # not a zip archive: numpy would try (and refuse) to unpickle it
            raise TableError(f"{p} is not a .npz score table ({'empty' if not magic else 'not a zip archive'}); "
                             f"{fix}")
        need = ["probs", "label_mass", "option_orders", "criterion_orders", "values", "item_ids", "criteria", "meta"]
        try:
            with np.load(p, allow_pickle=False) as z:
                missing = [k for k in need if k not in z.files]
                if missing:
                    raise TableError(f"{p} lacks arrays {missing}; it was not written by ScoreTable.save; {fix}")
                arrays = {k: z[k] for k in z.files}
            meta = json.loads(str(arrays["meta"]))
        except TableError:
            raise
        except Exception as e:  # noqa: BLE001 - a damaged archive fails in zipfile, zlib, numpy or json
            raise TableError(f"{p} is a damaged .npz score table ({type(e).__name__}: {str(e)[:120]}); "
                             f"{fix}") from None
        return cls(arrays["probs"], arrays["label_mass"], arrays["option_orders"], arrays["criterion_orders"],
                   arrays["values"], arrays["item_ids"], [str(x) for x in arrays["criteria"]],
                   arrays.get("item_groups"), meta)

    def option_labels(self) -> np.ndarray:
        """[criteria, options] the label text of each option, from the rubric the table recorded in ``meta``
        ('' where the table does not record it, e.g. a table built by hand)."""
        out = np.full(self.values.shape, "", dtype=object)
        crits = {c.get("name"): c for c in (self.meta.get("rubric") or {}).get("criteria") or []}
        for j, name in enumerate(self.criteria):
            opts = (crits.get(name) or {}).get("options") or []
            if len(opts) == self.n_options:
                out[j] = [str(o.get("label", "")) for o in opts]
        return out

    def to_dataframe(self):
        """Long format: one row per (item, criterion, ordering, option), with the option's label text and value,
        the position it was shown at (1..n, as the prompt numbers it; ``position_index`` 0-based), the criterion's
        position, the probability and label mass, and the judge that scored it (``model_id``, ``template``,
        ``dtype`` from ``meta``; '' where the table does not record them)."""
        import pandas as pd

        i, c, k, n = self.probs.shape
        ii, cc, kk, oo = np.meshgrid(np.arange(i), np.arange(c), np.arange(k), np.arange(n), indexing="ij")
        pos = np.broadcast_to(inverse(self.item_option_orders())[:, None], self.probs.shape)
        cpos = np.broadcast_to(self.criterion_positions()[None, :, :].transpose(0, 2, 1)[..., None], self.probs.shape)
        template = self.meta.get("template")
        df = pd.DataFrame({
            "item_id": self.item_ids[ii.ravel()],
            "criterion": np.asarray(self.criteria)[cc.ravel()],
            "ordering": kk.ravel(),
            "option": oo.ravel(),
            "label": self.option_labels()[cc.ravel(), oo.ravel()],
            "value": self.values[cc.ravel(), oo.ravel()],
            "position": pos.ravel() + 1,
            "position_index": pos.ravel(),
            "criterion_position": cpos.ravel() + 1,
            "prob": self.probs.ravel(),
            "label_mass": np.broadcast_to(self.label_mass[..., None], self.probs.shape).ravel(),
            "model_id": str(self.meta.get("model_id") or ""),
            "template": str((template.get("name") if isinstance(template, dict) else template) or ""),
            "dtype": str(self.meta.get("dtype") or ""),
        })
        if self.item_groups is not None:
            df.insert(1, "group", self.item_groups[ii.ravel()])
        return df

    def to_parquet(self, path: str | Path) -> Path:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise TableError("Parquet export needs pyarrow: pip install 'logitjudge[parquet]'") from None
        self.to_dataframe().to_parquet(path, index=False)
        return Path(path)
