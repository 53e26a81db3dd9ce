"""Engine parity: every fast path against the plain path (one full forward per prompt, fp32, full softmax).

Tolerance (fp32): 1e-5 absolute on every option probability; we also check log-probabilities within 5e-5.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from logitjudge import orderings
from logitjudge.engine import Engine, Job, distribution, plain_prompt_logprobs, prompt_job
from logitjudge.items import Item
from logitjudge.judge.backends.native import CPU_BATCH_TOKENS
from logitjudge.judge.features import cache_keyword
from logitjudge.judge.prefix import PrefixKV
from logitjudge.prompts import Template, builtin_template
from logitjudge.requests import item_prompts
from logitjudge.rubric import Criterion, Rubric, ScoreOption, likert
from logitjudge.runs import score
from logitjudge.trie import build, count_tokens

PROB_ATOL = 1e-5
LOGP_ATOL = 5e-5  # tiny model
GEMMA_LOGP_ATOL = 2e-4  # 18 layers with hidden norms in the hundreds: fp32 reassociation moves log-probs ~1e-4

WORDS = ["Very poor", "Poor", "Fair", "Good", "Excellent"]
STORY = "Once upon a time a cat sat on the mat and the dog barked at the moon while the sun rose slowly. "
pytestmark = pytest.mark.usefixtures("tiny_one_thread")  # the tiny model on one thread, the real Gemma on all


def word_rubric() -> Rubric:
    # multi-token labels ("Excellent" is several tokens for the tiny tokenizer)
    opts = tuple(ScoreOption(float(i + 1), w, f"the text is {w.lower()}") for i, w in enumerate(WORDS))
    return Rubric((Criterion("Quality", opts, "overall quality"),), "Rate the text.")


def digit_rubric(n_criteria: int = 1) -> Rubric:
    crits = tuple(likert(name, f"{name.lower()} of the text", [w for w in WORDS])
                  for name in ["Quality", "Coherence", "Fluency"][:n_criteria])
    return Rubric(crits, "Rate the text below.")


def items_of_lengths(*repeats: int) -> list[Item]:
    return [Item(f"i{k}", (STORY * r).strip()) for k, r in enumerate(repeats)]


def assert_parity(engine_lps, plain_lps, logp_atol=LOGP_ATOL):
    for a, b in zip(engine_lps, plain_lps):
        assert np.abs(a - b).max() < logp_atol
        assert np.abs(distribution(a)[0] - distribution(b)[0]).max() < PROB_ATOL


@pytest.mark.parametrize("mode", ["native", "shared", "copy"])
@pytest.mark.parametrize("template", ["text-first", "rubric-first"])
@pytest.mark.parametrize("design", ["balanced", "random"])
def test_parity_tiny(tiny_lm, mode, template, design):
    rub = digit_rubric(2)
    orders = orderings.balanced(5) if design == "balanced" else orderings.shared_random(5, 4, rng=1)
    tpl = builtin_template(template)
    items = items_of_lengths(1, 3, 6)  # different lengths, all past the 24-token sliding window
    groups = [item_prompts(tiny_lm, rub, it, orders, tpl) for it in items]
    eng = Engine(tiny_lm, prefix_mode=mode, token_budget=300)
    got = eng.prompt_logprobs(groups)
    for g, r in zip(groups, got):
        assert_parity(r, plain_prompt_logprobs(tiny_lm.model, g))


def test_parity_multi_token_labels(tiny_lm):
    rub = word_rubric()
    items = items_of_lengths(2, 5)
    groups = [item_prompts(tiny_lm, rub, it, orderings.balanced(5), Template()) for it in items]
    assert any(len(c) > 1 for c in groups[0][0].continuation_ids), "the test needs multi-token labels"
    got = Engine(tiny_lm, token_budget=200).prompt_logprobs(groups)
    plains = [plain_prompt_logprobs(tiny_lm.model, g) for g in groups]
    for r, plain in zip(got, plains):
        assert_parity(r, plain)
    # the plain path with logits only where read (what test_parity_gemma compares with) gives the same numbers up
    # to fp32 rounding (the unembedding's row count may change its summation order), on multi-token labels
    for a, b in zip(plain_prompt_logprobs(tiny_lm.model, groups[1][:2], logits="read"), plains[1]):
        assert np.abs(a - b).max() < 1e-5
        assert np.abs(distribution(a)[0] - distribution(b)[0]).max() < 1e-6


def test_parity_long_prompt(tiny_lm):
    """A prompt far past the sliding window (24 here) and past 512 tokens."""
    items = items_of_lengths(30)
    groups = [item_prompts(tiny_lm, digit_rubric(), it, orderings.shared_random(5, 3, rng=0), Template())
              for it in items]
    assert len(groups[0][0].prompt_ids) > 512
    got = Engine(tiny_lm).prompt_logprobs(groups)
    assert_parity(got[0], plain_prompt_logprobs(tiny_lm.model, groups[0]))


def test_backend_batch_tokens_cut_the_budget(tiny_lm):
    """A backend's own ``batch_tokens`` (the native step's on CPU) cuts a token budget's batch into more forward
    calls, and the probabilities stay those of one call per level."""
    items = items_of_lengths(1, 2, 4, 7)
    rub, orders = word_rubric(), orderings.balanced(5)
    whole = Engine(tiny_lm, token_budget=100_000)
    whole.backend.batch_tokens = None
    cut = Engine(tiny_lm, token_budget=100_000)
    assert cut.prefix_mode == "native" and cut.backend.batch_tokens == CPU_BATCH_TOKENS
    cut.backend.batch_tokens = 64
    t_whole = score(tiny_lm, items, rub, orders, engine=whole, progress=False)
    t_cut = score(tiny_lm, items, rub, orders, engine=cut, progress=False)
    assert cut.stats["forward_calls"] > whole.stats["forward_calls"]
    assert cut.stats["tokens"] == whole.stats["tokens"]  # the same trie, cut differently
    assert np.abs(t_cut.probs - t_whole.probs).max() <= 1e-6
    assert t_cut.meta["batch_tokens"] == 64 and t_whole.meta["batch_tokens"] is None


def test_batching_does_not_change_results(tiny_lm):
    items = items_of_lengths(1, 2, 4, 7)
    rub = word_rubric()
    orders = orderings.balanced(5)
    t_small = score(tiny_lm, items, rub, orders, engine=Engine(tiny_lm, token_budget=64), progress=False)
    t_big = score(tiny_lm, items, rub, orders, engine=Engine(tiny_lm, token_budget=100_000), progress=False)
    t_copy = score(tiny_lm, items, rub, orders, engine=Engine(tiny_lm, prefix_mode="copy"), progress=False)
    t_hf = score(tiny_lm, items, rub, orders, engine=Engine(tiny_lm, prefix_mode="shared"), progress=False)
    assert np.abs(t_small.probs - t_big.probs).max() <= 1e-6
    assert np.abs(t_hf.probs - t_big.probs).max() <= 1e-5
    assert np.abs(t_copy.probs - t_big.probs).max() <= 1e-5
    # results come back in input order whatever the length-sorted batching did
    assert list(t_small.item_ids) == [it.id for it in items]
    single = score(tiny_lm, items[2:3], rub, orders, progress=False)
    assert np.abs(single.probs[0] - t_big.probs[2]).max() <= 1e-6


def test_trie_shares_tokens(tiny_lm):
    g = item_prompts(tiny_lm, digit_rubric(), items_of_lengths(3)[0], orderings.balanced(5), Template())
    job = prompt_job(g)
    roots = build(job.sequences, job.reads)
    plain_tokens = sum(len(ep.prompt_ids) for ep in g)
    shared = count_tokens(roots)
    lcp = len(roots[0].tokens)
    assert len(roots) == 1 and lcp > 40
    # the shared prefix is counted once; forward/reversed rotations that start alike share their first line
    assert shared < plain_tokens - 9 * lcp
    no_trie = lcp + sum(len(ep.prompt_ids) - lcp for ep in g)
    assert shared < no_trie


def test_prefix_cache_matches_hf_cache(tiny_lm):
    """The explicit PrefixKV equals transformers' own DynamicCache of the same tokens (TransformerLens-style)."""
    from transformers import DynamicCache

    eng = Engine(tiny_lm)
    ids = tiny_lm.tokenizer((STORY * 3).strip()).input_ids
    res = eng.evaluate([Job([ids], [[(len(ids) - 1, 5, "r")]], keep=["end"])])[0]
    pkv: PrefixKV = res.caches["end"]
    assert pkv.length == len(ids)
    cache = DynamicCache()
    with torch.inference_mode():
        tiny_lm.model(input_ids=torch.tensor([ids]), use_cache=True, **{cache_keyword(tiny_lm.model): cache})
    assert len(cache.layers) == tiny_lm.model.config.num_hidden_layers  # the forward filled the cache it was given
    for i, layer in enumerate(cache.layers):
        assert torch.allclose(pkv.keys[i], layer.keys[0], atol=1e-5)
        assert torch.allclose(pkv.values[i], layer.values[0], atol=1e-5)
    # and continuing from it gives the same next-token log-prob as one full forward
    extra = tiny_lm.tokenizer(" and then", add_special_tokens=False).input_ids
    cont = eng.evaluate([Job([extra], [[(len(extra) - 1, 7, "x")]], prefix=pkv)])[0].logprobs["x"]
    with torch.inference_mode():
        logits = tiny_lm.model(input_ids=torch.tensor([ids + extra])).logits[0, -1].float()
    assert abs(cont - float(torch.log_softmax(logits, -1)[7])) < LOGP_ATOL


