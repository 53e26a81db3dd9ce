"""The service's request and response models (pydantic): what ``/v1/judge`` and ``/v1/score`` take and answer.

The models check the shape of a request; what needs the judge (the rubric's labels, the orderings against the
rubric's options, a text against the judge's context) is checked when the request is read
(:mod:`logitjudge.serve.app`) or by ``lj.score`` itself, each refusal naming the request's field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Strict(BaseModel):
    # an unknown field is a typo the client should hear about, not a setting silently ignored
    model_config = ConfigDict(extra="forbid")


class JudgeItem(_Strict):
    id: str = Field(min_length=1, description="the item's id, unique in the request (answers carry it back)")
    text: str = Field(min_length=1, description="the text judged")
    context: str | None = Field(None, description="what the text answers (a question, a source article)")
    group: str | None = Field(None, description="items ranked together (the responses to one prompt)")

    @field_validator("text")
    @classmethod
    def _visible(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the text is only whitespace; send the text to judge")
        return v


class JudgeRequest(_Strict):
    rubric: str | dict[str, Any] = Field(
        "default", description="a built-in rubric's name (default, hanna, summeval, mt_bench) or an inline rubric "
                               "({name, instructions, criteria: [{name, description, options: [{value, label, "
                               "description}]}]}), as lj.score takes a Rubric")
    criteria: list[str] | None = Field(None, description="a subset of the rubric's criteria; unset: all")
    items: list[JudgeItem] = Field(min_length=1, description="the texts to judge")
    orderings: str = Field("balanced", description="balanced (the 2n cyclic rotations), all (n! orders), "
                                                   "random:K (K orders drawn per item with seed), fixed or fixed:K")
    seed: int = Field(0, ge=0, description="seed of random:K")
    template: str | None = Field(None, description="a built-in template's name; unset: text-first")
    per_order: bool = Field(False, description="also return each order's distribution")


class ScoreRequest(_Strict):
    """SGLang's ``/v1/score`` request (``ScoringRequest`` of sglang.srt.entrypoints.openai.protocol)."""

    query: str | list[int] | None = Field(None, description="the query text or its token ids")
    items: str | list[str] | list[list[int]] | None = Field(None, description="item text(s) or token ids")
    label_token_ids: list[int] | None = Field(None, description="the token ids whose next-token probability "
                                                                "is returned, in this order")
    apply_softmax: bool = Field(False, description="normalise over the label tokens (else each label's "
                                                   "probability over the whole vocabulary)")
    item_first: bool = Field(False, description="item + query instead of query + item")
    model: str | None = Field(None, description="the served model's id (optional; checked when given)")


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int = 0
    total_tokens: int


class ScoreResponse(BaseModel):
    """SGLang's ``ScoringResponse``: ``scores[item]`` in the order of ``label_token_ids``."""

    scores: list[list[float]]
    model: str
    usage: Usage | None = None
    object: Literal["scoring"] = "scoring"


class ErrorBody(BaseModel):
    field: str | None = Field(description="the request's field at fault (items[2].text, ...); null: none")
    message: str = Field(description="one line: the problem and the fix")
    type: str = Field(description="bad_request, unauthorized, too_large, queue_full, timeout, ...")


class ErrorResponse(BaseModel):
    error: ErrorBody
