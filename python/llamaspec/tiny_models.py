#!/usr/bin/env python3
"""Tiny random-weight GGUF models for testing ``llamaspec`` against the vendored llama.cpp.

Everything here is built from numpy and the vendored ``gguf-py`` writer only (no torch, no
network). All weights are float32 and seeded, so every file is byte-for-byte reproducible.

Files that can be written
-------------------------
``write_target``
    A tiny ``qwen3`` model (the target architecture the vendored DFlash/DSpark drafters are
    converted against) with a real byte-level BPE tokenizer, so ``llama_tokenize`` /
    ``llama_token_to_piece`` round-trip arbitrary ASCII (indeed arbitrary UTF-8) text.
``write_draft_simple``
    A standalone ``qwen3`` draft with the target's vocabulary (for ``draft-simple``).
``write_dflash``
    A DFlash block-diffusion draft head (GGUF arch ``dflash``).
``write_dspark``
    A DSpark draft head: DFlash + Markov head (+ optional confidence head), also GGUF arch
    ``dflash``; llama.cpp tells the two apart by the presence of ``markov_w1.weight``.

Tokenizer
---------
``tokenizer.ggml.model = "gpt2"`` with ``tokenizer.ggml.pre = "qwen2"``. Ids ``0..255`` are
the 256 GPT-2 byte-level tokens (id ``b`` is byte ``b`` under the ``bytes_to_unicode``
mapping, e.g. id 32 is ``"Ġ"`` = space), followed by BPE merges trained deterministically on a
small built-in English/code corpus, followed by the control tokens in :data:`SPECIAL_TOKENS`
at the end of the vocabulary (like Qwen). ``add_bos_token`` defaults to **False** (Qwen
convention); pass ``add_bos=True`` to make llama.cpp prepend ``<|bos|>``. ``add_eos_token`` is
always False. EOS (and PAD) is ``<|endoftext|>``; ``<|im_end|>`` is also end-of-generation
(llama.cpp auto-detects it by text).

Logits / greedy decoding
------------------------
Output-head rows are N(0, (logit_std/sqrt(n_embd))^2), so after the final RMS norm the
logits have a std of about ``logit_std`` (default 3) and greedy argmaxes are far from ties.
The head rows of all control tokens and of the byte tokens that are not printable ASCII or
newline are exactly zero (see :meth:`TinyVocab.unprintable_ids`), so their logit is exactly 0
while the best other token is ~+8: greedy decoding never emits EOS/EOG/mask tokens, always
runs for the full ``-n`` and produces printable ASCII (valid UTF-8) only.

Weight sharing through seeds
----------------------------
Every tensor is drawn from its own RNG seeded by ``(seed, tensor name)``. Two models written
with the same seed therefore share every tensor they have in common: a ``write_draft_simple``
with the target's seed and fewer layers has the same embeddings, head and first layers as the
target and agrees with it on a good fraction of greedy tokens (non-zero acceptance); the same
seed and the same ``n_layer`` gives an identical model (100% acceptance). A different seed
gives an unrelated model (acceptance ~0). DFlash/DSpark heads have random weights, so their
acceptance is ~0 -- they are for "loads and runs" tests, not for speedups.

CLI: ``python -m llamaspec.tiny_models OUTDIR`` writes target.gguf, draft_simple.gguf,
dflash.gguf, dspark.gguf and target_othervocab.gguf into OUTDIR.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import zlib
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Sequence, Union

import numpy as np

def _vendored_gguf_py() -> Path:
    """The folder holding the gguf-py package of the llama.cpp tree llamaspec was built against.

    The wheel ships it as ``llamaspec/_vendor/gguf``; ``$LLAMASPEC_GGUF_PY`` (a folder containing
    ``gguf/``) overrides it, and an unbuilt source checkout falls back to ``vendor/llama.cpp/gguf-py``.
    """
    env = os.environ.get("LLAMASPEC_GGUF_PY")
    candidates = [Path(env)] if env else []
    candidates += [Path(__file__).resolve().parent / "_vendor",
                   Path(__file__).resolve().parents[2] / "vendor" / "llama.cpp" / "gguf-py"]
    for path in candidates:
        if (path / "gguf" / "__init__.py").is_file():
            return path
    raise ImportError("llamaspec's copy of gguf-py is missing (looked in " + ", ".join(map(str, candidates)) +
                      "): reinstall llamaspec (pip install .) or set LLAMASPEC_GGUF_PY")


def _import_gguf():
    """Import the vendored gguf-py as the top-level ``gguf`` (it imports itself by that name)."""
    folder = str(_vendored_gguf_py())
    loaded = sys.modules.get("gguf")
    if loaded is not None:
        if not hasattr(getattr(loaded, "MODEL_ARCH", None), "DFLASH"):
            raise ImportError(f"another 'gguf' package ({getattr(loaded, '__file__', '?')}) was imported first and "
                              "lacks the DFlash/DSpark keys: import llamaspec.tiny_models before it")
        return loaded
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import gguf as module

    return module


gguf = _import_gguf()

PathLike = Union[str, "os.PathLike[str]"]

ARCH_TARGET = "qwen3"   #: general.architecture of targets and simple drafts
ARCH_DFLASH = "dflash"  #: general.architecture of DFlash *and* DSpark drafts

#: Control tokens appended after the BPE merges, in this order.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",  # eos, pad
    "<|im_start|>",
    "<|im_end|>",     # end of turn (EOG by text)
    "<|bos|>",        # bos (only prepended when add_bos=True)
    "<|mask|>",       # DFlash/DSpark mask token (tokenizer.ggml.mask_token_id in draft files)
)

VOCAB_VARIANTS: tuple[str, ...] = ("base", "permuted", "larger", "alt")

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Small deterministic corpus for training the BPE merges (ASCII only).
_CORPUS = """\
Hello world! Hello there, how are you today? The quick brown fox jumps over the lazy dog.
Speculative decoding uses a small draft model to propose tokens and a large target model to
verify them in a single batch. When the draft is right, several tokens are accepted at once.
The target model always has the final word, so the output is the same as greedy decoding.
In the beginning there was the word, and the word was with the model, and the model was good.
Once upon a time, in a land far away, there lived a little robot that loved to read books.
It read every book in the library, from the first page to the last, and then it wrote its own.
def main(argv):
    for i in range(10):
        print("hello", i)
    return 0
