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
``write_qwen35_target``
    A tiny hybrid Qwen3.5/3.6 model: GGUF arch ``qwen35`` (Gated DeltaNet recurrent layers mixed
    with gated full-attention layers, dense FFN) or, with ``moe=True``, ``qwen35moe`` (routed
    experts + sigmoid-gated shared expert). Layer ``i`` is recurrent iff
    ``(i + 1) % full_attention_interval != 0`` (llama.cpp's rule; the real models use 4, the
    default here is 2, i.e. ``R A R A`` for 4 layers, so that 2-layer drafts are hybrids too).
    ``n_nextn=1`` appends an MTP block (``nextn_predict_layers``, ``blk.N.nextn.*``) as real
    Qwen3.5/3.6 GGUFs carry it, for llama.cpp's ``draft-mtp``. Same tokenizer as ``write_target``.
``write_qwen35_draft``
    The same with fewer layers (default 2), for ``draft-simple`` against a hybrid target.
``write_eagle3``
    An EAGLE3 draft head (GGUF arch ``eagle3``) for a ``qwen3`` or ``qwen35`` target: 3 target
    layer ids, ``fc``, one decoder layer, a copy of the target's head (optionally a reduced
    vocabulary with ``d2t``); token embeddings are borrowed from the target.

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

The hybrids follow the same rules: every residual branch (``ssm_out``, ``attn_output``,
``ffn_down*``) is scaled by ``residual_scale`` (0.5) so the shared embedding -> head path
dominates the logits. Measured greedy agreement, teacher-forced (the draft predicts each token of
the target's 48-token greedy continuation from the target's prefix), 3 prompts, seed 0:

* 4-layer ``qwen35`` target vs its 2-layer draft (same seed): ~0.4-0.5 (3-layer draft ~0.6);
  ``qwen35moe``: ~0.45 (0.26-0.56 over seeds); another seed: ~0.
* ``qwen35`` target vs the 2-layer ``qwen3`` draft of the same seed: ~0.35 (they share
  ``token_embd``/``output``/``output_norm`` and, by name and shape, the dense ``ffn_*`` weights);
  ``qwen35moe`` target vs that draft: ~0.17.
* The MTP block (``n_nextn=1``) predicts token t+2 from (token t+1, target hidden t): ~0.2.
* An EAGLE3 head's first draft step: ~0.1-0.25.

