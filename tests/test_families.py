"""The study's judge families, exact or refused: one tiny random-weight model per architecture, shaped like the
real one (layer types, GQA ratio, head dims, sliding windows, sinks, soft-capping, MoE, linear-attention layers,
tied/untied heads), scored in every prefix mode against the plain forward (one full forward per prompt, fp32,
full-vocabulary softmax). A mode the capability table allows must match within 1e-5 on every option
probability; a mode it refuses must be refused with the reason. Which cases the native mode must take follows
from the native registry (:mod:`logitjudge.judge.backends.native`): every model type it lists has a tiny model
here. Also: the CLI with no extra flags on saved GPT-OSS / Qwen3.5 folders, attention-implementation fallback,
and the exactness audit catching a model whose attention adds a bias no config declares.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from conftest import tiny_gemma, tiny_tokenizer

from logitjudge import orderings
from logitjudge.engine import Engine, EngineError, distribution, plain_prompt_logprobs
from logitjudge.items import Item
from logitjudge.judge import MODES, choose_mode, mode_refusal
from logitjudge.judge.backends.native import MODEL_TYPES as NATIVE_MODEL_TYPES
from logitjudge.judge.backends.native import STEPS
from logitjudge.judge.backends.native_llama import NativeLlama
from logitjudge.models import Judge
from logitjudge.prompts import builtin_template
from logitjudge.requests import item_prompts
from logitjudge.rubric import Rubric as _Rubric
from logitjudge.rubric import likert

PROB_ATOL = 1e-5
STORY = "Once upon a time a cat sat on the mat and the dog barked at the moon while the sun rose slowly. "


def _small(width: int) -> dict:
    """The shared sizes: hidden ``width`` (64 in the tests; benchmarks/families.py scales it), 2 query heads per
    KV head (GQA), short vocabularies from the tiny tokenizer."""
    heads = max(4, width // 16)
    return dict(hidden_size=width, intermediate_size=width * 3 // 2, num_attention_heads=heads,
                num_key_value_heads=heads // 2, max_position_embeddings=4096, pad_token_id=0, bos_token_id=1,
                eos_token_id=2)


def _make(cls_name: str, cfg_name: str, attn: str = "sdpa", **kw):
    """(model, attention implementation) of transformers' ``cls_name`` on a ``cfg_name`` config of ``kw``."""
    import transformers as tf

    cfg = getattr(tf, cfg_name)(**kw)
    cfg._attn_implementation = attn
    return getattr(tf, cls_name)(cfg).eval(), attn


def _random_biases(built):
    """q/k/v biases initialised to zero would test nothing."""
    with torch.no_grad():
        for name, p in built[0].named_parameters():
            if name.endswith("proj.bias"):
                p.normal_(0.0, 0.5)
    return built


def _random_sinks(built):
    """Sinks initialised to zero-mean normals: make them matter."""
    with torch.no_grad():
        for m in built[0].modules():
            if hasattr(m, "sinks"):
                m.sinks.normal_(0.0, 2.0)
    return built


def _gemma3(vocab, small):
    """The multimodal checkpoint class Gemma-3-12B/27B ship as."""
    text = tiny_gemma(tiny_tokenizer()).config.to_dict()
    text["vocab_size"] = vocab + 3  # image / begin- / end-of-image ids the text tokenizer never produces
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                  image_size=28, patch_size=14)
    return _make("Gemma3ForConditionalGeneration", "Gemma3Config", text_config=text, vision_config=vision,
                 mm_tokens_per_image=4, image_token_index=vocab, boi_token_index=vocab + 1,
                 eoi_token_index=vocab + 2)


def _qwen_linear(cls_name, cfg_name, vocab, small, **kw):
    """3 Gated DeltaNet layers to 1 gated full-attention layer, like Qwen3.5-9B/27B."""
    return _make(cls_name, cfg_name, vocab_size=vocab, num_hidden_layers=4, head_dim=32,
                 layer_types=["linear_attention"] * 3 + ["full_attention"], linear_num_key_heads=2,
                 linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                 linear_conv_kernel_dim=4, **kw, **small)


