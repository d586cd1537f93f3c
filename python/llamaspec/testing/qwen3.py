"""Tiny ``qwen3`` targets and simple drafts."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .common import ARCH_TARGET, PathLike, _add_attn_ffn_layer, _add_common_hparams, _finish, _head, _norm_weight, _normal, gguf
from .vocab import TinyVocab, build_vocab


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

