"""llamaspec: llama.cpp speculative decoding in-process, with per-round positional acceptance P1..Pk.

    >>> import llamaspec
    >>> gen = llamaspec.Generator("target.gguf", "dspark-head.gguf", n_max=8)
    >>> result = gen.generate("def fib(n):", max_tokens=64)
    >>> result.stats.positional_acceptance   # P1..P8 as a numpy array
"""

import os

from . import _core, models
from .batch import Batch, Request
from .context import Context
from .evaluate import Report, evaluate
from .sampler import Sampler
from .generator import Generator
from .model import Model, load_model
from .results import ChatResult, GenerationResult, StreamChunk
from .stats import SpecStats

set_verbose = _core.set_verbose


def set_batch_invariant(on: bool = True) -> None:
    """Process-wide switch of the batch-invariant CPU kernels (on by default; docs/guide/batch-invariance.md).

    On, a token's logits do not depend on how many tokens share its batch, so greedy speculative
    and batched output equal plain decoding bit for bit. Off, llama.cpp's faster batch kernels
    (tiled matmul, split-KV attention) may round verification batches differently.
    """
    _core.set_batch_invariant(bool(on))


def batch_invariant() -> bool:
    """Whether the batch-invariant CPU kernels are on."""
    return _core.get_batch_invariant()


def set_multidot(on: bool = True) -> None:
    """Process-wide switch of the few-column matmul kernels (on by default; ``patches/0008``).

    On, a CPU matmul of Q4_0, Q5_0, Q6_K or repacked Q4_K weights with 1..16 activation columns (a
    speculative verification pass, the first sizes of a batched round) reads every weight block once for
    all columns, with each column computed exactly as the one-column kernel computes it (bit-identical
    either way). And models loaded while it is on store their Q8_0, Q5_0, Q4_0, Q4_K, Q5_K and Q6_K matmul
    weights with 8 rows interleaved (x86 with AVX2, VNNI used where present), computed one output row per vector lane (16 rows per
    512-bit vector with AVX-512) for any number of columns: the same rounding for every batch, a little
    different from llama.cpp's one-token kernel. Such a model keeps that layout
    whatever the switch says later; load models again to compare (``bench/verify_cost.py``). Off, llama.cpp's
    own kernels run.
    """
    _core.set_multidot(bool(on))


def multidot() -> bool:
    """Whether the few-column matmul kernels are on."""
    return _core.get_multidot()


def supports_gpu_offload() -> bool:
    """Whether this build has a GPU backend with a device (a CUDA build on a CUDA machine): models then
    load every layer onto it (``load_model(path, n_gpu_layers=-1)``, the default; ``Model.devices`` says where)."""
    return _core.supports_gpu_offload()


def inspect_gguf(path: "str | os.PathLike[str]") -> dict:
    """Architecture and drafter heads of a GGUF, from its header (ValueError if missing or not a GGUF)."""
    return _core.inspect_gguf(os.fspath(path))


def quantize(src: "str | os.PathLike[str]", dst: "str | os.PathLike[str]", type: str = "Q2_K",
             n_threads: int = 0) -> None:
    """Requantize a GGUF with llama.cpp's quantizer (Q2_K, Q3_K_S, Q4_K_M, Q5_K_M, Q6_K, Q8_0, Q4_0
    or F16), e.g. for a weaker draft."""
    _core.quantize(os.fspath(src), os.fspath(dst), type, n_threads)

__all__ = ["Batch", "Request", "evaluate", "Report", "Context", "Sampler", "set_batch_invariant", "batch_invariant", "set_multidot", "multidot", "supports_gpu_offload", "Generator", "GenerationResult", "ChatResult", "StreamChunk", "SpecStats", "Model", "load_model",
           "inspect_gguf", "set_verbose", "quantize", "models"]
__version__ = "0.1.0"
