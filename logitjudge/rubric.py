"""Rubrics: score options, criteria, and their JSON / TOML files.

A score option has a numeric ``value``, a ``label`` (the text the judge writes, e.g. "4") and a ``description``.
A criterion has a name, a description and its options in canonical order. A rubric has instructions and one or
more criteria, all with the same number of options (the option-order permutations are shared across criteria).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import LogitJudgeError
from .tomlfile import read_toml


class RubricError(LogitJudgeError, ValueError):
    """A rubric is malformed; the message names the field and the fix."""


@dataclass(frozen=True)
class ScoreOption:
    value: float
    label: str
    description: str = ""


@dataclass(frozen=True)
class Criterion:
    name: str
    options: tuple[ScoreOption, ...]
    description: str = ""

    @property
    def labels(self) -> list[str]:
        return [o.label for o in self.options]

    @property
    def values(self) -> list[float]:
        return [float(o.value) for o in self.options]


@dataclass(frozen=True)
class Rubric:
    criteria: tuple[Criterion, ...]
    instructions: str = ""
    name: str = "rubric"
    meta: dict = field(default_factory=dict, compare=False)

    @property
    def n_options(self) -> int:
        return len(self.criteria[0].options)

    @property
    def n_criteria(self) -> int:
        return len(self.criteria)

    def criterion(self, name: str) -> Criterion:
        for c in self.criteria:
            if c.name == name:
                return c
        raise RubricError(f"no criterion named {name!r}; the rubric has {[c.name for c in self.criteria]}")

    def subset(self, names: list[str]) -> Rubric:
        """The rubric restricted to the named criteria, in the given order."""
        return Rubric(tuple(self.criterion(n) for n in names), self.instructions, self.name, dict(self.meta))

    def validate(self, *, need_descriptions: bool = False) -> Rubric:
        where = f"rubric {self.name!r}"
        if not self.criteria:
            raise RubricError(f"{where}: 'criteria' is empty; add at least one criterion with its options")
        names = [c.name for c in self.criteria]
        if len(set(names)) != len(names):
            raise RubricError(f"{where}: duplicate criterion names {names}; give each criterion a unique name")
        n = len(self.criteria[0].options)
        for c in self.criteria:
            cw = f"{where}, criterion {c.name!r}"
            if not c.name.strip():
                raise RubricError(f"{where}: a criterion has an empty 'name'; name every criterion")
            if len(c.options) < 2:
                raise RubricError(f"{cw}: 'options' has {len(c.options)} entries; a rubric needs at least 2")
            if len(c.options) != n:
                raise RubricError(
                    f"{cw}: has {len(c.options)} options but criterion {self.criteria[0].name!r} has {n}; "
                    "all criteria of one rubric need the same number of options (split it into two rubrics)")
            labels = [o.label for o in c.options]
            dup = sorted({x for x in labels if labels.count(x) > 1})
            if dup:
                raise RubricError(f"{cw}: duplicate option labels {dup}; every option needs its own label")
            values = [o.value for o in c.options]
            dupv = sorted({x for x in values if values.count(x) > 1})
            if dupv:
                raise RubricError(f"{cw}: duplicate option values {dupv}; every option needs its own value")
            for o in c.options:
                if not isinstance(o.value, (int, float)) or not math.isfinite(o.value):
                    raise RubricError(f"{cw}: option {o.label!r} has value {o.value!r}, not a finite number; "
                                      "give every option a finite numeric value")
                if not str(o.label).strip():
                    raise RubricError(f"{cw}: an option (value {o.value}) has an empty 'label'")
                if str(o.label) != str(o.label).strip():
                    raise RubricError(f"{cw}: option label {o.label!r} has surrounding whitespace; "
                                      "put spacing in the template's answer prefix, not in the label")
                if need_descriptions and not o.description.strip():
                    raise RubricError(f"{cw}: option {o.label!r} has an empty 'description', which the "
                                      "template shows; write one or use a template without descriptions")
            if need_descriptions and not c.description.strip():
                raise RubricError(f"{cw}: empty 'description', which the template shows; write one")
        return self

    # ---- files -------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = {"name": self.name, "instructions": self.instructions,
             "criteria": [{"name": c.name, "description": c.description,
                           "options": [asdict(o) for o in c.options]} for c in self.criteria]}
        return d

    @classmethod
    def from_dict(cls, d: dict, *, source: str = "rubric") -> Rubric:
        if not isinstance(d, dict):
            raise RubricError(f"{source}: expected a table/object at the top level, got {type(d).__name__}")
        crits = d.get("criteria")
        if crits is None and "options" in d:  # single-criterion shorthand
            crits = [{"name": d.get("criterion", d.get("name", "score")),
                      "description": d.get("description", ""), "options": d["options"]}]
        if not isinstance(crits, list) or not crits:
            raise RubricError(f"{source}: missing 'criteria' (a list of {{name, description, options}}); "
                              "see logitjudge/rubrics/default.toml for an example")
        out = []
        for i, c in enumerate(crits):
            if not isinstance(c, dict) or "options" not in c:
                raise RubricError(f"{source}: criteria[{i}] needs 'name' and 'options'")
            opts = []
            for j, o in enumerate(c["options"]):
                if not isinstance(o, dict) or "value" not in o:
                    raise RubricError(f"{source}: criteria[{i}].options[{j}] needs 'value' (a number) "
                                      "and optionally 'label' and 'description'")
                try:
                    value = float(o["value"])
                except (TypeError, ValueError):
                    raise RubricError(f"{source}: criteria[{i}].options[{j}].value={o['value']!r} "
                                      "is not a number") from None
                if not math.isfinite(value):
                    raise RubricError(f"{source}: criteria[{i}].options[{j}].value={o['value']!r} is not a finite "
                                      "number; give every option a finite numeric value")
                label = o.get("label")
                if label is None:
                    label = str(int(value)) if value == int(value) else str(value)
                opts.append(ScoreOption(value, str(label), str(o.get("description", ""))))
            out.append(Criterion(str(c.get("name", "")), tuple(opts), str(c.get("description", ""))))
        return cls(tuple(out), str(d.get("instructions", "")), str(d.get("name", "rubric"))).validate()

    @classmethod
    def load(cls, path: str | Path) -> Rubric:
        p = Path(path)
        if not p.exists():
            raise RubricError(f"rubric file {p} does not exist")
        if p.suffix.lower() == ".toml":
            d = read_toml(p, what="rubric file", error=RubricError)
        elif p.suffix.lower() == ".json":
            try:
                d = json.loads(p.read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise RubricError(f"rubric file {p} is not valid JSON: {e}") from None
        else:
            raise RubricError(f"rubric file {p}: unknown extension {p.suffix!r}; use .toml or .json")
        return cls.from_dict(d, source=str(p))

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        if p.suffix.lower() == ".toml":
            import tomli_w
            p.write_text(tomli_w.dumps(self.to_dict()), encoding="utf-8")
        elif p.suffix.lower() == ".json":
            p.write_text(json.dumps(self.to_dict(), indent=2), encoding="utf-8")
        else:
            raise RubricError(f"cannot save rubric to {p}: use a .toml or .json file name")
        return p


def builtin_rubric(name: str = "default") -> Rubric:
    """A rubric shipped with the package (``logitjudge/rubrics/<name>.toml``)."""
    p = Path(__file__).parent / "rubrics" / f"{name}.toml"
    if not p.exists():
        avail = sorted(x.stem for x in (Path(__file__).parent / "rubrics").glob("*.toml"))
        raise RubricError(f"no built-in rubric {name!r}; available: {avail}")
    return Rubric.load(p)


def load_rubric(spec: str | Path) -> Rubric:
    """A rubric from a file path, or a built-in one by name (``builtin:quality`` or just ``quality``)."""
    s = str(spec)
    if s.startswith("builtin:"):
        return builtin_rubric(s.split(":", 1)[1])
    if Path(s).exists() or s.endswith((".toml", ".json")):
        return Rubric.load(s)
    return builtin_rubric(s)


def likert(name: str, description: str, descriptions: list[str], *, start: int = 1) -> Criterion:
    """A criterion with integer labels start, start+1, ... and the given option descriptions."""
    return Criterion(name, tuple(ScoreOption(float(start + i), str(start + i), d)
                                 for i, d in enumerate(descriptions)), description)
