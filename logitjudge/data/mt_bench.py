"""MT-Bench (Zheng et al., 2023): 80 two-turn questions and the answers of the models present (LMSYS's
pre-generated answers of 31 models), for single-answer grading on 1-10. No human scores.

Files in ``<data>/mt_bench/``:

* ``question.jsonl``: ``question_id``, ``category``, ``turns`` (the 2 user messages);
* ``model_answer/<model>.jsonl`` (the file name is the model name): ``question_id``, ``model_id``, ``choices``
  (``[{"index": 0, "turns": [answer_1, answer_2]}]``);
* ``reference_answer/gpt-4.jsonl`` (read only with ``with_reference=True``): same fields as the answers.

Items: id = ``f"{question_id}/{model}"`` (turn 2: ``f"{question_id}/{model}/t2"``),
group = ``str(question_id)``, meta ``model``, ``model_id``, ``category``, ``question_id``, ``turn``.

* ``turn=1``: text = the turn-1 answer, context = the turn-1 question.
* ``turn=2``: text = the turn-2 answer, context = the first exchange and the second question::

      ### User:\\n{question_1}\\n\\n### Assistant:\\n{answer_1}\\n\\n### User:\\n{question_2}

* ``with_reference=True``: for math, reasoning and coding questions (the categories for which MT-Bench's
  judge uses a reference) the GPT-4 reference answer is added to the context in FastChat's layout, after the
  question for turn 1 (``[The Start of Reference Answer]`` ... ``[The End of Reference Answer]``) and before
  the conversation for turn 2 (both reference turns), and stored in ``meta["reference"]``.
* ``models=[...]``: only these models (file names without ``.jsonl``); default all, sorted by name.

Canonical order: by question id, then by model name. Answers are kept as they are, including the one empty
answer in the shipped files (llama-13b, question 127).
"""

from __future__ import annotations

from pathlib import Path

from ..items import Item
from ..rubric import builtin_rubric
from .base import DataError, Dataset, Origin, get, read_jsonl

NAME = "mt_bench"
MAIN_FILE = "question.jsonl"
MARKER = "model_answer"  # present in the data set's folder (lets data_dir point at it)
QUESTION_FIELDS = ("question_id", "category", "turns")
ANSWER_FIELDS = ("question_id", "model_id", "choices")
NEED_REFERENCE = ("math", "reasoning", "coding")  # FastChat llm_judge NEED_REF_CATS
CRITERION = "Rating"
SOURCE_URL = "https://github.com/lm-sys/FastChat/tree/main/fastchat/llm_judge"
ORIGIN = Origin("MT-Bench", f"{SOURCE_URL} (model answers: HF space lmsys/mt-bench, fetched by "
                "download_mt_bench_pregenerated.py)")
DESCRIPTION = ("MT-Bench: 80 two-turn questions x the models' answers, single-answer grading 1-10, "
               "no human scores")


def read_questions(path: Path, origin: Origin, n_turns: int) -> dict[int, dict]:
    """``{question_id: {"category", "turns"}}`` sorted by id; every question needs ``n_turns`` turns."""
    out: dict[int, dict] = {}
    for where, rec in read_jsonl(path, QUESTION_FIELDS, origin):
        qid = get(rec, "question_id", "int", where, origin)
        turns = get(rec, "turns", "list", where, origin)
        if len(turns) < n_turns or not all(isinstance(t, str) for t in turns):
            raise DataError(f"{where}: field 'turns' must be a list of at least {n_turns} strings (the user "
                            f"messages), got {len(turns)} entries. {origin.hint()}")
        if qid in out:
            raise DataError(f"{where}: question_id {qid} appears twice; ids must be unique. {origin.hint()}")
        out[qid] = {"category": get(rec, "category", "str", where, origin), "turns": turns}
    return dict(sorted(out.items()))


def answer_turns(rec: dict, where: str, origin: Origin, n_turns: int) -> list[str]:
    """The answer turns of a FastChat answer record (``choices[0]["turns"]``)."""
    ch = get(rec, "choices", "list", where, origin)
    turns = ch[0].get("turns") if ch and isinstance(ch[0], dict) else None
    if not isinstance(turns, list) or len(turns) < n_turns or not all(isinstance(t, str) for t in turns):
        raise DataError(f"{where}: field 'choices' must be [{{\"index\": 0, \"turns\": [answer, ...]}}] "
                        f"with at least {n_turns} string turn(s). {origin.hint()}")
    return turns


