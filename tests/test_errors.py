"""Bad input raises a clear Python exception; the interpreter never aborts."""

from __future__ import annotations

import os
import shutil

import pytest

import llamaspec
from conftest import PROMPTS

N_CTX = 256


def test_missing_file():
    with pytest.raises(ValueError, match="not found"):
        llamaspec.Generator("/nonexistent/model.gguf")


def test_missing_draft_file(models):
    with pytest.raises(ValueError, match="not found"):
        llamaspec.Generator(models["target"], "/nonexistent/draft.gguf")


def test_not_a_gguf(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"this is not a gguf file at all" * 10)
    with pytest.raises(ValueError, match="not a GGUF"):
        llamaspec.Generator(str(path))


def test_directory_is_not_a_model(tmp_path):
    with pytest.raises(ValueError, match="not a regular file"):
        llamaspec.Generator(str(tmp_path))


@pytest.mark.parametrize("fraction", [0.0005, 0.01, 0.3, 0.9, 0.999])
def test_truncated_gguf(models, tmp_path, fraction):
    data = open(models["target"], "rb").read()
    path = tmp_path / "truncated.gguf"
    path.write_bytes(data[: max(4, int(len(data) * fraction))])
    with pytest.raises(ValueError, match="GGUF|load"):
        llamaspec.Generator(str(path))


def test_wrong_type_of_model_argument():
    with pytest.raises(TypeError):
        llamaspec.Generator(1234)


def test_draft_vocab_differs(models):
    with pytest.raises(ValueError, match="vocabular"):
        llamaspec.Generator(models["target"], models["target_othervocab"], spec_type="draft-simple")


def test_head_given_as_target(models):
    with pytest.raises(ValueError, match="draft head"):
        llamaspec.Generator(models["dspark"], models["target"])


def test_draft_model_given_to_head_type(models):
    with pytest.raises(ValueError, match="DFlash/DSpark draft head"):
        llamaspec.Generator(models["target"], models["draft_simple"], spec_type="draft-dspark")


def test_dflash_head_is_not_dspark(models):
    with pytest.raises(ValueError, match="Markov"):
        llamaspec.Generator(models["target"], models["dflash"], spec_type="draft-dspark")


def test_spec_type_needs_draft(models):
    with pytest.raises(ValueError, match="needs a draft"):
        llamaspec.Generator(models["target"], spec_type="draft-simple")
    with pytest.raises(ValueError, match="uses no draft"):
        llamaspec.Generator(models["target"], models["draft_simple"], spec_type="ngram")


def test_unknown_spec_type(models):
    with pytest.raises(ValueError, match="unknown spec_type"):
        llamaspec.Generator(models["target"], spec_type="telepathy")


@pytest.mark.parametrize("n_max", [0, -1])
def test_n_max_not_positive(models, n_max):
    with pytest.raises(ValueError, match="n_max"):
        llamaspec.Generator(models["target"], models["dspark"], n_max=n_max)


@pytest.mark.parametrize("draft,n_max", [("dspark", 9), ("dflash", 8), ("draft_simple", 65)])
def test_n_max_above_block_size(models, draft, n_max):
    # the tiny heads have block size 8: DSpark drafts up to 8, DFlash up to 7
    with pytest.raises(ValueError, match="n_max must be in 1"):
        llamaspec.Generator(models["target"], models[draft], n_max=n_max)


def test_n_max_at_block_size_is_fine(models):
    for draft, n_max in (("dspark", 8), ("dflash", 7)):
        with llamaspec.Generator(models["target"], models[draft], n_max=n_max, n_ctx=N_CTX) as gen:
            assert gen.n_max == n_max


def test_ngram_depth_below_its_key_length_warns(target_model):
    """llama.cpp's ngram-simple drafts at least ngram_size_n tokens: with n_max below that it never drafts."""
    with pytest.warns(UserWarning, match="never drafts with n_max 2 < ngram_size_n 3"):
        gen = llamaspec.Generator(target_model, spec_type="ngram", n_max=2, n_ctx=256)
    gen.close()
    with pytest.warns(UserWarning, match="never drafts"):
        llamaspec.Batch(target_model, spec_type="ngram-simple", n_max=1, n_ctx=256, n_seq=1).close()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        llamaspec.Generator(target_model, spec_type="ngram", n_max=2, ngram_size_n=2, n_ctx=256).close()
        llamaspec.Generator(target_model, spec_type="ngram-mod", n_max=2, n_ctx=256).close()


def test_prompt_longer_than_context(models, target_model):
    with llamaspec.Generator(target_model, models["draft_simple"], n_max=4, n_ctx=64) as gen:
        with pytest.raises(ValueError, match="does not fit the context"):
            gen.generate("word " * 200, 8)
        # the generator is still usable afterwards
        assert len(gen.generate(PROMPTS[0], 4, ignore_eos=True).tokens) == 4


def test_bad_generate_arguments(target_model):
    with llamaspec.Generator(target_model, n_ctx=N_CTX) as gen:
        with pytest.raises(ValueError, match="empty"):
            gen.generate("", 8)
        with pytest.raises(ValueError, match="empty"):
            gen.generate([], 8)
        with pytest.raises(ValueError, match="max_tokens"):
            gen.generate("hi", 0)
        with pytest.raises(ValueError, match="vocabulary"):
            gen.generate([1, 2, 10**7], 4)
        with pytest.raises(TypeError):
            gen.generate(None, 4)


def test_use_after_close(target_model):
    gen = llamaspec.Generator(target_model, n_ctx=N_CTX)
    gen.close()
    gen.close()  # closing twice is harmless
    assert gen.closed
    with pytest.raises(RuntimeError, match="closed"):
        gen.generate("hello", 4)


def test_context_too_small(models):
    with pytest.raises(ValueError, match="n_ctx"):
        llamaspec.Generator(models["target"], models["dspark"], n_max=8, n_ctx=10)


def test_inspect_gguf(models):
    info = llamaspec.inspect_gguf(models["dspark"])
    assert info["architecture"] == "dflash" and info["has_markov_head"] and info["has_confidence_head"]
    assert not llamaspec.inspect_gguf(models["dflash"])["has_markov_head"]
    with pytest.raises(ValueError, match="not found"):
        llamaspec.inspect_gguf("/nonexistent.gguf")


def test_head_made_for_another_target(models, tmp_path):
    """Heads whose shape cannot fit the target are refused before llama.cpp would assert."""
    from llamaspec import testing as tiny_models

    wide = tiny_models.write_target(tmp_path / "wide.gguf", seed=5, n_embd=96, head_dim=24)
    tiny_models.write_dspark(tmp_path / "wide-dspark.gguf", wide, block_size=8)
    with pytest.raises(ValueError, match="hidden size"):
        llamaspec.Generator(models["target"], str(tmp_path / "wide-dspark.gguf"))

    deep = tiny_models.write_target(tmp_path / "deep.gguf", seed=6, n_layer=8)
    tiny_models.write_dflash(tmp_path / "deep-dflash.gguf", deep, target_layers=[1, 7])
    with pytest.raises(ValueError, match="target layer 7"):
        llamaspec.Generator(models["target"], str(tmp_path / "deep-dflash.gguf"))

    other = tiny_models.write_target(tmp_path / "other.gguf", seed=7, vocab_variant="larger")
    tiny_models.write_dflash(tmp_path / "other-dflash.gguf", other)
    with pytest.raises(ValueError, match="vocabular"):
        llamaspec.Generator(models["target"], str(tmp_path / "other-dflash.gguf"))
