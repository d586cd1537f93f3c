"""DFlash and DSpark draft heads (GGUF arch ``dflash``) for a tiny target."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .common import ARCH_DFLASH, PathLike, _add_attn_ffn_layer, _add_common_hparams, _finish, _head, _norm_weight, _normal, _rng, gguf
from .qwen3 import TargetSpec, _as_target_spec


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


