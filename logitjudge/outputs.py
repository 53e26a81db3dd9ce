"""Where a command may write: every output path is checked before any model loads and before any file is written.

An output (``--out``, ``--dump-prompts``, ``--scores``, ``--export``, a report folder and the files in it) is
refused, in one line naming the file and the fix, when it

* is an input of the same run (``score --texts t.jsonl --out t.jsonl``), or the path of another output of it:
  never allowed, ``--force`` included: the fix is another path;
* exists and is not a file of the kind the command writes there (a probe table where a score table goes, a
  scores CSV where the long export goes, a text file where a table goes): the fix is another path, or ``--force``
  to replace it; an empty file holds nothing and is replaced;
* is a folder where a file goes (or a file where a folder goes), the run's checkpoint or lock beside a table
  included, or cannot be written.

"A file of ours" is recognised by its content, never by its name alone (:data:`KINDS`): a score or probe table is
a zip archive holding that table's arrays (``probs.npy``, ``meta.npy`` and the others its ``load`` needs); a
prompt dump is JSONL whose first line is an object with the dump's keys; a per-item scores file and the long export
are CSV or Parquet whose columns are the ones that writer uses (a subset of them holding its key columns);
``results.json``, ``spec.toml``, ``report.md``/``report.html`` and the probe page by their own first bytes or keys;
plots are PNG images.
"""

from __future__ import annotations

import glob
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .checkpoint import check_file, check_unlocked
from .errors import LogitJudgeError


class OutputError(LogitJudgeError, ValueError):
    """An output path that would destroy a file or cannot be written; the message names the file and the fix."""


SCORE_ARRAYS = ("probs", "label_mass", "option_orders", "criterion_orders", "values", "item_ids", "criteria", "meta")
PROBE_ARRAYS = ("item_ids", "option_orders", "labels", "criterion", "probs", "meta")
DUMP_KEYS = {"item_id", "criterion", "ordering", "option_order", "prompt", "prompt_tokens", "continuations"}
EXPORT_COLUMNS = {"item_id", "group", "criterion", "ordering", "option", "label", "value", "position",
                  "position_index", "criterion_position", "prob", "label_mass", "model_id", "template", "dtype",
                  "candidate_id"}  # candidate_id: pairwise and listwise tables (ScoreTable.to_long)


def _head(p: Path, n: int = 1 << 16) -> bytes:
    with p.open("rb") as f:
        return f.read(n)


def _npz(arrays):
    def ours(p: Path) -> bool:
        try:
            with zipfile.ZipFile(p) as z:
                names = set(z.namelist())
        except (zipfile.BadZipFile, OSError, ValueError):
            return False
        return all(f"{a}.npy" in names for a in arrays)
    return ours


def _columns(p: Path) -> list[str] | None:
    """The column names of a CSV (its header line) or Parquet file (its schema); None if it is neither."""
    if _head(p, 4) == b"PAR1":
        try:
            import pyarrow.parquet as pq

            return list(pq.read_schema(p).names)
        except Exception:  # noqa: BLE001 - no pyarrow, or a damaged file: not recognisably ours
            return None
    line = _head(p).split(b"\n", 1)[0].strip()
    try:
        return line.decode("utf-8").split(",")
    except UnicodeDecodeError:
        return None


def _table_file(key: set, every: set):
    def ours(p: Path) -> bool:
        cols = _columns(p)
        return cols is not None and key <= set(cols) <= every
    return ours


def _dump(p: Path) -> bool:
    with p.open("rb") as f:
        first = f.readline(1 << 26)
    try:
        rec = json.loads(first)
    except ValueError:
        return False
    return isinstance(rec, dict) and DUMP_KEYS <= set(rec)


def _json_with(*keys):
    def ours(p: Path) -> bool:
        try:
            d = json.loads(p.read_bytes())
        except ValueError:
            return False
        return isinstance(d, dict) and all(k in d for k in keys)
    return ours


def _spec(p: Path) -> bool:
    from .spec import SECTIONS, Spec
    from .tomlfile import read_toml

    try:
        d = read_toml(p, what="spec")
    except ValueError:
        return False
    return "name" in d and set(d) <= set(Spec.__dataclass_fields__) | set(SECTIONS)


def _starts(*prefixes: bytes, contains: bytes = b""):
    def ours(p: Path) -> bool:
        head = _head(p, 1 << 20)
        return head.startswith(prefixes) and contains in head
    return ours


def _scores_columns() -> set:
    from .sections.paradigms import CANDIDATE_COLUMNS
    from .sections.scores import COLUMNS

    return set(COLUMNS) | set(CANDIDATE_COLUMNS)  # a rubric table's per-item scores, or a candidate table's