# One tiny model per case, (vocab, the shared sizes) -> (model, attention implementation): 2-4 layers, fp32. A
# case named after a model type is that type's model (every type of the native registry needs one:
# test_every_native_model_type_has_a_tiny_model); the others are variants real checkpoints differ in.
TINY = {
    "llama": lambda v, s: _make("LlamaForCausalLM", "LlamaConfig", vocab_size=v, num_hidden_layers=2,
                                tie_word_embeddings=False, **s),
    "llama3": lambda v, s: _make(  # Llama-3's RoPE scaling (per-frequency), GQA 4:1, untied head
        "LlamaForCausalLM", "LlamaConfig", vocab_size=v, num_hidden_layers=2, tie_word_embeddings=False,
        **{**s, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16},
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 64}, rope_theta=500000.0),
    "qwen2": lambda v, s: _random_biases(_make("Qwen2ForCausalLM", "Qwen2Config", vocab_size=v,
                                               num_hidden_layers=2, tie_word_embeddings=True, **s)),
    "qwen2_5": lambda v, s: _random_biases(_make(  # Qwen2.5-0.5B's ratios: GQA 14/2, head_dim 64, untied head
        "Qwen2ForCausalLM", "Qwen2Config", vocab_size=v, num_hidden_layers=2, tie_word_embeddings=False,
        **{**s, "num_attention_heads": 14, "num_key_value_heads": 2, "head_dim": 64})),
    "qwen3": lambda v, s: _make("Qwen3ForCausalLM", "Qwen3Config", vocab_size=v, num_hidden_layers=2, head_dim=32,
                                tie_word_embeddings=True, **s),
    "qwen3_5": lambda v, s: _qwen_linear("Qwen3_5ForCausalLM", "Qwen3_5TextConfig", v, s,
                                         tie_word_embeddings=False),
    "qwen3_next": lambda v, s: _qwen_linear(  # Gated DeltaNet (interleaved projections) + MoE, a shared expert
        "Qwen3NextForCausalLM", "Qwen3NextConfig", v, s, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, shared_expert_intermediate_size=32, decoder_sparse_step=1),
    "mistral": lambda v, s: _make("MistralForCausalLM", "MistralConfig", vocab_size=v, num_hidden_layers=2,
                                  sliding_window=16, head_dim=16, tie_word_embeddings=False, **s),
    "phi3": lambda v, s: _make("Phi3ForCausalLM", "Phi3Config", vocab_size=v, num_hidden_layers=2,
                               tie_word_embeddings=False, **s),
    "gpt2": lambda v, s: _make("GPT2LMHeadModel", "GPT2Config", vocab_size=v, n_embd=s["hidden_size"], n_layer=2,
                               n_head=s["num_attention_heads"], n_positions=4096, bos_token_id=1, eos_token_id=2),
    "olmo2": lambda v, s: _make("Olmo2ForCausalLM", "Olmo2Config", vocab_size=v, num_hidden_layers=2,
                                tie_word_embeddings=False, **s),
    "gemma2": lambda v, s: _make(  # soft-capped attention and logits, alternating sliding/full layers
        "Gemma2ForCausalLM", "Gemma2Config", "eager", vocab_size=v, num_hidden_layers=2, head_dim=32,
        sliding_window=16, query_pre_attn_scalar=32, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
        **s),
    "gemma3_text": lambda v, s: (tiny_gemma(tiny_tokenizer()).eval(), "sdpa"),
    "gemma3": _gemma3,
    "gpt_oss": lambda v, s: _random_sinks(_make(  # sinks, alternating sliding (8 here, 128 real) / full, 2 of 4
        "GptOssForCausalLM", "GptOssConfig", "eager", vocab_size=v, num_hidden_layers=2, head_dim=32,
        sliding_window=8, layer_types=["sliding_attention", "full_attention"], num_local_experts=4,
        num_experts_per_tok=2, tie_word_embeddings=False, **s)),
}
FAMILIES = list(TINY)
LINEAR_ATTENTION = {"qwen3_5", "qwen3_next"}  # recurrent state: no per-row copy of a prefix