if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv))
The numbers one, two, three, four, five, six, seven, eight, nine and ten are small numbers.
A token is a piece of text. Tokens are turned into embeddings, and embeddings into logits.
The cat sat on the mat. The dog sat on the log. The bird sat in the tree and sang a song.
We think that this is the best way to test the engine: tiny models, random weights, real code.
"""

# ASCII approximation of the llama.cpp "qwen2" pre-tokenizer regex (only used for training).
_PRETOKENIZE_RE = re.compile(
    r"'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])"
    r"|[^\r\nA-Za-z0-9]?[A-Za-z]+"
    r"|[0-9]"
    r"| ?[^\sA-Za-z0-9]+[\r\n]*"
    r"|\s*[\r\n]+"
    r"|\s+(?!\S)"
    r"|\s+"
)


# --------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """The GPT-2 byte -> printable unicode character mapping used by byte-level BPE."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


@lru_cache(maxsize=8)
def _train_merges(n_merges: int) -> tuple[str, ...]:
    """Greedy, deterministic byte-level BPE training on :data:`_CORPUS`."""
    b2u = bytes_to_unicode()
    words = Counter(
        tuple(b2u[b] for b in piece.encode("utf-8"))
        for piece in _PRETOKENIZE_RE.findall(_CORPUS)
    )
    merges: list[str] = []
    while len(merges) < n_merges:
        pairs: Counter[tuple[str, str]] = Counter()
        for word, freq in words.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] += freq
        if not pairs:
            break
        # most frequent pair; ties broken lexicographically so the result is deterministic
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(f"{best[0]} {best[1]}")
        joined = best[0] + best[1]
        new_words: Counter[tuple[str, ...]] = Counter()
        for word, freq in words.items():
            out: list[str] = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == best[0] and word[i + 1] == best[1]:
                    out.append(joined)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            new_words[tuple(out)] += freq
        words = new_words
    return tuple(merges)


