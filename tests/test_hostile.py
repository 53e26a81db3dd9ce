"""Issue 26, hostile inputs round 2: nothing destroyed, nothing wrong accepted. Every case is one line on stderr,
exit 2, and leaves every file as it was; the cases whose input allows it are refused before the model loads (the
loader is replaced by one that fails the test if it is reached: the tokenizer and the config, no weights, may be
read)."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from logitjudge import models
from logitjudge.cli import main
from logitjudge.table import ScoreTable

sys.path.insert(0, str(Path(__file__).parent))
from test_cli import write_texts  # noqa: E402


@pytest.fixture(scope="module")
def table(tmp_path_factory, model_dir):
    """A real score table of 3 texts under fixed:2 orders."""
    d = tmp_path_factory.mktemp("table")
    texts = write_texts(d / "texts.jsonl", 3)
    out = d / "t.npz"
    assert main(["score", "--model", str(model_dir), "--texts", str(texts), "--orderings", "fixed:2", "--quiet",
                 "--out", str(out)]) == 0
    return out


@pytest.fixture
def no_load(monkeypatch):
    """The model loader fails the test if it is reached."""
    def fail(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(models, "load_model", fail)


def _snapshot(folder: Path) -> dict:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(capsys, argv, *words, folder: Path | None = None) -> str:
    """Run ``argv``: exit 2, one line on stderr holding ``words``, and (``folder``) no file in it changed."""
    before = _snapshot(folder) if folder else None
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("Loading weights")]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (argv, rc, err)
    for w in words:
        assert w in lines[0], (w, lines[0])
    if folder:
        assert _snapshot(folder) == before, "a file changed"
    return lines[0]


def _score(model_dir, texts, out, *extra):
    return ["score", "--model", str(model_dir), "--texts", str(texts), "--out", str(out), "--quiet", *extra]


# ---- 1. outputs never overwrite an input or a file of another kind -------------------------------------------
def test_outputs_are_refused_before_the_model_loads(tmp_path, model_dir, table, capsys, no_load):
    from logitjudge.probing.table import ProbeTable

    texts = write_texts(tmp_path / "t.jsonl", 2)
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    probe = tmp_path / "probe.npz"
    ProbeTable(["a"], np.array([[0, 1]]), ["1", "2"], "q", np.array([[[0.5, 0.5]]])).save(probe)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "keep.txt").write_text("x")
    dump = tmp_path / "old-dump.jsonl"
    dump.write_text(json.dumps({"item_id": "a", "criterion": "Q", "ordering": 0, "option_order": [0, 1],
                                "prompt": "p", "prompt_tokens": 1, "continuations": ["1"], "labels": ["1"]}) + "\n")
    out = tmp_path / "new.npz"
    cases = [
        (_score(model_dir, texts, texts), [f"--out: {texts} is the --texts input of this run", "another path"]),
        (_score(model_dir, texts, notes), [f"--out: {notes} exists and is not a score table", "--force"]),
        (_score(model_dir, texts, probe), ["is not a score table (it is a probe table)", "--force"]),
        (_score(model_dir, texts, folder), [f"{folder} is a folder; give a file name, e.g. {folder}/table.npz"]),
        (_score(model_dir, texts, out, "--dump-prompts", str(texts)), ["--dump-prompts", "--texts input"]),
        (_score(model_dir, texts, out, "--dump-prompts", str(notes)), ["is not a prompt dump", "--force"]),
        (_score(model_dir, texts, out, "--dump-prompts", str(folder)), ["--dump-prompts", "is a folder"]),
        (_score(model_dir, texts, out, "--dump-prompts", str(out)), ["--dump-prompts and --out both write"]),
        (_score(model_dir, texts, out, "--dump-prompts", str(notes / "d.jsonl")), ["cannot write",
                                                                                 "is a file, not a folder"]),
        (_score(model_dir, texts, table, "--dump-prompts", str(table)), ["both write"]),
    ]
    for argv, words in cases:
        _refused(capsys, argv, *words, folder=tmp_path)
    # a file of the kind written there passes the checks (and the run goes on to load the model)
    for argv in (_score(model_dir, texts, table, "--dump-prompts", str(dump)),
                 _score(model_dir, texts, notes, "--force")):
        capsys.readouterr()
        assert main(argv) == 1  # no_load's AssertionError: an internal error
        assert "AssertionError: the model was loaded" in capsys.readouterr().err


def test_read_only_places_are_refused(tmp_path, model_dir, capsys, no_load, monkeypatch):
    from logitjudge import outputs

    texts = write_texts(tmp_path / "t.jsonl", 2)
    ro, locked = tmp_path / "ro", tmp_path / "locked.npz"
    ro.mkdir()
    locked.write_bytes(b"")
    ro.chmod(0o555)
    locked.chmod(0o444)
    if os.geteuid() == 0:  # root writes anywhere: these two are made unwritable to the check itself
        real = os.access
        monkeypatch.setattr(outputs.os, "access", lambda p, mode: Path(p) not in (ro, locked) and real(p, mode))
    try:
        _refused(capsys, _score(model_dir, texts, tmp_path / "t.npz", "--dump-prompts", str(ro / "d.jsonl")),
                 f"--dump-prompts: cannot write {ro / 'd.jsonl'} ({ro} is not writable)", folder=tmp_path)
        _refused(capsys, _score(model_dir, texts, ro / "sub" / "t.npz"), f"({ro} is not writable)", folder=tmp_path)
        _refused(capsys, _score(model_dir, texts, locked), f"--out: cannot write {locked} ({locked} is not writable)",
                 folder=tmp_path)
    finally:
        ro.chmod(0o755)


def test_force_replaces_a_foreign_file_but_never_an_input(tmp_path, model_dir, capsys):
    texts = write_texts(tmp_path / "t.jsonl", 2)
    notes = tmp_path / "notes.npz"
    notes.write_text("not a table\n")
    assert main(_score(model_dir, texts, notes, "--orderings", "fixed:1", "--force")) == 0
    assert ScoreTable.load(notes).shape[0] == 2
    _refused(capsys, _score(model_dir, texts, texts, "--force"), "--texts input", folder=tmp_path)


def test_analyze_outputs(tmp_path, table, capsys):
    import shutil

    t = tmp_path / "t.npz"
    shutil.copy(table, t)
    human = tmp_path / "human.jsonl"
    human.write_text("".join(json.dumps({"id": f"t{i}", "Quality": 3.0 + i}) + "\n" for i in range(3)))
    export, scores = tmp_path / "long.csv", tmp_path / "scores.csv"
    assert main(["analyze", str(t), "--export", str(export)]) == 0
    assert main(["analyze", str(t), "--scores", str(scores), "--n-boot", "5"]) == 0
    notes = tmp_path / "notes.csv"
    notes.write_text("name,phone\nann,123\n")
    human_csv = tmp_path / "h.csv"
    human_csv.write_text("id,Quality\nt0,3\n")
    (tmp_path / "dir.csv").mkdir()
    for argv, words in [
        (["--export", str(human_csv), "--human", str(human_csv)], [f"--export: {human_csv} is the --human input"]),
        (["--scores", str(export)], ["is not a per-item scores file (it is a long export)", "--force"]),
        (["--export", str(scores)], ["is not a long export (it is a per-item scores file)", "--force"]),
        (["--export", str(notes)], [f"--export: {notes} exists and is not a long export", "--force"]),
        (["--scores", str(tmp_path / "scores")], ["--scores", "must end in .parquet or .csv"]),
        (["--scores", str(tmp_path / "dir.csv")], ["is a folder"]),
    ]:
        _refused(capsys, ["analyze", str(t), *argv], *words, folder=tmp_path)
    odd = tmp_path / "table.csv"  # a table under a .csv name: --scores onto it would replace the input
    shutil.copy(table, odd)
    _refused(capsys, ["analyze", str(odd), "--scores", str(odd)], f"--scores: {odd} is the table input of this run",
             folder=tmp_path)
    assert main(["analyze", str(t), "--scores", str(scores), "--n-boot", "5"]) == 0  # its own kind: replaced
    assert main(["analyze", str(t), "--export", str(notes), "--force"]) == 0
    assert notes.read_text().startswith("item_id,")


def test_run_report_folder(tmp_path, model_dir, capsys, no_load):
    texts = write_texts(tmp_path / "t.jsonl", 2)
    spec = tmp_path / "exp" / "spec.toml"
    spec.parent.mkdir()
    spec.write_text(f'name = "x"\n[model]\nid = "{model_dir}"\n[data]\ntexts = "{texts}"\n')
    a_file = tmp_path / "report.txt"
    a_file.write_text("x")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "results.json").write_text('{"mine": true}\n')
    _refused(capsys, ["run", str(spec), "--out", str(a_file)], f"{a_file} is a file, and a folder is written there",
             folder=tmp_path)
    _refused(capsys, ["run", str(spec), "--out", str(foreign)],
             f"{foreign / 'results.json'} exists and is not a results.json of a report", "--force", folder=tmp_path)
    _refused(capsys, ["run", str(spec), "--out", str(spec.parent)],
             f"{spec} is the experiment spec input of this run", folder=tmp_path)


# ---- 2. inputs, before the model loads --------------------------------------------------------------------
def _rubric(tmp: Path, name: str, options: str) -> Path:
    p = tmp / f"{name}.toml"
    p.write_text(f'name = "r"\ninstructions = "Rate."\n[[criteria]]\nname = "Q"\ndescription = "q"\noptions = '
                 f"[{options}]\n", encoding="utf-8")
    return p


def test_inputs_are_refused_before_the_model_loads(tmp_path, model_dir, capsys, no_load):
    texts = write_texts(tmp_path / "t.jsonl", 2)
    out = tmp_path / "t.npz"
    opt = '{{value = {v}, label = "{lab}", description = "d"}}'
    label = lambda lab: _rubric(tmp_path, f"label{len(list(tmp_path.glob('label*')))}",  # noqa: E731
                                opt.format(v=1, lab="1") + ", " + opt.format(v=2, lab=lab))
    bad_ids = {}
    for name, value in {"null": None, "object": {"a": 1}, "float": 1.5, "bool": True, "list": [1]}.items():
        p = tmp_path / f"id_{name}.jsonl"
        p.write_text('{"id": "ok", "text": "fine"}\n' + json.dumps({"id": value, "text": "x"}) + "\n")
        bad_ids[name] = p
    only_option_line = tmp_path / "partial.toml"
    only_option_line.write_text('option_line = "({label}) {description}"\n')
    misspelt = tmp_path / "misspelt.toml"
    misspelt.write_text('base = "text-first"\noption_line = "{lable}. {description}"\n')
    long_text = tmp_path / "long.jsonl"
    long_text.write_text(json.dumps({"id": "long", "text": "the cat sat on the mat " * 9000}) + "\n")
    empty_model, config_only = tmp_path / "empty-model", tmp_path / "config-only"
    empty_model.mkdir()
    config_only.mkdir()
    (config_only / "config.json").write_text((model_dir / "config.json").read_text())
    cases = {
        "label with a newline": (["--rubric", str(label("2\\nScore: 3"))],
                                 ["'2\\nScore: 3'", "is not one line of visible text", "line break"]),
        "label with a control character": (["--rubric", str(label("2\\u0007"))], ["control character U+0007"]),
        "invisible label": (["--rubric", str(label("\\u200b"))], ["invisible format character U+200B"]),
        "value true": (["--rubric", str(_rubric(tmp_path, "vtrue", '{value = 1}, {value = true}'))],
                       ["options[1].value=True is not a number (a bool)"]),
        "value false": (["--rubric", str(_rubric(tmp_path, "vfalse", '{value = false}, {value = 1}'))],
                        ["options[0].value=False is not a number (a bool)"]),
        "value a string": (["--rubric", str(_rubric(tmp_path, "vstr", '{value = 1}, {value = "2"}'))],
                           ["value='2' is not a number (a str)"]),
        **{f"id {name}": (["--texts", str(p)], [f"{p}:2: 'id' must be a string or an integer"])
           for name, p in bad_ids.items()},
        "template with only option_line": (["--template", str(only_option_line)],
                                           ["missing keys ['body', 'context_block'", 'base = "text-first"']),
        "template placeholder": (["--template", str(misspelt)], ["'option_line' uses the placeholder {lable}"]),
        "seed -1": (["--seed", "-1"], ["--seed: must be at least 0"]),
        "random:3000000000": (["--orderings", "random:3000000000"],
                              ["'random:3000000000': 3,000,000,000 orders per item for 2 items", "GiB of memory",
                               "use a smaller count"]),
        "device banana": (["--device", "banana"], ["--device: 'banana' is not a device torch knows",
                                                   "this machine offers cpu, auto"]),
        "attention": (["--attn-implementation", "fastest"],
                      ["--attn-implementation: attention implementation 'fastest' is not one transformers",
                       "sdpa", "eager"]),
        "text past the context": (["--texts", str(long_text)], ["item 'long', criterion 'Quality'",
                                                                "the model's context is 2,048 tokens"]),
        "empty model folder": (["--model", str(empty_model)], [f"model folder {empty_model} is empty",
                                                               "save_pretrained"]),
        "model folder without weights": (["--model", str(config_only)],
                                         ["has no tokenizer files", "no weights"]),
    }
    if not models.torch.cuda.is_available():
        cases["device cuda:7"] = (["--device", "cuda:7"], ["CUDA is not available"])
    base = _score(model_dir, texts, out)
    for name, (extra, words) in cases.items():
        argv = list(base)
        for flag, value in zip(extra[::2], extra[1::2]):
            if flag in argv:
                argv[argv.index(flag) + 1] = value
            else:
                argv += [flag, value]
        t0 = time.time()
        _refused(capsys, argv, *words, folder=tmp_path)
        assert time.time() - t0 < 60, name  # nothing was allocated or loaded


def test_probe_layers_against_the_config(tmp_path, model_dir, capsys, no_load):
    texts = write_texts(tmp_path / "t.jsonl", 2)
    _refused(capsys, ["probe", "--model", str(model_dir), "--texts", str(texts), "--layers", "0,99", "--out",
                      str(tmp_path / "p.npz"), "--quiet"],
             "--layers: layer 99 is outside 0..3 (the model has 4 layers", folder=tmp_path)


def test_spec_files(tmp_path, capsys):
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "a.toml").write_text('name = "a"\n')
    _refused(capsys, ["run", str(folder)], f"experiment spec {folder} is a folder, not a .toml file",
             f"e.g. {folder / 'a.toml'}", folder=tmp_path)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b'name = "caf\xe9"\n\x00\x01')
    _refused(capsys, ["run", str(binary)], f"experiment spec {binary} is not UTF-8 text (byte 0xe9 on line 1)",
             folder=tmp_path)


def test_label_and_value_rules_in_python():
    from logitjudge.rubric import Criterion, Rubric, RubricError, ScoreOption, label_problem

    assert label_problem("level 1") is None and label_problem("[[10]]") is None and label_problem("très") is None
    assert "line break" in label_problem("2\rScore")
    bad = Rubric((Criterion("q", (ScoreOption(1.0, "1"), ScoreOption(True, "2"))),))
    with pytest.raises(RubricError, match="not a finite number"):
        bad.validate()


def test_ordering_counts_in_python():
    from logitjudge.orderings import OrderingError, parse

    for spec, words in [("balanced:3000000000", "'balanced' takes no count"),
                        ("shared-random:3000000000", "3,000,000,000 orders of 5 options need"),
                        ("fixed:3000000000", "use a smaller count"),
                        ("nonsense:3000000000", "unknown ordering spec")]:
        with pytest.raises(OrderingError, match=words):
            parse(spec, 5, n_items=2)


# ---- 3. analyze refuses what it cannot analyse -------------------------------------------------------------
def _forged(table_path: Path, tmp: Path, how: str) -> Path:
    t = ScoreTable.load(table_path)
    probs = t.probs.copy()
    if how == "nan":
        probs[1, 0, 1] = np.nan
    elif how == "all-nan":
        probs[:] = np.nan
    elif how == "inf":
        probs[2, 0, 0, 0] = np.inf
    elif how == "negative":
        probs[0, 0, 1, :2] = [-0.1, probs[0, 0, 1, 0] + probs[0, 0, 1, 1] + 0.1]
    else:  # unnormalised
        probs[0, 0, 1] *= 1.01
    p = tmp / f"{how}.npz"
    ScoreTable(probs, t.label_mass, t.option_orders, t.criterion_orders, t.values, t.item_ids, t.criteria,
               t.item_groups, t.meta).save(p)
    return p


@pytest.mark.parametrize("how, where, why", [
    ("nan", "item 't1', criterion 'Quality', ordering 1", "are not all finite"),
    ("all-nan", "item 't0', criterion 'Quality', ordering 0", "are not all finite"),
    ("inf", "item 't2', criterion 'Quality', ordering 0", "are not all finite"),
    ("negative", "item 't0', criterion 'Quality', ordering 1", "are negative"),
    ("unnormalised", "item 't0', criterion 'Quality', ordering 1", "do not sum to 1 (within 1e-6)"),
])
def test_analyze_refuses_bad_probabilities(tmp_path, table, capsys, how, where, why):
    p = _forged(table, tmp_path, how)
    with _no_warnings():
        _refused(capsys, ["analyze", str(p)], f"{p}: the probabilities of {where} {why}", "score again",
                 folder=tmp_path)


class _no_warnings:
    """No numpy RuntimeWarning on the way to the refusal."""

    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("error", RuntimeWarning)

    def __exit__(self, *exc):
        self._w.__exit__(*exc)


def test_analyze_refuses_bad_human_scores_and_settings(tmp_path, table, capsys):
    human = tmp_path / "human.jsonl"
    human.write_text('{"id": "t0", "Quality": 3}\n{"id": "t1", "Quality": NaN}\n')
    _refused(capsys, ["analyze", str(table), "--human", str(human)],
             f"{human}:2 (id 't1'): human score 'Quality' is nan, not a finite number", folder=tmp_path)
    human.write_text('{"id": "t0", "human": {"Quality": Infinity}}\n')
    _refused(capsys, ["analyze", str(table), "--human", str(human)], "is inf, not a finite number")
    for argv, words in [(["--n-boot", "-5"], "--n-boot: must be at least 0, got -5"),
                        (["--n-draws", "1"], "--n-draws: must be at least 2, got 1"),
                        (["--seed", "-1"], "--seed: must be at least 0")]:
        _refused(capsys, ["analyze", str(table), *argv], words)


# ---- 4. checkpoint records are checked against the run -------------------------------------------------------
def test_a_record_of_the_wrong_shape_is_skipped(tmp_path, tiny_lm, caplog):
    from logitjudge.checkpoint import frame
    from logitjudge.items import Item
    from logitjudge.orderings import parse
    from logitjudge.rubric import builtin_rubric
    from logitjudge.runs import Run, score

    items = [Item(f"t{i}", f"The cat sat on the mat {i} times.") for i in range(3)]
    rubric = builtin_rubric("default")
    orders = parse("fixed:2", rubric.n_options)
    ref = score(tiny_lm, items, rubric, orders, progress=False)
    out = tmp_path / "t.npz"
    fp = Run(tiny_lm, items, rubric, orders, out=out).fingerprint
    good = [["t0", ref.probs[0].tolist(), ref.label_mass[0].tolist()]]
    forged = [
        [["t1", [[0.5, 0.5]], [[0.1]]]],  # valid checksum, probs of shape (1, 2) for a (1, 2, 5) run
        [["t2", (ref.probs[2] * 2).tolist(), ref.label_mass[2].tolist()]],  # the right shape, sums to 2
        [["zz", ref.probs[2].tolist(), ref.label_mass[2].tolist()]],  # an item this run does not have
        [["t2", ref.probs[2].tolist()]],  # one array
    ]
    partial = Path(f"{out}.partial.jsonl")
    partial.write_bytes(frame({"fingerprint": fp, "format": 2}, 0) + frame({"items": good}, 1)
                        + b"".join(frame({"items": f}, 1) for f in forged))
    with caplog.at_level(logging.WARNING, logger="logitjudge"):
        got = score(tiny_lm, items, rubric, orders, out=out, progress=False)
    for line, why in ((3, "item 't1': probs of shape (1, 2)"), (4, "item 't2': probabilities that do not sum to 1"),
                      (5, "item 'zz': not an item of this run"), (6, "item 't2': 1 arrays where a score record has 2")):
        assert f"record on line {line} does not fit this run ({why}" in caplog.text, caplog.text
    assert "skipped, its items are scored again" in caplog.text
    assert np.array_equal(got.probs, ref.probs) and not partial.exists()


# ---- 4. issue 35: nothing late; --debug keeps the exit status ---------------------------------------------------
def test_late_checks_come_before_the_model_loads(tmp_path, model_dir, capsys, no_load):
    """An empty description a template shows, a checkpoint whose first record (the run's settings) is damaged or
    that is not a checkpoint, and a folder where the checkpoint goes: refused before the load, nothing written."""
    from logitjudge.checkpoint import frame

    texts = write_texts(tmp_path / "t.jsonl", 2)
    rubric = _rubric(tmp_path, "empty", '{value = 1, label = "1", description = "bad"}, '
                                        '{value = 2, label = "2", description = " "}')
    _refused(capsys, _score(model_dir, texts, tmp_path / "a.npz", "--rubric", str(rubric)),
             "option '2' has an empty 'description', which the template shows", folder=tmp_path)
    head = bytearray(frame({"fingerprint": "0123456789abcdef", "format": 2}, 0))
    head[40] ^= 1  # a flipped bit in the settings record
    records = frame({"items": [["t0", [[[0.5, 0.5]]], [[1.0]]]]}, 1) * 2
    (tmp_path / "b.npz.partial.jsonl").write_bytes(bytes(head) + records)
    _refused(capsys, _score(model_dir, texts, tmp_path / "b.npz"), "b.npz.partial.jsonl: its first record (the "
             "run's settings) is damaged, so the 2 records after it", "move it away or delete it", folder=tmp_path)
    (tmp_path / "c.npz.partial.jsonl").write_text("my notes\nmore notes\n")
    _refused(capsys, _score(model_dir, texts, tmp_path / "c.npz"), "is not a logitjudge checkpoint", folder=tmp_path)
    (tmp_path / "d.npz.partial.jsonl").mkdir()
    _refused(capsys, _score(model_dir, texts, tmp_path / "d.npz"), "d.npz.partial.jsonl is a folder where this "
             "run keeps its checkpoint", "move it away or choose another --out", folder=tmp_path)
    (tmp_path / "e.npz.lock").mkdir()
    _refused(capsys, _score(model_dir, texts, tmp_path / "e.npz"), "e.npz.lock is a folder where this run keeps "
             "its lock", folder=tmp_path)
    # a settings record cut off with nothing after it (a run killed while writing it) is started again: the
    # checks pass and the run goes on to load the model
    (tmp_path / "f.npz.partial.jsonl").write_bytes(bytes(head)[:30])
    assert main(_score(model_dir, texts, tmp_path / "f.npz")) == 1
    assert "AssertionError: the model was loaded" in capsys.readouterr().err


def _status(capsys, argv) -> tuple[int, str, int, str]:
    """(status, stderr) of ``argv`` without and with --debug."""
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err
    rc_debug = main(argv + ["--debug"])
    return rc, err, rc_debug, capsys.readouterr().err


def test_debug_adds_the_traceback_and_keeps_the_status(tmp_path, model_dir, capsys, monkeypatch):
    from logitjudge import cli
    from logitjudge.checkpoint import RunLock

    texts = write_texts(tmp_path / "t.jsonl", 2)
    out = tmp_path / "t.npz"
    lock = RunLock(Path(f"{out}.lock"), out)  # another run writing --out now
    try:
        rc, err, rc_debug, err_debug = _status(capsys, _score(model_dir, texts, out, "--orderings", "fixed:1"))
    finally:
        lock.release()
    assert rc == rc_debug == 2 and "another logitjudge run (pid" in err and "Traceback" not in err
    assert "Traceback" in err_debug and err_debug.strip().splitlines()[-1] == err.strip().splitlines()[-1]
    assert not out.exists()
    rubric = _rubric(tmp_path, "empty", '{value = 1, label = "1", description = ""}, '
                                        '{value = 2, label = "2", description = "b"}')
    rc, err, rc_debug, err_debug = _status(capsys, _score(model_dir, texts, out, "--rubric", str(rubric)))
    assert rc == rc_debug == 2 and "Traceback" in err_debug and "RubricError" in err_debug

    def boom(args):
        raise RuntimeError("kaput")

    def interrupt(args):
        raise KeyboardInterrupt

    for fn, status, line in ((boom, 1, "internal error: RuntimeError: kaput"), (interrupt, 130, "interrupted")):
        monkeypatch.setitem(cli.COMMANDS, "analyze", fn)
        rc, err, rc_debug, err_debug = _status(capsys, ["analyze", "t.npz"])
        assert rc == rc_debug == status and line in err and "Traceback" not in err, (err, err_debug)
        assert "Traceback" in err_debug and line in err_debug.strip().splitlines()[-1]
