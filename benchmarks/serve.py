"""logitjudge serve's throughput: items/s with 1, 4 and 16 concurrent clients against one ``lj.score`` call on the
same items (issue 54).

The service (``logitjudge.serve.app.create_app`` under uvicorn on 127.0.0.1, in this process) merges the requests
that arrive within its batch window into one ``lj.score`` call; C client threads each send requests of
``--per-request`` items, one after another, until the workload is done. The reference is one ``lj.score`` call on
every item (no HTTP, no merging window). Each configuration's time is the best of ``--rounds`` interleaved rounds
(benchmarks/timing.py); items/s = items / that time. The answers of every configuration are checked against the
reference's probabilities (max abs difference printed): a faster wrong answer is not a result. Prints a table and
writes JSON (``--json``).

    LOGITJUDGE_CACHE=... nice -n 5 .venv/bin/python -m benchmarks.serve --items 16 --tokens 48 --threads 2
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import threading
from pathlib import Path

import httpx
import numpy as np

from benchmarks.local_server import Server
from benchmarks.timing import best_of_interleaved
from benchmarks.workloads import make_texts


def run_clients(url: str, rows: list[dict], clients: int, per_request: int, orderings: str) -> dict:
    """Every row judged by ``clients`` threads taking requests of ``per_request`` rows from one work list; returns
    id -> per-order distributions."""
    chunks = [rows[i:i + per_request] for i in range(0, len(rows), per_request)]
    lock, out, errors = threading.Lock(), {}, []

    def client():
        with httpx.Client(timeout=600) as c:
            while True:
                with lock:
                    if not chunks:
                        return
                    chunk = chunks.pop(0)
                r = c.post(f"{url}/v1/judge", json={"items": chunk, "orderings": orderings, "per_order": True})
                if r.status_code != 200:
                    errors.append(r.text)
                    return
                for it in r.json()["items"]:
                    out[it["id"]] = [o["distribution"] for o in it["criteria"][0]["orders"]]

    threads = [threading.Thread(target=client) for _ in range(clients)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    if errors:
        raise RuntimeError(f"the service refused a request: {errors[0]}")
    return out


def cpu_model() -> str:
    try:
        info = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
        return f"{fields.get('Model name', '?').strip()} (family {fields.get('CPU family', '?').strip()})"
    except (OSError, subprocess.SubprocessError):
        return platform.processor() or "?"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--items", type=int, default=16, help="items in the workload")
    ap.add_argument("--tokens", type=int, default=48, help="tokens per item text")
    ap.add_argument("--orderings", default="balanced")
    ap.add_argument("--per-request", type=int, default=1, help="items per request")
    ap.add_argument("--clients", default="1,4,16", help="concurrent clients, comma-separated")
    ap.add_argument("--window-ms", type=float, default=15.0, help="the service's batch window")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--json", default="benchmarks/results/serve.json")
    args = ap.parse_args(argv)

    import logitjudge as lj
    from logitjudge.serve.app import Limits, create_app

    judge = lj.load_judge(args.model, threads=args.threads)
    texts, where = make_texts(judge.tokenizer, args.items, args.tokens)
    rows = [{"id": it.id, "text": it.text} for it in texts]
    clients = [int(c) for c in args.clients.split(",")]
    app = create_app(judge, Limits(window_s=args.window_ms / 1000,
                                   max_items=max(args.per_request, 1), max_queue=10**6))
    with Server(app) as url:
        fns = {"lj.score": lambda: lj.score(judge, rows, orderings=args.orderings, progress=False).table.probs}
        for c in clients:
            fns[f"serve x{c}"] = (lambda c=c: run_clients(url, rows, c, args.per_request, args.orderings))
        # first-call costs (the native engine's setup) once, untimed, on one item; the service shares them
        warm = {k: (lambda: None) for k in fns}
        warm["lj.score"] = lambda: lj.score(judge, rows[:1], orderings=args.orderings, progress=False)
        t = best_of_interleaved(fns, args.rounds, warmup=warm)
        stats = httpx.get(f"{url}/health").json()
    ref = t["lj.score"].value[:, 0]
    table, out = [], []
    for name, timing in t.items():
        got = ref if name == "lj.score" else np.array([timing.value[r["id"]] for r in rows])
        diff = float(np.abs(got - ref).max())
        row = {"run": name, "seconds": timing.best, "spread": timing.spread, "rounds": len(timing.times),
               "items_per_s": args.items / timing.best, "max_abs_prob_diff": diff}
        out.append(row)
        table.append(f"| {name} | {timing.best:.2f} | {row['items_per_s']:.2f} | {diff:.1e} |")
    env = {"model": args.model, "items": args.items, "tokens": args.tokens, "orderings": args.orderings,
           "per_request": args.per_request, "window_ms": args.window_ms, "texts": where, "cpu": cpu_model(),
           "threads": args.threads, "service_batches": stats["batches"], "service_requests": stats["requests"]}
    print(f"{args.model}, {args.items} items x {args.tokens} tokens, {args.orderings} orders, {args.per_request} "
          f"item(s) per request; {env['cpu']}, {args.threads or 'default'} threads; texts: {where}\n")
    print("| run | seconds | items/s | max abs prob diff vs lj.score |\n|---|---|---|---|")
    print("\n".join(table))
    print(f"\nthe service ran {stats['batches']} lj.score calls for {stats['requests']} requests")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"env": env, "rows": out}, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
