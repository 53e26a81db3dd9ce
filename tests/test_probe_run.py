"""The probe run: the scores' own rails (one checkpoint class and its lock, resumable, a finished table
reused), per-item random orders, bad input refused before the model loads, the report page."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import fresh_tiny_lm

from logitjudge import balanced, builtin_rubric
from logitjudge.checkpoint import Checkpoint
from logitjudge.cli import main
from logitjudge.errors import ProbeError
from logitjudge.items import Item
from logitjudge.orderings import parse
from logitjudge.probing import run as run_mod
from logitjudge.probing.run import ProbeRun
from logitjudge.probing.table import ProbeTable

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
    full = ProbeRun(lm, _items(), rub, orders, **kw).execute()
    out = tmp_path / "p.npz"
    real = run_mod.probe_item
    calls = {"n": 0}

    def dying(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(run_mod, "probe_item", dying)
    with pytest.raises(KeyboardInterrupt):
        ProbeRun(lm, _items(), rub, orders, out=out, **kw).execute()
    partial = tmp_path / "p.npz.partial.jsonl"  # the scores' checkpoint, lock released
    assert partial.exists() and not (tmp_path / "p.npz.lock").exists()
    fp = ProbeRun(lm, _items(), rub, orders, **kw).fingerprint
    assert len(Checkpoint(out, fp, codec=run_mod.ARRAYS).done) == 2
    redone = []

    def counting(*a, **k):
        redone.append(1)
        return real(*a, **k)

    monkeypatch.setattr(run_mod, "probe_item", counting)
    resumed = ProbeRun(lm, _items(), rub, orders, out=out, **kw).execute()
    assert len(redone) == 2  # only the two unfinished items ran again
    assert not partial.exists()
    loaded = ProbeTable.load(out)
    for name in ("probs", "lens_logprobs", "attention", "hidden", "clean", "patched", "pairs", "site_kind"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(full, name))
        np.testing.assert_array_equal(getattr(resumed, name), getattr(full, name))
    assert loaded.item_ids == full.item_ids and loaded.labels == ["1", "2", "3", "4", "5"]
    assert loaded.meta["prefix_mode"] == "native" and loaded.meta["kernels"]  # the run's meta, as a score table's
    redone.clear()  # a finished table of the same settings is reused, not probed again
    again = ProbeRun(lm, _items(), rub, orders, out=out, **kw).execute()
    assert not redone and np.array_equal(again.patched, full.patched)
    redone.clear()  # other settings: probed anew
    ProbeRun(lm, _items(), rub, orders, out=out, **dict(kw, hidden_layers=[1])).execute()
    assert len(redone) == len(_items())


def test_probe_with_per_item_random_orders_in_every_mode(lm, tmp_path):
    """random:K draws each item's own orders; every backend gives the same arrays (patching, lens, attention),
    and the report page reads them."""
    from logitjudge.engine import Engine
    from logitjudge.judge import MODES
    from logitjudge.report.probe import write_probe_report

    rub = builtin_rubric("default")
    orders = parse("random:4", 5, seed=1, n_items=2)  # (I, K, n)
    kw = dict(probes=("lens", "attention", "patch"), kinds=("resid",), pairs="canonical", progress=False)
    tabs = {m: ProbeRun(lm, _items()[:2], rub, orders, engine=Engine(lm, prefix_mode=m), **kw).execute()
            for m in MODES}
    ref = tabs["plain"]
    assert ref.option_orders.shape == (2, 4, 5) and ref.patched.shape == (2, 3, 4, 5)
    for m, t in tabs.items():
        assert t.meta["prefix_mode"] == m
        np.testing.assert_allclose(t.probs, ref.probs, atol=1e-5)
        np.testing.assert_allclose(t.patched, ref.patched, atol=1e-5)
        np.testing.assert_allclose(t.lens_logprobs, ref.lens_logprobs, atol=1e-4)
        np.testing.assert_allclose(t.attention, ref.attention, atol=1e-5)
    many = parse("random:7", 5, seed=2, n_items=4)  # enough prompts for the chi-square per position
    tab = ProbeRun(lm, _items(), rub, many, **dict(kw, probes=("lens", "attention"))).execute()
    assert write_probe_report(tab, tmp_path / "rep", n_boot=20, rng=0).exists()
    mixed = orders.copy()
    mixed[0, 1] = mixed[0, 0][::-1]  # item 0 has a reverse pair, item 1 none
    with pytest.raises(ProbeError, match="different reverse pairs"):
        ProbeRun(lm, _items()[:2], rub, mixed, **dict(kw, pairs="reverse"))


def test_probe_subset_and_report(lm, tmp_path):
    from logitjudge.report.probe import write_probe_report

    tab = ProbeRun(lm, _items()[:3], builtin_rubric("default"), balanced(5), probes=("lens", "patch"),
                   kinds=("resid", "attn"), pairs="canonical", progress=False).execute()
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
    (["--criterion", "Nope"], "is not one of the rubric's criteria"),
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


def test_lj_probe_is_the_probe_command_in_python(lm, tmp_path):
    """lj.probe builds the spec `logitjudge probe` builds and probes through the same run: its table equals a
    ProbeRun's on the same items, and a bad setting is refused naming the keyword, before anything runs."""
    import logitjudge as lj

    rows = [{"id": it.id, "text": it.text} for it in _items()[:2]]
    res = lj.probe(lm, rows, probes=("lens", "patch"), sites=("resid", "attn"), pairs="canonical",
                   out=tmp_path / "p.npz", report=tmp_path / "page", n_boot=20, progress=False)
    want = ProbeRun(lm, _items()[:2], builtin_rubric("default"), balanced(5), probes=("lens", "patch"),
                    kinds=("resid", "attn"), pairs="canonical", progress=False).execute()
    np.testing.assert_array_equal(res.table.probs, want.probs)
    np.testing.assert_array_equal(res.table.patched, want.patched)
    assert res.path == tmp_path / "p.npz" and ProbeTable.load(res.path).item_ids == ["t0", "t1"]
    assert res.page == tmp_path / "page" / "probe.html" and res.page.exists()
    with pytest.raises(Exception, match=r"lj\.probe\(probes=\.\.\.\)"):
        lj.probe(lm, rows, probes=["lens", "heads"])
