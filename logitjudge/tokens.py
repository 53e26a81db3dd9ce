"""A judge's token convention: whether its prompts start with a BOS token, and which one, read from the judge's
own files rather than from what the installed transformers happens to do with them.

A model is trained with one convention and scored under another gives other numbers: Gemma without its leading
``<bos>`` moves about 0.1 of probability onto the first option. The convention comes from, in order:

1. the conversion record of a folder logitjudge converted from a GGUF (:data:`RECORD`): the GGUF's own
   ``tokenizer.ggml.add_bos_token`` / ``add_eos_token`` and BOS/EOS ids, whatever transformers converted it;
2. ``add_bos_token`` in the folder's ``tokenizer_config.json`` where it is set explicitly;
3. else the tokenizer's own post-processor (``tokenizer.json``), observed by encoding a probe text.

Every prompt is held to it as it is encoded (:func:`first_tokens`): exactly one BOS first where the judge expects
one, none where it does not. A prompt that breaks it is mended where the fix is unambiguous (a missing BOS put
first, a doubled one dropped) and the mend is returned for the table's meta; otherwise it is refused in one line
naming the judge, the token and the fix, never scored as it is.
"""

from __future__ import annotations

import json
import weakref
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from .errors import LogitJudgeError

RECORD = "logitjudge-conversion.json"  # written beside a converted GGUF's config.json (logitjudge.gguf)
PROBE = "Hello world"  # encoded with the tokenizer's special tokens to observe what its post-processor adds


class TokenConventionError(LogitJudgeError, ValueError):
    """A prompt whose first tokens break the judge's convention in a way that cannot be mended unambiguously."""


@dataclass(frozen=True)
class Convention:
    """What the judge expects around a prompt. ``add_bos``: exactly one ``bos`` (id ``bos_id``) first;
    ``add_eos``: the tokenizer appends ``eos`` to what it encodes (never part of a label: :func:`first_tokens`
    drops it); ``source``: where ``add_bos`` was read (a person checks it there)."""

    add_bos: bool
    bos_id: int | None
    bos: str | None
    add_eos: bool
    eos_id: int | None
    eos: str | None
    source: str
    judge: str = "the judge"  # how a refusal names the judge (its folder's or id's last part)

    def meta(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "judge"}  # the meta names the model already


_CONVENTIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> its Convention


def convention(tokenizer) -> Convention:
    """The judge's convention for ``tokenizer`` (read once per tokenizer object)."""
    try:
        return _CONVENTIONS[tokenizer]
    except (KeyError, TypeError):
        pass
    conv = _read(tokenizer)
    try:
        _CONVENTIONS[tokenizer] = conv
    except TypeError:  # a tokenizer that cannot be weakly referenced: read again next time
        pass
    return conv