# kind -> (what it is, in a message; recogniser). A recogniser reads as little of the file as it can.
KINDS = {
    "table": ("a score table", _npz(SCORE_ARRAYS)),
    "probe-table": ("a probe table", _npz(PROBE_ARRAYS)),
    "prompt-dump": ("a prompt dump", _dump),
    "scores": ("a per-item scores file", lambda p: _table_file({"item_id", "criterion", "reading"},
                                                               _scores_columns())(p)),
    "export": ("a long export", _table_file({"item_id", "criterion", "ordering", "option", "prob"}, EXPORT_COLUMNS)),
    "results": ("a results.json of a report", _json_with("verdict", "analysis")),
    "spec": ("a normalised spec", _spec),
    "report-md": ("a Markdown report", _starts(b"# ", contains=b"**Verdict:**")),
    "report-html": ("an HTML report", _starts(b'<!DOCTYPE html>\n<html lang="en">', contains=b'id="verdict"')),
    "probe-md": ("a probe page", _starts(b"# Probing ")),
    "probe-html": ("a probe page", _starts(b"<!doctype html><meta charset='utf-8'><title>probe</title>")),
    "probe-json": ("a probe results file", _json_with("position_preference")),
    "png": ("a PNG image", _starts(b"\x89PNG\r\n\x1a\n")),
}


def probe_folder() -> dict:
    """The files a probe page folder holds: name -> kind."""
    return {"probe.md": "probe-md", "probe.html": "probe-html", "probe.json": "probe-json",
            **{f"probe_{p}.png": "png" for p in ("lens", "attention", "patch", "linear")}}


def report_folder(*, probe: bool = False) -> dict:
    """The files a run's report folder holds: relative name -> kind."""
    from .report.plots import PLOTS

    out = {"table.npz": "table", "results.json": "results", "report.md": "report-md", "report.html": "report-html",
           "scores.csv": "scores", "spec.toml": "spec", **{f"plots/{p}.png": "png" for p in PLOTS}}
    if probe:
        out.update({"probe.npz": "probe-table", **{f"probe/{k}": v for k, v in probe_folder().items()}})
    return out


@dataclass(frozen=True)
class Output:
    """One path a command writes: a file of ``kind`` (a key of :data:`KINDS`), or a folder of ``files``
    (relative name -> kind); ``where`` names it in messages (the flag or spec key); ``side`` are the run's
    own files beside it (a table's checkpoint and lock), which may not be an input either; ``resumes``: the tables
    whose checkpoints the run resumes (:func:`check_resumable`)."""

    path: Path
    where: str
    kind: str | None = None
    files: dict | None = None
    side: tuple = ()
    resumes: tuple = ()


def _same(a: Path, b: Path) -> bool:
    """The same file: one inode (hard links, symlinks, other spellings) or, not yet there, the same path."""
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _identify(p: Path) -> str:
    for what, ours in KINDS.values():
        try:
            if ours(p):
                return f"it is {what}"
        except OSError:
            break
    return "it is not a file logitjudge writes"


EXAMPLE = {"table": "table.npz", "probe-table": "probe.npz", "prompt-dump": "prompts.jsonl", "scores": "scores.csv",
           "export": "long.csv"}


def _writable(path: Path, where: str, kind: str | None, folder: bool) -> None:
    """``path`` is of the right type (a folder where a folder goes, else a file) and can be created or
    replaced: its nearest existing folder is writable, and so is the file if it exists."""
    if folder and path.exists() and not path.is_dir():
        raise OutputError(f"{where}: {path} is a file, and a folder is written there; give a folder path")
    if not folder and path.is_dir():
        raise OutputError(f"{where}: {path} is a folder; give a file name, e.g. {path / EXAMPLE.get(kind, 'out')}")
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe != path and not probe.is_dir():
        raise OutputError(f"{where}: cannot write {path}: {probe} is a file, not a folder; choose another path")
    folder_of = probe if probe.is_dir() else probe.parent
    blocked = folder_of if not os.access(folder_of, os.W_OK | os.X_OK) else \
        path if path.is_file() and not os.access(path, os.W_OK) else None
    if blocked is not None:
        raise OutputError(f"{where}: cannot write {path} ({blocked} is not writable); choose another path")