CLI: ``python -m llamaspec.tiny_models OUTDIR`` writes target.gguf, draft_simple.gguf,
dflash.gguf, dspark.gguf and target_othervocab.gguf into OUTDIR; ``--hybrid`` also writes the
:func:`write_hybrid_set` files (qwen35/qwen35moe targets with and without MTP, their 2-layer
drafts, EAGLE3 heads for the qwen3 and qwen35 targets).
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
                        n_head_kv: int, head_dim: int, n_ff: int, qk_norm: bool = True,
                        passthrough: bool = False) -> None:
    """Qwen3-style block tensors: attn q/k/v/o + q/k norms + SwiGLU FFN (shared by qwen3/dflash);
    without the q/k norms for a qwen2 block. ``passthrough``: zero output projections, so the block
    adds nothing to the residual stream (its output equals its input)."""
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
    if not qk_norm:
        del t["attn_q_norm.weight"], t["attn_k_norm.weight"]
    if passthrough:
        t["attn_output.weight"] = np.zeros_like(t["attn_output.weight"])
        t["ffn_down.weight"] = np.zeros_like(t["ffn_down.weight"])
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
    arch: str = ARCH_TARGET,
    passthrough_last_layer: bool = False,
) -> TargetSpec:
    """Write a tiny random ``qwen3`` model with a working byte-level BPE tokenizer.

    ``passthrough_last_layer``: the last block adds nothing to the residual stream, so the logits are
    the output norm and head applied to that block's input (a test of which tensor features() returns).

    ``arch="qwen2"`` writes the same model as a ``qwen2`` (no q/k norms): an architecture whose
    llama.cpp graph publishes no layer features, for the tests of that check.

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

    if arch not in (ARCH_TARGET, "qwen2"):
        raise ValueError(f"arch must be '{ARCH_TARGET}' or 'qwen2', got {arch!r}")
    if arch == "qwen2" and n_head * head_dim != n_embd:
        raise ValueError("a qwen2 model needs n_head * head_dim == n_embd")
    w = gguf.GGUFWriter(os.fspath(path), arch)
    _add_common_hparams(w, name=name, n_ctx_train=n_ctx_train, n_embd=n_embd, n_layer=n_layer,
                        n_ff=n_ff, n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
                        rope_freq_base=rope_freq_base, rms_eps=spec.rms_eps)
    vocab.write(w)

    w.add_tensor("token_embd.weight", _normal(seed, "token_embd", (vocab.n_vocab, n_embd), 1.0))
    w.add_tensor("output_norm.weight", _norm_weight(seed, "output_norm", n_embd))
    w.add_tensor("output.weight", _head(seed, "output", vocab.n_vocab, n_embd, logit_std,
                                        vocab.unprintable_ids()))
    for il in range(n_layer):
        _add_attn_ffn_layer(w, seed, il, n_embd, n_head, n_head_kv, head_dim, n_ff, qk_norm=arch == ARCH_TARGET,
                            passthrough=passthrough_last_layer and il == n_layer - 1)
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
    """Read hyper-parameters and the tokenizer back from a (``qwen3``-like) GGUF file.

    Works for ``qwen35``/``qwen35moe`` files too: ``n_layer`` excludes MTP (nextn) blocks and
    ``n_ff`` is 0 when ``feed_forward_length`` is absent (MoE). ``seed`` is unknown (0).
    """
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
    n_nextn = int(get(f"{arch}.nextn_predict_layers", 0))
    return TargetSpec(
        vocab=vocab, n_embd=n_embd, n_layer=int(get(f"{arch}.block_count")) - n_nextn, n_head=n_head,
        n_head_kv=int(get(f"{arch}.attention.head_count_kv", n_head)),
        head_dim=int(get(f"{arch}.attention.key_length", n_embd // n_head)),
        n_ff=int(get(f"{arch}.feed_forward_length", 0)),
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
    n_ff = n_ff or t.n_ff or 2 * n_embd  # MoE targets have no dense feed_forward_length
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


# --------------------------------------------------------------------------------------------
# Hybrid Qwen3.5 / Qwen3.6 (qwen35, qwen35moe) targets and drafts, MTP (nextn) layers, EAGLE3
# --------------------------------------------------------------------------------------------

ARCH_QWEN35 = "qwen35"        #: dense hybrid (Gated DeltaNet + gated full attention)
ARCH_QWEN35MOE = "qwen35moe"  #: hybrid MoE (routed experts + gated shared expert)
ARCH_EAGLE3 = "eagle3"        #: EAGLE3 draft head

LAYER_RECURRENT = "recurrent"  #: a Gated DeltaNet (linear attention) layer
LAYER_ATTENTION = "attention"  #: a gated full-attention layer


@dataclass(frozen=True)
class HybridSpec(TargetSpec):
    """Hyper-parameters of a tiny ``qwen35`` / ``qwen35moe`` model (target or simple draft).

    ``n_layer`` counts the trunk layers only; the file's ``block_count`` is
    ``n_layer + n_nextn`` (the MTP block is stored as layer ``n_layer``, as in real GGUFs).
    ``n_ff`` is the dense FFN width (0 for ``qwen35moe``).
    """

    arch: str = ARCH_QWEN35
    layer_types: tuple[str, ...] = ()
    n_nextn: int = 0
    n_rot: int = 8
    rope_sections: tuple[int, int, int, int] = (2, 1, 1, 0)
    full_attention_interval: int = 2
    ssm_d_conv: int = 4
    ssm_d_state: int = 16
    ssm_n_group: int = 2
    ssm_dt_rank: int = 4
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    n_ff_shexp: int = 0

    @property
    def recurrent_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == LAYER_RECURRENT)

    @property
    def attention_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == LAYER_ATTENTION)

    @property
    def ssm_d_inner(self) -> int:
        return self.ssm_d_state * self.ssm_dt_rank


@dataclass(frozen=True)
class Eagle3Spec:
    """What was written into an EAGLE3 draft file."""

    path: str
    target_layers: tuple[int, int, int]
    n_embd: int
    n_embd_target: int
    n_vocab: int
    n_head: int
    head_dim: int
    n_ff: int
    norm_before_residual: bool
    norm_before_fc: bool
    own_head: bool
    own_embeddings: bool
    draft_vocab_size: int | None = None
    arch: str = ARCH_EAGLE3


def _uniform(seed: int, name: str, shape: Sequence[int], lo: float, hi: float) -> np.ndarray:
    return _rng(seed, name).uniform(lo, hi, tuple(shape)).astype(np.float32)


def _orthogonal(seed: int, name: str, n: int) -> np.ndarray:
    """A seeded random n x n orthogonal matrix."""
    q, r = np.linalg.qr(_rng(seed, name).standard_normal((n, n)))
    return (q * np.sign(np.diag(r))).astype(np.float32)


def _layer_types(n_layer: int, full_attention_interval: int,
                 recurrent_layers: Sequence[bool] | None) -> tuple[str, ...]:
    """llama.cpp's rule (src/models/qwen35.cpp): layer i is recurrent iff
    ``(i + 1) % full_attention_interval != 0``, unless ``attention.recurrent_layers`` is given."""
    if recurrent_layers is not None:
        if len(recurrent_layers) != n_layer:
            raise ValueError(f"recurrent_layers has {len(recurrent_layers)} entries, expected n_layer={n_layer}")
        flags = [bool(x) for x in recurrent_layers]
    else:
        if full_attention_interval < 1:
            raise ValueError("full_attention_interval must be >= 1")
        flags = [(i + 1) % full_attention_interval != 0 for i in range(n_layer)]
    return tuple(LAYER_RECURRENT if f else LAYER_ATTENTION for f in flags)


def _add_gdn_tensors(w: gguf.GGUFWriter, seed: int, il: int, s: HybridSpec, res: float) -> None:
    """Gated DeltaNet (linear attention) tensors of layer ``il`` (cf. qwen35.cpp load_block_trunk).

    ggml ne: attn_qkv {n_embd, 2*key_dim + value_dim}, attn_gate {n_embd, value_dim},
    ssm_conv1d {d_conv, conv_dim}, ssm_dt.bias / ssm_a {dt_rank}, ssm_beta / ssm_alpha
    {n_embd, dt_rank}, ssm_norm {d_state}, ssm_out {value_dim, n_embd}, where
    key_dim = d_state * n_group and value_dim = d_state * dt_rank (= ssm.inner_size).
    """
    p = f"blk.{il}."
    E = s.n_embd
    key_dim = s.ssm_d_state * s.ssm_n_group
    value_dim = s.ssm_d_inner
    conv_dim = 2 * key_dim + value_dim
    t = {
        "attn_qkv.weight":   _normal(seed, p + "attn_qkv", (conv_dim, E), E ** -0.5),
        "attn_gate.weight":  _normal(seed, p + "attn_gate", (value_dim, E), E ** -0.5),
        "ssm_conv1d.weight": _normal(seed, p + "ssm_conv1d", (conv_dim, s.ssm_d_conv), s.ssm_d_conv ** -0.5),
        "ssm_dt.bias":       _normal(seed, p + "ssm_dt", (s.ssm_dt_rank,), 0.5),
        # A = -exp(A_log) (the converter stores it already negated): per-head decay rates
        "ssm_a":             -_uniform(seed, p + "ssm_a", (s.ssm_dt_rank,), 0.1, 1.0),
        "ssm_beta.weight":   _normal(seed, p + "ssm_beta", (s.ssm_dt_rank, E), E ** -0.5),
        "ssm_alpha.weight":  _normal(seed, p + "ssm_alpha", (s.ssm_dt_rank, E), E ** -0.5),
        "ssm_norm.weight":   _norm_weight(seed, p + "ssm_norm", s.ssm_d_state),
        "ssm_out.weight":    _normal(seed, p + "ssm_out", (E, value_dim), res * value_dim ** -0.5),
    }
    for name, arr in t.items():
        w.add_tensor(p + name, arr)


def _add_gated_attn_tensors(w: gguf.GGUFWriter, seed: int, il: int, s: HybridSpec, res: float,
                            as_il: int | None = None) -> None:
    """Gated full attention of layer ``il``: attn_q holds query + output gate per head
    (ggml ne {n_embd, 2 * n_head * head_dim}), separate attn_k / attn_v, q/k RMS norms."""
    p = f"blk.{il}."
    E, hd = s.n_embd, s.head_dim
    t = {
        "attn_q.weight":      _normal(seed, p + "attn_q", (2 * s.n_head * hd, E), E ** -0.5),
        "attn_k.weight":      _normal(seed, p + "attn_k", (s.n_head_kv * hd, E), E ** -0.5),
        "attn_v.weight":      _normal(seed, p + "attn_v", (s.n_head_kv * hd, E), E ** -0.5),
        "attn_output.weight": _normal(seed, p + "attn_output", (E, s.n_head * hd), res * (s.n_head * hd) ** -0.5),
        "attn_q_norm.weight": _norm_weight(seed, p + "attn_q_norm", hd),
        "attn_k_norm.weight": _norm_weight(seed, p + "attn_k_norm", hd),
    }
    out = p if as_il is None else f"blk.{as_il}."
    for name, arr in t.items():
        w.add_tensor(out + name, arr)


def _add_hybrid_ffn_tensors(w: gguf.GGUFWriter, seed: int, il: int, s: HybridSpec, res: float,
                            as_il: int | None = None) -> None:
    """Dense SwiGLU FFN (qwen35) or routed experts + sigmoid-gated shared expert (qwen35moe)."""
    p = f"blk.{il}."
    E = s.n_embd
    if s.arch == ARCH_QWEN35:
        t = {
            "ffn_gate.weight": _normal(seed, p + "ffn_gate", (s.n_ff, E), E ** -0.5),
            "ffn_up.weight":   _normal(seed, p + "ffn_up", (s.n_ff, E), E ** -0.5),
            "ffn_down.weight": _normal(seed, p + "ffn_down", (E, s.n_ff), res * s.n_ff ** -0.5),
        }
    else:
        X, F, S = s.n_expert, s.n_ff_exp, s.n_ff_shexp
        t = {
            # ne {n_embd, n_expert}, {n_embd, n_ff_exp, n_expert}, {n_ff_exp, n_embd, n_expert}
            "ffn_gate_inp.weight":       _normal(seed, p + "ffn_gate_inp", (X, E), E ** -0.5),
            "ffn_gate_exps.weight":      _normal(seed, p + "ffn_gate_exps", (X, F, E), E ** -0.5),
            "ffn_up_exps.weight":        _normal(seed, p + "ffn_up_exps", (X, F, E), E ** -0.5),
            "ffn_down_exps.weight":      _normal(seed, p + "ffn_down_exps", (X, E, F), res * F ** -0.5),
            # ne {n_embd}: one sigmoid gate logit per token for the shared expert
            "ffn_gate_inp_shexp.weight": _normal(seed, p + "ffn_gate_inp_shexp", (E,), E ** -0.5),
            "ffn_gate_shexp.weight":     _normal(seed, p + "ffn_gate_shexp", (S, E), E ** -0.5),
            "ffn_up_shexp.weight":       _normal(seed, p + "ffn_up_shexp", (S, E), E ** -0.5),
            "ffn_down_shexp.weight":     _normal(seed, p + "ffn_down_shexp", (E, S), res * S ** -0.5),
        }
    out = p if as_il is None else f"blk.{as_il}."  # write layer il's tensors under another index
    for name, arr in t.items():
        w.add_tensor(out + name, arr)


def write_qwen35_target(
    path: PathLike,
    *,
    seed: int = 0,
    n_layer: int = 4,
    moe: bool = False,
    n_nextn: int = 0,
    full_attention_interval: int = 2,
    recurrent_layers: Sequence[bool] | None = None,
    vocab_size: int = 384,
    vocab_variant: str = "base",
    add_bos: bool = False,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    head_dim: int = 16,
    n_rot: int = 8,
    rope_sections: Sequence[int] | None = None,
    n_ff: int = 128,
    ssm_d_conv: int = 4,
    ssm_d_state: int = 16,
    ssm_n_group: int = 2,
    ssm_dt_rank: int = 4,
    n_expert: int = 4,
    n_expert_used: int = 2,
    n_ff_exp: int = 32,
    n_ff_shexp: int = 64,
    n_ctx_train: int = 2048,
    rope_freq_base: float = 10_000_000.0,
    residual_scale: float = 0.5,
    mtp_copy_last_attention: bool = True,
    mtp_residual_scale: float = 0.25,
    logit_std: float = 3.0,
    name: str | None = None,
) -> HybridSpec:
    """Write a tiny hybrid Qwen3.5/3.6 model: GGUF arch ``qwen35`` or, with ``moe``, ``qwen35moe``.

    Layout (cf. conversion/qwen.py ``Qwen3_5TextModel`` / ``Qwen3_5MoeTextModel`` and
    src/models/qwen35.cpp, qwen35moe.cpp):

    * Layer types: layer ``i`` is a Gated DeltaNet (recurrent) layer iff
      ``(i + 1) % full_attention_interval != 0``, else gated full attention. The real models use
      interval 4 (3 recurrent, 1 attention); the default 2 gives ``R A R A`` so that a 2-layer draft
      with the same seed (``R A``) is still a true hybrid sharing the target's first layers. Both
      ``qwen35.full_attention_interval`` and the explicit ``qwen35.attention.recurrent_layers`` bool
      array (length ``block_count``, MTP layers false) are written, as the converter does;
      ``recurrent_layers`` overrides the pattern.
    * hparams: ``qwen35.{context_length, embedding_length, block_count (= n_layer + n_nextn),
      feed_forward_length (dense only), attention.head_count[_kv], attention.key_length /
      value_length, attention.layer_norm_rms_epsilon, rope.dimension_count (partial rotary: n_rot),
      rope.dimension_sections (4 ints, required; IMROPE), rope.freq_base, ssm.conv_kernel,
      ssm.state_size (head_k = head_v dim), ssm.group_count (k heads), ssm.time_step_rank
      (v heads), ssm.inner_size (= state_size * time_step_rank)}``; MoE adds ``expert_count,
      expert_used_count, expert_feed_forward_length, expert_shared_feed_forward_length``.
      ``nextn_predict_layers`` when ``n_nextn > 0``.
    * Per layer: ``attn_norm``, ``post_attention_norm`` + the DeltaNet tensors (see
      :func:`_add_gdn_tensors`) or the gated attention ones (``attn_q`` is query+gate, 2x wide) +
      dense FFN or experts (``ffn_gate_inp, ffn_{gate,up,down}_exps``) and the shared expert
      (``ffn_gate_inp_shexp, ffn_{gate,up,down}_shexp``).
    * ``n_nextn=1`` appends one MTP block as layer ``n_layer`` (like real Qwen3.5/3.6 GGUFs):
      a full-attention block (with MoE FFN for ``qwen35moe``) plus ``nextn.eh_proj`` (ne
      {2*n_embd, n_embd}), ``nextn.enorm``, ``nextn.hnorm`` and ``nextn.shared_head_norm``
      (``embed_tokens`` / ``shared_head_head`` are absent, so the trunk's are used). It is
      skipped unless llama.cpp loads the model with ``load_mtp`` (the ``draft-mtp`` type).
      llama.cpp's qwen35 MTP graph supports exactly one MTP block.

    Dims are tiny but valid for every kernel: ssm_d_state 16 (CUDA gated_delta_net handles
    16/32/64/128), conv channels 2*16*2 + 16*4 = 128 (CUDA ssm_conv wants a multiple of 128),
    d_conv 4, H_v = 2*H_k (exercises the k-head broadcast), head_dim 16, n_rot 8 with IMROPE
    sections (2, 1, 1, 0) (sum = n_rot / 2, like Qwen3.5's 11+11+10 for n_rot 64).

    Weight scales: as :func:`write_target` (embeddings N(0,1), head rows zero for control and
    unprintable tokens, same tensor names, so a ``qwen3`` model with the same seed shares
    ``token_embd``/``output``/``output_norm``); every residual branch output projection
    (``ssm_out``, ``attn_output``, ``ffn_down*``) is scaled by ``residual_scale`` so the logits
    stay dominated by the shared embedding -> head path and fewer-layer drafts agree often.

    The MTP block is built to *partly agree* with the target: ``eh_proj`` is the identity on the
    normalised next-token embedding (plus a small random mix of the target hidden state),
    ``enorm`` is all ones, ``shared_head_norm`` equals ``output_norm`` and the block's attention and
    FFN are a copy of the trunk's last full-attention layer (``mtp_copy_last_attention``; else
    random with residual branches scaled by ``mtp_residual_scale``), so it predicts roughly what
    the target predicts after that token (teacher-forced agreement ~0.2 with the defaults).
    """
    if n_nextn not in (0, 1):
        raise ValueError("n_nextn must be 0 or 1 (llama.cpp's qwen35 MTP graph supports a single block)")
    if n_head % n_head_kv:
        raise ValueError("n_head must be a multiple of n_head_kv")
    if ssm_dt_rank % ssm_n_group:
        raise ValueError("ssm_dt_rank (value heads) must be a multiple of ssm_n_group (key heads)")
    if n_rot % 2 or not 0 < n_rot <= head_dim:
        raise ValueError("n_rot must be even and in (0, head_dim]")
    if rope_sections is None:  # split n_rot/2 into 3 like Qwen3.5's [11, 11, 10, 0] for n_rot 64
        base, rem = divmod(n_rot // 2, 3)
        rope_sections = (base + (rem > 0), base + (rem > 1), base, 0)
    sections = tuple(int(x) for x in rope_sections)
    if len(sections) != 4 or sum(sections) > n_rot // 2 or sum(sections[:3]) <= 0:
        raise ValueError(f"rope_sections must be 4 ints with 0 < sum <= n_rot/2, got {sections}")
    types = _layer_types(n_layer, full_attention_interval, recurrent_layers)
    if LAYER_RECURRENT not in types or LAYER_ATTENTION not in types:
        # llama.cpp aborts (GGML_ASSERT(buffer) in ggml-backend.cpp) when the hybrid memory's KV
        # cache or recurrent cache has no layer: a qwen35 model needs at least one of each kind
        raise ValueError(f"layer pattern {types} needs at least one recurrent and one attention layer "
                         "(llama.cpp aborts on a qwen35 model without one of them)")
    arch = ARCH_QWEN35MOE if moe else ARCH_QWEN35
    if moe and not 0 < n_expert_used <= n_expert:
        raise ValueError("need 0 < n_expert_used <= n_expert")
    vocab = build_vocab(vocab_size, vocab_variant, add_bos)
    spec = HybridSpec(
        vocab=vocab, n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv,
        head_dim=head_dim, n_ff=0 if moe else n_ff, n_ctx_train=n_ctx_train,
        rope_freq_base=rope_freq_base, seed=seed, path=os.fspath(path), arch=arch,
        layer_types=types, n_nextn=n_nextn, n_rot=n_rot, rope_sections=sections,
        full_attention_interval=full_attention_interval, ssm_d_conv=ssm_d_conv,
        ssm_d_state=ssm_d_state, ssm_n_group=ssm_n_group, ssm_dt_rank=ssm_dt_rank,
        n_expert=n_expert if moe else 0, n_expert_used=n_expert_used if moe else 0,
        n_ff_exp=n_ff_exp if moe else 0, n_ff_shexp=n_ff_shexp if moe else 0)

    w = gguf.GGUFWriter(os.fspath(path), arch)
    w.add_name(name or f"tiny-{arch}")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer + n_nextn)
    if not moe:
        w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(n_rot)
    w.add_rope_dimension_sections(list(sections))
    w.add_rope_freq_base(rope_freq_base)
    w.add_layer_norm_rms_eps(spec.rms_eps)
    w.add_ssm_conv_kernel(ssm_d_conv)
    w.add_ssm_state_size(ssm_d_state)
    w.add_ssm_group_count(ssm_n_group)
    w.add_ssm_time_step_rank(ssm_dt_rank)
    w.add_ssm_inner_size(spec.ssm_d_inner)
    w.add_full_attention_interval(full_attention_interval)
    w.add_recurrent_layers([t == LAYER_RECURRENT for t in types] + [False] * n_nextn)
    if moe:
        w.add_expert_count(n_expert)
        w.add_expert_used_count(n_expert_used)
        w.add_expert_feed_forward_length(n_ff_exp)
        w.add_expert_shared_feed_forward_length(n_ff_shexp)
    if n_nextn:
        w.add_nextn_predict_layers(n_nextn)
    vocab.write(w)

    output_norm = _norm_weight(seed, "output_norm", n_embd)
    w.add_tensor("token_embd.weight", _normal(seed, "token_embd", (vocab.n_vocab, n_embd), 1.0))
    w.add_tensor("output_norm.weight", output_norm)
    w.add_tensor("output.weight", _head(seed, "output", vocab.n_vocab, n_embd, logit_std,
                                        vocab.unprintable_ids()))
    for il, kind in enumerate(types):
        p = f"blk.{il}."
        w.add_tensor(p + "attn_norm.weight", _norm_weight(seed, p + "attn_norm", n_embd))
        w.add_tensor(p + "post_attention_norm.weight", _norm_weight(seed, p + "post_attention_norm", n_embd))
        if kind == LAYER_RECURRENT:
            _add_gdn_tensors(w, seed, il, spec, residual_scale)
        else:
            _add_gated_attn_tensors(w, seed, il, spec, residual_scale)
        _add_hybrid_ffn_tensors(w, seed, il, spec, residual_scale)

    for il in range(n_layer, n_layer + n_nextn):
        p = f"blk.{il}."
        w.add_tensor(p + "attn_norm.weight", _norm_weight(seed, p + "attn_norm", n_embd))
        w.add_tensor(p + "post_attention_norm.weight", _norm_weight(seed, p + "post_attention_norm", n_embd))
        if mtp_copy_last_attention and spec.attention_layers:
            # the block starts as a copy of the trunk's last full-attention layer (attention + FFN)
            src = max(spec.attention_layers)
            _add_gated_attn_tensors(w, seed, src, spec, residual_scale, as_il=il)
            _add_hybrid_ffn_tensors(w, seed, src, spec, residual_scale, as_il=il)
        else:
            _add_gated_attn_tensors(w, seed, il, spec, mtp_residual_scale)
            _add_hybrid_ffn_tensors(w, seed, il, spec, mtp_residual_scale)
        # eh_proj: concat(enorm(embed(x_{t+1})), hnorm(h_t)) -> n_embd; ne {2*n_embd, n_embd}
        eh = np.concatenate([np.eye(n_embd, dtype=np.float32),
                             _normal(seed, p + "nextn.eh_proj", (n_embd, n_embd), 0.25 * n_embd ** -0.5)],
                            axis=1)
        w.add_tensor(p + "nextn.eh_proj.weight", eh)
        w.add_tensor(p + "nextn.enorm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "nextn.hnorm.weight", _norm_weight(seed, p + "nextn.hnorm", n_embd))
        w.add_tensor(p + "nextn.shared_head_norm.weight", output_norm.copy())
    _finish(w)
    return spec


def write_qwen35_draft(path: PathLike, *, seed: int = 0, n_layer: int = 2, **kwargs) -> HybridSpec:
    """A small hybrid draft for ``draft-simple``: :func:`write_qwen35_target` with fewer layers.

    With the target's seed (and the same ``moe``, dims and layer pattern) it shares the target's
    embeddings, head and first ``n_layer`` layers; the default 2 layers (``R A`` with
    ``full_attention_interval=2``) keep one layer of each kind. Pass ``moe=True`` for a
    ``qwen35moe`` draft. ``kwargs`` must match the target's vocabulary arguments.
    """
    kwargs.setdefault("name", "tiny-qwen35moe-draft" if kwargs.get("moe") else "tiny-qwen35-draft")
    return write_qwen35_target(path, seed=seed, n_layer=n_layer, **kwargs)


def _read_tensor(path: PathLike, name: str) -> np.ndarray | None:
    """A tensor of a GGUF file as a numpy array (numpy order = ggml ne reversed), or None."""
    r = gguf.GGUFReader(os.fspath(path))
    for t in r.tensors:
        if t.name == name:
            return np.array(t.data).reshape([int(x) for x in reversed(t.shape)])
    return None


def default_eagle3_layers(n_layer_target: int) -> tuple[int, int, int]:
    """Three target layer ids (low, mid, high) whose *input* hidden states EAGLE3 reads.

    The converter's default is ``[2, n // 2, n - 3]`` (conversion/llama.py), which collapses for
    tiny targets; this spreads 3 ids over ``[1, n_layer - 1]`` (distinct when ``n_layer >= 4``).
    Ids ``< n_layer`` are read with ``llama_set_embeddings_layer_inp``; ``n_layer`` itself would
    read the target's final normed hidden state (``t_h_nextn``), which qwen3 does not export.
    """
    if n_layer_target < 2:
        return (0, 0, 0)
    ids = np.linspace(1, n_layer_target - 1, num=3)
    return tuple(int(round(x)) for x in ids)  # type: ignore[return-value]


def write_eagle3(
    path: PathLike,
    target: TargetSpec | PathLike,
    *,
    seed: int = 3,
    target_layers: Sequence[int] | None = None,
    n_head: int | None = None,
    n_ff: int | None = None,
    draft_vocab_size: int | None = None,
    own_head: bool = True,
    own_embeddings: bool = False,
    norm_before_residual: bool = True,
    norm_before_fc: bool = False,
    token_gain: float = 3.0,
    residual_scale: float = 0.25,
    rope_freq_base: float = 10_000.0,
    logit_std: float = 3.0,
    name: str = "tiny-eagle3",
) -> Eagle3Spec:
    """Write a tiny EAGLE3 draft head (GGUF arch ``eagle3``) for a ``qwen3`` or ``qwen35`` target.

    Layout (cf. conversion/llama.py EAGLE-3 branch, src/models/eagle3.cpp and
    ``common_speculative_impl_draft_eagle3``):

    * hparams: ``eagle3.{context_length, embedding_length (= target n_embd: the decoder reads the
      target's token embeddings), block_count = 1, feed_forward_length, attention.head_count[_kv],
      attention.key_length/value_length, rope.dimension_count, rope.freq_base (NORM rope),
      attention.layer_norm_rms_epsilon}`` plus **required** ``eagle3.target_layers`` (exactly 3
      i32: target layer ids whose input hidden state is extracted) and
      ``eagle3.target_hidden_size``; ``eagle3.norm_before_residual`` and ``eagle3.norm_before_fc``
      (bools). Tokenizer: the target's.
    * tensors: ``fc.weight`` (ne {3*n_embd_target, n_embd}), ``output_norm``, ``blk.0.{attn_norm
      (token-embedding norm), attn_norm_2 (hidden/g norm), attn_q/k/v (ne {2*n_embd, ...}: input
      is concat(norm(embd), norm(g))), attn_output, ffn_norm, ffn_gate/up/down}``; ``enc.output_norm``
      (ne {3*n_embd_target}) with ``norm_before_fc``; ``output.weight`` with ``own_head``
      (ne {n_embd, draft vocab}; otherwise the target's head is borrowed through ``ctx_other``);
      ``d2t`` (I64 absolute target ids) when ``draft_vocab_size`` < n_vocab; ``token_embd`` only
      with ``own_embeddings`` (otherwise borrowed from the target through ``ctx_other``).

    To *partly agree* with the target rather than be pure noise: the head is a copy of the
    target's ``output.weight`` rows (read from the target file, as EAGLE3 training initialises it),
    Q/K/V only read the normalised token embedding with Q = K (large ``token_gain``), so each
    position attends to positions holding the same token and V/O copy that token's embedding
    into the residual stream; g enters through the (normalised, with ``norm_before_residual``)
    residual and small-scaled FFN. The draft then predicts roughly what the target predicts
    after the current token (its logits are dominated by the same embedding -> head path).
    """
    t = _as_target_spec(target)
    n_embd = t.n_embd
    n_head = n_head or t.n_head
    if n_embd % n_head:
        raise ValueError("n_embd must be a multiple of n_head")
    head_dim = n_embd // n_head
    n_ff = n_ff or t.n_ff or 2 * n_embd
    layers = tuple(int(x) for x in target_layers) if target_layers is not None \
        else default_eagle3_layers(t.n_layer)
    if len(layers) != 3:
        raise ValueError("EAGLE3 needs exactly 3 target layer ids")
    arch = getattr(t, "arch", None)
    if arch is None and t.path and Path(t.path).is_file():
        arch = gguf.GGUFReader(t.path).get_field("general.architecture").contents()
    # id n_layer reads the final normed hidden state (t_h_nextn), which qwen35* export and qwen3 does not
    top = t.n_layer if arch in (ARCH_QWEN35, ARCH_QWEN35MOE) else t.n_layer - 1
    if any(not 0 <= L <= top for L in layers):
        raise ValueError(f"target_layers must be in [0, {top}] for a {arch or ARCH_TARGET} target, got {layers}")
    n_vocab = t.n_vocab
    special = set(t.vocab.unprintable_ids())

    d2t = None
    if draft_vocab_size is not None and draft_vocab_size < n_vocab:
        if draft_vocab_size < 256:
            raise ValueError("draft_vocab_size must keep the 256 byte tokens")
        if not own_head:
            raise ValueError("a reduced draft vocabulary (d2t) needs own_head=True")
        rest = np.arange(256, n_vocab)
        pick = _rng(seed, "d2t").choice(rest, size=draft_vocab_size - 256, replace=False)
        d2t = np.sort(np.concatenate([np.arange(256), pick])).astype(np.int64)

    w = gguf.GGUFWriter(os.fspath(path), ARCH_EAGLE3)
    w.add_name(name)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_context_length(t.n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(1)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(rope_freq_base)
    w.add_layer_norm_rms_eps(t.rms_eps)
    w.add_target_layers(list(layers))
    w.add_target_hidden_size(t.n_embd)
    w.add_norm_before_residual(norm_before_residual)
    w.add_norm_before_fc(norm_before_fc)
    t.vocab.write(w)

    E, n_enc = n_embd, 3 * t.n_embd
    if own_embeddings:
        emb = _read_tensor(t.path, "token_embd.weight") if t.path else None
        if emb is None:
            emb = _normal(t.seed, "token_embd", (n_vocab, E), 1.0)
        w.add_tensor("token_embd.weight", emb.astype(np.float32))
    if own_head:
        head = _read_tensor(t.path, "output.weight") if t.path else None
        if head is None:  # tied or unknown: regenerate from the target's seed
            head = _head(t.seed, "output", n_vocab, E, logit_std, sorted(special))
        head = head.astype(np.float32)
        if d2t is not None:
            head = head[d2t]
        w.add_tensor("output.weight", np.ascontiguousarray(head))
    if d2t is not None:
        w.add_tensor("d2t", d2t)

    w.add_tensor("fc.weight", _normal(seed, "fc", (E, n_enc), n_enc ** -0.5))
    if norm_before_fc:
        w.add_tensor("enc.output_norm.weight", _norm_weight(seed, "enc.output_norm", n_enc))
    w.add_tensor("output_norm.weight", _norm_weight(seed, "output_norm", E))

    p = "blk.0."
    M = _orthogonal(seed, p + "attn_qkv_basis", E)  # rows split into heads of head_dim
    zeros = np.zeros((E, E), dtype=np.float32)
    small = _normal(seed, p + "attn_g", (E, E), 0.05 * E ** -0.5)
    t_ = {
        "attn_norm.weight":   np.ones(E, dtype=np.float32),
        "attn_norm_2.weight": _norm_weight(seed, p + "attn_norm_2", E),
        # input = concat(norm(embd), norm(g)) -> [token part | g part]
        "attn_q.weight":      np.concatenate([token_gain * M, small], axis=1),
        "attn_k.weight":      np.concatenate([token_gain * M, zeros], axis=1),
        "attn_v.weight":      np.concatenate([M, zeros], axis=1),
        "attn_output.weight": np.ascontiguousarray(token_gain * M.T),
        "ffn_norm.weight":    _norm_weight(seed, p + "ffn_norm", E),
        "ffn_gate.weight":    _normal(seed, p + "ffn_gate", (n_ff, E), E ** -0.5),
        "ffn_up.weight":      _normal(seed, p + "ffn_up", (n_ff, E), E ** -0.5),
        "ffn_down.weight":    _normal(seed, p + "ffn_down", (E, n_ff), residual_scale * n_ff ** -0.5),
    }
    for nm, arr in t_.items():
        w.add_tensor(p + nm, np.ascontiguousarray(arr, dtype=np.float32))
    _finish(w)

    return Eagle3Spec(
        path=os.fspath(path), target_layers=layers, n_embd=E, n_embd_target=t.n_embd,
        n_vocab=n_vocab, n_head=n_head, head_dim=head_dim, n_ff=n_ff,
        norm_before_residual=norm_before_residual, norm_before_fc=norm_before_fc,
        own_head=own_head, own_embeddings=own_embeddings,
        draft_vocab_size=None if d2t is None else int(d2t.size))


def write_hybrid_set(outdir: PathLike, seed: int = 0) -> dict[str, object]:
    """Write the hybrid test models into ``outdir``; returns name -> spec (``spec.path`` is the file).

    * ``qwen35_target.gguf``: 4-layer ``qwen35`` (``R A R A``), vocab 384, seed ``seed``.
    * ``qwen35_target_mtp.gguf``: the same trunk + one MTP block (``nextn_predict_layers = 1``).
    * ``qwen35moe_target.gguf``: 4-layer ``qwen35moe`` (4 experts, 2 used, shared expert).
    * ``qwen35moe_target_mtp.gguf``: the same + one MTP block with MoE FFN.
    * ``qwen35_draft.gguf`` / ``qwen35moe_draft.gguf``: the targets' first 2 layers (``R A``) +
      embeddings + head (same seed) for ``draft-simple``.
    * ``target.gguf`` / ``draft_simple.gguf``: the ``qwen3`` target and 2-layer draft of
      :func:`write_all` (same vocabulary and seed, so they also pair with the hybrids).
    * ``eagle3_qwen3.gguf`` / ``eagle3_qwen35.gguf``: EAGLE3 heads for the qwen3 and qwen35 targets.
    """
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    qwen35 = write_qwen35_target(out / "qwen35_target.gguf", seed=seed)
    qwen3 = write_target(out / "target.gguf", seed)
    return {
        "qwen35_target": qwen35,
        "qwen35_target_mtp": write_qwen35_target(out / "qwen35_target_mtp.gguf", seed=seed, n_nextn=1,
                                                 name="tiny-qwen35-mtp"),
        "qwen35moe_target": write_qwen35_target(out / "qwen35moe_target.gguf", seed=seed, moe=True),
        "qwen35moe_target_mtp": write_qwen35_target(out / "qwen35moe_target_mtp.gguf", seed=seed, moe=True,
                                                    n_nextn=1, name="tiny-qwen35moe-mtp"),
        "qwen35_draft": write_qwen35_draft(out / "qwen35_draft.gguf", seed=seed, n_layer=2),
        "qwen35moe_draft": write_qwen35_draft(out / "qwen35moe_draft.gguf", seed=seed, n_layer=2, moe=True),
        "target": qwen3,
        "draft_simple": write_draft_simple(out / "draft_simple.gguf", seed, n_layer=2),
        "eagle3_qwen3": write_eagle3(out / "eagle3_qwen3.gguf", qwen3, seed=seed + 4),
        "eagle3_qwen35": write_eagle3(out / "eagle3_qwen35.gguf", qwen35, seed=seed + 5),
    }


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
    ap.add_argument("--hybrid", action="store_true",
                    help="also write the qwen35/qwen35moe/MTP/EAGLE3 set of write_hybrid_set")
    args = ap.parse_args(argv)
    specs = write_all(args.outdir, args.seed)
    if args.hybrid:
        specs.update(write_hybrid_set(args.outdir, args.seed))
    for name, spec in specs.items():
        p = Path(args.outdir) / f"{name}.gguf"
        print(f"{p}  ({p.stat().st_size / 1024:.0f} KiB, n_vocab={spec.n_vocab})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