@dataclass(frozen=True)
class TinyVocab:
    """A byte-level BPE vocabulary as stored in GGUF ``tokenizer.ggml.*`` keys."""

    tokens: tuple[str, ...]
    token_types: tuple[int, ...]
    merges: tuple[str, ...]
    bos_id: int
    eos_id: int
    pad_id: int
    mask_id: int
    add_bos: bool = False
    pre: str = "qwen2"

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    @property
    def special_ids(self) -> list[int]:
        """Ids of all non-normal tokens (control / unused)."""
        return [i for i, t in enumerate(self.token_types) if t != gguf.TokenType.NORMAL]

    def unprintable_ids(self) -> list[int]:
        """Special tokens plus the byte tokens that are not printable ASCII / newline.

        These get all-zero output-head rows, so greedy decoding only ever produces printable
        ASCII text (valid UTF-8) and never stops early on EOS.
        """
        u2b = {u: b for b, u in bytes_to_unicode().items()}
        bad = set(self.special_ids)
        for i, tok in enumerate(self.tokens):
            if i not in bad and any(c not in u2b or not (32 <= u2b[c] < 127 or u2b[c] == 10)
                                    for c in tok):
                bad.add(i)
        return sorted(bad)

    def token_id(self, text: str) -> int:
        return self.tokens.index(text)

    def write(self, w: gguf.GGUFWriter, *, with_mask: bool = False) -> None:
        """Write the tokenizer keys. ``with_mask`` also writes ``tokenizer.ggml.mask_token_id``."""
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(self.pre)
        w.add_token_list(list(self.tokens))
        w.add_token_types(list(self.token_types))
        w.add_token_merges(list(self.merges))
        w.add_bos_token_id(self.bos_id)
        w.add_eos_token_id(self.eos_id)
        w.add_pad_token_id(self.pad_id)
        w.add_add_bos_token(self.add_bos)
        w.add_add_eos_token(False)
        if with_mask:
            w.add_mask_token_id(self.mask_id)
        w.add_chat_template(CHATML_TEMPLATE)


def build_vocab(vocab_size: int = 384, variant: str = "base", add_bos: bool = False) -> TinyVocab:
    """Build the tiny byte-level BPE vocabulary.

    ``vocab_size`` is the total number of tokens: 256 byte tokens + BPE merges + the control
    tokens of :data:`SPECIAL_TOKENS`. If the corpus runs out of merges the gap is filled with
    ``<|reserved_N|>`` tokens of type UNUSED (never produced by the tokenizer).

    ``variant`` builds a vocabulary that is *incompatible* with ``"base"`` (for mismatch tests,
    cf. ``common_speculative_are_compatible`` in common/speculative.cpp):

    * ``"permuted"``: same size, byte tokens in reverse id order -> token texts differ.
    * ``"larger"``:   ``vocab_size + 160`` tokens (extra merges) -> size differs by > 128 and the
      control tokens move to other ids.
    * ``"alt"``:      both of the above.
    """
    if variant not in VOCAB_VARIANTS:
        raise ValueError(f"unknown vocab variant {variant!r}, expected one of {VOCAB_VARIANTS}")
    if variant in ("larger", "alt"):
        vocab_size += 160
    n_fill = vocab_size - 256 - len(SPECIAL_TOKENS)
    if n_fill < 0:
        raise ValueError(f"vocab_size must be >= {256 + len(SPECIAL_TOKENS)}")

    b2u = bytes_to_unicode()
    byte_tokens = [b2u[b] for b in range(256)]
    if variant in ("permuted", "alt"):
        byte_tokens.reverse()

    merges = _train_merges(n_fill)
    merged = [m.replace(" ", "") for m in merges]
    reserved = [f"<|reserved_{i}|>" for i in range(n_fill - len(merges))]

    tokens = byte_tokens + merged + reserved + list(SPECIAL_TOKENS)
    types = ([gguf.TokenType.NORMAL] * (256 + len(merged))
             + [gguf.TokenType.UNUSED] * len(reserved)
             + [gguf.TokenType.CONTROL] * len(SPECIAL_TOKENS))
    assert len(tokens) == vocab_size and len(set(tokens)) == vocab_size

    ids = {t: i for i, t in enumerate(tokens)}
    return TinyVocab(
        tokens=tuple(tokens),
        token_types=tuple(int(t) for t in types),
        merges=merges,
        bos_id=ids["<|bos|>"],
        eos_id=ids["<|endoftext|>"],
        pad_id=ids["<|endoftext|>"],
        mask_id=ids["<|mask|>"],
        add_bos=add_bos,
    )