def build(family: str, vocab: int, *, width: int = 64):
    """(model, attention implementation it runs) for a case of :data:`TINY`: hidden ``width``, fp32, seeded."""
    torch.manual_seed(0)
    return TINY[family](vocab, _small(width))


def native_type(model) -> bool:
    """Whether the native registry holds the model type of ``model``'s decoder."""
    return getattr(model.get_decoder().config, "model_type", None) in NATIVE_MODEL_TYPES


def allowed(family: str, model) -> set[str]:
    """The modes the capability table must allow for a case (the rest must be refused)."""
    modes = {"shared", "plain"} if family in LINEAR_ATTENTION else {"shared", "copy", "plain"}
    return modes | {"native"} if native_type(model) else modes


def rubric(n: int = 5) -> _Rubric:
    return _Rubric((likert("Quality", "overall quality", [f"level {i}" for i in range(n)]),), "Rate the text.")


def texts() -> list[Item]:
    return [Item(f"t{k}", (STORY * r).strip()) for k, r in enumerate((1, 2, 3))]  # past every sliding window


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def cases(tok):
    """Per family: the plain forward's option distributions of 3 texts x balanced orderings (computed once)."""
    out = {}
    rub, orders, tpl = rubric(), orderings.balanced(5), builtin_template("text-first")
    for fam in FAMILIES:
        model, _ = build(fam, len(tok))
        lm = Judge.of(model, tok, f"tiny-{fam}")
        groups = [item_prompts(lm, rub, it, orders, tpl) for it in texts()]
        plain = [[distribution(lp)[0] for lp in plain_prompt_logprobs(model, g)] for g in groups]
        out[fam] = (lm, groups, plain)
    return out


def test_every_native_model_type_has_a_tiny_model():
    """A family in the native registry is held to the plain forward here: each of its model types has a case."""
    missing = sorted(set(NATIVE_MODEL_TYPES) - set(TINY))
    assert not missing, f"native model types with no tiny model in tests/test_families.py's TINY: {missing}"
    claimed = [t for step in STEPS for t in step.MODEL_TYPES]
    assert len(claimed) == len(set(claimed)), f"a model type in two native steps: {claimed}"


@pytest.mark.parametrize("family", FAMILIES)
def test_family_modes_exact_or_refused(cases, family):
    lm, groups, plain = cases[family]
    if family in NATIVE_MODEL_TYPES:  # the case named after a registry type builds a model of that type
        assert lm.model.get_decoder().config.model_type == family
    modes = allowed(family, lm.model)
    assert {m for m in MODES if mode_refusal(lm.model, m) is None} == modes
    assert choose_mode(lm.model, "auto").mode == ("native" if "native" in modes else "shared")
    for mode in MODES:
        if mode not in modes:
            with pytest.raises(EngineError, match=f"prefix_mode='{mode}' cannot compute this model exactly"):
                Engine(lm, prefix_mode=mode)
            continue
        eng = Engine(lm, prefix_mode=mode, token_budget=256)
        got = eng.prompt_logprobs(groups)
        worst = max(np.abs(distribution(a)[0] - b).max() for ga, gb in zip(got, plain) for a, b in zip(ga, gb))
        assert worst < PROB_ATOL, (family, mode, worst)
    # the plain path itself is unchanged after the engines routed the model's attention
    again = [distribution(lp)[0] for lp in plain_prompt_logprobs(lm.model, groups[0])]
    assert max(np.abs(a - b).max() for a, b in zip(again, plain[0])) < 1e-6


