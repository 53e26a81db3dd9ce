"""Vicuna-Bench (LMSYS, March 2023): 80 single-turn questions and the answers of the 7 systems in the original
Vicuna evaluation table, for single-answer grading on 1-10 (the MT-Bench rubric). No human scores.

Files in ``<data>/vicuna_bench/``:

* ``question.jsonl``: ``question_id``, ``category``, ``turns`` (one user message);
* ``legacy_eval_table/answer/answer_<model>.jsonl``: ``question_id``, ``model_id``, ``text`` (the answer);
* ``reference_answer/gpt-4.jsonl`` (only with ``with_reference=True``): FastChat answer layout (``choices``).

Items: id = ``f"{question_id}/{model}"``, text = the answer, context = the question (plus, with
``with_reference=True``, the GPT-4 reference answer for math and coding questions, laid out as in MT-Bench),
group = ``str(question_id)``; meta ``model`` (the file name without ``answer_``, e.g. ``gpt35``), ``model_id``
(e.g. ``gpt-3.5-turbo:20230327``), ``category``, ``question_id``. ``models=[...]`` accepts either name.
Canonical order: by question id, then by model name. Answers are kept as they are, including the one empty
answer (llama-13b, question 74).
"""

from __future__ import annotations

from pathlib import Path

from ..rubric import builtin_rubric
from .base import DataError, Dataset, Origin, get
from .mt_bench import build_items, choose_models, read_answers, read_questions, read_references

NAME = "vicuna_bench"
MAIN_FILE = "question.jsonl"
MARKER = "legacy_eval_table"  # present in the data set's folder (lets data_dir point at it)
ANSWER_FIELDS = ("question_id", "model_id", "text")
SOURCE_URL = "https://github.com/lm-sys/FastChat"
ORIGIN = Origin("Vicuna-Bench", f"{SOURCE_URL} (questions: fastchat/llm_judge/data/vicuna_bench; answers: "
                "fastchat/eval/table at commit 69d085e)")
DESCRIPTION = "Vicuna-Bench: 80 questions x 7 systems' answers, single-answer grading 1-10, no human scores"


def _read_answers(path: Path, questions: dict[int, dict]) -> dict[int, tuple]:
    return read_answers(path, ORIGIN, 1, questions, fields=ANSWER_FIELDS,
                        turns_of=lambda rec, where: [get(rec, "text", "str", where, ORIGIN)])


def load(root: Path, *, models=None, with_reference: bool = False) -> Dataset:
    """Vicuna-Bench answers from ``root`` (the ``vicuna_bench`` folder)."""
    root = Path(root)
    questions = read_questions(root / MAIN_FILE, ORIGIN, 1)
    folder = root / "legacy_eval_table" / "answer"
    files = {p.stem.removeprefix("answer_"): p for p in sorted(folder.glob("answer_*.jsonl"))}
    if not files:
        raise DataError(f"no answers: {folder} has no answer_<model>.jsonl files (fields "
                        f"{list(ANSWER_FIELDS)}). {ORIGIN.hint()}")
    answers = {m: _read_answers(p, questions) for m, p in files.items()}
    aliases = {mid: m for m, a in answers.items() for _, mid in a.values()}
    chosen = choose_models(list(files), models, ORIGIN, aliases)
    refs = None
    if with_reference:
        refs = read_references(root / "reference_answer" / "gpt-4.jsonl", ORIGIN, 1, questions)
    items = build_items(questions, {m: answers[m] for m in chosen}, chosen, 1, refs)
    for it in items:  # a single-turn benchmark: no turn key
        it.meta.pop("turn", None)
    rubric = builtin_rubric("mt_bench")
    return Dataset(NAME, items, rubric, tuple(c.name for c in rubric.criteria), False, DESCRIPTION,
                   SOURCE_URL, str(root), {"models": chosen, "with_reference": with_reference})
