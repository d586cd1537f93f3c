"""Lossless: greedy speculative output equals the target decoding alone, token for token."""

from __future__ import annotations

import pytest

import llamaspec
from conftest import PROMPTS

MAX_TOKENS = 40
N_CTX = 512

# (spec_type, draft file or None, n_max)
DRAFTERS = [
    ("draft-simple", "draft_simple", 4),
    ("draft-simple", "draft_simple", 1),
    ("draft-dflash", "dflash", 7),
    ("draft-dflash", "dflash", 3),
    ("draft-dspark", "dspark", 8),
    ("draft-dspark", "dspark", 2),
    ("ngram-simple", None, 4),
    ("ngram-map-k", None, 6),
    ("ngram-mod", None, 4),
]


@pytest.fixture(scope="module")
def reference(target_model):
    """Plain greedy decoding of the target alone, per prompt."""
    with llamaspec.Generator(target_model, spec_type="none", n_ctx=N_CTX) as gen:
        assert gen.spec_type == "none"
        return {p: gen.generate(p, MAX_TOKENS, ignore_eos=True) for p in PROMPTS}


def test_reference_is_plain_decoding(reference):
    for result in reference.values():
        assert len(result.tokens) == MAX_TOKENS
        assert result.stats.n_drafted == 0
        assert result.stats.rounds == MAX_TOKENS  # one target pass per token


@pytest.mark.parametrize("spec_type,draft,n_max", DRAFTERS)
def test_greedy_output_equals_target(models, target_model, reference, spec_type, draft, n_max):
    drafted = 0
    with llamaspec.Generator(target_model, models[draft] if draft else None, n_max=n_max,
                             spec_type=spec_type, n_ctx=N_CTX, ngram_size_n=2) as gen:
        assert gen.spec_type == spec_type
        for prompt in PROMPTS:
            result = gen.generate(prompt, MAX_TOKENS, ignore_eos=True)
            assert result.tokens == reference[prompt].tokens, (spec_type, prompt)
            assert result.text == reference[prompt].text
            assert result.stats.drafted.max(initial=0) <= n_max
            drafted += result.stats.n_drafted
    # the drafter really proposed tokens, so the comparison above exercised verification and rollback
    assert drafted > 0


def test_auto_reads_the_draft_metadata(models, target_model):
    expected = {"dspark": "draft-dspark", "dflash": "draft-dflash", "draft_simple": "draft-simple"}
    for name, spec_type in expected.items():
        with llamaspec.Generator(target_model, models[name], n_max=4, n_ctx=N_CTX) as gen:
            assert gen.spec_type == spec_type
    with llamaspec.Generator(target_model, n_ctx=N_CTX) as gen:
        assert gen.spec_type == "none"


def test_repeated_generations_are_independent(models, target_model, reference):
    """Drafter state is fresh per generation: the same call gives the same tokens and the same rounds."""
    with llamaspec.Generator(target_model, models["dspark"], n_max=8, n_ctx=N_CTX) as gen:
        first = gen.generate(PROMPTS[0], MAX_TOKENS, ignore_eos=True)
        gen.generate(PROMPTS[1], MAX_TOKENS, ignore_eos=True)
        again = gen.generate(PROMPTS[0], MAX_TOKENS, ignore_eos=True)
    assert first.tokens == again.tokens == reference[PROMPTS[0]].tokens
    assert first.stats.accepted.tolist() == again.stats.accepted.tolist()


def test_stream_yields_the_same_tokens(models, target_model, reference):
    with llamaspec.Generator(target_model, models["draft_simple"], n_max=4, n_ctx=N_CTX) as gen:
        chunks = list(gen.stream(PROMPTS[1], MAX_TOKENS, ignore_eos=True))
        stats = gen.last_stats
    tokens = [t for c in chunks for t in c.tokens]
    assert tokens == reference[PROMPTS[1]].tokens
    assert "".join(c.text for c in chunks) == reference[PROMPTS[1]].text
    round_chunks = [c for c in chunks if c.tokens]
    assert len(round_chunks) == stats.rounds
    assert [c.accepted for c in round_chunks] == stats.accepted.tolist()


def test_requantized_draft(models, target_model, reference, tmp_path):
    """A draft made with llamaspec.quantize (llama.cpp's quantizer) is a real partial-acceptance draft."""
    draft = tmp_path / "target-q8_0.gguf"
    llamaspec.quantize(models["target"], str(draft), "Q8_0")
    assert llamaspec.inspect_gguf(str(draft))["architecture"] == "qwen3"
    with llamaspec.Generator(target_model, str(draft), n_max=6, n_ctx=N_CTX) as gen:
        assert gen.spec_type == "draft-simple"
        result = gen.generate(PROMPTS[0], MAX_TOKENS, ignore_eos=True)
    assert result.tokens == reference[PROMPTS[0]].tokens
    assert result.stats.n_accepted > 0
    with pytest.raises(ValueError, match="quantization type"):
        llamaspec.quantize(models["target"], str(tmp_path / "x.gguf"), "Q9_9")
