"""Self-distilled training data for a drafter head: the target answers prompts, and its features at the
head's layers are captured from the same GGUF that will serve it.

    python -m llamaspec.train.data TARGET.gguf OUT_DIR --layers 2,9,16 [--prompts 2000] [--max-tokens 128]

1. answers: llamaspec.Batch decodes every prompt with the target alone (spec_type "none"), greedy for
   half of them and sampled (temperature 0.8, top-p 0.95) for the other half, n_seq at a time;
2. features: each prompt + answer is decoded through a llamaspec.Context that captures the input of
   the ``layers`` (what a DSpark head reads at those target_layers), all positions at once (the
   batch-invariant kernels make them the features the target computes while generating).

OUT_DIR receives ``tokens.npy`` (int32, every sample's prompt + answer, concatenated),
``features.npy`` (float32 [n_tokens, len(layers) * n_embd], same rows; not float16: Gemma's residual
stream reaches 3e4 at the first positions, where float16 overflows) and ``index.json`` (per sample:
offset, prompt and total length, category, temperature; plus the layers, sizes and wall times).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ..batch import Batch
from ..context import Context
from ..model import load_model
from .prompts import build_prompts


def prompt_ids(model, prompts: list, n_ctx: int, max_tokens: int) -> list:
    """Each prompt's token ids (BOS included), cut so that the prompt and ``max_tokens`` fit in ``n_ctx``."""
    return [model.tokenize(item["prompt"].encode("utf-8"), True)[: n_ctx - max_tokens - 1] for item in prompts]


def answer(model, prompts: list, max_tokens: int = 128, n_seq: int = 16, n_ctx: int = 512,
           n_threads: Optional[int] = None, sampled_share: float = 0.5, seed: int = 0,
           progress: bool = True) -> list:
    """Step 1: the target answers every prompt, ``n_seq`` at a time (greedy, or sampled at temperature 0.8,
    top-p 0.95 for ``sampled_share`` of them, each with its own seed). Returns one dict per prompt:
    category, temperature, prompt_ids, answer (token ids)."""
    t0 = time.perf_counter()
    batch = Batch(model, n_seq=n_seq, spec_type="none", n_ctx=n_ctx, n_threads=n_threads)
    rng = random.Random(seed)
    samples = []
    for i, (item, ids) in enumerate(zip(prompts, prompt_ids(model, prompts, n_ctx, max_tokens))):
        temperature = 0.8 if rng.random() < sampled_share else 0.0
        request = batch.submit(ids, max_tokens, temperature=temperature, top_p=0.95, seed=seed + i)
        samples.append({"category": item.get("category", ""), "temperature": temperature, "prompt_ids": ids,
                        "request": request})
    done = 0
    while batch.step():
        finished = sum(s["request"].done for s in samples)
        if progress and finished // 100 > done // 100:
            print(f"answers: {finished}/{len(samples)} ({time.perf_counter() - t0:.0f} s)", flush=True)
        done = finished
    batch.close()
    for s in samples:
        s["answer"] = list(s.pop("request").tokens)
    return samples


def distill(target, out_dir, layers: Sequence[int], prompts: Optional[list] = None, n_prompts: int = 2000,
            max_tokens: int = 128, n_seq: int = 16, n_ctx: int = 512, n_threads: Optional[int] = None,
            sampled_share: float = 0.5, seed: int = 0, progress: bool = True,
            answers: Optional[list] = None) -> dict:
    """Answer the prompts with the target and capture its features; writes OUT_DIR (see the module doc).

    ``prompts``: list of {"category", "prompt"} (default: :func:`build_prompts` (``n_prompts``, ``seed``)).
    ``answers``: step 1's result for these prompts and settings, when kept from an earlier run
    (:mod:`llamaspec.train.answers`); only the features are computed then.
    Returns the index (also written as index.json).
    """
    model = load_model(target)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    layers = [int(layer) for layer in layers]
    prompts = prompts if prompts is not None else build_prompts(n_prompts, seed)
    t0 = time.perf_counter()

    # 1. answers, n_seq prompts decoded together
    samples = answers if answers is not None else answer(model, prompts, max_tokens, n_seq, n_ctx, n_threads,
                                                         sampled_share, seed, progress)
    if len(samples) != len(prompts):
        raise ValueError(f"{len(samples)} answers for {len(prompts)} prompts")
    t_answers = time.perf_counter() - t0

    # 2. features over prompt + answer
    n_tokens = sum(len(s["prompt_ids"]) + len(s["answer"]) for s in samples)
    ctx = Context(model, n_ctx=n_ctx, capture_layers=layers, n_batch=n_ctx, n_threads=n_threads)
    width = len(layers) * model.n_embd
    tokens_out = np.lib.format.open_memmap(out / "tokens.npy", mode="w+", dtype=np.int32, shape=(n_tokens,))
    features_out = np.lib.format.open_memmap(out / "features.npy", mode="w+", dtype=np.float32,
                                             shape=(n_tokens, width))
    index = []
    offset = 0
    for k, s in enumerate(samples):
        ids = s["prompt_ids"] + s["answer"]
        ctx.clear()
        ctx.decode(ids, logits=False)
        features = np.concatenate([ctx.features(layer) for layer in layers], axis=1)
        tokens_out[offset:offset + len(ids)] = ids
        features_out[offset:offset + len(ids)] = features
        index.append({"offset": offset, "n_prompt": len(s["prompt_ids"]), "n_total": len(ids),
                      "category": s["category"], "temperature": s["temperature"]})
        offset += len(ids)
        if progress and (k + 1) % 200 == 0:
            print(f"features: {k + 1}/{len(samples)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    tokens_out.flush()
    features_out.flush()
    manifest = {"target": model.path, "layers": layers, "n_embd": model.n_embd, "n_samples": len(samples),
                "n_tokens": n_tokens, "n_answer_tokens": n_tokens - sum(len(s["prompt_ids"]) for s in samples),
                "max_tokens": max_tokens, "seed": seed, "answer_seconds": round(t_answers, 1),
                "answers_kept": answers is not None,
                "total_seconds": round(time.perf_counter() - t0, 1),
                "bytes": int((out / "features.npy").stat().st_size + (out / "tokens.npy").stat().st_size),
                "samples": index}
    (out / "index.json").write_text(json.dumps(manifest))
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target")
    ap.add_argument("out_dir")
    ap.add_argument("--layers", required=True, help="comma-separated target layer ids (the head's target_layers)")
    ap.add_argument("--prompts", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--n-seq", type=int, default=16)
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sampled-share", type=float, default=0.5,
                    help="share of prompts answered with sampling (temperature 0.8, top-p 0.95) instead of greedily")
    args = ap.parse_args(argv)
    manifest = distill(args.target, args.out_dir, [int(x) for x in args.layers.split(",")], n_prompts=args.prompts,
                       max_tokens=args.max_tokens, n_seq=args.n_seq, n_ctx=args.n_ctx, n_threads=args.threads,
                       seed=args.seed, sampled_share=args.sampled_share)
    print(json.dumps({k: v for k, v in manifest.items() if k != "samples"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
