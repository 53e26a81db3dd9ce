"""logitjudge.probing: exactness against the plain model and the engine in every prefix mode (each backend's hook
points), and a planted positional shortcut that lens, attention, patching and probes must find."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import CORPUS, fresh_tiny_lm, tiny_tokenizer, torch_threads
from planted import planted_lm

from logitjudge import balanced, orderings
from logitjudge import stats as st
from logitjudge.engine import Engine, distribution, plain_prompt_logprobs
from logitjudge.errors import ProbeError
from logitjudge.items import Item
from logitjudge.judge import MODES
from logitjudge.judge.hooks import attn_implementation
from logitjudge.probing.capture import capture_item
from logitjudge.probing.lens import option_distribution
from logitjudge.probing.patching import make_pairs, make_sites, patch_item, patch_item_plain
from logitjudge.probing.prompts import probe_prompts
from logitjudge.probing.spans import category_names
from logitjudge.prompts import builtin_template
from logitjudge.report.probe import probe_results
from logitjudge.rubric import Criterion, Rubric, ScoreOption, likert

STORY = "Once upon a time a cat sat on the mat and the dog barked at the moon while the sun rose slowly. "
WORDS = ["Very poor", "Poor", "Fair", "Good", "Excellent"]
pytestmark = pytest.mark.usefixtures("tiny_one_thread")  # the tiny model on one thread, the real Gemma on all


def digit_rubric() -> Rubric:
    return Rubric((likert("Quality", "quality of the text", WORDS),), "Rate the text below.")


def word_rubric() -> Rubric:  # multi-token labels for the tiny tokenizer ("Excellent")
    opts = tuple(ScoreOption(float(i + 1), w, f"the text is {w.lower()}") for i, w in enumerate(WORDS))
    return Rubric((Criterion("Quality", opts, "overall quality"),), "Rate the text.")


@pytest.fixture(scope="module")
def lm():
    return fresh_tiny_lm()  # its own model: the backends install their attention on it


def _items(*repeats):
    return [Item(f"i{k}", (STORY * r).strip()) for k, r in enumerate(repeats)]


def backend(lm, mode: str = "auto"):
    """The backend the scores of ``lm`` run on in ``mode`` (the probe's only way into the model)."""
    return Engine(lm, prefix_mode=mode).backend


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rubric,template", [(digit_rubric, "text-first"), (word_rubric, "text-first"),
                                             (digit_rubric, "rubric-first")])
def test_last_layer_lens_equals_engine(lm, rubric, template, mode):
    rub, tpl, orders = rubric(), builtin_template(template), balanced(5)
    b = backend(lm, mode)
    for it in _items(1, 3):
        pps = probe_prompts(lm, rub, it, orders, tpl)
        cap = capture_item(b, pps, attention=False)
        eng = Engine(lm, prefix_mode="native").prompt_logprobs([[pp.encoded for pp in pps]])[0]
        ref = np.array([distribution(x)[0] for x in eng])
        assert np.abs(option_distribution(cap.lens_logprobs[:, -1]) - ref).max() < 1e-5
        plain = plain_prompt_logprobs(lm.model, [pp.encoded for pp in pps])
        assert np.abs(cap.lens_logprobs[:, -1] - np.array(plain)).max() < 5e-5


@pytest.mark.parametrize("mode", MODES)
def test_attention_masses_equal_eager_attentions(lm, mode):
    """Masses over all categories sum to 1 per head and equal the plain eager run's output_attentions, whichever
    backend computed them (native and shared compute the pattern, copy and plain switch to eager)."""
    orders = orderings.shared_random(5, 3, rng=2)
    pps = probe_prompts(lm, digit_rubric(), _items(2)[0], orders)
    cap = capture_item(backend(lm, mode), pps, attention=True)
    assert np.abs(cap.attention.sum(-1) - 1).max() < 1e-5
    C = len(category_names(5))
    with attn_implementation(lm.model, "eager"), torch.inference_mode():
        for k, pp in enumerate(pps):
            out = lm.model(input_ids=torch.tensor([list(pp.ids)]), output_attentions=True)
            for layer, w in enumerate(out.attentions):  # (1, H, T, T)
                row = w[0, :, pp.answer].double().numpy()  # (H, T)
                ref = np.stack([row[:, pp.spans.category == c].sum(1) for c in range(C)], axis=1)
                assert np.abs(cap.attention[k, layer] - ref).max() < 1e-5


