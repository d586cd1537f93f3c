"""Loading models and turning prompts into token ids; the argument checks every front end shares."""

from __future__ import annotations

import math
import os
import warnings
from typing import Optional, Sequence, Union

import numpy as np

from . import _core
from .rpc import check_rpc

Model = _core.Model
ModelLike = Union[str, "os.PathLike[str]", Model]


def load_model(model: ModelLike, n_gpu_layers: int = -1, repack: bool = True, load_mtp: bool = True,
               rpc: Optional[Sequence[str]] = None, rpc_timeout: float = 5.0, rpc_head_local: bool = False) -> Model:
    """A loaded model as it is, or load a GGUF path (ValueError if missing, not a GGUF or unloadable).

    ``repack=False`` turns off llama.cpp's CPU weight repacking: its kernels round differently for
    different batch shapes, which can flip a near-tie argmax between a verification batch and plain
    one-token decoding of a quantized model. Off, greedy speculative output is bit-identical.

    ``rpc``: ``"host:port"`` of ``python -m llamaspec rpc-server`` (or llama.cpp ``rpc-server``) processes
    that hold the model's layers, as llama.cpp's ``--rpc``: they count as GPUs, ahead of this machine's own,
    and ``n_gpu_layers`` of the layers (-1: all) are split over them. Each server is checked first (within
    ``rpc_timeout`` seconds): ValueError for a malformed address, ConnectionError for one that cannot be used.
    llama.cpp counts the output head as the last layer and offloads it first, so every position's n_vocab
    logits come back over the network; ``rpc_head_local=True`` keeps the head here and brings back the
    n_embd-wide hidden state instead (the head's compute and memory stay on this machine). See docs/guide/rpc.md.
    """
    endpoints = check_rpc(rpc)
    if isinstance(model, Model):
        if endpoints and list(model.rpc) != endpoints:
            raise ValueError(f"rpc={endpoints} applies when loading a GGUF path; this model is already loaded "
                             f"(with rpc={list(model.rpc)}): pass its path instead")
        return model
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"expected a GGUF path or a llamaspec.Model, got {type(model).__name__}")
    return Model(os.fspath(model), n_gpu_layers, repack, load_mtp, endpoints, float(rpc_timeout), bool(rpc_head_local))



def tokenize(model: Model, text: Union[str, bytes], add_special: bool = True) -> list:
    """Token ids of ``text`` (str, or raw bytes passed to the tokenizer as they are)."""
    if isinstance(text, str):
        try:
            text = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"the prompt is not valid Unicode text: {exc}") from None
    if not isinstance(text, (bytes, bytearray)):
        raise TypeError(f"prompt must be str, bytes or a list of token ids, got {type(text).__name__}")
    return model.tokenize(bytes(text), add_special)


def prompt_tokens(model: Model, prompt: Union[str, bytes, Sequence[int]], add_special: bool) -> list:
    """A prompt (text, bytes or token ids) as a non-empty list of the model's token ids (ValueError else)."""
    if isinstance(prompt, np.ndarray) and prompt.ndim == 1 and prompt.dtype.kind in "iu":
        prompt = prompt.tolist()
    if isinstance(prompt, (str, bytes, bytearray)):
        tokens = tokenize(model, prompt, add_special)
    elif isinstance(prompt, Sequence) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        tokens = list(prompt)
    else:
        raise TypeError("prompt must be str, bytes or a sequence of int token ids")
    if not tokens:
        raise ValueError("the prompt is empty (no tokens)")
    n_vocab = model.n_vocab
    bad = next((t for t in tokens if not 0 <= t < n_vocab), None)
    if bad is not None:
        raise ValueError(f"prompt token {bad} is outside the vocabulary ({n_vocab} tokens)")
    return tokens


def check_max_tokens(max_tokens: int) -> None:
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")


def sampling_args(temperature: float, top_k: int, top_p: float, min_p: float, seed: int) -> tuple:
    """(temperature, top_k, top_p, min_p, seed) for the core: greedy when temperature <= 0."""
    temperature = float(temperature)
    if not math.isfinite(temperature):
        raise ValueError(f"temperature must be a finite number, got {temperature}")
    seed = int(seed)
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    if temperature > 0:
        return temperature, int(top_k), float(top_p), float(min_p), seed
    return 0.0, 0, 1.0, 0.0, seed



def warn_if_ngram_cannot_draft(spec_type: str, n_max: int, ngram_size_n: int, stacklevel: int = 3) -> None:
    """llama.cpp's ngram-simple drafts only runs of at least ``ngram_size_n`` tokens, so with ``n_max`` below
    that it never drafts: say so instead of decoding plainly without a word."""
    if "ngram-simple" in spec_type.split(",") and n_max < ngram_size_n:
        warnings.warn(f"ngram-simple never drafts with n_max {n_max} < ngram_size_n {ngram_size_n} (llama.cpp drafts "
                      f"at least ngram_size_n tokens): pass ngram_size_n={n_max} or n_max >= {ngram_size_n}",
                      stacklevel=stacklevel)