# --------------------------------------------------------------------------------------------
# Model specs
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TargetSpec:
    """Hyper-parameters + vocabulary of a tiny ``qwen3`` model (target or simple draft)."""

    vocab: TinyVocab
    n_embd: int = 64
    n_layer: int = 4
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_ff: int = 128
    n_ctx_train: int = 2048
    rope_freq_base: float = 1_000_000.0
    rms_eps: float = 1e-6
    seed: int = 0
    path: str | None = field(default=None, compare=False)

    @property
    def n_vocab(self) -> int:
        return self.vocab.n_vocab


@dataclass(frozen=True)
class DFlashSpec:
    """What was written into a DFlash / DSpark draft file."""

    path: str
    arch: str
    block_size: int
    target_layers: tuple[int, ...]
    mask_token_id: int
    n_layer: int
    n_embd: int
    n_vocab: int
    is_dspark: bool = False
    has_confidence_head: bool = False
    sample_from_anchor: bool = True
    markov_rank: int = 0
    draft_vocab_size: int | None = None

    @property
    def n_draft_max(self) -> int:
        """Largest draft the vendored common_speculative produces per step (it clamps n_max)."""
        return self.block_size if (self.is_dspark and self.sample_from_anchor) else self.block_size - 1


# --------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------

def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def _normal(seed: int, name: str, shape: Sequence[int], std: float) -> np.ndarray:
    """Seeded N(0, std^2) float32 tensor. ``shape`` is numpy order (= ggml ``ne`` reversed)."""
    return (_rng(seed, name).standard_normal(tuple(shape)) * std).astype(np.float32)


def _norm_weight(seed: int, name: str, n: int) -> np.ndarray:
    """RMS-norm gains around 1 (slightly perturbed so the norms are not trivially identity)."""
    return (1.0 + 0.1 * _rng(seed, name).standard_normal(n)).astype(np.float32)


def _head(seed: int, name: str, n_rows: int, n_embd: int, logit_std: float,
          zero_rows: Sequence[int] = ()) -> np.ndarray:
    w = _normal(seed, name, (n_rows, n_embd), logit_std / np.sqrt(n_embd))
    if len(zero_rows):
        w[np.asarray(zero_rows)] = 0.0
    return w


def _add_attn_ffn_layer(w: gguf.GGUFWriter, seed: int, il: int, n_embd: int, n_head: int,
                        n_head_kv: int, head_dim: int, n_ff: int) -> None:
    """Qwen3-style block tensors: attn q/k/v/o + q/k norms + SwiGLU FFN (shared by qwen3/dflash)."""
    p = f"blk.{il}."
    t = {
        "attn_norm.weight":   _norm_weight(seed, p + "attn_norm", n_embd),
        "attn_q.weight":      _normal(seed, p + "attn_q", (n_head * head_dim, n_embd), n_embd ** -0.5),
        "attn_k.weight":      _normal(seed, p + "attn_k", (n_head_kv * head_dim, n_embd), n_embd ** -0.5),
        "attn_v.weight":      _normal(seed, p + "attn_v", (n_head_kv * head_dim, n_embd), n_embd ** -0.5),
        "attn_output.weight": _normal(seed, p + "attn_output", (n_embd, n_head * head_dim),
                                      0.5 * (n_head * head_dim) ** -0.5),
        "attn_q_norm.weight": _norm_weight(seed, p + "attn_q_norm", head_dim),
        "attn_k_norm.weight": _norm_weight(seed, p + "attn_k_norm", head_dim),
        "ffn_norm.weight":    _norm_weight(seed, p + "ffn_norm", n_embd),
        "ffn_gate.weight":    _normal(seed, p + "ffn_gate", (n_ff, n_embd), n_embd ** -0.5),
        "ffn_up.weight":      _normal(seed, p + "ffn_up", (n_ff, n_embd), n_embd ** -0.5),
        "ffn_down.weight":    _normal(seed, p + "ffn_down", (n_embd, n_ff), 0.5 * n_ff ** -0.5),
    }
    for name, arr in t.items():
        w.add_tensor(p + name, arr)


