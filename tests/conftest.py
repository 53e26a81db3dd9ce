"""Shared fixtures: a tiny random-weight Gemma-3 model with a small trained tokenizer, and the real Gemma-3-270M."""

from __future__ import annotations

import os
import platform
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from logitjudge.models import Judge

CORPUS = [
    "Rate the quality of the text below. Answer with the label of the option that fits best.",
    "Score: 1 2 3 4 5 6 7 8 9 10 [[1]] [[10]] Rating: Quality score: Coherence: Fluency: Empathy:",
    "Very poor. Poor. Fair. Good. Excellent. Worst. Perfect. The text is clear, well written and correct.",
    "Once upon a time a cat sat on the mat and the dog barked at the moon while the sun rose slowly.",
    "Context: Text: Summary: Question: Answer: the article says that the economy grew by three percent.",
]

# the builds every C kernel is tested in: the machine's own, and on x86 the AVX2 and SSE4.2 levels as well
BUILD_TARGETS = ["native"] + (["x86-64-v3", "x86-64-v2"] if platform.machine() in ("x86_64", "AMD64") else [])

SUMMARY = pytest.StashKey[list]()  # lines a test module reports after the run (test_faults: where kills landed)


def pytest_configure(config):
    config.stash[SUMMARY] = []


def pytest_sessionfinish(session):
    """On a pytest-xdist worker (`make test` runs two): hand its summary lines to the controller, which prints."""
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["summary_lines"] = list(session.config.stash.get(SUMMARY, []))


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: absent (and not called) without the plugin
def pytest_testnodedown(node, error):
    node.config.stash[SUMMARY].extend(getattr(node, "workeroutput", {}).get("summary_lines", []))


def pytest_terminal_summary(terminalreporter, config):
    for line in config.stash.get(SUMMARY, []):
        terminalreporter.write_line(line)


def tiny_tokenizer(alphabet: str = ""):
    """``alphabet``: characters added to the trained ones (e.g. the capital letters that label candidates)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFC()
    # Metaspace like Gemma/Llama: a space becomes "▁" and may stand alone before a digit
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<pad>", "<bos>", "<eos>", "<unk>"],
                                  initial_alphabet=list("0123456789[]:.,\n" + alphabet))
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                   unk_token="<unk>", pad_token="<pad>")


def tiny_gemma(tokenizer, *, sliding_window: int = 24, softcap: float | None = 30.0, seed: int = 0):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    cfg = Gemma3TextConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, sliding_window=sliding_window,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
        max_position_embeddings=2048, query_pre_attn_scalar=32, final_logit_softcapping=softcap,
        initializer_range=0.2, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = Gemma3ForCausalLM(cfg).eval()
    return model


@pytest.fixture(scope="session")
def tiny_lm():
    tok = tiny_tokenizer()
    return Judge.of(tiny_gemma(tok), tok, "tiny-random-gemma3", dtype="fp32")


def fresh_tiny_lm(alphabet: str = "", **kw) -> Judge:
    tok = tiny_tokenizer(alphabet)
    return Judge.of(tiny_gemma(tok, **kw), tok, "tiny-random-gemma3", dtype="fp32")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A saved tiny random-weight model folder, loaded by the CLI like any local model (one per test module)."""
    lm = fresh_tiny_lm()
    d = tmp_path_factory.mktemp("tiny-model")
    lm.model.save_pretrained(d)
    lm.tokenizer.save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def gemma_lm():
    """The real Gemma-3-270M (converted once from the GGUF into the logitjudge cache)."""
    from logitjudge.models import load_model

    return load_model("gemma-3-270m", dtype="fp32", device="cpu")


def shared_data_dir(*needed: str) -> Path | None:
    """The real data folder ($LOGITJUDGE_DATA, else ../shared/data beside the repository) when it holds every
    data set in ``needed`` (default: any), else None (the tests that need it skip)."""
    env = os.environ.get("LOGITJUDGE_DATA")
    p = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
    if not p.is_dir() or not all((p / name).is_dir() for name in needed) or not any(p.iterdir()):
        return None
    return p


def build_target_fixture(library):
    """A ``target`` fixture over :data:`BUILD_TARGETS` for a kernel module's ``_library(target)``: each build the
    compiler makes here, the others skipped with the reason."""

    @pytest.fixture(params=BUILD_TARGETS)
    def target(request):
        why = library(request.param)[1]
        if why:
            pytest.skip(f"no {request.param} build here: {why[:200]}")
        return request.param

    return target


@contextmanager
def torch_threads(n: int):
    """torch's intra-op threads set to ``n`` inside, restored after (for a module-scoped fixture that runs a tiny
    model: it is set up before any function-scoped ``tiny_one_thread``). ``one_thread`` and ``tiny_one_thread``
    use it."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models gain nothing from intra-op threads; on a shared 2-core machine two spinning OpenMP threads made
    a module 7-10x slower (tests/test_families.py: 31 s vs 228 s for two families). A module opts in with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    with torch_threads(1):
        yield


@pytest.fixture
def tiny_one_thread(request):
    """``one_thread`` per test, except for a test on the real Gemma-3-270M (``gemma_lm``), which keeps the machine's
    threads for its larger GEMMs: for a module that mixes both (``pytestmark =
    pytest.mark.usefixtures("tiny_one_thread")``). On the shared 2-core machine two threads made
    test_probe.py::test_patching_matches_plain_hooks[word_rubric-native] 52 s instead of 4 s."""
    if "gemma_lm" in request.fixturenames:
        yield
        return
    with torch_threads(1):
        yield
