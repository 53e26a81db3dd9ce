"""A judge's token convention (logitjudge.tokens): one BOS first where the judge expects one, none where it does
not, read from its files; a prompt that breaks it is mended (and the mend recorded) or refused, never scored as
it is. Tokenizers in the styles of Gemma-3, Llama, Qwen and a chat template, built small here."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import fresh_tiny_lm, tiny_tokenizer

from logitjudge.items import Item
from logitjudge.prompts import encode_prompt, load_template, wrap_chat
from logitjudge.requests import RequestPlan, token_meta
from logitjudge.rubric import builtin_rubric
from logitjudge.runs import score
from logitjudge.tokens import RECORD, TokenConventionError, convention, first_tokens

GEMMA_CHAT = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n"
              "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
NO_BOS_CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
               "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _saved(tmp_path, tok, *, config: dict | None = None, record: dict | None = None):
    """``tok`` saved into a folder (with tokenizer_config.json keys and a conversion record) and loaded back, as
    a judge's tokenizer is."""
    from transformers import AutoTokenizer

    tok.save_pretrained(tmp_path)
    if config:
        path = tmp_path / "tokenizer_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    if record:
        (tmp_path / RECORD).write_text(json.dumps(record))
    return AutoTokenizer.from_pretrained(str(tmp_path))


def _no_bos_post_processor(tok):
    from tokenizers import processors

    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B")
    return tok


def _encode(tok, prompt="Text: a story.\nScore: ", *, add_special=True):
    return encode_prompt(tok, prompt, ["1", "5"], add_special_tokens=add_special)


def test_gemma_style_gguf_record_puts_the_lost_bos_back(tmp_path):
    """A converted GGUF folder whose tokenizer lost <bos> (transformers 5.19) while the GGUF says add_bos_token:
    the record is the convention, the BOS goes first, and the mend is said."""
    tok = _saved(tmp_path, _no_bos_post_processor(tiny_tokenizer()),
                 record={"converter": 2, "tokens": {"add_bos": True, "add_eos": False, "bos_id": 1, "eos_id": 2}})
    assert tok("a")["input_ids"][0] != 1
    conv = convention(tok)
    assert conv.add_bos and conv.bos_id == 1 and RECORD in conv.source
    ep = _encode(tok)
    assert ep.prompt_ids[0] == 1 and ep.prompt_ids[1] != 1
    assert ep.mended.startswith("put <bos> (id 1) first")


def test_llama_style_config_flag_and_a_doubled_bos(tmp_path):
    """tokenizer_config.json's add_bos_token is the convention; a template whose text starts with the BOS as well
    as the tokenizer's gives two, and one is dropped."""
    tok = _saved(tmp_path, tiny_tokenizer(), config={"add_bos_token": True})
    conv = convention(tok)
    assert conv.add_bos and conv.source == "tokenizer_config.json add_bos_token"
    plain = _encode(tok)
    assert plain.prompt_ids[0] == 1 and plain.prompt_ids[1] != 1 and plain.mended == ""
    doubled = _encode(tok, "<bos>Text: a story.\nScore: ")
    assert doubled.prompt_ids[:2] != (1, 1) and doubled.prompt_ids[0] == 1
    assert doubled.mended.startswith("dropped 1 extra <bos>")


def test_qwen_style_expects_no_bos(tmp_path):
    """A judge without BOS (Qwen: add_bos_token false): nothing is added; a prompt that starts with its bos token
    anyway is refused in one line naming the token and the fix."""
    tok = _saved(tmp_path, _no_bos_post_processor(tiny_tokenizer()), config={"add_bos_token": False})
    assert not convention(tok).add_bos
    ep = _encode(tok)
    assert ep.prompt_ids[0] != 1 and ep.mended == ""
    with pytest.raises(TokenConventionError, match=r"starts with <bos> \(id 1\).*expects no BOS.*remove it"):
        _encode(tok, "<bos>Text: a story.\nScore: ")


def test_chat_template_gives_exactly_one_bos(tmp_path):
    """A chat template that writes {{ bos_token }}: the prompt is tokenized without the tokenizer's special
    tokens, so template and tokenizer give exactly one BOS; a chat template without it, on a judge that expects
    one, is mended."""
    tok = _saved(tmp_path, tiny_tokenizer(), config={"add_bos_token": True})
    tok.chat_template = GEMMA_CHAT
    ep = _encode(tok, wrap_chat(tok, "Rate it.", "Score: "), add_special=False)
    assert ep.prompt_ids[0] == 1 and ep.prompt_ids[1] != 1 and ep.mended == ""
    tok.chat_template = NO_BOS_CHAT
    ep = _encode(tok, wrap_chat(tok, "Rate it.", "Score: "), add_special=False)
    assert ep.prompt_ids[0] == 1 and ep.mended.startswith("put <bos>")


def test_expected_bos_without_a_bos_token_is_refused():
    from logitjudge.tokens import Convention

    conv = Convention(True, None, None, False, None, None, "tokenizer_config.json add_bos_token")
    with pytest.raises(TokenConventionError, match="expects a BOS token first.*names none"):
        first_tokens([5, 6], [(0, 1), (1, 2)], conv)


def test_an_appended_eos_is_not_part_of_a_label():
    from logitjudge.tokens import Convention

    conv = Convention(True, 1, "<bos>", True, 2, "<eos>", "test")
    ids, offsets, mend = first_tokens([1, 5, 6, 2], [(0, 0), (0, 1), (1, 2), (0, 0)], conv)
    assert ids == [1, 5, 6] and offsets[-1] == (1, 2) and mend == ""


def test_the_mend_reaches_the_table_meta(tmp_path):
    """A whole run on a judge whose tokenizer drops the BOS its record expects: every prompt scored with the BOS,
    the same numbers as the judge whose tokenizer adds it, and the table's meta says what was mended."""
    good = fresh_tiny_lm()
    broken = replace(good, tokenizer=_saved(tmp_path, _no_bos_post_processor(tiny_tokenizer()),
                                            record={"converter": 2, "tokens": {"add_bos": True, "bos_id": 1,
                                                                               "eos_id": 2}}))
    items = [Item("a", "A short story about a lighthouse."), Item("b", "Another text, with numbers 1 2 3.")]
    rubric, orders = builtin_rubric("default"), [[0, 1, 2, 3, 4], [4, 3, 2, 1, 0]]
    t_good = score(good, items, rubric, orders, progress=False)
    t_broken = score(broken, items, rubric, orders, progress=False)
    assert abs(t_good.probs - t_broken.probs).max() <= 1e-6
    assert t_good.meta["tokens"]["mended"] == [] and t_good.meta["tokens"]["add_bos"]
    assert t_broken.meta["tokens"]["mended"] and "put <bos> (id 1) first" in t_broken.meta["tokens"]["mended"][0]
    assert token_meta(RequestPlan(broken, load_template(None), rubric, items, orders))["bos_id"] == 1

