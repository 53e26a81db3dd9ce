"""Exactness audit and throughput per architecture family, at small scale (random weights).

For each family of ``tests/test_families.py`` (the same builders, hidden ``--width``): the mode ``auto`` picks,
an exactness audit (``logitjudge.verify.verify_exactness``: ``--verify`` prompts against the plain forward,
tolerance 1e-5 on option probabilities) and the time of the engine and of the plain path (one full forward per
prompt and label; the best of ``--rounds`` interleaved rounds, default 1, ``benchmarks.timing``) on ``--texts``
texts of about ``--text-tokens`` tokens x balanced orders of an n-option rubric.
Prints a table and writes JSON. On a GPU: ``--device cuda`` (``benchmarks/gpu_check.sh`` runs it).

    .venv/bin/python -m benchmarks.families --device cpu --width 64 --texts 2      # smoke, ~1 min on 2 cores
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch

from benchmarks.timing import best_of_interleaved

ROOT = Path(__file__).resolve().parents[1]


def _families_module():
    """tests/test_families.py's builders. It imports ``conftest`` by that name (pytest puts tests/ on sys.path):
    the root's ``tests.conftest`` (importable as ``python -m benchmarks.families`` runs from the root) answers it."""
    import tests.conftest

    sys.modules.setdefault("conftest", tests.conftest)
    spec = importlib.util.spec_from_file_location("test_families_builders", ROOT / "tests" / "test_families.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def run_family(fam, name: str, args, tok) -> dict:
    from logitjudge import orderings
    from logitjudge.engine import Engine, plain_prompt_logprobs
    from logitjudge.items import Item
    from logitjudge.models import Judge
    from logitjudge.prompts import builtin_template
    from logitjudge.requests import item_prompts
    from logitjudge.verify import verify_exactness

    model, attn = fam.build(name, len(tok), width=args.width)
    model = model.to(args.device)
    lm = Judge.of(model, tok, f"random-{name}", dtype="fp32", device=args.device)
    reps = max(1, args.text_tokens // 25)  # the story sentence is ~25 tokens of the tiny tokenizer
    items = [Item(f"t{k}", (fam.STORY * (reps + k)).strip()) for k in range(args.texts)]
    rub, orders, tpl = fam.rubric(args.options), orderings.balanced(args.options), builtin_template("text-first")
    groups = [item_prompts(lm, rub, it, orders, tpl) for it in items]
    engine = Engine(lm, token_budget=args.token_budget)
    audit = verify_exactness(engine, groups, args.verify, rng=0)  # also the warm-up
    timed = best_of_interleaved({"engine": lambda: engine.prompt_logprobs(groups),
                                 "plain": lambda: [plain_prompt_logprobs(model, g) for g in groups]}, args.rounds,
                                sync=torch.cuda.synchronize if args.device.startswith("cuda") else None)
    t_engine, t_plain = timed["engine"].best, timed["plain"].best
    n_prompts = sum(len(g) for g in groups)
    return {"family": name, "attn_implementation": attn, "prefix_mode": engine.prefix_mode,
            "refused": engine.mode_meta["prefix_mode_refused"], "audit_prompts": audit.n_prompts,
            "audit_max_abs_prob_diff": audit.max_abs_diff, "prompts": n_prompts,
            "prompt_tokens": sum(len(p.prompt_ids) for g in groups for p in g),
            "engine_s": t_engine, "plain_s": t_plain, "engine_spread_s": timed["engine"].spread,
            "plain_spread_s": timed["plain"].spread, "prompts_per_s": n_prompts / t_engine,
            "speed_up": t_plain / t_engine}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--width", type=int, default=256, help="hidden size of the random models")
    ap.add_argument("--texts", type=int, default=4)
    ap.add_argument("--text-tokens", type=int, default=400)
    ap.add_argument("--options", type=int, default=5, help="rubric options n (2n balanced orders)")
    ap.add_argument("--verify", type=int, default=5, help="prompts audited against the plain forward")
    ap.add_argument("--token-budget", type=int, default=4096)
    ap.add_argument("--families", default=None, help="comma-separated subset")
    ap.add_argument("--rounds", type=int, default=1, help="timed rounds, engine and plain interleaved (the best)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "families.json"))
    args = ap.parse_args(argv)
    fam = _families_module()
    from tests.conftest import tiny_tokenizer

    tok = tiny_tokenizer()
    names = args.families.split(",") if args.families else fam.FAMILIES
    rows = []
    print(f"device={args.device} width={args.width} texts={args.texts}x~{args.text_tokens} tokens "
          f"n={args.options} (balanced: {2 * args.options} orders)")
    print("| family | attention | auto mode | audit max abs dp (prompts) | prompts/s | engine s | plain s | speed-up |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    for name in names:
        r = run_family(fam, name, args, tok)
        rows.append(r)
        print(f"| {name} | {r['attn_implementation']} | {r['prefix_mode']} | {r['audit_max_abs_prob_diff']:.1e} "
              f"({r['audit_prompts']}) | {r['prompts_per_s']:.1f} | {r['engine_s']:.2f} | {r['plain_s']:.2f} | "
              f"{r['speed_up']:.1f} |", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
