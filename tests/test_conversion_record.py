"""A cached GGUF conversion is tied to what made it (logitjudge.gguf.why_stale): a folder without a conversion
record, from another converter, or whose tokens the installed transformers no longer gives, is converted again;
one made under another transformers that gives the same token ids is reused and the version recorded."""

from __future__ import annotations

import json

import pytest
import transformers
from conftest import tiny_tokenizer

from logitjudge import gguf as lj_gguf


@pytest.fixture()
def folder(tmp_path):
    """A converted folder as logitjudge leaves it (tiny tokenizer, a stand-in weight file) with its record."""
    d = tmp_path / "models" / "gguf-0123456789abcdef"
    tok = tiny_tokenizer()
    tok.save_pretrained(d)
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"")
    lj_gguf._write_record(d, {"converter": lj_gguf.CONVERTER, "transformers": transformers.__version__,
                              "tokens": {"add_bos": True, "add_eos": False, "bos_id": 1, "eos_id": 2},
                              "probe_ids": lj_gguf.probe_ids(tok), "verified_under": [transformers.__version__]})
    return d


def _edit(folder, **changes):
    rec = json.loads((folder / lj_gguf.RECORD).read_text())
    rec.update(changes)
    (folder / lj_gguf.RECORD).write_text(json.dumps(rec))
    return rec


def test_current_folder_is_reused(folder):
    assert lj_gguf.why_stale(folder) is None and lj_gguf.current(folder)


def test_folder_without_record_is_stale(folder):
    (folder / lj_gguf.RECORD).unlink()
    assert "without a conversion record" in lj_gguf.why_stale(folder)


def test_other_converter_is_stale(folder):
    _edit(folder, converter=1)
    assert lj_gguf.why_stale(folder) == f"made by conversion 1, not {lj_gguf.CONVERTER}"


def test_other_transformers_same_ids_is_reused_and_recorded(folder):
    _edit(folder, transformers="0.0.1", verified_under=["0.0.1"])
    assert lj_gguf.why_stale(folder) is None
    assert lj_gguf.read_record(folder)["verified_under"] == ["0.0.1", transformers.__version__]


def test_other_transformers_other_ids_is_stale(folder):
    rec = _edit(folder, transformers="0.0.1", verified_under=["0.0.1"])
    _edit(folder, probe_ids=[ids[1:] for ids in rec["probe_ids"]])  # made where the BOS was dropped
    why = lj_gguf.why_stale(folder)
    assert why.startswith("made under transformers 0.0.1, whose token ids") and transformers.__version__ in why


def test_stale_folder_is_converted_again_not_reused(folder, tmp_path, monkeypatch):
    """gguf_checkpoint converts a stale folder again (saying why), and returns a current one as it is."""
    header = lj_gguf.Header(tmp_path / "m.gguf", "gemma3", "m", None, 4)
    monkeypatch.setattr(lj_gguf, "read_header", lambda path: header)
    monkeypatch.setattr(lj_gguf, "check_architecture", lambda h: None)
    monkeypatch.setattr(lj_gguf, "sha256_file", lambda path, what="": "0123456789abcdef" + "0" * 48)
    monkeypatch.setenv("LOGITJUDGE_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(lj_gguf, "convert", lambda h, target, source_note, why: calls.append(why) or target)
    assert lj_gguf.gguf_checkpoint(header.path) == folder and calls == []
    _edit(folder, converter=1)
    assert lj_gguf.gguf_checkpoint(header.path) == folder
    assert calls == [f"made by conversion 1, not {lj_gguf.CONVERTER}"]