def test_spans_cover_the_option_lines(lm):
    rub = digit_rubric()
    pp = probe_prompts(lm, rub, _items(1)[0], balanced(5))[3]
    n = 5
    for p, o in enumerate(pp.order):
        toks = [t for t, c in zip(pp.ids, pp.spans.category) if c in (p, n + p)]
        text = lm.tokenizer.decode(toks)
        assert rub.criteria[0].options[o].description in text
        assert pp.spans.category[pp.spans.line_ends[p]] == n + p
    instr = [t for t, c in zip(pp.ids, pp.spans.category) if c == 2 * n]
    assert lm.tokenizer.decode(instr).strip() == rub.instructions


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rubric", [digit_rubric, word_rubric])
def test_patching_matches_plain_hooks(lm, mode, rubric):
    """Batched patching on the cached prefix, in every backend, equals one full forward per patch (the
    hook-library way); a small token budget splits the patches of a target into several batches."""
    orders = balanced(5)
    b = backend(lm, mode)
    sites = make_sites(b.n_layers, b.n_heads)
    pps = probe_prompts(lm, rubric(), _items(2)[0], orders)
    pairs = make_pairs(orders, "reverse")[:3]
    clean, patched = patch_item(b, pps, pairs, sites, token_budget=40)
    clean_ref, patched_ref = patch_item_plain(lm.model, pps, pairs, sites)
    assert np.abs(clean - clean_ref).max() < 1e-5
    assert np.abs(patched - patched_ref).max() < 1e-5
    if mode == "native":  # the plain way with logits only where read (logits_to_keep) gives the same numbers
        clean_read, patched_read = patch_item_plain(lm.model, pps, pairs, sites, logits="read")
        assert np.abs(clean_read - clean_ref).max() < 1e-6 and np.abs(patched_read - patched_ref).max() < 1e-6
    assert np.abs(patched - clean[pairs[:, 1]][:, None]).max() > 1e-3  # the patches move the answers


def test_self_patch_changes_nothing_and_last_residual_is_the_source(lm):
    orders = balanced(5)
    b = backend(lm)
    sites = make_sites(b.n_layers, b.n_heads)
    pps = probe_prompts(lm, digit_rubric(), _items(3)[0], orders)
    K = len(orders)
    selfpairs = np.stack([np.arange(K), np.arange(K)], axis=1)
    clean, patched = patch_item(b, pps, selfpairs, sites)
    assert np.abs(patched - clean[:, None]).max() <= 1e-6
    pairs = make_pairs(orders, "all")
    clean, patched = patch_item(b, pps, pairs, sites)
    last = np.flatnonzero((sites.layer == b.n_layers - 1) & (sites.kind == 0))[0]
    assert np.abs(patched[:, last] - clean[pairs[:, 0]]).max() < 1e-5  # single-token labels


@pytest.mark.parametrize("mode", ["native", "shared"])
def test_hook_names_are_checked(lm, mode):
    b = backend(lm, mode)
    with pytest.raises(ProbeError, match="unknown hook point"):
        with b.hooks({"blocks.0.resid": lambda t: None}):
            pass
    with pytest.raises(ProbeError, match="layers"):
        with b.hooks({"blocks.99.hook_resid_post": lambda t: None}):
            pass


def test_lens_reads_one_log_sum_exp_per_position(lm, monkeypatch):
    """Five one-token labels at the answer position are one read row per layer and ordering (the engine's
    read-out: one full-vocabulary log-sum-exp per position, the labels as its columns), not five."""
    import logitjudge.judge.head as head_mod

    rows = []
    real = head_mod.label_logprobs

    def counting(h, *a, **k):
        rows.append(h.shape[0])
        return real(h, *a, **k)

    monkeypatch.setattr(head_mod, "label_logprobs", counting)
    b = backend(lm)
    pps = probe_prompts(lm, digit_rubric(), _items(1)[0], balanced(5))
    capture_item(b, pps, attention=False)
    assert rows == [len(pps) * b.n_layers]
    rows.clear()
    pairs = make_pairs(balanced(5), "reverse")[:1]
    patch_item(b, pps, pairs, make_sites(b.n_layers, b.n_heads, ("resid",)))
    assert sum(rows) == len(pps) + b.n_layers  # a clean row per ordering, a row per patch


