"""The routes of ``logitjudge serve``: ``POST /v1/judge``, ``POST /v1/score`` (SGLang's shape), ``GET /health``,
``GET /v1/models``, and FastAPI's OpenAPI page (``/docs``, ``/openapi.json``).

A request is checked here before it queues (rubric, criteria, template, orderings, item count and ids), each
refusal a 4xx with one JSON error ``{"error": {"field", "message", "type"}}`` naming the field; the texts are held
to the judge's context by ``lj.score`` itself (:class:`~logitjudge.serve.batcher.ItemRefused` names the item).
Bounds: the body's bytes, the items of a request, the items waiting (429 with Retry-After), a request's seconds
(504). A client that disconnects cancels its work (unscored if its batch had not started). Nothing is written
unless ``out`` is set; then each answered request's table is saved there as ``judge-NNNNNN.npz``.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from .. import __version__
from ..errors import LogitJudgeError
from .answers import judge_answer
from .batcher import Batcher, ItemRefused, JudgeJob, QueueFull, merge_key
from .schema import ErrorResponse, JudgeRequest, ScoreRequest, ScoreResponse, Usage


@dataclass(frozen=True)
class Limits:
    """The service's bounds and settings (each a ``logitjudge serve`` flag)."""

    api_key: str | None = None
    max_body_bytes: int = 8 * 2**20
    max_items: int = 256
    max_queue: int = 4096
    timeout_s: float = 600.0
    window_s: float = 0.015
    n_boot: int = 200
    out: str | None = None
    token_budget: int = 4096
    prefix_mode: str = "auto"
    verify: int | None = None


class ApiError(Exception):
    def __init__(self, status: int, field: str | None, message: str, kind: str = "bad_request", headers=None):
        super().__init__(message)
        self.status, self.field, self.message, self.kind, self.headers = status, field, message, kind, headers


def error(status: int, field: str | None, message: str, kind: str, headers=None) -> JSONResponse:
    return JSONResponse({"error": {"field": field, "message": message, "type": kind}}, status, headers=headers)


def _field(loc) -> str:
    """("body", "items", 0, "text") -> "items[0].text"."""
    out = ""
    for part in loc[1:] if loc and loc[0] == "body" else loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def _validation(request, exc: RequestValidationError) -> JSONResponse:
    e = exc.errors()[0]  # one error: the first; the client fixes it and hears of the next
    if e.get("type") == "json_invalid":
        return error(400, "body", f"the body is not valid JSON ({e.get('ctx', {}).get('error', e['msg'])}); send "
                                  "one JSON object", "malformed_json")
    field = _field(e.get("loc", ()))
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return error(422, field, f"{field}: {e['msg']}{more}", "bad_request")


