"""What every test-model writer shares: the gguf module, architecture names, seeded weights."""

from __future__ import annotations

import os
import zlib
from typing import Sequence, Union

import numpy as np

from .._gguf import import_gguf

gguf = import_gguf()

PathLike = Union[str, "os.PathLike[str]"]

ARCH_TARGET = "qwen3"   #: general.architecture of targets and simple drafts
ARCH_DFLASH = "dflash"  #: general.architecture of DFlash *and* DSpark drafts
ARCH_QWEN35 = "qwen35"        #: dense hybrid (Gated DeltaNet + gated full attention)
ARCH_QWEN35MOE = "qwen35moe"  #: hybrid MoE (routed experts + gated shared expert)
ARCH_EAGLE3 = "eagle3"        #: EAGLE3 draft head

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




def _uniform(seed: int, name: str, shape: Sequence[int], lo: float, hi: float) -> np.ndarray:
    return _rng(seed, name).uniform(lo, hi, tuple(shape)).astype(np.float32)


def _orthogonal(seed: int, name: str, n: int) -> np.ndarray:
    """A seeded random n x n orthogonal matrix."""
    q, r = np.linalg.qr(_rng(seed, name).standard_normal((n, n)))
    return (q * np.sign(np.diag(r))).astype(np.float32)



def _read_tensor(path: PathLike, name: str) -> np.ndarray | None:
    """A tensor of a GGUF file as a numpy array (numpy order = ggml ne reversed), or None."""
    r = gguf.GGUFReader(os.fspath(path))
    for t in r.tensors:
        if t.name == name:
            return np.array(t.data).reshape([int(x) for x in reversed(t.shape)])
    return None