def test_cache_keyword_is_the_one_the_forward_takes():
    """transformers 5.24 renamed the forward's ``past_key_values`` to ``cache``; the other name would land in
    ``**kwargs`` unread and the forward would run on an empty cache of its own (a silent wrong number)."""
    from logitjudge.errors import ModeError

    class New:
        def forward(self, input_ids=None, cache=None, **kwargs): ...

    class Old:
        def forward(self, input_ids=None, past_key_values=None, **kwargs): ...

    class Neither:
        def forward(self, input_ids=None, **kwargs): ...

    assert (cache_keyword(New()), cache_keyword(Old())) == ("cache", "past_key_values")
    with pytest.raises(ModeError, match="neither cache= nor past_key_values="):
        cache_keyword(Neither())


def test_label_mass_and_normalisation(tiny_lm):
    t = score(tiny_lm, items_of_lengths(1), digit_rubric(), orderings.fixed(5, 1), progress=False)
    assert np.allclose(t.probs.sum(-1), 1.0)
    assert np.all((t.label_mass > 0) & (t.label_mass <= 1.0))


@pytest.mark.slow
def test_parity_gemma(gemma_lm):
    """The real Gemma-3-270M: text shorter and longer than its 512-token sliding window, single-token labels,
    and the bracketed 1-10 rubric whose labels are several tokens ("10]]")."""
    rub = digit_rubric()
    short = Item("short", STORY.strip())
    long = Item("long", (STORY * 28).strip())
    groups = [item_prompts(gemma_lm, rub, it, orderings.shared_random(5, 2, rng=3), Template()) for it in (short, long)]
    assert len(groups[1][0].prompt_ids) > 512
    got = Engine(gemma_lm, token_budget=2048).prompt_logprobs(groups)
    # the plain path with the vocabulary logits only where read (the same numbers as at every position:
    # test_parity_multi_token_labels), without the 262k-vocabulary unembedding of every prompt token
    for g, r in zip(groups, got):
        assert_parity(r, plain_prompt_logprobs(gemma_lm.model, g, logits="read"), GEMMA_LOGP_ATOL)
    ten = Rubric((likert("Rating", "overall", [f"level {i}" for i in range(1, 11)]),), "Rate the answer.")
    g = item_prompts(gemma_lm, ten, short, orderings.fixed(10, 1), builtin_template("bracketed"))
    assert max(len(c) for c in g[0].continuation_ids) >= 3
    assert_parity(Engine(gemma_lm).prompt_logprobs([g])[0], plain_prompt_logprobs(gemma_lm.model, g, logits="read"),
                  GEMMA_LOGP_ATOL)


def test_push_down_keeps_results(tiny_lm):
    g = item_prompts(tiny_lm, word_rubric(), items_of_lengths(2)[0], orderings.balanced(5), Template())
    job = prompt_job(g)
    deep = build(job.sequences, job.reads)
    flat = build(job.sequences, job.reads, min_shared=1000)
    assert max(len(n.children) for n in flat) >= max(len(n.children) for n in deep)
    assert count_tokens(flat) > count_tokens(deep)
    a = Engine(tiny_lm, min_shared=0).prompt_logprobs([g])[0]
    b = Engine(tiny_lm, min_shared=1000).prompt_logprobs([g])[0]
    for x, y in zip(a, b):  # another split of the same sums: fp32 rounding only
        assert np.abs(x - y).max() < LOGP_ATOL
        assert np.abs(distribution(x)[0] - distribution(y)[0]).max() < 1e-6
