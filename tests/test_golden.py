"""Golden numbers (tests/golden.py): each built-in judge's token ids and option probabilities on a small fixed
workload, as committed, whatever the machine, the cache or the installed versions. Token ids are checked exactly
and first; probabilities within golden.PROB_TOL, from the plain forward and from the engine's own route."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from importlib import metadata

import pytest
from golden import HERE, PROB_TOL, golden_record, plan, prob_difference, probabilities, token_difference

from logitjudge.engine import Engine
from logitjudge.judges import BUILTINS


def _golden(name: str) -> dict:
    return json.loads((HERE / f"{name}.json").read_text(encoding="utf-8"))


def _installed(alias: str) -> bool:
    try:
        metadata.distribution(BUILTINS[alias].parts[0][0])
        return True
    except metadata.PackageNotFoundError:
        return False


def _check(lm, name: str) -> None:
    golden, now = _golden(name), golden_record(lm)
    why = token_difference(golden, [(p["prompt_ids"], p["continuation_ids"]) for p in now["prompts"]])
    assert why is None, why
    assert prob_difference(golden, [p["probs"] for p in now["prompts"]]) is None
    rp = plan(lm)
    engine = Engine(lm)
    fast = engine.prompt_logprobs([rp.prompts(i) for i in range(len(rp))])
    probs = [probabilities(lp) for group in fast for lp in group]
    assert prob_difference(golden, probs) is None, f"the engine ({engine.prefix_mode}): " + \
        str(prob_difference(golden, probs))


def test_gemma_golden(gemma_lm):
    """The demo judge: every prompt starts with its one <bos> (id 2), tokens and probabilities as committed."""
    assert all(p["prompt_ids"][:2] != [2, 2] and p["prompt_ids"][0] == 2 for p in _golden("gemma-3-270m")["prompts"])
    _check(gemma_lm, "gemma-3-270m")


@pytest.mark.parametrize("alias", [a for a in BUILTINS if a != "gemma-3-270m"])
def test_instruct_golden(alias):
    if not (HERE / f"{alias}.json").exists() or not _installed(alias):
        pytest.skip(f"{alias}: not installed (pip install 'logitjudge[judges]') or no golden file")
    from logitjudge.models import load_model

    _check(load_model(alias), alias)


def test_the_check_fails_without_bos():
    """Dropping the BOS is a token difference, named as such before any probability is compared."""
    golden = _golden("gemma-3-270m")
    ids = [(p["prompt_ids"][1:], p["continuation_ids"]) for p in golden["prompts"]]
    why = token_difference(golden, ids)
    assert why is not None and why.startswith("tokens differ first") and "token 1" in why
    assert token_difference(golden, [(p["prompt_ids"], p["continuation_ids"]) for p in golden["prompts"]]) is None
    moved = [[*p["probs"][:-1], p["probs"][-1] + 2 * PROB_TOL] for p in golden["prompts"]]
    assert "a numerical change" in prob_difference(golden, moved)


def test_a_tokenizer_that_drops_bos_is_mended(gemma_lm):
    """The converted judge's tokenizer made to drop <bos> (as transformers 5.19's GGUF converter left it): its
    convention, read from the conversion record, puts <bos> back into every prompt and says so; the tokens are
    the golden ones."""
    from tokenizers import processors

    lm = replace(gemma_lm, tokenizer=copy.deepcopy(gemma_lm.tokenizer))
    lm.tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B")
    assert lm.tokenizer("Hello world")["input_ids"][0] != 2
    rp = plan(lm)
    eps = [ep for i in range(len(rp)) for ep in rp.prompts(i)]
    assert token_difference(_golden("gemma-3-270m"), [(ep.prompt_ids, ep.continuation_ids) for ep in eps]) is None
    assert rp.mends and all("put <bos> (id 2) first" in m for m in rp.mends)
