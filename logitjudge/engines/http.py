"""A running vLLM server answers the label reads (:mod:`logitjudge.engines.reads`): ``--engine http://HOST:PORT``.

The server is ``vllm serve MODEL --enable-prefix-caching`` (one GPU, tensor / pipeline parallel, several nodes:
whatever serves the OpenAI routes). logitjudge tokenizes locally and sends token ids to ``/v1/completions`` with
``max_tokens=1``, ``logprob_token_ids`` (the labels read there: vLLM gathers them from an fp32 log-softmax over the
full vocabulary) and ``return_tokens_as_token_ids`` (answers keyed ``token_id:N``, never by a decoded string two ids
may share). Contexts that read the same labels go in one request, ``batch`` prompts at most; ``concurrency``
requests are in flight at once.

Before scoring, :meth:`HTTPEngine.check` refuses a server that serves another model or tokenizes differently.
Every request is a pure function of its token ids, so a failed one (connection dropped, refused, a 5xx, a stall past
``timeout``, a malformed body) is sent again, up to ``retries`` times; a batch's rows reach the checkpoint only when
every read of the batch has its answer, so a retry never duplicates a row and a failure loses none: the run stops
in one line and the same command resumes it. An answer for other token ids or from another model stops the run at
once.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..engine import EngineError
from .base import TOKEN_BUDGET, refuse_native_settings
from .reads import Context, ServedEngine, load_served_judge, reference_loader

log = logging.getLogger("logitjudge.engines")

RETRY_STATUS = {408, 429, 500, 502, 503, 504}


class ServerError(EngineError):
    """The server could not answer (after the retries): the run stops, its finished batches kept."""


class Retry(Exception):
    """A failure worth sending the same request again for."""


PROTOCOL = "vllm"  # the server protocol this engine speaks: vllm+http://HOST:PORT, or plain http://HOST:PORT


def normalise_url(url: str) -> str:
    """``http://HOST:PORT`` without a trailing slash or ``/v1`` (nor ``vllm+``, which names the protocol); refused
    in one line if it is not one."""
    u = url.strip().rstrip("/")
    if u.startswith(f"{PROTOCOL}+"):
        u = u[len(PROTOCOL) + 1:]
    if u.endswith("/v1"):
        u = u[:-3]
    if not u.startswith(("http://", "https://")) or not u.split("://", 1)[1]:
        raise EngineError(f"--engine {url!r} is not a server address; use e.g. --engine http://127.0.0.1:8000")
    return u


@dataclass(frozen=True)
class HTTPConfig:
    """``--engine http://HOST:PORT`` (or ``vllm+http://HOST:PORT``)'s [model] settings: ``engine`` (the address as
    given), ``dtype`` (the server's precision), ``token_budget``, ``concurrency`` and ``request_timeout``;
    ``device``: where the audit's reference runs; ``prefix_mode`` / ``quantize``: the native engine's, refused."""

    name: ClassVar[str] = "http"
    engine: str
    dtype: str = "fp32"
    device: str = "cpu"
    token_budget: int = TOKEN_BUDGET
    concurrency: int = 8
    request_timeout: int = 300
    prefix_mode: str = "auto"
    quantize: str | None = None

    def __post_init__(self):
        normalise_url(self.engine)  # not an address: refused here, before anything loads

    @classmethod
    def from_spec(cls, model_spec) -> HTTPConfig:
        m = model_spec
        return cls(m.engine, m.dtype, m.device, m.token_budget, m.concurrency, m.request_timeout, m.prefix_mode,
                   m.quantize)

    def check(self, *, probing: bool) -> None:
        refuse_native_settings(f"--engine {self.engine}", prefix_mode=self.prefix_mode, quantize=self.quantize,
                               probing=probing)

    def load_judge(self, source: str, model_spec):
        """The tokenizer and config: the server holds the weights."""
        return load_served_judge(source, model_spec, device="server")

    def make(self, lm, *, texts: Callable[[], list[str]], seed: int = 0) -> HTTPEngine:
        """The server at ``engine``, checked before anything is scored: it serves the judge, tokenizes
        ``texts()`` (a prompt, its labels) as the judge does, and its context bounds the judge's."""
        engine = HTTPEngine(self.engine, dtype=lm.dtype, token_budget=self.token_budget,
                            concurrency=self.concurrency, timeout=float(self.request_timeout),
                            reference=reference_loader(lm, self.device))
        engine.check({lm.model_id, lm.source, str(lm.source).rstrip("/").rsplit("/", 1)[-1]}, lm.tokenizer, texts())
        return engine


class HTTPEngine(ServedEngine):
    """A vLLM server at ``url``. ``dtype``: the precision the server was started with (its meta and the audit's
    tolerance). ``concurrency``: requests in flight; ``batch``: prompts per request; ``timeout``: seconds a
    request may stall; ``retries``: further tries of a failed request."""

    name = "http"

    def __init__(self, url: str, *, dtype: str = "fp32", token_budget: int = TOKEN_BUDGET, concurrency: int = 8,
                 batch: int = 32, timeout: float = 300.0, retries: int = 3, reference=None):
        super().__init__(token_budget=token_budget, dtype=dtype)
        self.url = normalise_url(url)
        self.concurrency, self.batch, self.timeout, self.retries = int(concurrency), int(batch), timeout, retries
        self._reference = reference
        self._count = threading.Lock()
        self.served = self._model()
        ctx = self.served.get("max_model_len")
        self.max_model_len = ctx if isinstance(ctx, int) and not isinstance(ctx, bool) and ctx > 0 else None
        self.mode_meta = {"engine": {"name": "http", "url": self.url, "served_model": self.served.get("id"),
                                     "root": self.served.get("root"), "max_model_len": self.served.get("max_model_len"),
                                     "concurrency": self.concurrency, "batch": self.batch}}

    # ---- the server ------------------------------------------------------------------------------------------
    def _call(self, path: str, body: dict | None = None, *, tries: int | None = None) -> dict:
        """One route's JSON answer, retrying what may succeed when sent again."""
        tries = self.retries + 1 if tries is None else tries
        why = ""
        for attempt in range(tries):
            if attempt:
                time.sleep(min(0.5 * 2 ** (attempt - 1), 8.0))
            try:
                return self._once(path, body)
            except Retry as e:
                why = str(e)
                log.warning("%s%s: %s (try %d of %d)", self.url, path, why, attempt + 1, tries)
        raise ServerError(f"the server at {self.url} did not answer {path} ({why}) after {tries} tries; the "
                          "finished items are kept: start or fix the server and run the same command again to resume")

    def _once(self, path: str, body: dict | None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            text = e.read()[:300].decode("utf-8", "replace")
            if e.code in RETRY_STATUS:
                raise Retry(f"HTTP {e.code}: {text}") from None
            raise ServerError(f"the server at {self.url} refused {path}: HTTP {e.code}: {text}") from None
        except (urllib.error.URLError, OSError, TimeoutError) as e:  # refused, dropped, reset, timed out
            raise Retry(f"{type(e).__name__}: {getattr(e, 'reason', e)}") from None
        try:
            out = json.loads(raw)
        except ValueError:
            raise Retry(f"a body that is not JSON ({raw[:80]!r})") from None
        if not isinstance(out, dict):
            raise Retry(f"a JSON {type(out).__name__} where an object was expected")
        return out

    def _model(self) -> dict:
        """The served model (``/v1/models``): one connection try, so an address with no server fails at once."""
        try:
            models = self._call("/v1/models", tries=1).get("data") or []
        except ServerError as e:
            raise ServerError(f"no vLLM server answers at {self.url} ({str(e).split('(', 1)[-1].split(')')[0]}); "
                              f"start one with: vllm serve MODEL --enable-prefix-caching") from None
        if len(models) != 1 or not isinstance(models[0], dict):
            raise ServerError(f"the server at {self.url} serves {len(models)} models; logitjudge scores against one")
        return models[0]

    def check(self, names: set[str], tokenizer, texts: list[str]) -> None:
        """Refuse a server that serves none of ``names`` (the judge's id, folder, source) or whose tokenizer
        encodes ``texts`` (a prompt, the labels) to other ids than ``tokenizer`` does."""
        served = {str(self.served.get(k)) for k in ("id", "root") if self.served.get(k)}
        if not served & names and not {n.rstrip("/").rsplit("/", 1)[-1] for n in served} & names:
            raise ServerError(f"the server at {self.url} serves {self.served.get('id')!r} (root "
                              f"{self.served.get('root')!r}), not the judge {sorted(names)[0]!r}; serve the same "
                              f"model, or pass --model {self.served.get('id')}")
        for text in texts:
            local = tokenizer.encode(text, add_special_tokens=False)
            got = self._call("/tokenize", {"model": self.served["id"], "prompt": text,
                                           "add_special_tokens": False}).get("tokens")
            if list(got or []) != list(local):
                raise ServerError(f"the server at {self.url} tokenizes {text[:40]!r} as {list(got or [])[:8]}, the "
                                  f"judge's tokenizer as {list(local)[:8]}: it serves another tokenizer")

    # ---- the reads -------------------------------------------------------------------------------------------
    def read(self, contexts: list[Context]) -> list[np.ndarray]:
        by_labels: dict[tuple, list[int]] = {}
        for c, ctx in enumerate(contexts):
            by_labels.setdefault(ctx.labels, []).append(c)
        chunks = [(labels, cs[s:s + self.batch]) for labels, cs in by_labels.items()
                  for s in range(0, len(cs), self.batch)]
        values: list = [None] * len(contexts)
        pool = ThreadPoolExecutor(max_workers=max(1, min(self.concurrency, len(chunks))))
        try:
            futures = [(cs, pool.submit(self._request, labels, [contexts[c].tokens for c in cs]))
                       for labels, cs in chunks]
            for cs, fut in futures:
                for c, v in zip(cs, fut.result()):
                    values[c] = v
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        return values

    def _request(self, labels: tuple, prompts: list[tuple]) -> list[np.ndarray]:
        body = {"model": self.served["id"], "prompt": [list(p) for p in prompts], "max_tokens": 1,
                "temperature": 0.0, "logprobs": len(labels), "logprob_token_ids": list(labels),
                "return_tokens_as_token_ids": True}
        for attempt in range(self.retries + 1):
            out = self._call("/v1/completions", body)
            try:
                return self._parse(out, labels, len(prompts))
            except Retry as e:  # a malformed answer: the same request again
                if attempt == self.retries:
                    raise ServerError(f"the server at {self.url} answered /v1/completions with {e} "
                                      f"{self.retries + 1} times; the finished items are kept: run the same "
                                      "command again to resume") from None
        raise AssertionError("unreachable")

    def _parse(self, out: dict, labels: tuple, n: int) -> list[np.ndarray]:
        if out.get("model") != self.served["id"]:
            raise ServerError(f"the server at {self.url} now serves {out.get('model')!r}, not "
                              f"{self.served['id']!r} as when the run started; nothing was written for this batch")
        choices = out.get("choices")
        if not isinstance(choices, list) or sorted(c.get("index", -1) for c in choices if isinstance(c, dict)) \
                != list(range(n)):
            raise Retry(f"{len(choices) if isinstance(choices, list) else 'no'} choices for {n} prompts")
        values: list = [None] * n
        for ch in choices:
            try:
                top = ch["logprobs"]["top_logprobs"][0]
                got = {int(k.split(":", 1)[1]): float(v) for k, v in top.items() if k.startswith("token_id:")}
            except (KeyError, IndexError, TypeError, ValueError, AttributeError):
                raise Retry("a choice without label log-probabilities") from None
            missing = [t for t in labels if t not in got]
            if missing:
                raise ServerError(f"the server at {self.url} answered for token ids {sorted(got)[:8]}, not the "
                                  f"labels' {list(labels)[:8]}; it serves another vocabulary")
            values[ch["index"]] = np.array([got[t] for t in labels], dtype=np.float64)
        usage = out.get("usage") or {}
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") if isinstance(usage, dict) else None
        if isinstance(cached, int):
            with self._count:  # requests answer on several threads
                self.stats["cached_tokens"] += cached
        return values

    def reference(self):
        if self._reference is None:
            raise EngineError("the exactness audit needs the served weights in transformers; none was given")
        return self._reference()