def check_outputs(outputs, inputs, *, force: bool = False) -> None:
    """Refuse (:class:`OutputError`) any output of ``outputs`` (:class:`Output`) that is a folder where a file
    goes, cannot be written, is one of ``inputs`` (``(label, path)`` pairs, e.g. ``("--texts", ...)``; paths
    that are not files are left out) or another output's path, or exists holding a file not of its kind (unless
    ``force``); then the checkpoint of each table a run resumes (:func:`check_resumable`)."""
    ins = [(label, Path(p)) for label, p in inputs if p is not None and Path(p).is_file()]
    seen: dict = {}
    for out in outputs:
        folder = out.files is not None
        _writable(out.path, out.where, out.kind, folder)
        if folder:  # a file output at the folder's path would make one of them fail after the run
            key = str(out.path.resolve())
            if seen.setdefault(key, out.where) != out.where:
                raise OutputError(f"{out.where} and {seen[key]} both write {out.path}; give each its own path")
        files = [(out.path, out.kind, out.where)] if not folder else \
            [(out.path / name, kind, f"{out.where} {out.path}") for name, kind in out.files.items()]
        for path, kind, where in files + [(Path(s), None, out.where) for s in out.side]:
            for label, src in ins:
                if _same(path, src):
                    raise OutputError(f"{where}: {path} is the {label} input of this run; writing there would "
                                      "destroy it: choose another path")
            key = str(path.resolve())
            if seen.setdefault(key, out.where) != out.where:
                raise OutputError(f"{out.where} and {seen[key]} both write {path}; give each its own path")
            if folder and path.is_dir():
                raise OutputError(f"{where}: {path} is a folder where the report writes a file; move it away or "
                                  "choose another folder")
            if str(path) in map(str, out.side) and path.is_dir():  # the run opens it after the model has loaded
                what = "lock" if path.name.endswith(".lock") else "checkpoint (the finished items of a run)"
                raise OutputError(f"{where}: {path} is a folder where this run keeps its {what}; move it away or "
                                  "choose another --out")
            if kind is None or force or not path.is_file() or path.stat().st_size == 0:
                continue  # nothing there, or an empty file: nothing is lost
            what, ours = KINDS[kind]
            if not ours(path):
                raise OutputError(f"{where}: {path} exists and is not {what} ({_identify(path)}); it would be "
                                  "replaced: choose another path, or add --force to replace it")
    for out in outputs:
        for table in out.resumes:
            check_resumable(table)


def check_resumable(table: Path) -> None:
    """What a run checks when it starts, here before the model loads: each checkpoint it would resume beside
    ``table`` (a file that is not one, or whose first record, the run's settings, is damaged:
    :func:`logitjudge.checkpoint.check_file`; under torchrun each rank's too), and that no other run is writing
    ``table`` now (:func:`logitjudge.checkpoint.check_unlocked`)."""
    parts = [Path(f"{table}.partial.jsonl")]
    if table.parent.is_dir():
        parts += sorted(table.parent.glob(f"{glob.escape(table.name)}.rank*.partial.jsonl"))
    for part in parts:
        check_file(part)
    check_unlocked(table)


# ---- a spec's outputs and inputs ---------------------------------------------------------------------
def spec_outputs(spec, table_path: Path | None, probe_path: Path | None, probing: bool) -> list:
    """Every path the spec's command writes (:mod:`logitjudge.outputs`): ``score`` its table, ``probe`` its probe
    table and page folder, ``run`` its report folder; and the prompt dump."""

    def table(p: Path, **kw) -> Output:  # a table and the run's checkpoint and lock beside it, which it resumes
        return Output(p, out, side=(Path(f"{p}.partial.jsonl"), Path(f"{p}.lock")), resumes=(p,), **kw)

    out = spec.where("", "out")
    if table_path is None:  # nothing written but the prompt dump
        outs = []
    elif not spec.from_flags:
        tables = [table(p) for p in ((table_path, probe_path) if probing else (table_path,))]
        outs = [Output(Path(spec.out), out, files=report_folder(probe=probing),
                       side=sum((t.side for t in tables), ()), resumes=sum((t.resumes for t in tables), ()))]
    elif probing:
        outs = [table(probe_path, kind="probe-table")]
        if spec.probe.report:
            outs.append(Output(Path(spec.probe.report), spec.where("probe", "report"), files=probe_folder()))
    else:
        outs = [table(table_path, kind="table")]
    if spec.dump_prompts:
        outs.append(Output(Path(spec.dump_prompts), spec.where("", "dump_prompts"), kind="prompt-dump"))
    return outs


def spec_inputs(spec, paths, info: dict, spec_file) -> list:
    """The files the run reads, as (label, path): none of them may be written. ``paths``: the spec's files,
    resolved (:class:`~logitjudge.spec.Paths`)."""
    d = spec.data
    ins = [(spec.where("data", "texts") if d.texts else "data set", info.get("path")),
           (spec.where("data", "rubric"), paths.rubric), (spec.where("prompts", "template"), paths.template),
           ("experiment spec", spec_file)]
    model = Path(paths.model).expanduser()
    if model.is_dir():
        ins += [(spec.where("model", "id"), f) for f in model.iterdir()]
    elif model.is_file():  # a GGUF judge
        ins.append((spec.where("model", "id"), model))
    return ins
