"""Golden numbers: a small fixed workload on each built-in judge, its token ids and option probabilities, made by
the plain fp32 forward (one full forward per prompt and label, full-vocabulary log-softmax) and committed in
``tests/golden/<judge>.json``. A judge's tokens and probabilities must not depend on the machine, a cache or the
package versions that made them: tests/test_golden.py holds every run to these files.

    python tests/golden.py gemma-3-270m          # prints the comparison with the committed file
    python tests/golden.py gemma-3-270m --write  # writes it (only when a change of numbers is intended)

The comparison says which came first: a token difference (a tokenizer or conversion change) is reported before
any probability is compared (a numerical change).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent / "golden"
ITEMS = 2  # the first demo texts
ORDERINGS = 2  # the first balanced orderings of the default 5-option rubric
PROB_TOL = 1e-4  # across CPUs and kernel routes: fp32 reassociation is ~1e-6 on these prompts


def plan(lm):
    """The workload's RequestPlan: the first :data:`ITEMS` demo texts, the default rubric and template, the first
    :data:`ORDERINGS` balanced orderings (bf16's calibration reads the same: logitjudge.autodtype)."""
    from logitjudge.requests import demo_plan

    return demo_plan(lm, items=ITEMS, orderings=ORDERINGS)


def probabilities(logprobs) -> list[float]:
    p = np.exp(np.asarray(logprobs, dtype=np.float64) - np.max(logprobs))
    return (p / p.sum()).tolist()


def golden_record(lm) -> dict:
    """The workload's prompts: token ids, each option's continuation ids and its probability (plain forward)."""
    from logitjudge.engine import plain_prompt_logprobs

    rp, prompts = plan(lm), []
    for i in range(len(rp)):
        for j, ep in enumerate(rp.prompts(i)):
            prompts.append({"item": rp.units[i].id, "prompt": j, "prompt_ids": list(ep.prompt_ids),
                            "continuation_ids": [list(c) for c in ep.continuation_ids],
                            "probs": probabilities(plain_prompt_logprobs(lm.model, [ep])[0])})
    return {"prompts": prompts}


def token_difference(golden: dict, ids: list[tuple]) -> str | None:
    """The first difference between the golden prompts' token ids and ``ids`` ((prompt ids, continuation ids)
    per prompt, in order), in words; None where they are equal."""
    for g, (prompt_ids, conts) in zip(golden["prompts"], ids):
        where = f"item {g['item']!r}, prompt {g['prompt'] + 1}"
        want, got = g["prompt_ids"], list(prompt_ids)
        if want != got:
            k = next((k for k, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
            return (f"tokens differ first (a tokenizer or conversion change): {where}, token {k + 1}: golden "
                    f"{want[k:k + 4]} (length {len(want)}), now {got[k:k + 4]} (length {len(got)})")
        if g["continuation_ids"] != [list(c) for c in conts]:
            return f"tokens differ first (a tokenizer change): {where}, the label continuations"
    if len(ids) != len(golden["prompts"]):
        return f"tokens differ first: {len(ids)} prompts, golden {len(golden['prompts'])}"
    return None


def prob_difference(golden: dict, probs: list[list[float]], *, tol: float = PROB_TOL) -> str | None:
    """The largest option-probability difference, in words, where it is over ``tol``; else None."""
    worst, where = 0.0, ""
    for g, p in zip(golden["prompts"], probs):
        d = float(np.abs(np.asarray(g["probs"]) - np.asarray(p)).max())
        if d > worst:
            worst, where = d, f"item {g['item']!r}, prompt {g['prompt'] + 1}"
    if worst > tol:
        return (f"the tokens are the golden ones but the probabilities differ (a numerical change): max |dp| "
                f"{worst:.3g} > {tol:g} at {where}")
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("judge")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    import transformers

    import logitjudge as lj

    lm = lj.load_judge(args.judge)
    rec = golden_record(lm)
    path = HERE / f"{args.judge}.json"
    if args.write:
        rec["made_by"] = {"transformers": transformers.__version__, "python": platform.python_version(),
                          "machine": platform.processor() or platform.machine(),
                          "command": f"python tests/golden.py {args.judge} --write"}
        HERE.mkdir(exist_ok=True)
        path.write_text(json.dumps(rec) + "\n", encoding="utf-8")
        print(f"wrote {path}: {len(rec['prompts'])} prompts")
        return 0
    golden = json.loads(path.read_text(encoding="utf-8"))
    why = token_difference(golden, [(p["prompt_ids"], p["continuation_ids"]) for p in rec["prompts"]]) or \
        prob_difference(golden, [p["probs"] for p in rec["prompts"]])
    print(why or f"{args.judge}: {len(rec['prompts'])} prompts as golden")
    return 1 if why else 0


if __name__ == "__main__":
    sys.exit(main())
