"""What the frameworks' own judges read from one prompt, for a side-by-side with logitjudge's order-averaged exact
score (docs/integrations.md, "Side by side"):

- :func:`geval_score`: DeepEval's G-Eval weighting (``calculate_weighted_summed_score`` of
  ``deepeval.metrics.g_eval.utils``): over the top-20 next-token log-probabilities at the score token, the tokens
  that are decimal digits with probability at least 1%, each read as its integer, weighted by its probability
  renormalised over the kept tokens; the raw (generated) score where none is kept;
- the single-order grade of a regex reader such as inspect_ai's ``model_graded_qa``: the greedy token, which is a
  grade only where it is one of the labels (else nothing parses).

:func:`first_order_readings` reads both from a plain forward pass on one prompt of ``lj.score``'s
``dump_prompts`` (the prompt exactly as logitjudge tokenizes it), so all three readings see the same judge and
the same words; only logitjudge's reads every order.
"""

from __future__ import annotations

import math

TOP = 20  # G-Eval's top_logprobs
MIN_PROB = 0.01  # G-Eval drops the tokens under 1%


def geval_score(top_logprobs: list[tuple[str, float]], raw_score):
    """G-Eval's weighted score (module doc) from ``(token, logprob)`` pairs, best first."""
    weights: dict[int, float] = {}
    for token, logprob in top_logprobs:
        if logprob < math.log(MIN_PROB) or not token.isdecimal():
            continue
        weights[int(token)] = weights.get(int(token), 0.0) + math.exp(logprob)
    total = sum(weights.values())
    return raw_score if total == 0 else sum(s * p for s, p in weights.items()) / total


def first_order_readings(judge, record: dict, top: int = TOP) -> dict:
    """One dumped prompt (a line of ``lj.score(..., dump_prompts=PATH)``) through a plain forward pass of
    ``judge``: the ``top`` next tokens with their log-probabilities, the greedy token, the grade a regex reader
    parses from it (the label whose continuation it is; None: not a label) and G-Eval's weighted score."""
    import torch

    model = judge.forward_model()  # a serving engine's judge: its fp32 weights, loaded here
    tok = judge.tokenizer
    ids = tok(record["prompt"], return_tensors="pt", add_special_tokens=record["add_special_tokens"])["input_ids"]
    with torch.no_grad():
        logits = model(ids.to(model.device)).logits[0, -1].float()
    values, index = torch.log_softmax(logits, -1).topk(top)
    pairs = [(tok.decode([i]), float(v)) for i, v in zip(index.tolist(), values.tolist())]
    greedy = pairs[0][0]
    conts = dict(zip(record["continuations"], record["labels"]))  # each label's text as it follows the prompt
    grade = conts.get(greedy)
    raw = int(greedy) if greedy.isdecimal() else None
    return {"top_logprobs": pairs, "greedy": greedy, "grade": grade, "geval": geval_score(pairs, raw),
            "option_order": record["option_order"]}
