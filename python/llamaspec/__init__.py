"""llamaspec: llama.cpp speculative decoding in-process, with per-round positional acceptance P1..Pk.

    >>> import llamaspec
    >>> gen = llamaspec.Generator("target.gguf", "dspark-head.gguf", n_max=8)
    >>> result = gen.generate("def fib(n):", max_tokens=64)
    >>> result.stats.positional_acceptance   # P1..P8 as a numpy array
"""

import os

from . import _core
from .generator import GenerationResult, Generator, Model, StreamChunk, load_model
from .stats import SpecStats

set_verbose = _core.set_verbose


def inspect_gguf(path: "str | os.PathLike[str]") -> dict:
    """Architecture and drafter heads of a GGUF, from its header (ValueError if missing or not a GGUF)."""
    return _core.inspect_gguf(os.fspath(path))


def quantize(src: "str | os.PathLike[str]", dst: "str | os.PathLike[str]", type: str = "Q2_K",
             n_threads: int = 0) -> None:
    """Requantize a GGUF with llama.cpp's quantizer (Q2_K, Q3_K_S, Q4_K_M or Q8_0), e.g. for a weaker draft."""
    _core.quantize(os.fspath(src), os.fspath(dst), type, n_threads)

__all__ = ["Generator", "GenerationResult", "StreamChunk", "SpecStats", "Model", "load_model",
           "inspect_gguf", "set_verbose", "quantize"]
__version__ = "0.1.0"