# ---- the planted shortcut -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def planted_table():
    from logitjudge.probing.run import ProbeRun

    lm, rub, tpl = planted_lm(tiny_tokenizer())
    words = " ".join(CORPUS).split()
    rng = np.random.default_rng(0)
    items = [Item(str(i), " ".join(rng.choice(words, size=8 + i))) for i in range(6)]
    with torch_threads(1):  # module-scoped: set up before the test's tiny_one_thread
        return ProbeRun(lm, items, rub, balanced(5), template=tpl, progress=False).execute()


@pytest.fixture(scope="module")
def planted_results(planted_table):
    """The report's estimates at n_boot=100 (the lens, attention and patching tests read one section each of
    the same deterministic call, computed once)."""
    return probe_results(planted_table, n_boot=100, rng=0)


def test_planted_shortcut_model_picks_the_first_position(planted_table):
    _, pos = st.chosen_option(planted_table.probs, planted_table.option_orders)
    assert (pos == 0).all()
    assert planted_table.probs.max(-1).min() > 0.9


def test_lens_finds_the_planted_layer(planted_results):
    res = planted_results["lens"]
    assert res.emerges_at == 1
    assert res.pvalue[0] > 0.5 and res.pvalue[1] < 1e-10
    assert res.log_odds[1, 0] > 3 and np.abs(res.log_odds[0]).max() < 1e-9


def test_attention_finds_the_planted_head(planted_results):
    att = planted_results["attention"]
    assert np.unravel_index(att.position_index.argmax(), att.position_index.shape) == (1, 0)
    assert att.top_position_index[1, 0] == 0 and att.by_position[1, 0, 0] > 0.95
    assert att.follows_choice[1, 0] > 0.9  # the chosen option is the one shown first


def test_patching_finds_the_planted_head(planted_results):
    pat = planted_results["patch"]
    moved = dict(zip(pat.names, pat.to_source))
    for site in ("L1.resid", "L1.attn", "L1.head0"):
        assert moved[site] > 0.99
        # the head has already read the first line: what it carries is the source's label (content), not
        # "take the first position" (which would pick the target's first option)
        assert pat.follows_content[pat.names.index(site)] == 1.0
        assert pat.follows_position[pat.names.index(site)] == 0.0
    for site in ("L0.resid", "L0.attn", "L0.mlp", "L0.head0", "L0.head1", "L1.mlp", "L1.head1"):
        assert abs(moved[site]) < 1e-6


def test_linear_probe_finds_the_chosen_option_after_the_planted_layer(planted_table):
    lin = probe_results(planted_table, n_boot=200, rng=0)["linear"]
    before, after = lin.results[("chosen option", "answer")]
    # before the head writes the label, the answer position's state is the same in every ordering of an item
    assert before.accuracy == pytest.approx(0.2) and before.chance == pytest.approx(0.2)
    assert after.ci_low > after.chance_ci_high and after.accuracy > 0.95


