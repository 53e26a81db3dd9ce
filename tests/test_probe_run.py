"""The probe run: resumable like score, bad input refused before the model loads, the report page."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import fresh_tiny_lm

from logitjudge import balanced, builtin_rubric
from logitjudge.cli import main
from logitjudge.items import Item
from logitjudge.probe import run as run_mod
from logitjudge.probe.hooks import ProbeError
from logitjudge.probe.table import ProbeTable

TEXTS = ["Once upon a time a cat sat on the mat.", "The dog barked at the moon while the sun rose slowly.",
         "The article says that the economy grew by three percent.", "The text is clear and correct."]


@pytest.fixture(scope="module")
def lm():
    return fresh_tiny_lm()


def _items():
    return [Item(f"t{i}", t) for i, t in enumerate(TEXTS)]


def test_resumed_probe_equals_uninterrupted(lm, tmp_path, monkeypatch):
    rub, orders = builtin_rubric("default"), balanced(5)
    kw = dict(probes=("lens", "attention", "patch", "linear"), hidden_layers=[1, 3], progress=False)
    full = run_mod.probe(lm, _items(), rub, orders, **kw)
    out = tmp_path / "p.npz"
    real = run_mod.capture_item
    calls = {"n": 0}

    def dying(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(run_mod, "capture_item", dying)
    with pytest.raises(KeyboardInterrupt):
        run_mod.probe(lm, _items(), rub, orders, out=out, **kw)
    assert len(list((tmp_path / "p.npz.partial").glob("item-*.npz"))) == 2
    redone = []

    def counting(*a, **k):
        redone.append(1)
        return real(*a, **k)

    monkeypatch.setattr(run_mod, "capture_item", counting)
    resumed = run_mod.probe(lm, _items(), rub, orders, out=out, **kw)
    assert len(redone) == 2  # only the two unfinished items ran again
    assert not (tmp_path / "p.npz.partial").exists()
    loaded = ProbeTable.load(out)
    for name in ("probs", "lens_logprobs", "attention", "hidden", "clean", "patched", "pairs", "site_kind"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(full, name))
        np.testing.assert_array_equal(getattr(resumed, name), getattr(full, name))
    assert loaded.item_ids == full.item_ids and loaded.labels == ["1", "2", "3", "4", "5"]
    redone.clear()  # a finished table of the same settings is reused, not probed again
    again = run_mod.probe(lm, _items(), rub, orders, out=out, **kw)
    assert not redone and np.array_equal(again.patched, full.patched)
    redone.clear()  # other settings: probed anew
    run_mod.probe(lm, _items(), rub, orders, out=out, **dict(kw, hidden_layers=[1]))
    assert len(redone) == len(_items())
    with pytest.raises(ProbeError, match="other settings"):
        (tmp_path / "q.npz.partial").mkdir()
        (tmp_path / "q.npz.partial" / "fingerprint").write_text("something else")
        run_mod.probe(lm, _items(), rub, orders, out=tmp_path / "q.npz", **kw)


def test_probe_subset_and_report(lm, tmp_path):
    from logitjudge.report.probe import write_probe_report

    tab = run_mod.probe(lm, _items()[:3], builtin_rubric("default"), balanced(5), probes=("lens", "patch"),
                        kinds=("resid", "attn"), pairs="canonical", progress=False)
    assert not tab.has("attention") and not tab.has("hidden")
    assert tab.patched.shape == (3, 9, 2 * 4, 5) and tab.pairs[:, 0].tolist() == [0] * 9
    np.testing.assert_allclose(tab.probs, tab.clean, atol=1e-5)  # capture run and patch run agree
    page = write_probe_report(tab, tmp_path / "rep", n_boot=50, rng=0)
    assert page.exists() and (tmp_path / "rep" / "probe_lens.png").exists()
    assert not (tmp_path / "rep" / "probe_attention.png").exists()
    res = json.loads((tmp_path / "rep" / "probe.json").read_text())
    assert len(res["lens"]["pvalue"]) == 4 and len(res["patch"]["names"]) == 8
    assert "Logit lens" in (tmp_path / "rep" / "probe.md").read_text()


@pytest.mark.parametrize("argv,msg", [
    (["--orderings", "fixed:2"], "fixed orderings"),
    (["--probes", "lens,heads"], "unknown probes"),
    (["--sites", "resid,ffn"], "unknown patch sites"),
    (["--criterion", "Nope"], "is not in the rubric"),
])
def test_cli_refuses_bad_input_before_loading(tmp_path, capsys, monkeypatch, argv, msg):
    import logitjudge.models as models

    def no_load(*a, **k):
        raise AssertionError("the model must not load")

    monkeypatch.setattr(models, "load_model", no_load)
    texts = tmp_path / "t.jsonl"
    texts.write_text(json.dumps({"id": "a", "text": "hello"}) + "\n")
    rc = main(["probe", "--texts", str(texts), "--out", str(tmp_path / "p.npz"), *argv])
    assert rc == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1
