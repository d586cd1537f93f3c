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

CLI: ``python -m llamaspec.testing OUTDIR`` writes target.gguf, draft_simple.gguf,
dflash.gguf, dspark.gguf and target_othervocab.gguf into OUTDIR; ``--hybrid`` also writes the
:func:`write_hybrid_set` files (qwen35/qwen35moe targets with and without MTP, their 2-layer
drafts, EAGLE3 heads for the qwen3 and qwen35 targets).
"""


from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

from .common import (ARCH_DFLASH, ARCH_EAGLE3, ARCH_QWEN35, ARCH_QWEN35MOE, ARCH_TARGET, PathLike, _read_tensor,
                     gguf)
from .dflash import DFlashSpec, default_target_layers, write_dflash, write_dspark
from .eagle3 import Eagle3Spec, default_eagle3_layers, write_eagle3
from .hybrid import LAYER_ATTENTION, LAYER_RECURRENT, HybridSpec, write_qwen35_draft, write_qwen35_target
from .qwen3 import TargetSpec, read_target_spec, write_draft_simple, write_target
from .vocab import CHATML_TEMPLATE, SPECIAL_TOKENS, VOCAB_VARIANTS, TinyVocab, build_vocab, bytes_to_unicode

__all__ = ["ARCH_DFLASH", "ARCH_EAGLE3", "ARCH_QWEN35", "ARCH_QWEN35MOE", "ARCH_TARGET", "CHATML_TEMPLATE", "DFlashSpec",
           "Eagle3Spec", "HybridSpec", "LAYER_ATTENTION", "LAYER_RECURRENT", "PathLike", "SPECIAL_TOKENS", "TargetSpec",
           "TinyVocab", "VOCAB_VARIANTS", "build_vocab", "bytes_to_unicode", "default_eagle3_layers",
           "default_target_layers", "gguf", "main", "read_target_spec", "write_all", "write_dflash", "write_draft_simple",
           "write_dspark", "write_eagle3", "write_hybrid_set", "write_qwen35_draft", "write_qwen35_target",
           "write_target", "_read_tensor"]


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