# ---- the linear probe on known features -------------------------------------------------------------------
def test_logistic_gradient_and_probe_on_known_features():
    from scipy.optimize import check_grad

    from logitjudge.stats.linear_probe import fit_logistic, logistic_loss, probe_accuracy

    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 120)
    groups = np.repeat(np.arange(12), 10)
    x_signal = np.eye(3)[y] * 2 + 0.3 * rng.standard_normal((120, 3))
    x_noise = rng.standard_normal((120, 6))
    good = probe_accuracy(np.hstack([x_signal, x_noise]), y, groups, n_boot=200, rng=1)
    bad = probe_accuracy(x_noise, y, groups, n_boot=200, rng=1)
    assert good.accuracy > 0.95 and good.ci_low > good.chance_ci_high
    assert bad.ci_low <= max(bad.chance, 1 / 3) + 0.05 and bad.accuracy < 0.6
    w = fit_logistic(x_signal, y, 3, l2=0.5)
    assert (np.argmax(np.hstack([x_signal, np.ones((120, 1))]) @ w, 1) == y).mean() > 0.95
    with pytest.raises(st.StatsError):
        probe_accuracy(x_noise, y, np.zeros(120), n_boot=0)

    xb = np.hstack([x_signal, np.ones((120, 1))])
    onehot = np.eye(3)[y]
    w0 = rng.standard_normal(12)
    assert check_grad(lambda v: logistic_loss(v, xb, onehot, 0.5)[0],
                      lambda v: logistic_loss(v, xb, onehot, 0.5)[1], w0) < 1e-5
    W = w0.reshape(4, 3)
    z = xb @ W
    direct = np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(120), y]) + 0.25 * (W[:-1] ** 2).sum() / 120
    assert logistic_loss(w0, xb, onehot, 0.5)[0] == pytest.approx(direct, rel=1e-12)


def test_wide_logistic_fit_in_the_span_of_the_rows_is_the_same_optimum():
    """More features than samples: the fit in the span of the training rows reaches the full problem's optimum
    (same loss, same logits on held-out rows), far faster."""
    from scipy.optimize import minimize

    from logitjudge.stats.linear_probe import fit_logistic, logistic_loss

    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((40, 300)), rng.integers(0, 4, 40)
    x[:, :4] += 1.5 * np.eye(4)[y]
    x_new = rng.standard_normal((10, 300))
    w = fit_logistic(x, y, 4, l2=2.0)  # (301, 4), fitted in 40 dimensions
    xb, onehot = np.hstack([x, np.ones((40, 1))]), np.eye(4)[y]
    full = minimize(logistic_loss, np.zeros(301 * 4), args=(xb, onehot, 2.0), jac=True, method="L-BFGS-B",
                    options={"maxiter": 5000, "gtol": 1e-10, "ftol": 1e-15}).x.reshape(301, 4)
    assert logistic_loss(w.ravel(), xb, onehot, 2.0)[0] == pytest.approx(
        logistic_loss(full.ravel(), xb, onehot, 2.0)[0], abs=1e-6)
    xn = np.hstack([x_new, np.ones((10, 1))])
    assert np.abs(xn @ w - xn @ full).max() < 1e-2


@pytest.mark.slow
def test_gemma_lens_attention_and_patching_are_exact(gemma_lm):
    """The real Gemma-3-270M (18 layers, GQA, sliding + global layers): lens = engine, masses sum to 1,
    batched patching = one full forward per patch (tolerance 1e-5 on option probabilities)."""
    from logitjudge.probing.patching import Sites

    orders = balanced(5)
    pps = probe_prompts(gemma_lm, digit_rubric(), _items(2)[0], orders)
    engine = Engine(gemma_lm)  # native
    b = engine.backend
    cap = capture_item(b, pps, attention=True)
    eng = engine.prompt_logprobs([[pp.encoded for pp in pps]])[0]
    ref = np.array([distribution(x)[0] for x in eng])
    assert np.abs(option_distribution(cap.lens_logprobs[:, -1]) - ref).max() < 1e-5
    assert np.abs(cap.attention.sum(-1) - 1).max() < 1e-5
    every = make_sites(b.n_layers, b.n_heads)
    keep = np.isin(every.layer, [0, 8, 17]) & ((every.kind != 3) | (every.head == 1))
    sites = Sites(every.layer[keep], every.kind[keep], every.head[keep])
    pairs = make_pairs(orders, "reverse")[:1]  # one order swap: the plain way is a full forward per site
    clean, patched = patch_item(b, pps, pairs, sites)
    # the plain way with the vocabulary logits only where read (logits_to_keep): the same numbers as at every
    # position (test_patching_matches_plain_hooks[native]), without the 262k-vocabulary head on every prompt token
    clean_ref, patched_ref = patch_item_plain(gemma_lm.model, pps, pairs, sites, logits="read")
    assert np.abs(clean - clean_ref).max() < 1e-5 and np.abs(patched - patched_ref).max() < 1e-5
    assert np.abs(clean - ref).max() < 1e-5
