"""SummEval (Fabbri et al., TACL 2021): 1,600 summaries = 100 CNN/DailyMail articles x 16 systems, rated 1-5
on coherence, consistency, fluency and relevance by 3 experts.

Files in ``<data>/summeval/``:

* ``summeval_summaries.jsonl``: ``doc_id``, ``model_id``, ``summary``, ``expert_mean``
  (``{criterion: mean}``), optionally ``expert_annotations`` / ``turker_annotations`` (lists of
  ``{criterion: score}``, null for the four extractive systems M0, M1, M2, M5);
* ``summeval_sources.jsonl``: ``doc_id``, ``source`` (the article).

Items: id = ``f"{doc_id}/{model_id}"``, text = the summary, context = the source article (joined on
``doc_id``), group = ``doc_id``, human = the expert mean; meta holds ``model_id``, ``doc_id`` and, where the
file has them, ``expert`` / ``turker`` (``{criterion: [per-annotator scores]}``). Canonical order: the
summaries file's order (article by article, the official order within an article).

Ids: the shipped file has no repeated (doc_id, model_id) pair (checked in the tests). Should a file repeat
one, the repeats are kept and renamed deterministically: the k-th occurrence (k >= 2, in file order) gets the
id ``f"{doc_id}/{model_id}#{k}"`` and ``meta["duplicate_of"]``.
"""

from __future__ import annotations

from pathlib import Path

from ..items import Item
from ..rubric import builtin_rubric
from .base import DataError, Dataset, Origin, get, read_jsonl, scores, unique_ids

NAME = "summeval"
MAIN_FILE = "summeval_summaries.jsonl"
MARKER = MAIN_FILE  # present in the data set's folder (lets data_dir point at it)
SOURCES_FILE = "summeval_sources.jsonl"
CRITERIA = ("coherence", "consistency", "fluency", "relevance")
FIELDS = ("doc_id", "model_id", "summary", "expert_mean")
SOURCE_FIELDS = ("doc_id", "source")
ORIGIN = Origin("SummEval", "https://github.com/Yale-LILY/SummEval")
DESCRIPTION = ("SummEval: 1,600 summaries of 100 CNN/DailyMail articles (16 systems), 4 criteria rated 1-5, "
               "mean of 3 experts")


def _per_annotator(value, where: str, key: str) -> dict[str, list[float]] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise DataError(f"{where}: field {key!r} must be a list of objects with keys {list(CRITERIA)} "
                        f"or null. {ORIGIN.hint()}")
    rows = [scores(a, CRITERIA, where, f"{key}[{i}]", ORIGIN, 1, 5) for i, a in enumerate(value)]
    return {c: [r[c] for r in rows] for c in CRITERIA}


def load(root: Path) -> Dataset:
    """The SummEval summaries from ``root`` (the ``summeval`` folder), each with its source article."""
    root = Path(root)
    sources: dict[str, str] = {}
    src_path = root / SOURCES_FILE
    for where, rec in read_jsonl(src_path, SOURCE_FIELDS, ORIGIN):
        doc = get(rec, "doc_id", "str", where, ORIGIN)
        text = get(rec, "source", "str", where, ORIGIN)
        if not text.strip():
            raise DataError(f"{where}: 'source' (the article of {doc}) is empty. {ORIGIN.hint()}")
        sources[doc] = text
    items = []
    for where, rec in read_jsonl(root / MAIN_FILE, FIELDS, ORIGIN):
        doc = get(rec, "doc_id", "str", where, ORIGIN)
        model = get(rec, "model_id", "str", where, ORIGIN)
        if doc not in sources:
            raise DataError(f"{where}: doc_id {doc!r} has no article in {src_path} (fields "
                            f"{list(SOURCE_FIELDS)}); the two files must come from the same release. "
                            f"{ORIGIN.hint()}")
        human = scores(rec["expert_mean"], CRITERIA, where, "field 'expert_mean'", ORIGIN, 1, 5)
        meta = {"model_id": model, "doc_id": doc}
        for key, name in (("expert_annotations", "expert"), ("turker_annotations", "turker")):
            per = _per_annotator(rec.get(key), where, key)
            if per is not None:
                meta[name] = per
        items.append(Item(f"{doc}/{model}", get(rec, "summary", "str", where, ORIGIN), sources[doc], doc,
                          human, meta))
    return Dataset(NAME, unique_ids(items), builtin_rubric("summeval"), CRITERIA, True, DESCRIPTION,
                   ORIGIN.url, str(root))
