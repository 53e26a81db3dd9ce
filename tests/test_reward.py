"""The RLAIF reward (logitjudge.rlaif) and the grouped trie it scores on (logitjudge.runs.GroupedRun): a real TRL
GRPOTrainer runs two steps with a tiny random policy and the tiny judge, and the rewards it logged equal scoring
the same completions directly; the grouped trie equals the plain forward within 1e-5."""

from __future__ import annotations

import numpy as np
import pytest

from logitjudge.engine import Engine
from logitjudge.items import Item
from logitjudge.orderings import parse
from logitjudge.rlaif import JudgeReward, RewardError, completion_text, prompt_text, reward
from logitjudge.rubric import builtin_rubric
from logitjudge.runs import score

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = ["Summarise: the council met on Tuesday.", "Describe the cat."]


def _direct(lm, rubric, items, orders) -> np.ndarray:
    """The expected score of each item, averaged over its orders, from the plain per-item run (no grouping)."""
    t = score(lm, items, rubric, orders, progress=False)
    return np.einsum("ickn,cn->ick", t.probs, t.values).mean(axis=(1, 2))


def test_grouped_trie_equals_plain_forward(tiny_lm):
    """Fast path parity: a group's items on one trie against one full forward per prompt (fp32), 1e-5."""
    from logitjudge.runs import GroupedRun, planned_tokens

    rubric = builtin_rubric("default")
    items = [Item(f"c{i}", t, context=PROMPTS[0], group="p0") for i, t in enumerate(["It met.", "Tuesday."])]
    items.append(Item("c2", "A cat.", context=PROMPTS[1], group="p1"))
    orders = parse("random:3", rubric.n_options, n_items=len(items), seed=1)
    grouped = GroupedRun(tiny_lm, items, rubric, orders, progress=False)
    shared_tokens = planned_tokens(grouped)
    fast = grouped.execute()
    plain = score(tiny_lm, items, rubric, orders, engine=Engine(tiny_lm, prefix_mode="plain"), progress=False)
    assert np.abs(fast.probs - plain.probs).max() < 1e-5
    alone = planned_tokens(GroupedRun(tiny_lm, [Item(x.id, x.text, x.context) for x in items], rubric, orders,
                                      progress=False))
    assert shared_tokens < alone  # the two completions of p0 share their prompt's tokens


def test_reward_inputs_and_refusals(tiny_lm):
    assert prompt_text([{"role": "user", "content": "Hi"}]) == "user: Hi"
    assert completion_text([{"role": "assistant", "content": "Yes."}]) == "Yes."
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "Ok"}]}]) == "Ok"
    with pytest.raises(RewardError, match="criterion"):
        reward(tiny_lm, rubric="default", criterion="nope")
    with pytest.raises(RewardError, match="reading"):
        reward(tiny_lm, reading="sampled")
    rew = reward(tiny_lm, orderings="random:2", seed=3)
    with pytest.raises(RewardError, match="one prompt per completion"):
        rew(["a"], ["b", "c"])
    chat = rew([[{"role": "user", "content": PROMPTS[1]}]] * 2,
               [[{"role": "assistant", "content": "A cat."}], [{"role": "assistant", "content": "Dog"}]])
    plain = JudgeReward(tiny_lm, builtin_rubric("default"), orderings="random:2", seed=3)
    items = [Item(f"c{i}", t, context=f"user: {PROMPTS[1]}", group="p0") for i, t in enumerate(["A cat.", "Dog"])]
    np.testing.assert_allclose(chat, _direct(tiny_lm, builtin_rubric("default"), items, plain.orders(2, 0)),
                               atol=1e-6)


def _policy(tok):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                      pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      tie_word_embeddings=True)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg)


def test_grpo_trainer_logs_the_judges_rewards(tiny_lm, tmp_path):
    """Two real GRPO steps: every completion's logged reward equals its expected score averaged over the call's
    orders, computed directly (plain per-item run, no grouping), to 1e-6; the logged mean equals their mean."""
    trl = pytest.importorskip("trl")
    from datasets import Dataset

    rew = reward(tiny_lm, rubric="default", orderings="random:3", seed=0)
    args = trl.GRPOConfig(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, num_generations=4,
                          max_completion_length=6, use_cpu=True, report_to=[], logging_steps=1, save_strategy="no",
                          learning_rate=1e-4, beta=0.0, seed=0, dataloader_num_workers=0, log_completions=False)
    trainer = trl.GRPOTrainer(model=_policy(tiny_lm.tokenizer), reward_funcs=[rew], args=args,
                              train_dataset=Dataset.from_dict({"prompt": PROMPTS * 4}),
                              processing_class=tiny_lm.tokenizer)
    trainer.train()
    assert rew.calls >= 2 and trainer.state.global_step == 2
    logged = [h for h in trainer.state.log_history if f"rewards/{rew.__name__}/mean" in h]
    assert len(logged) >= 2
    rubric = builtin_rubric("default")
    for h, call in zip(logged, list(rew.history)[-len(logged):]):
        direct = _direct(tiny_lm, rubric, call["items"], call["option_orders"])
        np.testing.assert_allclose(call["rewards"], direct, atol=1e-6)
        assert abs(h[f"rewards/{rew.__name__}/mean"] - direct.mean()) < 1e-6
    # what the trainer kept of the last generation batch: the same rewards, completion by completion
    last = list(rew.history)[-1]
    kept = list(trainer._logs["rewards"][rew.__name__])
    np.testing.assert_allclose(kept, last["rewards"], atol=1e-6)
    assert [completion_text(c) for c in trainer._logs["completion"]] == [it.text for it in last["items"]]