class BodyLimit:
    """413 for a body past ``limit`` bytes, by its Content-Length or as it streams in, before the route reads it."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await self._refuse(scope, receive, send)
        seen = 0

        async def counted():
            nonlocal seen
            msg = await receive()
            seen += len(msg.get("body", b""))
            if seen > self.limit:
                raise ApiError(413, "body", self._line(), "too_large")
            return msg

        try:
            await self.app(scope, counted, send)
        except ApiError:
            await self._refuse(scope, receive, send)

    def _line(self) -> str:
        return f"the body is larger than {self.limit:,} bytes (--max-body-bytes); send fewer or shorter items"

    async def _refuse(self, scope, receive, send):
        await error(413, "body", self._line(), "too_large")(scope, receive, send)


def _rubric(value):
    from ..rubric import Rubric, builtin_rubric

    try:
        if isinstance(value, dict):
            return Rubric.from_dict(value, source="rubric")
        if not re.fullmatch(r"[A-Za-z0-9_-]+", value):  # a name, never a path on the server
            raise LogitJudgeError(f"rubric {value!r} is not a built-in rubric's name; send a name (default, hanna, "
                                  "summeval, mt_bench) or the rubric inline as an object")
        return builtin_rubric(value)
    except LogitJudgeError as e:
        raise ApiError(422, "rubric", str(e)) from None


def _settings(req: JudgeRequest, limits: Limits) -> dict:
    """lj.score's keywords of a request, each checked here with the field it came from."""
    from ..orderings import parse
    from ..prompts import builtin_names, load_template

    rubric = _rubric(req.rubric)
    if req.criteria:
        try:
            rubric = rubric.subset(req.criteria)
        except LogitJudgeError as e:
            raise ApiError(422, "criteria", f"criteria: {e}") from None
    if req.template is not None and req.template not in builtin_names():
        raise ApiError(422, "template", f"template {req.template!r} is not a built-in template; use one of "
                                        f"{builtin_names()}")
    try:  # the rubric against the template that shows it, as the run checks it
        rubric.validate(need_descriptions=load_template(req.template).shows_descriptions)
    except LogitJudgeError as e:
        raise ApiError(422, "rubric", f"rubric: {e}") from None
    if len(req.items) > limits.max_items:
        raise ApiError(422, "items", f"items: {len(req.items)} items, more than {limits.max_items} per request "
                                     "(--max-items); split them over several requests")
    seen = {}
    for n, it in enumerate(req.items):
        if it.id in seen:
            raise ApiError(422, f"items[{n}].id", f"items[{n}].id {it.id!r} repeats items[{seen[it.id]}].id; "
                                                  "give each item its own id")
        seen[it.id] = n
    try:
        parse(req.orderings, rubric.n_options, seed=req.seed, n_items=len(req.items))
    except LogitJudgeError as e:
        raise ApiError(422, "orderings", f"orderings: {e}") from None
    return {"rubric": rubric, "criteria": None, "orderings": req.orderings, "seed": req.seed,
            "template": req.template}


async def _wait(request: Request, fut: asyncio.Future, timeout_s: float):
    """The future's result; cancelled when the client disconnects or the request's time is up (504)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        done, _ = await asyncio.wait({fut}, timeout=0.05)
        if done:
            return fut.result()
        if await request.is_disconnected():
            fut.cancel()
            raise ApiError(499, None, "the client disconnected", "client_closed")
        if loop.time() > deadline:
            fut.cancel()
            raise ApiError(504, None, f"the request did not finish within {timeout_s:g} s (--timeout); send fewer "
                                      "items per request or raise --timeout", "timeout")


class Service:
    """The loaded judge, its queue and its /v1/score engine."""

    def __init__(self, judge, limits: Limits):
        import logitjudge as lj

        self.judge, self.limits = judge, limits
        self.model_id = str(judge.model_id)
        self.engine_name = "native" if judge.settings is None else str(judge.settings.engine)
        kw = {"token_budget": limits.token_budget, "prefix_mode": limits.prefix_mode, "verify": limits.verify}
        self.batcher = Batcher(lambda rows, **s: lj.score(judge, rows, progress=False, **kw, **s),
                               window_s=limits.window_s, max_items=limits.max_queue)
        self.engine = None
        self.saved = itertools.count(1)
        self.unique = itertools.count()
        config = judge.config
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        self.vocab = int(getattr(text, "vocab_size", None) or len(judge.tokenizer))

    def score_engine(self, first: list[int]):
        """The engine /v1/score reads through, made once on the judge's worker thread."""
        if self.engine is None:
            from dataclasses import replace

            from ..engines import engine_config
            from ..spec import ModelSpec

            settings = self.judge.settings or ModelSpec(id=self.model_id)  # a judge built by hand: native
            settings = replace(settings, token_budget=self.limits.token_budget, prefix_mode=self.limits.prefix_mode)
            self.engine = engine_config(settings).make(self.judge, texts=lambda: [self.judge.tokenizer.decode(first)])
        return self.engine

    def save(self, table) -> Path | None:
        if self.limits.out is None:
            return None
        from ..api import Result

        path = Path(self.limits.out) / f"judge-{next(self.saved):06d}.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        return Result(table).save(path)