def test_sinks_matter_and_shared_mode_uses_them(cases):
    """Without the sinks the shared path would be off by far more than the tolerance (the bug this fixes)."""
    lm, groups, plain = cases["gpt_oss"]
    sinks = [m.sinks for m in lm.model.modules() if hasattr(m, "sinks")]
    saved = [s.detach().clone() for s in sinks]
    with torch.no_grad():
        for s in sinks:
            s.fill_(-1e4)  # a sink this low is no sink: the model becomes sink-free attention
    nosink = [distribution(lp)[0] for lp in plain_prompt_logprobs(lm.model, groups[0])]
    with torch.no_grad():
        for s, v in zip(sinks, saved):
            s.copy_(v)
    assert max(np.abs(a - b).max() for a, b in zip(nosink, plain[0])) > 1e-3


def test_hybrid_state_is_shared_per_trie_node(cases):
    """Qwen3.5 in shared mode keeps each linear layer's recurrent state on the trie (not recomputed per row)."""
    lm, groups, _ = cases["qwen3_5"]
    shared = Engine(lm, prefix_mode="shared", token_budget=256)
    plain = Engine(lm, prefix_mode="plain", token_budget=256)
    shared.prompt_logprobs(groups)
    plain.prompt_logprobs(groups)
    assert shared.stats["tokens"] < plain.stats["tokens"] / 3


def test_attention_fallback_and_cli_scores_gpt_oss_and_qwen35(tmp_path, tok, cases):
    """`logitjudge score` with no extra flags on saved GPT-OSS (SDPA refused -> eager) and Qwen3.5 folders
    matches the plain forward; the table's meta says which mode and why."""
    from logitjudge.cli import main
    from logitjudge.models import load_model
    from logitjudge.table import ScoreTable

    texts_path = tmp_path / "texts.jsonl"
    texts_path.write_text("".join(json.dumps({"id": it.id, "text": it.text}) + "\n" for it in texts()))
    rub = tmp_path / "rubric.json"
    rub.write_text(json.dumps(rubric().to_dict()))
    for fam, attn in (("gpt_oss", "eager"), ("qwen3_5", "sdpa")):
        folder = tmp_path / fam
        model, _ = build(fam, len(tok))
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        out = tmp_path / f"{fam}.npz"
        assert main(["score", "--model", str(folder), "--texts", str(texts_path), "--rubric", str(rub),
                     "--out", str(out), "--quiet"]) == 0
        torch.set_num_threads(1)  # the CLI set its own thread count
        table = ScoreTable.load(out)
        lm = load_model(str(folder))
        assert lm.info["attn_implementation"] == attn
        _, groups, _ = cases[fam]
        plain = np.stack([[distribution(lp)[0] for lp in plain_prompt_logprobs(lm.model, g)] for g in groups])
        assert np.abs(table.probs[:, 0] - plain).max() < PROB_ATOL
        assert table.meta["prefix_mode"] == "shared"
        assert table.meta["prefix_mode_refused"] == {"native": table.meta["prefix_mode_refused"]["native"]}


