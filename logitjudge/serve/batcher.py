"""The queue that merges concurrent ``/v1/judge`` requests into one ``lj.score`` call.

Requests that arrive within ``window_s`` of each other and share a key (rubric, criteria, orderings, seed,
template) are scored together: their items go into one ``lj.score`` call, so their prompts share the engine's trie
steps, and the table is split back per request. An item's probabilities do not depend on the items beside it (the
engine computes each prompt exactly), so a request's answer is the one it gets alone; the statistics that pool items
(the position test, the PriDe prior) are computed on each request's own part of the table.

Per-item random orders (``random:K``, ``balanced+random:R``) are drawn for the items of one call, so a request under
them is scored alone: merged, its items would get other orders than ``lj.score`` gives them.

One worker thread runs every call on the judge (one engine, one model: calls never overlap). A request whose client
left (its future cancelled) before its batch starts is dropped from the queue unscored.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..errors import LogitJudgeError

log = logging.getLogger("logitjudge")

PER_ITEM_DESIGNS = ("random", "balanced+random")  # orders drawn per item of one call: never merged


class QueueFull(LogitJudgeError):
    """More items wait than ``--max-queue`` allows."""


class ItemRefused(LogitJudgeError):
    """``lj.score`` refused one item of a request: ``index`` is its position in the request's items."""

    def __init__(self, message: str, index: int | None):
        super().__init__(message)
        self.index = index


@dataclass
class JudgeJob:
    """One request's work: ``items`` (dicts of id, text, context, group) under ``settings`` (lj.score keywords:
    rubric, criteria, orderings, seed, template), merged with others of the same ``key``."""

    items: list[dict]
    settings: dict
    key: tuple
    future: asyncio.Future = field(default=None)


def merge_key(settings: dict, rubric_key: str, unique) -> tuple:
    """Jobs merge when everything that shapes their prompts and orders is equal; a per-item random design gets a
    key of its own (``unique``)."""
    kind = settings["orderings"].strip().lower().partition(":")[0]
    own = unique if kind in PER_ITEM_DESIGNS else None
    return (rubric_key, tuple(settings["criteria"] or ()), settings["orderings"], settings["seed"],
            settings["template"], own)


_SYNTHETIC = re.compile(r"'r(\d+)i(\d+)'")


def score_jobs(score, jobs: list[JudgeJob]) -> list:
    """Each job's own ScoreTable (or the LogitJudgeError that refused it) from one ``score(rows, **settings)``
    call on all their items. Items are renamed r{job}i{item} (ids and groups of two requests may coincide); a
    refusal that names one of them fails that job alone and the others are scored again without it."""
    rows = [{"id": f"r{j}i{i}", "text": it["text"], "context": it.get("context"),
             "group": None if it.get("group") is None else f"r{j}/{it['group']}"}
            for j, job in enumerate(jobs) for i, it in enumerate(job.items)]
    try:
        table = score(rows, **jobs[0].settings).table
    except LogitJudgeError as e:
        return _refused(score, jobs, e)
    out, start = [], 0
    for job in jobs:
        n = len(job.items)
        part = table.select_items(np.arange(start, start + n))
        part.item_ids = np.asarray([it["id"] for it in job.items], dtype=str)  # the request's own ids and groups
        given = [it.get("group") or "" for it in job.items]
        part.item_groups = np.asarray(given, dtype=str) if any(given) else None
        out.append(part)
        start += n
    return out


def _refused(score, jobs: list[JudgeJob], e: LogitJudgeError) -> list:
    msg = str(e)
    hit = _SYNTHETIC.search(msg)
    if hit is None:  # not about one item: the settings themselves, alike for every job of this key
        if len(jobs) == 1:
            return [ItemRefused(msg, None)]
        return list(itertools.chain.from_iterable(score_jobs(score, [j]) for j in jobs))
    j, i = int(hit.group(1)), int(hit.group(2))
    real = _SYNTHETIC.sub(lambda m: repr(jobs[int(m.group(1))].items[int(m.group(2))]["id"]), msg)
    rest = score_jobs(score, jobs[:j] + jobs[j + 1:]) if len(jobs) > 1 else []
    return rest[:j] + [ItemRefused(real, i)] + rest[j:]


class Batcher:
    """The queue (module doc). ``score(rows, **settings)``: lj.score on the loaded judge; ``max_items``: items
    that may wait at once (past it :class:`QueueFull`); ``window_s``: how long the first request of a batch
    waits for others."""

    def __init__(self, score, *, window_s: float = 0.015, max_items: int = 4096):
        self.score, self.window_s, self.max_items = score, window_s, max_items
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="logitjudge-judge")
        self.queue: list[JudgeJob] = []
        self.wake = asyncio.Event()
        # held while the worker runs anything: a batch is taken from the queue only when the worker is free, so a
        # request whose client leaves while others are scored is still in the queue and is dropped unscored
        self.busy = asyncio.Lock()
        self.stats = {"batches": 0, "requests": 0, "items_scored": 0, "dropped": 0, "seconds_per_item": 0.0}
        self.task = None

    @property
    def waiting(self) -> int:
        return sum(len(j.items) for j in self.queue if not j.future.done())

    def retry_after(self) -> int:
        """Seconds until the queue has likely drained (at least 1): the items waiting at the recent pace."""
        return max(1, int(self.waiting * self.stats["seconds_per_item"] + self.window_s + 0.999))

    def submit(self, job: JudgeJob) -> asyncio.Future:
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._loop())
        if self.waiting + len(job.items) > self.max_items:
            raise QueueFull(f"the queue holds {self.waiting} items and takes at most {self.max_items} "
                            f"(--max-queue); retry after {self.retry_after()} s")
        job.future = asyncio.get_running_loop().create_future()
        self.queue.append(job)
        self.wake.set()
        return job.future

    async def run_exclusive(self, fn, *args):
        """Run ``fn`` on the judge's worker thread once it is free (/v1/score's reads share the engine);
        cancelled while it waits, it never runs."""
        async with self.busy:
            return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def _take(self) -> list[JudgeJob]:
        """The first live job's key and every live job of that key; cancelled jobs leave the queue unscored."""
        dropped = [j for j in self.queue if j.future.done()]
        self.stats["dropped"] += len(dropped)
        live = [j for j in self.queue if not j.future.done()]
        if not live:
            self.queue = []
            return []
        key = live[0].key
        batch = [j for j in live if j.key == key]
        self.queue = [j for j in live if j.key != key]
        return batch

    async def _loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            await asyncio.sleep(self.window_s)  # let the requests sent together arrive
            while True:
                async with self.busy:
                    batch = self._take()
                    if not batch:
                        break
                    await self._run(batch)

    async def _run(self, batch: list[JudgeJob]) -> None:
        t = time.perf_counter()
        try:
            results = await asyncio.get_running_loop().run_in_executor(self.pool, score_jobs, self.score, batch)
        except Exception as e:  # noqa: BLE001 - an internal error fails this batch's requests, not the service
            log.exception("a batch of %d requests failed", len(batch))
            results = [e] * len(batch)
        n = sum(len(j.items) for j in batch)
        self.stats["batches"] += 1
        self.stats["requests"] += len(batch)
        self.stats["items_scored"] += n
        self.stats["seconds_per_item"] = (time.perf_counter() - t) / max(n, 1)
        for job, res in zip(batch, results):
            if job.future.done():  # the client left while its batch ran
                continue
            if isinstance(res, BaseException):
                job.future.set_exception(res)
            else:
                job.future.set_result(res)

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self.pool.shutdown(wait=False, cancel_futures=True)