def read_record(folder) -> dict | None:
    """The conversion record of a folder logitjudge converted (None: none, or unreadable)."""
    try:
        return json.loads((Path(folder) / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return None


def observed(tokenizer) -> tuple[bool, bool]:
    """(BOS first, EOS last) in what the tokenizer's post-processor makes of :data:`PROBE`."""
    ids = list(tokenizer(PROBE, add_special_tokens=True)["input_ids"])
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    return bool(ids) and bos is not None and ids[0] == bos, bool(ids) and eos is not None and ids[-1] == eos


def _read(tokenizer) -> Convention:
    name = getattr(tokenizer, "name_or_path", "") or ""
    return replace(_read_flags(tokenizer), judge=f"judge {Path(name).name!r}" if name else "the judge")


def _read_flags(tokenizer) -> Convention:
    bos_id, eos_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    bos, eos = tokenizer.bos_token, tokenizer.eos_token
    record = read_record(getattr(tokenizer, "name_or_path", "") or ".")
    flags = (record or {}).get("tokens") or {}
    if flags.get("add_bos") is not None:
        bos_id = flags.get("bos_id", bos_id)
        bos = tokenizer.convert_ids_to_tokens(bos_id) if bos_id is not None else bos
        eos_id = flags.get("eos_id", eos_id)
        eos = tokenizer.convert_ids_to_tokens(eos_id) if eos_id is not None else eos
        return Convention(bool(flags["add_bos"]), bos_id, bos, bool(flags.get("add_eos")), eos_id, eos,
                          f"the GGUF's tokenizer.ggml.add_bos_token ({RECORD})")
    seen_bos, seen_eos = observed(tokenizer)
    config = tokenizer_config(getattr(tokenizer, "name_or_path", "") or "")
    if isinstance(config.get("add_bos_token"), bool):
        add_eos = config.get("add_eos_token")
        return Convention(config["add_bos_token"], bos_id, bos, add_eos if isinstance(add_eos, bool) else seen_eos,
                          eos_id, eos, "tokenizer_config.json add_bos_token")
    return Convention(seen_bos, bos_id, bos, seen_eos, eos_id, eos, "the tokenizer's post-processor")


def tokenizer_config(name: str) -> dict:
    """The judge's tokenizer_config.json as its files hold it: a folder's, or a hub id's in the local cache (no
    download); {} where there is none. Read directly: transformers keeps ``add_bos_token`` from it in some
    versions and drops it in others."""
    path = Path(name) / "tokenizer_config.json"
    if not path.is_file() and name and not Path(name).exists():
        try:
            from huggingface_hub import try_to_load_from_cache

            hit = try_to_load_from_cache(name, "tokenizer_config.json")
            path = Path(hit) if isinstance(hit, str) else path
        except Exception:  # noqa: BLE001 - not a hub id, or no cache: the tokenizer's own behaviour decides
            return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def first_tokens(ids: list, offsets: list, conv: Convention, *, where: str = "prompt") -> tuple[list, list, str]:
    """``ids`` / ``offsets`` (one encoding of a prompt and a label) held to ``conv``: a missing BOS put first, a
    doubled one dropped, an appended EOS dropped (a label is not followed by the end of the text). Returns the ids,
    the offsets and what was mended ("" if nothing); a BOS where the judge expects none, or a BOS expected but
    unnamed, is refused (:class:`TokenConventionError`)."""
    ids, offsets, mends = list(ids), list(offsets), []
    if conv.add_eos and conv.eos_id is not None and ids and ids[-1] == conv.eos_id and tuple(offsets[-1]) == (0, 0):
        ids, offsets = ids[:-1], offsets[:-1]
    n = 0
    while conv.bos_id is not None and n < len(ids) and ids[n] == conv.bos_id:
        n += 1
    if conv.add_bos:
        if conv.bos_id is None:
            raise TokenConventionError(f"{where}: {conv.judge} expects a BOS token first ({conv.source}) but its "
                                       "tokenizer names none; give the tokenizer its bos_token")
        if n == 0:
            ids, offsets = [conv.bos_id, *ids], [(0, 0), *offsets]
            mends.append(f"put {conv.bos} (id {conv.bos_id}) first: the tokenizer or template gave none")
        elif n > 1:
            ids, offsets = ids[n - 1:], offsets[n - 1:]
            mends.append(f"dropped {n - 1} extra {conv.bos} (id {conv.bos_id}): template and tokenizer both add one")
    elif n:
        raise TokenConventionError(f"{where}: the prompt starts with {conv.bos} (id {conv.bos_id}), but "
                                   f"{conv.judge} expects no BOS token ({conv.source}); remove it from the prompt "
                                   "template or the chat template")
    return ids, offsets, "; ".join(mends)


# The vocabulary check: a tokenizer converted from a GGUF must encode the file's own word pieces to the file's ids.
# transformers 5.17 converts Gemma-3's GGUF tokenizer wrongly ("Hello world" in 4 tokens, 11 once saved and read
# back: its merges lost) yet decodes every text back exactly, so a round trip cannot see it; a piece's id can.
LOCKED_TRANSFORMERS = "5.19.0"  # requirements/lock.txt's (tests/test_gguf_tokenizer_check.py holds them equal)
MARKERS = {"llama": "\u2581", "gpt2": "\u0120"}  # the space marker of a sentencepiece / byte-level BPE vocabulary
SAMPLE = 128  # pieces checked: a per-character or merge-less tokenizer splits every one of them, 5.17's Gemma 91%
# split pieces let pass: a vocabulary may hold pieces its own merges never produce (Gemma-3's ' YYYY', ' yyyy',
# ' diffformul': 3 of its 139k word pieces, under the right tokenizer too); Qwen2.5's 68k word pieces hold none
TOLERATED = 2


class TokenizerError(LogitJudgeError, RuntimeError):
    """A tokenizer that does not encode its judge's own vocabulary to its ids: its scores would be wrong."""


def sample_words(vocab: dict, n: int = SAMPLE) -> list[list]:
    """[text, id] of up to ``n`` word pieces of ``vocab`` (:func:`logitjudge.gguf.read_vocabulary`), spread evenly
    over the ids: the pieces that start a word (its model's space marker, written as a space), or, in a
    vocabulary of no known marker, its bare pieces. A piece inside a word is left out: a tokenizer that puts a
    space before a text (Llama's, Phi-3's) cannot give it at a text's start, rightly."""
    marker = MARKERS.get(vocab.get("model"))
    if marker:
        out = [[" " + piece[1:], i] for piece, i in vocab["words"] if piece.startswith(marker)]
    else:
        out = [[piece, i] for piece, i in vocab["words"] if piece[0] not in "\u2581\u0120"]
    return out[::max(1, len(out) // n)][:n]


def check_pieces(tokenizer, words: list, *, what: str) -> None:
    """Refuse (:class:`TokenizerError`, one line) a tokenizer that does not encode each [text, id] of ``words``
    to exactly that one id (:data:`TOLERATED` excepted): what is wrong, an example, the transformers version and
    the fix. A text " word" passes as " word" or as "word": whether a tokenizer puts a space before a text is a
    convention (transformers picks it by architecture), not the word's segmentation."""
    if not words:
        return
    texts = [t for t, _ in words]
    encoded = tokenizer(texts + [t[1:] if t.startswith(" ") else t for t in texts],
                        add_special_tokens=False)["input_ids"]
    n = len(words)
    bad = [(t, i, list(encoded[k])) for k, (t, i) in enumerate(words)
           if [i] not in (list(encoded[k]), list(encoded[n + k]))]
    if len(bad) <= TOLERATED:
        return
    import transformers

    text, i, ids = bad[0]
    pieces = tokenizer.convert_ids_to_tokens(ids[:8])
    fix = f'pip install "transformers>={LOCKED_TRANSFORMERS.rsplit(".", 1)[0]}"'
    raise TokenizerError(
        f"{what}: transformers {transformers.__version__} tokenizes it wrongly ({len(bad)} of {len(words)} of its "
        f"own single-token words split, e.g. {text!r} (id {i}) into {len(ids)} tokens {pieces}); its scores would "
        f"be wrong. Install a transformers that reads it right: {fix} (logitjudge's lock pins {LOCKED_TRANSFORMERS})")
