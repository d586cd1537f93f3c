"""Tiny hybrid Qwen3.5 / Qwen3.6 targets and drafts (``qwen35``, ``qwen35moe``), MTP (nextn) layers."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .common import (ARCH_QWEN35, ARCH_QWEN35MOE, PathLike, _finish, _head, _norm_weight, _normal, _uniform, gguf)
from .qwen3 import TargetSpec
from .vocab import build_vocab


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

