"""``logitjudge serve``: one judge behind an HTTP service (FastAPI + uvicorn; ``pip install 'logitjudge[serve]'``).

``schema.py`` the request and response models, ``batcher.py`` the queue that merges concurrent requests into one
``lj.score`` call, ``answers.py`` an answer from a request's table (``lj.analyze``, the hold probability),
``sgl.py`` SGLang's ``/v1/score`` on the engine's label reads, ``app.py`` the routes. The service sits at the top,
beside the CLI: it calls ``lj.load_judge`` / ``lj.score`` / ``lj.analyze`` and nothing below imports it. This
module holds only the subcommand's flags and entry (FastAPI is imported when the service starts).
"""

from __future__ import annotations

from ..errors import LogitJudgeError


def add_serve_flags(p) -> None:
    """The serve subcommand's flags: the judge's [model] flags (as ``logitjudge score`` takes them) and the
    service's own."""
    from ..flags import add_flags
    from ..spec import ModelSpec

    add_flags(p, ModelSpec, dest_prefix="model.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on")
    p.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY on /v1/* (unset: open; "
                                                   "also read from $LOGITJUDGE_API_KEY)")
    p.add_argument("--max-body-bytes", type=int, default=8 * 2**20, help="largest request body (413 past it)")
    p.add_argument("--max-items", type=int, default=256, help="items per request (422 past it)")
    p.add_argument("--max-queue", type=int, default=4096, help="items waiting at once (429 with Retry-After past it)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds a request may take (504 past it)")
    p.add_argument("--batch-window-ms", type=float, default=15.0,
                   help="how long the first request of a batch waits for others to merge with")
    p.add_argument("--n-boot", type=int, default=200, help="bootstrap resamples of the bias summary's intervals")
    p.add_argument("--out", default=None, help="folder where each answered /v1/judge request's score table is "
                                               "saved (judge-NNNNNN.npz); unset: nothing is written")


def limits_of(args):
    """The service's :class:`~logitjudge.serve.app.Limits` from the parsed flags, each bound checked."""
    import os

    from .app import Limits

    for flag, value, low in (("--max-body-bytes", args.max_body_bytes, 1), ("--max-items", args.max_items, 1),
                             ("--max-queue", args.max_queue, 1), ("--timeout", args.timeout, 1e-3),
                             ("--batch-window-ms", args.batch_window_ms, 0), ("--n-boot", args.n_boot, 0)):
        if value < low:
            raise LogitJudgeError(f"{flag} {value}: must be at least {low}")
    return Limits(api_key=args.api_key or os.environ.get("LOGITJUDGE_API_KEY") or None,
                  max_body_bytes=args.max_body_bytes, max_items=args.max_items, max_queue=args.max_queue,
                  timeout_s=args.timeout, window_s=args.batch_window_ms / 1000, n_boot=args.n_boot, out=args.out,
                  token_budget=getattr(args, "model.token_budget"), prefix_mode=getattr(args, "model.prefix_mode"),
                  verify=getattr(args, "model.verify"))


def load_flags_judge(args):
    """``lj.load_judge`` on the [model] flags (the engine's own settings as ``engine_options``)."""
    import logitjudge as lj
    from logitjudge.api import ENGINE_OPTIONS

    m = {k.split(".", 1)[1]: v for k, v in vars(args).items() if k.startswith("model.")}
    return lj.load_judge(m["id"], dtype=m["dtype"], device=m["device"], threads=m["threads"],
                         quantize=m["quantize"], attn_implementation=m["attn_implementation"], engine=m["engine"],
                         engine_options={k: m[k] for k in ENGINE_OPTIONS if m.get(k) is not None})


def cmd_serve(args) -> int:
    try:
        import uvicorn

        from .app import create_app
    except ImportError as e:
        raise LogitJudgeError(f"logitjudge serve needs FastAPI and uvicorn ({e}); install them with pip install "
                              "'logitjudge[serve]'") from None
    limits = limits_of(args)
    judge = load_flags_judge(args)
    uvicorn.run(create_app(judge, limits), host=args.host, port=args.port, log_level="info")
    return 0
