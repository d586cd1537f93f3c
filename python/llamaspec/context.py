"""Context: one llama.cpp context in Python, for notebooks that need logits and hidden features.

    >>> ctx = llamaspec.Context("target.gguf", n_ctx=2048, capture_layers=[1, 3])
    >>> ctx.decode(tokens)                 # positions 0.. of sequence 0, logits at every token
    >>> ctx.logits()                       # numpy float32 [n_outputs, n_vocab]
    >>> ctx.features(3)                    # numpy float32 [n_tokens, n_embd]: input of layer 3
    >>> ctx.trim(0, 10); ctx.decode(more)  # keep positions < 10, continue from there

The features are the tensors a DFlash / DSpark / EAGLE3 head reads from the target (llama.cpp's
``llama_set_embeddings_layer_inp``): a head's training data can be captured from the exact GGUF
that will serve it. Arrays are copies (llama.cpp reuses its buffers at the next decode).
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np

from . import _core
from .model import ModelLike, load_model


class Context:
    """RAII owner of a llama_context: decode tokens, read logits and layer features, roll back.

    Args:
        model: GGUF path or :class:`llamaspec.Model`.
        n_ctx: tokens per sequence.
        n_seq: sequences (each with its own positions; KV cache of n_ctx per sequence).
        capture_layers: layers whose *input* hidden state :meth:`features` returns.
        n_batch: most tokens one :meth:`decode` takes.
        n_threads: CPU threads (None: llama.cpp's default).
        rollback: ``"auto"`` or ``"checkpoint"``, how a recurrent/hybrid model's :meth:`trim` works
            (see ``Generator``); attention-only models drop positions.
        max_rollback: most tokens one :meth:`trim` may take back from the latest decode of a
            recurrent/hybrid model (per-token state snapshots, where the architecture has them).
        cache_type: ``"f16"`` (llama.cpp's default KV cache) or ``"f32"``.
        flash_attn: ``"auto"`` (llama.cpp's choice), ``"on"`` or ``"off"``. llama.cpp's CPU flash
            attention computes in f16 whatever the cache type: ``cache_type="f32", flash_attn="off"``
            gives f32 attention (comparisons against an f32 reference implementation).
    """

    def __init__(self, model: ModelLike, n_ctx: int = 4096, n_seq: int = 1,
                 capture_layers: Sequence[int] = (), n_batch: int = 512, n_threads: Optional[int] = None,
                 rollback: str = "auto", max_rollback: int = 16, cache_type: str = "f16",
                 flash_attn: str = "auto") -> None:
        self.model = load_model(model)
        self._ctx = _core.Context(self.model, n_ctx, n_seq, n_batch, n_threads or 0, list(capture_layers),
                                  rollback, max_rollback, cache_type, flash_attn)

    @property
    def n_ctx(self) -> int:
        return self._ctx.n_ctx

    @property
    def n_seq(self) -> int:
        return self._ctx.n_seq

    @property
    def n_embd_input(self) -> int:
        """Values per row of :meth:`decode_features` (a DFlash/DSpark head: len(target_layers) * n_embd)."""
        return self._ctx.n_embd_input

    @property
    def rollback(self) -> str:
        """``"remove"``, ``"snapshots"`` or ``"checkpoint"``."""
        return self._ctx.rollback

    @property
    def capture_layers(self) -> list:
        return list(self._ctx.captured_layers)

    @property
    def graphs_reused(self) -> int:
        """Decodes so far that ran a graph built for an earlier one instead of building it again."""
        return self._ctx.graphs_reused

    def n_pos(self, seq: int = 0) -> int:
        """Positions held by sequence ``seq`` (the next token goes there)."""
        return self._ctx.n_pos(seq)

    def decode(self, tokens: Sequence[int], pos: Optional[int] = None, seq: int = 0,
               logits: Union[bool, str] = True) -> int:
        """Decode ``tokens`` into sequence ``seq`` at positions ``pos``, ``pos`` + 1, ... (default: where
        the sequence ends; any other value raises). ``logits``: True (every token), ``"last"`` or False.
        Returns the number of logit rows."""
        outputs = "all" if logits is True else "none" if logits is False else logits
        if isinstance(tokens, np.ndarray):
            tokens = tokens.tolist()
        return self._ctx.decode(list(tokens), -1 if pos is None else int(pos), int(seq), outputs)

    def decode_features(self, rows, pos: Optional[int] = None, seq: int = 0, logits: Union[bool, str] = False) -> int:
        """Decode rows of input embeddings instead of tokens: for a DFlash/DSpark head, the target
        features of positions ``pos``, ``pos`` + 1, ... (float32 [n, len(target_layers) * n_embd], the
        layers' :meth:`features` concatenated in the head's ``target_layers`` order), which its
        cache keeps as context. Then ``decode([anchor] + [mask] * (k - 1))`` drafts a block:
        :meth:`logits` are the head's (Markov-biased, for DSpark) logits and :meth:`confidence` its
        confidence head's outputs, as llama.cpp's drafter computes them."""
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        if rows.ndim != 2:
            raise ValueError(f"expected rows of shape [n, {self._ctx.n_embd_input}], got {rows.shape}")
        outputs = "all" if logits is True else "none" if logits is False else logits
        return self._ctx.decode_embeddings(rows, -1 if pos is None else int(pos), int(seq), outputs)

    def confidence(self) -> np.ndarray:
        """float32 [n_outputs]: a DSpark head's confidence at every output row of the latest decode."""
        return np.asarray(self._ctx.confidence(), dtype=np.float32)

    def logits(self, device: str = "cpu"):
        """float32 [n_outputs, n_vocab] of the latest :meth:`decode` (numpy; a cupy array with ``device="cuda"``)."""
        out = np.empty((self._ctx.n_outputs, self.model.n_vocab), dtype=np.float32)
        self._ctx._logits_into(out)
        return _on_device(out, device)

    def features(self, layer: int, device: str = "cpu"):
        """float32 [n_tokens, n_embd]: the input hidden state of ``layer`` at every token of the latest
        :meth:`decode` (the output of layer - 1; layer 0 is the embedding). numpy, or cupy with
        ``device="cuda"``."""
        out = np.empty((self._ctx.n_decoded, self.model.n_embd), dtype=np.float32)
        self._ctx._features_into(int(layer), out)
        return _on_device(out, device)

    def trim(self, seq: int, n_past: int) -> None:
        """Keep positions < ``n_past`` of ``seq``; RuntimeError when a recurrent state cannot go back."""
        self._ctx.trim(seq, n_past)

    def clear(self) -> None:
        self._ctx.clear()

    def __repr__(self) -> str:
        return (f"Context({self.model.path!r}, n_ctx={self.n_ctx}, n_seq={self.n_seq}, "
                f"rollback={self.rollback!r}, capture_layers={self.capture_layers})")


def _on_device(array: np.ndarray, device: str):
    """The array where the caller wants it. llama.cpp hands logits and features over in host memory
    (also on CUDA builds), so ``"cuda"`` is one host-to-device copy into a cupy array. cupy is imported
    only here, so CPU-only installs never load it."""
    if device == "cpu":
        return array
    if device != "cuda":
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    try:
        import cupy
    except ImportError:
        raise ValueError("device='cuda' needs cupy: pip install 'llamaspec[gpu]' on a machine with CUDA") from None
    return cupy.asarray(array)
