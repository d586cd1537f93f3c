"""llamaspec: llama.cpp speculative decoding in-process, with per-round positional acceptance P1..Pk.

    >>> import llamaspec
    >>> gen = llamaspec.Generator("target.gguf", "dspark-head.gguf", n_max=8)
    >>> result = gen.generate("def fib(n):", max_tokens=64)
    >>> result.stats.positional_acceptance   # P1..P8 as a numpy array
"""

from . import _core
from .generator import GenerationResult, Generator, Model, StreamChunk, load_model
from .stats import SpecStats

inspect_gguf = _core.inspect_gguf
set_verbose = _core.set_verbose
quantize = _core.quantize

__all__ = ["Generator", "GenerationResult", "StreamChunk", "SpecStats", "Model", "load_model",
           "inspect_gguf", "set_verbose", "quantize"]
__version__ = "0.1.0"