def create_app(judge, limits: Limits | None = None) -> FastAPI:
    """The service on a loaded judge (``lj.load_judge``)."""
    limits = limits or Limits()
    svc = Service(judge, limits)
    app = FastAPI(title="logitjudge serve", version=__version__,
                  description="Order-averaged exact label probabilities of an LLM judge (docs/integrations.md)",
                  responses={422: {"model": ErrorResponse}})
    app.state.service = svc
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(ApiError, lambda r, e: error(e.status, e.field, e.message, e.kind, e.headers))

    def authorised(request: Request):
        if limits.api_key is None:
            return
        got = request.headers.get("authorization", "")
        scheme, _, token = got.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), limits.api_key.encode()):
            what = "missing" if not got else "wrong"
            raise ApiError(401, "authorization", f"the API key is {what}; send the header Authorization: Bearer "
                                                 "KEY with the key the service was started with (--api-key)",
                           "unauthorized", {"WWW-Authenticate": "Bearer"})

    @app.get("/health")
    async def health():
        b = svc.batcher
        return {"status": "ok", "model": svc.model_id, "engine": svc.engine_name, "waiting_items": b.waiting,
                **b.stats}

    @app.get("/v1/models", dependencies=[Depends(authorised)])
    async def models():
        return {"object": "list", "data": [{"id": svc.model_id, "object": "model", "owned_by": "logitjudge",
                                            "engine": svc.engine_name}]}

    @app.post("/v1/judge", dependencies=[Depends(authorised)])
    async def judge_route(req: JudgeRequest, request: Request):
        import logitjudge as lj

        settings = _settings(req, limits)
        key = merge_key(settings, json.dumps(settings["rubric"].to_dict(), sort_keys=True), next(svc.unique))
        job = JudgeJob([it.model_dump() for it in req.items], settings, key)
        try:
            fut = svc.batcher.submit(job)
        except QueueFull as e:
            raise ApiError(429, None, str(e), "queue_full",
                           {"Retry-After": str(svc.batcher.retry_after())}) from None
        try:
            table = await _wait(request, fut, limits.timeout_s)
        except ItemRefused as e:
            raise ApiError(422, None if e.index is None else f"items[{e.index}].text", str(e)) from None
        report = await asyncio.to_thread(lj.analyze, table, n_boot=limits.n_boot)
        path = await asyncio.to_thread(svc.save, table)
        return judge_answer(table, report, per_order=req.per_order, model=svc.model_id, orderings=req.orderings,
                            table_path=path)

    @app.post("/v1/score", dependencies=[Depends(authorised)], response_model=ScoreResponse)
    async def score_route(req: ScoreRequest, request: Request):
        from . import sgl

        if req.model is not None and req.model != svc.model_id:
            raise ApiError(422, "model", f"model {req.model!r} is not served here; this service serves "
                                         f"{svc.model_id!r}")
        tok = judge.tokenizer
        try:
            labels = sgl.check_labels(req.label_token_ids, svc.vocab)
            prompts = sgl.score_prompts(tok, req.query, req.items, item_first=req.item_first, vocab=svc.vocab,
                                        max_length=judge.max_length)
        except sgl.ScoreRefused as e:
            raise ApiError(422, e.field, str(e)) from None
        if len(prompts) > limits.max_items:
            raise ApiError(422, "items", f"items: {len(prompts)} items, more than {limits.max_items} per request "
                                         "(--max-items); split them over several requests")
        task = asyncio.ensure_future(svc.batcher.run_exclusive(
            lambda: sgl.label_logprobs(svc.score_engine(prompts[0]), prompts, labels)))
        lp = await _wait(request, task, limits.timeout_s)
        n = sum(map(len, prompts))
        return ScoreResponse(scores=sgl.scores_of(lp, req.apply_softmax), model=svc.model_id,
                             usage=Usage(prompt_tokens=n, total_tokens=n))

    @app.on_event("shutdown")
    async def _close():
        svc.batcher.close()

    return app
