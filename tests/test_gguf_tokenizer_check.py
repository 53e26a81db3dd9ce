"""A GGUF judge's tokenizer is checked against the GGUF's own vocabulary (logitjudge.tokens.check_pieces): its
word pieces, read from ``tokenizer.ggml.tokens``, must each encode to exactly their one id, at conversion (before
the weights are de-quantised) and on every load of the converted folder. transformers 5.17 converts Gemma-3's GGUF
tokenizer without its merges ("Hello world" in 11 tokens) and decodes every text back exactly; a tokenizer built
the same way here (the tiny one without its merges) is refused in one line, the right ones pass."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import transformers
from conftest import tiny_tokenizer

from logitjudge import gguf as lj_gguf
from logitjudge import models, tokens
from logitjudge.judges import BUILTINS, assemble, part_paths
from logitjudge.tokens import TokenizerError, check_pieces, sample_words

SPECIAL, BYTE, UNUSED = 3, 6, 5  # llama.cpp's token types


def _rebuilt(tok, edit):
    """``tok`` with its tokenizer.json edited (``edit(dict)``), as a transformers fast tokenizer."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = json.loads(tok.backend_tokenizer.to_str())
    edit(spec)
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), bos_token="<bos>",
                                   eos_token="<eos>", unk_token="<unk>", pad_token="<pad>")


def merge_less(tok):
    """The same vocabulary without its merges: every word split into characters, as transformers 5.17 reads
    Gemma-3's GGUF tokenizer once saved."""
    return _rebuilt(tok, lambda spec: spec["model"].update(merges=[]))