def read_answers(path: Path, origin: Origin, n_turns: int, questions: dict[int, dict], *,
                 fields=ANSWER_FIELDS, turns_of=None) -> dict[int, tuple]:
    """``{question_id: (turns, model_id)}`` from one answer file (FastChat layout; ``turns_of(rec, where)``
    reads the answer turns of a record in another layout, e.g. the legacy Vicuna table's ``text``)."""
    out: dict[int, tuple] = {}
    for where, rec in read_jsonl(path, fields, origin):
        qid = get(rec, "question_id", "int", where, origin)
        if qid not in questions:
            raise DataError(f"{where}: question_id {qid} is not in the question file. {origin.hint()}")
        if qid in out:
            raise DataError(f"{where}: a second answer to question {qid}; one answer per question. "
                            f"{origin.hint()}")
        turns = turns_of(rec, where) if turns_of else answer_turns(rec, where, origin, n_turns)
        out[qid] = (turns, get(rec, "model_id", "str", where, origin))
    return out


def read_references(path: Path, origin: Origin, n_turns: int, questions: dict[int, dict]) -> dict[int, list]:
    return {q: t for q, (t, _) in read_answers(path, origin, n_turns, questions).items()}


def choose_models(available: list[str], models, origin: Origin,
                  aliases: dict[str, str] | None = None) -> list[str]:
    """``available`` restricted to ``models`` (names, or ``aliases`` of them), in ``available`` order."""
    if models is None:
        return list(available)
    wanted = [models] if isinstance(models, str) else list(models)
    aliases = aliases or {}
    names = []
    for m in wanted:
        name = m if m in available else aliases.get(m)
        if name is None:
            raise DataError(f"unknown model {m!r} for {origin.name}; available: {available}")
        names.append(name)
    if not names:
        raise DataError(f"models=[] selects nothing; choose from {available}")
    keep = set(names)
    return [m for m in available if m in keep]


def reference_block(question: list[str], reference: list[str], turn: int) -> str:
    if turn == 1:
        return f"[The Start of Reference Answer]\n{reference[0]}\n[The End of Reference Answer]"
    return ("[The Start of Reference Answer]\n"
            f"### User:\n{question[0]}\n\n### Reference answer:\n{reference[0]}\n\n"
            f"### User:\n{question[1]}\n\n### Reference answer:\n{reference[1]}\n"
            "[The End of Reference Answer]")


def make_context(question: list[str], answer: list[str], turn: int, reference: list[str] | None) -> str:
    if turn == 1:
        ctx = question[0]
        return f"{ctx}\n\n{reference_block(question, reference, 1)}" if reference else ctx
    conv = f"### User:\n{question[0]}\n\n### Assistant:\n{answer[0]}\n\n### User:\n{question[1]}"
    return f"{reference_block(question, reference, 2)}\n\n{conv}" if reference else conv


def build_items(questions: dict[int, dict], answers: dict[str, dict[int, tuple]], models: list[str],
                turn: int, references: dict[int, list] | None) -> list[Item]:
    """Items by question, then model (the order of ``models``)."""
    items = []
    for qid, q in questions.items():
        ref = None
        if references is not None and q["category"] in NEED_REFERENCE:
            ref = references.get(qid)
        for m in models:
            if qid not in answers[m]:
                continue
            turns, model_id = answers[m][qid]
            meta = {"model": m, "model_id": model_id, "category": q["category"], "question_id": qid,
                    "turn": turn}
            if ref:
                meta["reference"] = ref[turn - 1]
            iid = f"{qid}/{m}" if turn == 1 else f"{qid}/{m}/t{turn}"
            items.append(Item(iid, turns[turn - 1], make_context(q["turns"], turns, turn, ref), str(qid), {},
                              meta))
    return items


def load(root: Path, *, models=None, turn: int = 1, with_reference: bool = False) -> Dataset:
    """MT-Bench answers from ``root`` (the ``mt_bench`` folder) for single-answer grading of one turn."""
    root = Path(root)
    if turn not in (1, 2) or isinstance(turn, bool):
        raise DataError(f"turn={turn!r}: MT-Bench has turns 1 and 2")
    questions = read_questions(root / MAIN_FILE, ORIGIN, 2)
    folder = root / "model_answer"
    files = {p.stem: p for p in sorted(folder.glob("*.jsonl"))}
    if not files:
        raise DataError(f"no model answers: {folder} has no <model>.jsonl files (fields "
                        f"{list(ANSWER_FIELDS)}). {ORIGIN.hint()}")
    chosen = choose_models(list(files), models, ORIGIN)
    answers = {m: read_answers(files[m], ORIGIN, turn, questions) for m in chosen}
    refs = None
    if with_reference:
        refs = read_references(root / "reference_answer" / "gpt-4.jsonl", ORIGIN, turn, questions)
    items = build_items(questions, answers, chosen, turn, refs)
    rubric = builtin_rubric("mt_bench")
    return Dataset(NAME, items, rubric, tuple(c.name for c in rubric.criteria), False, DESCRIPTION,
                   SOURCE_URL, str(root),
                   {"models": chosen, "turn": turn, "with_reference": with_reference})
