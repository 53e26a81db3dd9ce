"""HANNA (Chhun et al., COLING 2022): 1,056 stories = 96 WritingPrompts prompts x 11 systems, rated 1-5 by 3
annotators on 6 criteria.

File: ``<data>/hanna/hanna_stories.jsonl``, one story per line with ``story_id`` (official Story ID),
``prompt_id``, ``model``, ``prompt``, ``story`` and ``annotations`` (``{criterion: [a1, a2, a3]}``).

Items: id = ``str(story_id)``, text = the story, context = the writing prompt, group = ``str(prompt_id)`` (11
stories per prompt), human = the mean of the annotators per criterion; meta holds ``model``, ``prompt_id``,
``story_id`` and ``annotations`` (the per-annotator lists). Canonical order: by prompt, then by story id (the
systems in HANNA's order: Human, BertGeneration, CTRL, GPT, GPT-2 (tag), GPT-2, RoBERTa, XLNet, Fusion, HINT,
TD-VAE).
"""

from __future__ import annotations

from pathlib import Path

from ..items import Item
from ..rubric import builtin_rubric
from .base import DataError, Dataset, Origin, get, read_jsonl

NAME = "hanna"
MAIN_FILE = "hanna_stories.jsonl"
MARKER = MAIN_FILE  # present in the data set's folder (lets data_dir point at it)
CRITERIA = ("Relevance", "Coherence", "Empathy", "Surprise", "Engagement", "Complexity")
FIELDS = ("story_id", "prompt_id", "model", "prompt", "story", "annotations")
ORIGIN = Origin("HANNA", "https://github.com/dig-team/hanna-benchmark-asg")
DESCRIPTION = ("HANNA: 1,056 stories (96 WritingPrompts prompts x 11 systems), 6 criteria rated 1-5 "
               "by 3 annotators")


def _annotations(value, where: str) -> dict[str, list[int]]:
    if not isinstance(value, dict):
        raise DataError(f"{where}: field 'annotations' must be an object {{criterion: [scores]}} with keys "
                        f"{list(CRITERIA)}. {ORIGIN.hint()}")
    out = {}
    for c in CRITERIA:
        v = value.get(c)
        if (not isinstance(v, list) or not v
                or any(isinstance(x, bool) or not isinstance(x, (int, float)) or not 1 <= x <= 5 for x in v)):
            raise DataError(f"{where}: annotations[{c!r}] must be a non-empty list of scores 1-5 (one per "
                            f"annotator), got {v!r}; keys needed: {list(CRITERIA)}. {ORIGIN.hint()}")
        out[c] = list(v)
    return out


def load(root: Path) -> Dataset:
    """The HANNA stories from ``root`` (the ``hanna`` folder)."""
    path = Path(root) / MAIN_FILE
    rows = []
    for where, rec in read_jsonl(path, FIELDS, ORIGIN):
        sid = get(rec, "story_id", "int", where, ORIGIN)
        pid = get(rec, "prompt_id", "int", where, ORIGIN)
        ann = _annotations(rec["annotations"], where)
        human = {c: sum(v) / len(v) for c, v in ann.items()}
        item = Item(
            id=str(sid),
            text=get(rec, "story", "str", where, ORIGIN),
            context=get(rec, "prompt", "str", where, ORIGIN),
            group=str(pid),
            human=human,
            meta={"model": get(rec, "model", "str", where, ORIGIN), "prompt_id": pid, "story_id": sid,
                  "annotations": ann},
        )
        rows.append((pid, sid, where, item))
    seen: dict[int, str] = {}
    for _, sid, where, _ in rows:
        if sid in seen:
            raise DataError(f"{where}: story_id {sid} already used at {seen[sid]}; each story needs its own "
                            f"story_id. {ORIGIN.hint()}")
        seen[sid] = where
    rows.sort(key=lambda r: (r[0], r[1]))
    return Dataset(NAME, [r[3] for r in rows], builtin_rubric("hanna"), CRITERIA, True, DESCRIPTION,
                   ORIGIN.url, str(root))