def _add_common_hparams(w: gguf.GGUFWriter, *, name: str, n_ctx_train: int, n_embd: int,
                        n_layer: int, n_ff: int, n_head: int, n_head_kv: int, head_dim: int,
                        rope_freq_base: float, rms_eps: float) -> None:
    w.add_name(name)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(rope_freq_base)
    w.add_layer_norm_rms_eps(rms_eps)


def _finish(w: gguf.GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# --------------------------------------------------------------------------------------------
# Writers
# --------------------------------------------------------------------------------------------

def write_target(
    path: PathLike,
    seed: int = 0,
    *,
    vocab_size: int = 384,
    vocab_variant: str = "base",
    add_bos: bool = False,
    n_layer: int = 4,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    head_dim: int = 16,
    n_ff: int = 128,
    n_ctx_train: int = 2048,
    rope_freq_base: float = 1_000_000.0,
    logit_std: float = 3.0,
    name: str = "tiny-qwen3",
) -> TargetSpec:
    """Write a tiny random ``qwen3`` model with a working byte-level BPE tokenizer.

    Returns the :class:`TargetSpec` (pass it, or the path, to :func:`write_dflash` etc.).
    The output head is untied (``output.weight``); its rows for control tokens and
    non-printable bytes are zero (see module docstring).
    """
    if n_head % n_head_kv:
        raise ValueError("n_head must be a multiple of n_head_kv")
    vocab = build_vocab(vocab_size, vocab_variant, add_bos)
    spec = TargetSpec(vocab=vocab, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                      n_head_kv=n_head_kv, head_dim=head_dim, n_ff=n_ff, n_ctx_train=n_ctx_train,
                      rope_freq_base=rope_freq_base, seed=seed, path=os.fspath(path))

    w = gguf.GGUFWriter(os.fspath(path), ARCH_TARGET)
    _add_common_hparams(w, name=name, n_ctx_train=n_ctx_train, n_embd=n_embd, n_layer=n_layer,
                        n_ff=n_ff, n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
                        rope_freq_base=rope_freq_base, rms_eps=spec.rms_eps)
    vocab.write(w)

    w.add_tensor("token_embd.weight", _normal(seed, "token_embd", (vocab.n_vocab, n_embd), 1.0))
    w.add_tensor("output_norm.weight", _norm_weight(seed, "output_norm", n_embd))
    w.add_tensor("output.weight", _head(seed, "output", vocab.n_vocab, n_embd, logit_std,
                                        vocab.unprintable_ids()))
    for il in range(n_layer):
        _add_attn_ffn_layer(w, seed, il, n_embd, n_head, n_head_kv, head_dim, n_ff)
    _finish(w)
    return spec


def write_draft_simple(path: PathLike, seed: int = 0, *, n_layer: int = 1, **kwargs) -> TargetSpec:
    """Write a small standalone ``qwen3`` draft with the target's vocabulary.

    Same as :func:`write_target` with fewer layers. With the target's seed (default 0) it
    shares the target's embeddings, head and first ``n_layer`` blocks, so greedy acceptance
    is well above zero; use another seed for an unrelated draft. ``kwargs`` must match the
    target's vocabulary arguments (``vocab_size``, ``vocab_variant``, ``add_bos``).
    """
    kwargs.setdefault("name", "tiny-qwen3-draft")
    return write_target(path, seed, n_layer=n_layer, **kwargs)


def read_target_spec(path: PathLike) -> TargetSpec:
    """Read hyper-parameters and the tokenizer back from a (``qwen3``-like) GGUF file."""
    r = gguf.GGUFReader(os.fspath(path))

    def get(key: str, default=None):
        f = r.get_field(key)
        return default if f is None else f.contents()

    arch = get("general.architecture")
    n_embd = int(get(f"{arch}.embedding_length"))
    n_head = int(get(f"{arch}.attention.head_count"))
    tokens = tuple(get("tokenizer.ggml.tokens"))
    types = tuple(int(t) for t in get("tokenizer.ggml.token_type"))
    eos = int(get("tokenizer.ggml.eos_token_id"))
    mask = get("tokenizer.ggml.mask_token_id")
    if mask is None:
        mask = tokens.index("<|mask|>") if "<|mask|>" in tokens else eos
    vocab = TinyVocab(
        tokens=tokens, token_types=types, merges=tuple(get("tokenizer.ggml.merges", [])),
        bos_id=int(get("tokenizer.ggml.bos_token_id", eos)), eos_id=eos,
        pad_id=int(get("tokenizer.ggml.padding_token_id", eos)), mask_id=int(mask),
        add_bos=bool(get("tokenizer.ggml.add_bos_token", False)),
        pre=str(get("tokenizer.ggml.pre", "default")),
    )
    return TargetSpec(
        vocab=vocab, n_embd=n_embd, n_layer=int(get(f"{arch}.block_count")), n_head=n_head,
        n_head_kv=int(get(f"{arch}.attention.head_count_kv", n_head)),
        head_dim=int(get(f"{arch}.attention.key_length", n_embd // n_head)),
        n_ff=int(get(f"{arch}.feed_forward_length")),
        n_ctx_train=int(get(f"{arch}.context_length")),
        rope_freq_base=float(get(f"{arch}.rope.freq_base", 10000.0)),
        rms_eps=float(get(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)),
        path=os.fspath(path),
    )


def _as_target_spec(target: TargetSpec | PathLike) -> TargetSpec:
    return target if isinstance(target, TargetSpec) else read_target_spec(target)


def default_target_layers(n_layer_target: int, n: int = 2) -> tuple[int, ...]:
    """Evenly spaced target layers in ``[1, n_layer_target - 1]``.

    ``dflash.target_layers`` holds ids ``L`` whose *input* hidden state (= output of block
    ``L-1``) is extracted from the target (``llama_set_embeddings_layer_inp``); the HF
    converter writes ``target_layer_ids + 1``. For a ``qwen3`` target only ``0..n_layer-1``
    are valid: id ``n_layer`` passes the ``lid <= n_layer`` assert but aborts in graph build
    ("layer input tensor is null") because qwen3 does not export ``t_layer_inp[n_layer]``.
    """
    if n_layer_target < 2:
        return (0,)
    ids = np.linspace(1, n_layer_target - 1, num=min(n, n_layer_target - 1))
    return tuple(sorted({int(round(x)) for x in ids}))


def write_dflash(
    path: PathLike,
    target: TargetSpec | PathLike,
    block_size: int = 8,
    seed: int = 1,
    *,
    n_layer: int = 1,
    target_layers: Sequence[int] | None = None,
    n_ff: int | None = None,
    own_embeddings: bool = False,
    causal: bool | None = None,
    logit_std: float = 3.0,
    name: str = "tiny-dflash",
    _dspark: dict | None = None,
) -> DFlashSpec:
    """Write a tiny DFlash draft head (GGUF arch ``dflash``) for ``target``.

    Layout (cf. conversion/qwen.py ``DFlashModel`` and src/models/dflash.cpp):

    * hparams: the usual ``dflash.{context_length, embedding_length, block_count,
      feed_forward_length, attention.head_count[_kv], attention.key_length/value_length,
      rope.*, attention.layer_norm_rms_epsilon}`` plus ``dflash.block_size`` (u32) and
      ``dflash.target_layers`` (i32 array, **required**), optionally
      ``dflash.attention.causal`` (default: non-causal block attention).
    * tokenizer: the target's tokenizer keys + ``tokenizer.ggml.mask_token_id`` (the noise
      token filling the block; without it the drafter feeds token -1).
    * tensors: ``fc.weight`` [ggml ne: n_target_layers*n_embd, n_embd], ``enc.output_norm``,
      ``output_norm`` and per block ``attn_norm, attn_q/k/v/output, attn_q_norm, attn_k_norm,
      ffn_norm, ffn_gate/up/down``.
    * ``token_embd``/``output`` are absent by default: the draft context then borrows the
      target's through ``ctx_other`` (``own_embeddings=True`` writes its own copies, which
      makes the draft self-contained).

    ``embedding_length`` equals the target's ``n_embd`` (required: the drafter gathers
    ``n_target_layers * n_embd_target`` features while ``fc`` expects
    ``n_target_layers * n_embd_draft``).
    """
    t = _as_target_spec(target)
    layers = tuple(target_layers) if target_layers is not None else default_target_layers(t.n_layer)
    if not layers or any(not 0 <= L < t.n_layer for L in layers):
        raise ValueError(f"target_layers must be non-empty ids in [0, {t.n_layer - 1}], got {layers}")
    if block_size < 2:
        raise ValueError("block_size must be >= 2")
    n_embd, head_dim = t.n_embd, t.head_dim
    n_ff = n_ff or t.n_ff
    ds = _dspark or {}
    is_dspark = bool(ds)

    w = gguf.GGUFWriter(os.fspath(path), ARCH_DFLASH)
    _add_common_hparams(w, name=name, n_ctx_train=t.n_ctx_train, n_embd=n_embd, n_layer=n_layer,
                        n_ff=n_ff, n_head=t.n_head, n_head_kv=t.n_head_kv, head_dim=head_dim,
                        rope_freq_base=t.rope_freq_base, rms_eps=t.rms_eps)
    w.add_block_size(block_size)
    w.add_target_layers(list(layers))
    if causal is not None:
        w.add_causal_attention(causal)
    if is_dspark:
        w.add_sample_from_anchor(ds["sample_from_anchor"])
        w.add_has_confidence_head(ds["with_confidence"])
    t.vocab.write(w, with_mask=True)

    n_vocab = t.n_vocab
    draft_vocab = ds.get("d2t")  # absolute target ids of the reduced draft vocabulary
    n_vocab_draft = n_vocab if draft_vocab is None else len(draft_vocab)
    special = set(t.vocab.unprintable_ids())

    if own_embeddings:
        w.add_tensor("token_embd.weight", _normal(seed, "token_embd", (n_vocab, n_embd), 1.0))
    if own_embeddings or draft_vocab is not None:
        rows = range(n_vocab) if draft_vocab is None else draft_vocab
        zero = [i for i, tid in enumerate(rows) if tid in special]
        w.add_tensor("output.weight", _head(seed, "output", n_vocab_draft, n_embd, logit_std, zero))
    if draft_vocab is not None:
        w.add_tensor("d2t", np.asarray(draft_vocab, dtype=np.int64))

    w.add_tensor("fc.weight", _normal(seed, "fc", (n_embd, len(layers) * n_embd),
                                      (len(layers) * n_embd) ** -0.5))
    w.add_tensor("enc.output_norm.weight", _norm_weight(seed, "enc.output_norm", n_embd))
    w.add_tensor("output_norm.weight", _norm_weight(seed, "output_norm", n_embd))
    for il in range(n_layer):
        _add_attn_ffn_layer(w, seed, il, n_embd, t.n_head, t.n_head_kv, head_dim, n_ff)

    rank = 0
    if is_dspark:
        rank = ds["markov_rank"]
        # ggml ne {rank, n_vocab} / {rank, n_vocab_draft} / {n_embd + rank, 1} / {1}
        w.add_tensor("markov_w1.weight", _normal(seed, "markov_w1", (n_vocab, rank), 1.0))
        w.add_tensor("markov_w2.weight", _normal(seed, "markov_w2", (n_vocab_draft, rank), rank ** -0.5))
        if ds["with_confidence"]:
            w.add_tensor("conf_proj.weight", _normal(seed, "conf_proj", (1, n_embd + rank),
                                                     (n_embd + rank) ** -0.5))
            w.add_tensor("conf_proj.bias", np.full((1,), 1.0, dtype=np.float32))
    _finish(w)

    return DFlashSpec(
        path=os.fspath(path), arch=ARCH_DFLASH, block_size=block_size, target_layers=layers,
        mask_token_id=t.vocab.mask_id, n_layer=n_layer, n_embd=n_embd, n_vocab=n_vocab,
        is_dspark=is_dspark, has_confidence_head=bool(ds.get("with_confidence", False)),
        sample_from_anchor=bool(ds.get("sample_from_anchor", True)), markov_rank=rank,
        draft_vocab_size=None if draft_vocab is None else n_vocab_draft,
    )


def write_dspark(
    path: PathLike,
    target: TargetSpec | PathLike,
    block_size: int = 8,
    seed: int = 2,
    *,
    with_confidence: bool = True,
    markov_rank: int = 16,
    sample_from_anchor: bool = True,
    draft_vocab_size: int | None = None,
    name: str = "tiny-dspark",
    **kwargs,
) -> DFlashSpec:
    """Write a tiny DSpark draft head: a DFlash head plus the Markov (and confidence) head.

    Extra over :func:`write_dflash` (cf. conversion/qwen.py ``DSparkModel``):
    ``dflash.sample_from_anchor`` (bool), ``dflash.has_confidence_head`` (bool),
    ``markov_w1.weight`` [ne: rank, n_vocab], ``markov_w2.weight`` [ne: rank, n_vocab_draft]
    and, with ``with_confidence``, ``conf_proj.weight`` [ne: n_embd + rank, 1] and
    ``conf_proj.bias`` [1]. ``with_confidence=False`` requires ``--spec-draft-p-min 0``
    (llama.cpp throws otherwise when p_min > 0).

    ``draft_vocab_size`` < n_vocab writes a reduced draft vocabulary: an I64 ``d2t`` tensor of
    absolute target ids (a seeded random subset that always keeps the 256 byte tokens) and the
    draft's own ``output.weight`` [ne: n_embd, draft_vocab_size].
    """
    t = _as_target_spec(target)
    d2t = None
    if draft_vocab_size is not None and draft_vocab_size < t.n_vocab:
        if draft_vocab_size < 256:
            raise ValueError("draft_vocab_size must keep the 256 byte tokens")
        rest = np.arange(256, t.n_vocab)
        pick = _rng(seed, "d2t").choice(rest, size=draft_vocab_size - 256, replace=False)
        d2t = tuple(int(x) for x in np.sort(np.concatenate([np.arange(256), pick])))
    return write_dflash(
        path, t, block_size, seed, name=name,
        _dspark={"with_confidence": with_confidence, "markov_rank": markov_rank,
                 "sample_from_anchor": sample_from_anchor, "d2t": d2t},
        **kwargs,
    )


def write_all(outdir: PathLike, seed: int = 0) -> dict[str, object]:
    """Write the standard set of test models into ``outdir``; returns name -> spec.

    * ``target.gguf``: 4-layer qwen3, vocab 384 (seed ``seed``).
    * ``draft_simple.gguf``: the target's first 2 layers + embeddings + head (same seed), so
      draft-simple greedy acceptance is non-zero (~13% at n_max 4 on "Hello world").
    * ``dflash.gguf`` / ``dspark.gguf``: random heads, block_size 8, target_layers (1, 3).
    * ``target_othervocab.gguf``: vocab variant ``"alt"`` (544 tokens, permuted bytes).
    """
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    target = write_target(out / "target.gguf", seed)
    return {
        "target": target,
        "draft_simple": write_draft_simple(out / "draft_simple.gguf", seed, n_layer=2),
        "dflash": write_dflash(out / "dflash.gguf", target, block_size=8, seed=seed + 1),
        "dspark": write_dspark(out / "dspark.gguf", target, block_size=8, seed=seed + 2),
        "target_othervocab": write_target(out / "target_othervocab.gguf", seed + 3,
                                          vocab_variant="alt", name="tiny-qwen3-othervocab"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", help="directory to write the .gguf files into")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    for name, spec in write_all(args.outdir, args.seed).items():
        p = Path(args.outdir) / f"{name}.gguf"
        print(f"{p}  ({p.stat().st_size / 1024:.0f} KiB, n_vocab={spec.n_vocab})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
