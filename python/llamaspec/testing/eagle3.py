"""EAGLE3 draft heads (GGUF arch ``eagle3``) for tiny ``qwen3`` / ``qwen35`` targets."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .common import (ARCH_EAGLE3, ARCH_QWEN35, ARCH_QWEN35MOE, ARCH_TARGET, PathLike, _finish, _head, _norm_weight,
                     _normal, _orthogonal, _read_tensor, _rng, gguf)
from .qwen3 import TargetSpec, _as_target_spec


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