def _biased_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Eager attention plus a bias no config declares: -0.3 x distance (ALiBi-like, one slope)."""
    from transformers.models.llama.modeling_llama import repeat_kv

    k, v = repeat_kv(key, module.num_key_value_groups), repeat_kv(value, module.num_key_value_groups)
    scores = torch.matmul(query, k.transpose(2, 3)) * scaling
    T, S = k.shape[2], query.shape[2]
    dist = (torch.arange(T - S, T)[:, None] - torch.arange(T)[None, :]).clamp(min=0).to(scores.dtype)
    scores = scores - 0.3 * dist
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, :, :T]
    out = torch.matmul(torch.softmax(scores.float(), dim=-1).to(v.dtype), v)
    return out.transpose(1, 2).contiguous(), None


def test_verify_catches_an_unknown_attention_bias(tmp_path, tok):
    from transformers import AttentionInterface, LlamaForCausalLM
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    from logitjudge.verify import ExactnessError, audit_run, verify_exactness

    AttentionInterface.register("test_biased", _biased_attention)
    AttentionMaskInterface.register("test_biased", ALL_MASK_ATTENTION_FUNCTIONS["eager"])
    model, _ = build("llama", len(tok))
    biased = LlamaForCausalLM(copy.deepcopy(model.config)).eval()
    biased.load_state_dict(model.state_dict())
    biased.set_attn_implementation("test_biased")
    lm = Judge.of(biased, tok, "tiny-biased-llama")
    eng = Engine(lm)  # nothing in the config shows the bias: auto picks shared
    assert eng.prefix_mode == "shared"
    rub, orders, tpl = rubric(), orderings.balanced(5), builtin_template("text-first")
    with pytest.raises(ExactnessError, match="exactness audit failed"):
        audit_run(eng, lm, texts(), rub, orders, tpl, 3)
    # the audit passes where the path is exact, and records itself for the table's meta
    good_lm = Judge.of(model, tok, "tiny-llama")
    good = Engine(good_lm)
    groups = [item_prompts(good_lm, rub, it, orders, tpl) for it in texts()]
    res = verify_exactness(good, groups, 4, rng=1)
    assert res.n_prompts == 4 and res.max_abs_diff < PROB_ATOL
    plain_eng = Engine(lm, prefix_mode="plain")
    assert audit_run(plain_eng, lm, texts(), rub, orders, tpl, 2).max_abs_diff < PROB_ATOL

    # through the CLI: the run stops with one line and writes no table
    from logitjudge.cli import main

    folder, out = tmp_path / "llama", tmp_path / "biased.npz"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    texts_path = tmp_path / "texts.jsonl"
    texts_path.write_text("".join(json.dumps({"id": it.id, "text": it.text}) + "\n" for it in texts()))
    rub_path = tmp_path / "rubric.json"
    rub_path.write_text(json.dumps(rub.to_dict()))
    args = ["score", "--model", str(folder), "--texts", str(texts_path), "--rubric", str(rub_path), "--quiet",
            "--attn-implementation", "test_biased", "--out", str(out)]
    assert main([*args, "--verify", "3"]) == 2
    assert not out.exists()
    assert main([*args, "--verify", "3", "--prefix-mode", "plain"]) == 0  # the exact mode passes the audit


def _yarn(model):
    model.config.rope_parameters = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                    "rope_theta": 10000.0}


def _longrope(model):
    model.config.rope_parameters = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 8,
                                    "long_factor": [2.0] * 8, "original_max_position_embeddings": 64}


def _gelu(model):
    model.config.hidden_act = "gelu"


def _o_bias(model):
    o = model.get_decoder().layers[1].self_attn.o_proj
    o.bias = torch.nn.Parameter(torch.zeros(o.out_features))


def _partial(model):
    model.config.rope_parameters = {**model.config.rope_parameters, "partial_rotary_factor": 0.5}


@pytest.mark.parametrize("family", NativeLlama.MODEL_TYPES)
@pytest.mark.parametrize("change,reason", [(_yarn, "RoPE scaling 'yarn'"), (_longrope, "RoPE scaling 'longrope'"),
                                           (_gelu, "activation 'gelu'"), (_o_bias, "output projection"),
                                           (_partial, "partial rotary")])
def test_native_refuses_what_it_does_not_compute(tok, family, change, reason):
    """A config feature the native step does not compute: refused with the reason, auto takes shared."""
    model, _ = build(family, len(tok))
    assert mode_refusal(model, "native") is None
    change(model)
    assert reason in mode_refusal(model, "native")
    choice = choose_mode(model, "auto")
    assert choice.mode == "shared" and reason in choice.refused["native"]


@torch.inference_mode()
def test_native_hook_points_match_the_modules(tok):
    """The probe's hook points inside the native step read what transformers' modules compute (plain backend),
    and a patch at one of them changes the output the same way."""
    from logitjudge.judge.backends import BACKENDS
    from logitjudge.judge.prefix import PrefixKV

    model, _ = build("qwen2_5", len(tok))
    ids = torch.randint(4, len(tok), (1, 24), generator=torch.Generator().manual_seed(0))
    names = [f"blocks.{i}.{p}" for i in range(2)
             for p in ("hook_resid_post", "hook_attn_out", "hook_mlp_out", "attn.hook_z", "attn.hook_pattern")]
    seen, out = {}, {}

    def keep(got: dict, name: str):
        return lambda t: got.__setitem__(name, t.detach().clone())

    for mode in ("native", "plain"):
        b = BACKENDS[mode](model)
        fns = {n: keep(seen.setdefault(mode, {}), n) for n in names}
        with b.hooks(fns):
            b.forward(ids, [(PrefixKV.empty(2), 1)])
        with b.hooks({"blocks.0.attn.hook_z": lambda t: t * 0.5}):
            out[mode] = b.forward(ids, [(PrefixKV.empty(2), 1)], read=(torch.tensor([0]), torch.tensor([23])))[0]
    for n in names:
        assert seen["native"][n].shape == seen["plain"][n].shape, n
        assert (seen["native"][n].float() - seen["plain"][n].float()).abs().max() < 1e-4, n
    assert (out["native"] - out["plain"]).abs().max() < 1e-4


@pytest.mark.parametrize("family", ["qwen2_5", "gemma3_text"])  # SiLU and GELU-tanh gating
def test_native_mlp_in_row_blocks_matches_the_plain_forward(cases, family, monkeypatch):
    """The MLP in row blocks (where the dispatcher measures it faster on calls of more than 256 rows), forced
    here whatever this CPU measured: the same option probabilities as the plain forward, on calls of up to 1024
    rows."""
    from logitjudge_kernels import dispatch

    from logitjudge.judge.backends import native_gemms as ng

    def blocks_of_256(mlp, down, h):
        name = "blocks of 256" if ng.MLP_DOWN.candidate("blocks of 256").refusal(mlp, down, h) is None else "whole"
        return ng.MLP_DOWN.candidate(name), ng.MLP_DOWN.bucket(mlp, down, h), {"choice": name, "why": "forced"}

    monkeypatch.setattr(ng.MLP_DOWN, "choose", blocks_of_256)
    lm, groups, plain = cases[family]
    eng = Engine(lm, prefix_mode="native", token_budget=4096)
    with dispatch.recording() as rec:
        got = eng.prompt_logprobs(groups)
    assert "blocks of 256" in rec.ran("mlp_rows"), rec.as_meta().get("mlp_rows")
    worst = max(np.abs(distribution(a)[0] - b).max() for ga, gb in zip(got, plain) for a, b in zip(ga, gb))
    assert worst < PROB_ATOL, (family, worst)


@pytest.mark.parametrize("route", ["packed", "plain"])
@pytest.mark.parametrize("family", ["gemma3_text", "qwen2_5", "llama3"])  # GELU-tanh; SiLU with q/k/v biases
def test_native_gemm_routes_match_the_plain_forward(cases, family, route, monkeypatch):
    """Every GEMM route of the native step (the packed oneDNN GEMMs with the MLP's epilogues, or plain F.linear
    with the activation and product after it), forced for every call whatever this CPU measured: the same option
    probabilities as the plain forward."""
    from logitjudge_kernels import dispatch

    from logitjudge.judge.backends import native_gemms as ng

    if route == "packed" and not ng.packing_available():
        pytest.skip("no oneDNN packing here")
    for kernel in (ng.LINEAR, ng.GATE_UP):
        name = next(c.name for c in kernel.candidates if c.name.startswith(route))

        def forced(*a, _k=kernel, _n=name):
            return _k.candidate(_n), _k.bucket(*a), {"choice": _n, "why": "forced"}

        monkeypatch.setattr(kernel, "choose", forced)
    lm, groups, plain = cases[family]
    eng = Engine(lm, prefix_mode="native", token_budget=256)
    with dispatch.recording() as rec:
        got = eng.prompt_logprobs(groups)
    assert {i.split()[0] for k in ("linear", "gate_up") for i in rec.ran(k)} == {route}, rec.as_meta().keys()
    worst = max(np.abs(distribution(a)[0] - b).max() for ga, gb in zip(got, plain) for a, b in zip(ga, gb))
    assert worst < PROB_ATOL, (family, route, worst)
