"""The shared backend's pruned last layer (logitjudge/judge/backends/shared.py): on every family the shared path
takes, the hidden states at the read positions and the captured keys/values equal the unpruned layer's, on
right-padded rows continuing a real prefix (sliding windows, sinks, soft-caps, MoE and linear-attention layers
below it); pruning is off where it cannot be exact or gains nothing (a linear-attention last layer, every
position read, hooks). The option probabilities against the plain forward: tests/test_families.py."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_tokenizer
from test_families import FAMILIES, _small, build

from logitjudge.judge.backends import shared
from logitjudge.judge.backends.shared import SharedBackend
from logitjudge.judge.prefix import PrefixKV

ATOL = 1e-5
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def vocab():
    return len(tiny_tokenizer())


@pytest.fixture
def reads_counted(monkeypatch):
    """How many times the pruned layer's read attention ran."""
    calls = []
    real = shared.attend_reads

    def counted(*a, **kw):
        calls.append(a[0].shape[0])
        return real(*a, **kw)

    monkeypatch.setattr(shared, "attend_reads", counted)
    return calls


def _batch(backend, vocab: int, seed: int = 1):
    """A 20-token prefix (captured), then 3 right-padded suffix rows of 12, 7 and 10 tokens continuing it
    (past the tiny models' sliding windows of 8 and 16), and reads: each row's last real position plus two
    inside rows 0 and 2."""
    g = torch.Generator().manual_seed(seed)
    pre_ids = torch.randint(3, vocab, (1, 20), generator=g)
    _, cap = backend.forward(pre_ids, [(PrefixKV.empty(backend.n_layers), 1)], capture=True)
    prefix = PrefixKV.empty(backend.n_layers).extend(cap, 0, 20)
    lengths = [12, 7, 10]
    ids = torch.randint(3, vocab, (3, 12), generator=g)
    for r, n in enumerate(lengths):
        ids[r, n:] = 0
    rows, offs = torch.tensor([0, 1, 2, 0, 2]), torch.tensor([11, 6, 9, 3, 0])
    return ids, prefix, lengths, (rows, offs)


@pytest.mark.parametrize("family", FAMILIES)
def test_pruned_last_layer_equals_unpruned(family, vocab, reads_counted):
    model, _ = build(family, vocab)
    backend = SharedBackend(model)
    assert backend.prunes  # every family here ends with a full-attention layer
    ids, prefix, lengths, read = _batch(backend, vocab)
    full, cap_full = backend.forward(ids, [(prefix, 3)], lengths=lengths, capture=True)  # all positions
    assert not reads_counted
    got, cap = backend.forward(ids, [(prefix, 3)], lengths=lengths, read=read, capture=True)
    assert reads_counted == [5]  # the last layer ran its attention for the 5 read positions only
    want = full[read[0], read[1]]
    assert got.shape == want.shape
    assert (got - want).abs().max().item() < ATOL, family
    for a, b in zip(cap, cap_full):  # the captured keys/values (the next trie level's prefix) are unchanged
        if isinstance(a, tuple):
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        else:
            assert torch.equal(a.state, b.state)


def test_no_read_in_the_batch_still_captures(vocab, reads_counted):
    model, _ = build("gpt_oss", vocab)
    backend = SharedBackend(model)
    ids, prefix, lengths, _ = _batch(backend, vocab)
    none = (torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    got, cap = backend.forward(ids, [(prefix, 3)], lengths=lengths, read=none, capture=True)
    _, cap_full = backend.forward(ids, [(prefix, 3)], lengths=lengths, capture=True)
    assert got.shape == (0, model.config.hidden_size) and not reads_counted
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(cap, cap_full))


def test_reading_every_position_or_hooks_disable_pruning(vocab, reads_counted):
    model, _ = build("llama", vocab)
    backend = SharedBackend(model)
    ids, prefix, lengths, _ = _batch(backend, vocab)
    B, S = ids.shape
    every = (torch.arange(B).repeat_interleave(S), torch.arange(S).repeat(B))
    full, _ = backend.forward(ids, [(prefix, B)], lengths=lengths)
    got, _ = backend.forward(ids, [(prefix, B)], lengths=lengths, read=every)
    assert not reads_counted and torch.equal(got, full.reshape(B * S, -1))
    seen = []
    with backend.hooks({"blocks.1.hook_mlp_out": lambda t: seen.append(t.shape) and None}):
        backend.forward(ids, [(prefix, B)], lengths=lengths, read=(torch.tensor([0]), torch.tensor([11])))
    assert not reads_counted and seen == [(B, S, model.config.hidden_size)]  # the hook saw every position


def test_linear_attention_last_layer_is_not_pruned(vocab, reads_counted):
    """A Gated DeltaNet last layer: its output at a position depends on the recurrence over every earlier one,
    which the two-stage pruning does not split; it runs unpruned and stays exact."""
    import transformers as tf

    cfg = tf.Qwen3_5TextConfig(vocab_size=vocab, num_hidden_layers=2, head_dim=32,
                               layer_types=["full_attention", "linear_attention"], linear_num_key_heads=2,
                               linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                               linear_conv_kernel_dim=4, tie_word_embeddings=False, **_small(64))
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    backend = SharedBackend(tf.Qwen3_5ForCausalLM(cfg).eval())
    assert not backend.prunes
    ids, prefix, lengths, read = _batch(backend, vocab)
    full, _ = backend.forward(ids, [(prefix, 3)], lengths=lengths)
    got, _ = backend.forward(ids, [(prefix, 3)], lengths=lengths, read=read)
    assert not reads_counted and torch.equal(got, full[read[0], read[1]])
