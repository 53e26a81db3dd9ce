"""The HTTP engine's client: the standard library's urllib (what ``--engine http://`` runs) against httpx, on the
requests that engine sends (issue 53 item 5: a hand-written part kept only where it measures no worse).

A FastAPI app under uvicorn on 127.0.0.1, in this process, answers ``POST /v1/completions`` with a vLLM-shaped body:
``--prompts`` choices, each with ``prompt_logprobs`` for ``--labels`` labels (the size of one batch of the engine's
read-outs). Clients, each sending ``--requests`` requests one after another:

* ``urllib``: ``HTTPEngine._once`` itself (a new connection per request, as urllib opens one);
* ``httpx``: one ``httpx.Client`` (keep-alive: one connection for every request);
* ``httpx-new``: a new ``httpx.Client`` per request (a connection each, like urllib).

Each client's time is the best of ``--rounds`` interleaved rounds (benchmarks/timing.py); the table gives ms per
request. Every answer is parsed and checked to be the body the server sent. Prints a table and writes JSON.

    .venv/bin/python -m benchmarks.http_client --requests 200 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import httpx

from benchmarks.local_server import Server
from benchmarks.timing import best_of_interleaved

HERE = Path(__file__).resolve().parent


def answer(prompts: int, labels: int) -> dict:
    """A vLLM completions body: each choice's prompt_logprobs, the last ``labels`` positions with a log-prob."""
    rows = [None] + [{str(1000 + j): {"logprob": -0.25 * (j + 1), "rank": j + 1}} for j in range(labels)]
    return {"id": "cmpl", "object": "text_completion", "model": "judge",
            "choices": [{"index": i, "text": "", "prompt_logprobs": rows} for i in range(prompts)]}


def make_app(body: dict):
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/v1/completions")
    def completions(req: dict) -> dict:
        return body

    return app


def clients(url: str, body: dict, n: int) -> dict:
    """name -> a function sending ``n`` requests and checking each answer."""
    from logitjudge.engines.http import HTTPEngine

    engine = HTTPEngine.__new__(HTTPEngine)  # only _once: no /v1/models, no judge
    engine.url, engine.timeout = url, 60.0
    request = {"model": "judge", "prompt": [[1, 2, 3]] * len(body["choices"]), "max_tokens": 1}

    def check(out):
        if out != body:
            raise AssertionError("an answer differs from the body the server sent")

    def with_urllib():
        for _ in range(n):
            check(engine._once("/v1/completions", request))

    def with_httpx():
        with httpx.Client(timeout=60.0) as c:
            for _ in range(n):
                check(c.post(f"{url}/v1/completions", json=request).json())

    def with_httpx_new():
        for _ in range(n):
            with httpx.Client(timeout=60.0) as c:
                check(c.post(f"{url}/v1/completions", json=request).json())

    return {"urllib": with_urllib, "httpx": with_httpx, "httpx-new": with_httpx_new}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=200, help="requests per client per round")
    ap.add_argument("--prompts", type=int, default=32, help="choices per answer (the engine's batch)")
    ap.add_argument("--labels", type=int, default=5, help="label log-probs per choice")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=str(HERE / "results" / "http_client.json"))
    args = ap.parse_args(argv)
    body = answer(args.prompts, args.labels)
    with Server(make_app(body)) as url:
        times = best_of_interleaved(clients(url, body, args.requests), args.rounds, warmup=True)
    size = len(json.dumps(body).encode())
    cpu = platform.processor() or platform.machine()
    print(f"{args.requests} requests per round, answers of {size:,} bytes ({args.prompts} choices x "
          f"{args.labels} labels), best of {args.rounds} interleaved rounds; {cpu}")
    print(f"{'client':<10} {'ms/request':>10} {'spread ms':>10}")
    rows = {}
    for name, t in times.items():
        per, spread = 1e3 * t.best / args.requests, 1e3 * t.spread / args.requests
        rows[name] = {"ms_per_request": per, "spread_ms": spread, "round_seconds": t.times}
        print(f"{name:<10} {per:>10.2f} {spread:>10.2f}")
    out = {"settings": vars(args), "answer_bytes": size, "clients": rows}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.json}")
    return out


if __name__ == "__main__":
    main()