def write_gguf(path: Path, tok, *, model: str = "llama") -> Path:
    """A tiny GGUF of ``tok``'s vocabulary (sentencepiece-style ``llama`` with scores) that transformers can read
    a tokenizer from; "<" pieces typed control, one piece typed byte and one unused (neither a word)."""
    from gguf import GGUFWriter

    vocab = [t for t, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1])]
    types = [SPECIAL if t.startswith("<") else 1 for t in vocab]
    types[vocab.index("▁the")], types[vocab.index("at")] = UNUSED, BYTE
    w = GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_head_count(2)
    w.add_feed_forward_length(16)
    w.add_tokenizer_model(model)
    w.add_token_list(vocab)
    w.add_token_scores([-float(i) for i in range(len(vocab))])
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_tensor("token_embd.weight", np.zeros((len(vocab), 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture()
def gguf_file(tmp_path, tok):
    return write_gguf(tmp_path / "tiny.gguf", tok)


def test_read_vocabulary_keeps_the_files_ordinary_word_pieces(gguf_file, tok):
    vocab = lj_gguf.read_vocabulary(gguf_file)
    ids = tok.get_vocab()
    assert vocab["model"] == "llama" and vocab["words"]
    assert all(ids[piece] == i and re.fullmatch("▁?[A-Za-z]{2,16}", piece) for piece, i in vocab["words"])
    kept = {piece for piece, _ in vocab["words"]}
    assert "▁cat" in kept and "▁the" not in kept and "at" not in kept  # unused and byte pieces are no words
    assert not any(p.startswith("<") for p in kept)


def test_sample_words_takes_word_starts_spread_over_the_ids():
    words = [(f"▁w{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}", i) for i in range(1000)] + [("inner", 1000)]
    sample = sample_words({"model": "llama", "words": words}, n=10)
    assert len(sample) == 10 and all(t.startswith(" w") for t, _ in sample)
    assert [i for _, i in sample] == list(range(0, 1000, 100))
    byte_level = sample_words({"model": "gpt2", "words": [("Ġworld", 5), ("world", 6), ("▁x", 7)]})
    assert byte_level == [[" world", 5]]
    # a vocabulary of no known marker: its bare pieces; a marked piece there is a letter (Maltese Ġ), left out
    assert sample_words({"model": "bert", "words": [("world", 3), ("Ġenerali", 4)]}) == [["world", 3]]


def test_the_right_tokenizer_passes(gguf_file, tok):
    words = sample_words(lj_gguf.read_vocabulary(gguf_file))
    assert len(words) > 20
    check_pieces(tok, words, what="tiny.gguf")


def test_a_tokenizer_transformers_converts_from_the_gguf_passes(gguf_file):
    """The real conversion route (transformers' GGUF tokenizer loader, Llama's Metaspace that puts a space before
    every text) on the tiny file: no false alarm."""
    from transformers import AutoTokenizer

    converted = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    check_pieces(converted, sample_words(lj_gguf.read_vocabulary(gguf_file)), what="tiny.gguf")


def test_a_tokenizer_that_puts_a_space_first_passes(gguf_file, tok):
    """Phi-3's convention (a normaliser prepends the marker to every text): the word's segmentation is right."""
    def prepend(spec):
        spec["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
        spec["pre_tokenizer"] = None

    check_pieces(_rebuilt(tok, prepend), sample_words(lj_gguf.read_vocabulary(gguf_file)), what="tiny.gguf")


def test_a_merge_less_tokenizer_is_refused_in_one_line(gguf_file, tok):
    broken = merge_less(tok)
    ids = broken(" the cat", add_special_tokens=False)["input_ids"]
    assert len(ids) == 8 and broken.decode(ids) == " the cat"  # one token a character: a round trip cannot see it
    words = sample_words(lj_gguf.read_vocabulary(gguf_file))
    with pytest.raises(TokenizerError) as e:
        check_pieces(broken, words, what="tiny.gguf")
    line = str(e.value)
    assert "\n" not in line and line.startswith("tiny.gguf: transformers ")
    assert f"transformers {transformers.__version__} tokenizes it wrongly ({len(words)} of {len(words)}" in line
    assert "into" in line and "tokens ['▁', " in line
    assert 'pip install "transformers>=5.19"' in line and f"lock pins {tokens.LOCKED_TRANSFORMERS}" in line


def test_a_few_unreachable_pieces_are_tolerated_more_are_not(gguf_file, tok):
    """A vocabulary may hold a piece its own merges never produce (Gemma-3: ' YYYY', ' yyyy', ' diffformul')."""
    words = sample_words(lj_gguf.read_vocabulary(gguf_file))
    off = [[t, i + 1 if k <= tokens.TOLERATED else i] for k, (t, i) in enumerate(words)]  # 1 + TOLERATED wrong
    check_pieces(tok, off[1:], what="tiny.gguf")
    with pytest.raises(TokenizerError, match=f"{tokens.TOLERATED + 1} of {len(off)}"):
        check_pieces(tok, off, what="tiny.gguf")


def test_conversion_refuses_before_the_weights_are_dequantised(gguf_file, tok, tmp_path, monkeypatch):
    """transformers handing back a merge-less tokenizer for the GGUF: refused, the model never loaded."""
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: merge_less(tok))

    def no_model(*a, **k):
        raise AssertionError("the weights were loaded before the tokenizer was checked")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_model)
    header = lj_gguf.Header(gguf_file, "llama", "tiny", None, 4)
    with pytest.raises(TokenizerError, match="tiny.gguf: transformers .* tokenizes it wrongly"):
        lj_gguf._write(header, tmp_path / "out", "tiny.gguf")


def test_a_conversions_reads_of_the_gguf_share_one_parse(gguf_file, monkeypatch):
    """Inside :func:`logitjudge.gguf_once.one_reader` transformers' reads of one GGUF (tokenizer, config, weights)
    parse its metadata once and read the same tokenizer; gguf's own ``GGUFReader`` is back afterwards."""
    import gguf
    from transformers import AutoTokenizer

    from logitjudge.gguf_once import one_reader

    made = []

    class Counting(gguf.GGUFReader):
        def __init__(self, path, mode="r"):
            made.append(path)
            super().__init__(path, mode)

    monkeypatch.setattr(gguf, "GGUFReader", Counting)
    load = lambda: AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)  # noqa: E731
    alone = load()
    per_load = len(made)  # transformers' legacy loader: one reader per read of the file
    with one_reader():
        shared = [load(), load()]
        assert gguf.GGUFReader(str(gguf_file)) is gguf.GGUFReader(gguf_file)
    assert len(made) - per_load == min(per_load, 1), (per_load, made)
    assert all(t.get_vocab() == alone.get_vocab() and t("the cat")["input_ids"] == alone("the cat")["input_ids"]
               for t in shared)
    assert gguf.GGUFReader is Counting


@pytest.fixture()
def converted(tmp_path, tok, gguf_file):
    """A folder as a conversion leaves it: the tokenizer, stand-in weights, a record with the GGUF's words."""
    d = tmp_path / "models" / "gguf-0123456789abcdef"
    tok.save_pretrained(d)
    (d / "config.json").write_text(json.dumps({"model_type": "gemma3_text"}))
    (d / "model.safetensors").write_bytes(b"")
    words = sample_words(lj_gguf.read_vocabulary(gguf_file))
    lj_gguf._write_record(d, {"converter": lj_gguf.CONVERTER, "tokens": {"add_bos": True, "bos_id": 1},
                              "words": words, "verified_under": [transformers.__version__]})
    return d


def test_load_checks_the_folder_against_its_recorded_words(converted, tok):
    assert models._tokenizer(str(converted), None, "tiny")("the cat")["input_ids"]
    merge_less(tok).save_pretrained(converted)  # a transformers that reads tokenizer.json wrongly, in effect
    with pytest.raises(TokenizerError, match="the tokenizer of 'tiny': transformers .* tokenizes it wrongly"):
        models._tokenizer(str(converted), None, "tiny")


def test_a_folder_of_the_previous_conversion_is_converted_again(converted):
    """Conversion 2 recorded no words: a folder it made under transformers 5.17 holds a merge-less tokenizer that
    every transformers reads the same way, so its probe ids still match; it is converted again, and checked."""
    rec = tokens.read_record(converted)
    (converted / tokens.RECORD).write_text(json.dumps({**rec, "converter": 2}))
    assert lj_gguf.why_stale(converted) == f"made by conversion 2, not {lj_gguf.CONVERTER}"


def test_locked_transformers_is_the_locks():
    lock = (Path(__file__).resolve().parents[1] / "requirements" / "lock.txt").read_text()
    assert f"\ntransformers=={tokens.LOCKED_TRANSFORMERS}\n" in lock


@pytest.mark.slow
@pytest.mark.parametrize("alias", list(BUILTINS))
def test_real_gguf_tokenizers_pass_and_their_merge_less_copy_is_refused(alias, tmp_path):
    """The built-in judges' GGUFs, their tokenizers as this transformers converts them: no false alarm; the same
    tokenizer without its merges (transformers 5.17's Gemma-3) refused."""
    from transformers import AutoTokenizer

    try:
        part_paths(BUILTINS[alias])
    except lj_gguf.GGUFError as e:
        pytest.skip(str(e))
    path = assemble(BUILTINS[alias], tmp_path / f"{alias}.gguf")
    words = sample_words(lj_gguf.read_vocabulary(path))
    converted = AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    check_pieces(converted, words, what=path.name)
    with pytest.raises(TokenizerError, match=f"{len(words)} of {len(words)}"):
        check_pieces(merge_less(converted), words, what=path.name)
