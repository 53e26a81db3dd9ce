"""logitjudge.stats.probing on hand-built probe arrays: Holm's correction, the onset rule for "the layer at which
the position preference appears", the lens share of the output's effect, attention by position with CIs, and
the patching effect on the preferred position that ranks heads."""

import numpy as np
import pytest

from logitjudge import stats as st
from logitjudge.orderings import balanced


def test_holm_matches_hand_computed_values():
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04 -> running max 0.02, 0.03, 0.06, 0.06
    assert st.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert st.holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])


def test_preference_onset_needs_significance_after_holm_and_the_fraction_at_every_later_layer():
    p = [0.5, 1e-4, 0.3, 1e-5, 1e-6, 1e-8]  # Holm: 0.6, 3e-4, 0.6, 4e-5, 5e-6, 6e-8
    share = [0.0, 0.1, 0.2, 0.3, 0.8, 1.0]
    assert st.preference_onset(p, share, fraction=0.5) == 4
    assert st.preference_onset(p, share, fraction=0.25) == 3
    assert st.preference_onset(p, share, fraction=0.0) == 3  # layer 1 is significant, layer 2 breaks the run
    assert st.preference_onset([0.5, 0.01, 0.2], [0, 1, 1]) is None  # the output itself is not significant
    # 0.03 at one of 6 layers is significant alone but not after Holm (x6 = 0.18 > 0.05)
    assert st.preference_onset([0.5] * 5 + [0.03], [1.0] * 6) is None
    assert st.preference_onset([0.5] * 5 + [1e-9], [2.0] * 6) == 5


def test_lens_effect_per_layer_and_its_share_of_the_output():
    orders = balanced(3)
    rng = np.random.default_rng(0)
    content = rng.dirichlet(np.ones(3), size=12)  # (I, n) content preference per item
    bias = np.array([1.5, 0.0, -1.5])  # position effect (log space) at the last layer, half of it at layer 1
    layers = []
    for scale in (0.0, 0.5, 1.0):
        logits = np.log(content)[:, None, :] + scale * bias[np.argsort(orders, axis=1)][None]  # (I, K, n)
        layers.append(np.exp(logits) / np.exp(logits).sum(-1, keepdims=True))
    lens = np.stack(layers, axis=2)  # (I, K, L, n)
    res = st.lens_position_effect(lens, orders, n_boot=0)
    for layer in range(3):
        ref = st.fit_position_effect(lens[:, :, layer], orders, n_boot=0)
        assert res.log_odds[layer] == pytest.approx(ref.log_odds, abs=1e-12)
    assert res.share_of_final == pytest.approx([0.0, 0.5, 1.0], abs=1e-9)
    assert res.pvalue_holm == pytest.approx(st.holm(res.pvalue))
    assert res.emerges_at == st.preference_onset(res.pvalue, res.share_of_final, fraction=0.5)
    assert st.lens_position_effect(lens, orders, n_boot=0, fraction=0.6).emerges_at == 2


def test_attention_by_position_and_the_position_index_ci():
    orders = np.array([[0, 1], [1, 0]])
    I, n = 5, 2
    att = np.zeros((I, 2, 1, 2, 2 * n + 3))
    w = np.linspace(0.5, 0.7, I)  # head 0: mass w on position 0's line, 0.1 on position 1's, rest elsewhere
    att[:, :, 0, 0, 0], att[:, :, 0, 0, 1], att[:, :, 0, 0, 4] = w[:, None], 0.1, 0.9 - w[:, None]
    att[:, :, 0, 1, 0], att[:, :, 0, 1, 1], att[:, :, 0, 1, 5] = 0.2, 0.2, 0.6  # head 1: no position favoured
    probs = np.tile([[[0.9, 0.1], [0.1, 0.9]]], (I, 1, 1))  # the model picks whatever is shown first
    res = st.attention_summary(att, orders, probs, n_boot=200, rng=0)
    assert res.by_position[0, 0] == pytest.approx([w.mean(), 0.1])
    per_item = w / (w + 0.1) - 0.5  # each item's share of position 0 among the option lines, minus 1/n
    assert res.position_index[0] == pytest.approx([per_item.mean(), 0.0])
    assert res.top_position_index[0, 0] == 0
    lo, hi = res.position_index_ci  # the CI of the same estimator holds it
    assert per_item.min() <= lo[0, 0] <= res.position_index[0, 0] <= hi[0, 0] <= per_item.max()
    assert lo[0, 1] == hi[0, 1] == 0
    assert res.follows_choice[0, 0] == pytest.approx(w.mean() - 0.1)  # the chosen option is the one shown first


def test_patch_preference_drop_and_head_ranking():
    orders = np.array([[0, 1], [1, 0]])
    pairs = np.array([[1, 0], [0, 1]])  # from the reversed ordering
    I = 4
    a = np.linspace(0.7, 0.9, I)  # per item: probability of the option shown first
    clean = np.stack([np.stack([[x, 1 - x], [1 - x, x]]) for x in a])  # (I, K, n): position 0 preferred
    src = clean[:, pairs[:, 0]]  # (I, P, n)
    tgt = clean[:, pairs[:, 1]]
    half = 0.5 * (src + tgt)
    # sites: residual L0 (no effect), head L0.0 (target answers like the source), head L0.1 (half way)
    patched = np.stack([tgt, src, half], axis=2)  # (I, P, S, n)
    res = st.patch_summary(clean, patched, pairs, orders, site_layer=[0, 0, 0], site_kind=[0, 3, 3],
                           site_head=[-1, 0, 1], n_boot=200, rng=0)
    assert res.names == ["L0.resid", "L0.head0", "L0.head1"]
    assert res.preferred_position_index == 0
    drop = 2 * a - 1  # target's first-shown option: a before, 1 - a after a full patch from the reverse
    assert res.preference_drop == pytest.approx([0.0, drop.mean(), drop.mean() / 2])
    assert res.to_source == pytest.approx([0.0, 1.0, 0.5])
    assert res.follows_content[1] == 1.0 and res.keeps_target[0] == 1.0
    lo, hi = res.preference_drop_ci
    assert drop.min() <= lo[1] <= res.preference_drop[1] <= hi[1] <= drop.max()
    assert list(res.ranked("head")) == [1, 2]
