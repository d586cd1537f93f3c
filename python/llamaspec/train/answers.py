"""Kept answers: step 1 of the training data (the target's answers to one prompt set), saved small.

Answering 2,000 prompts takes the Gemma target 20-26 minutes on 2 cores; capturing the features of
the same tokens about 8. A session of this project has 3 hours and keeps no files outside the
repository, so the answers of each prompt set are kept in the repository (``train-answers/``, 140-180 KB
per set) and a later run recomputes only the features. That lets the data grow by a prompt set
per session instead of being capped by what one session can answer.

A file is used only for exactly what made it: its key is the sha256 of the target GGUF, the prompts
and the answering settings; anything else is answered afresh. Answers are deterministic (greedy, or
sampled with one seed per prompt, batch-invariant kernels), and :func:`spot_check` re-answers a few
greedy prompts to show that the kept answers are what this build of the target says.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

import numpy as np


def file_sha256(path) -> str:
    """sha256 of a file (a target GGUF is 253 MB: read in 1 MiB chunks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def answers_key(target_sha256: str, prompts: list, max_tokens: int, n_ctx: int, sampled_share: float,
                seed: int) -> str:
    """What a set of answers depends on, hashed."""
    what = {"target": target_sha256, "prompts": [[p.get("category", ""), p["prompt"]] for p in prompts],
            "max_tokens": max_tokens, "n_ctx": n_ctx, "sampled_share": sampled_share, "seed": seed}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def save_answers(path, samples: list, key: str) -> None:
    """Write :func:`llamaspec.train.data.answer`'s result (compressed npz)."""
    lengths = np.array([len(s["answer"]) for s in samples], dtype=np.int32)
    tokens = np.array([t for s in samples for t in s["answer"]], dtype=np.int32)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        np.savez_compressed(f, key=np.array(key), answer_tokens=tokens, answer_lengths=lengths,
                            prompt_lengths=np.array([len(s["prompt_ids"]) for s in samples], dtype=np.int32),
                            temperatures=np.array([s["temperature"] for s in samples], dtype=np.float64),
                            categories=np.array(json.dumps([s["category"] for s in samples])))


def load_answers(path, key: str, prompt_ids: list) -> Optional[list]:
    """The kept answers in ``path`` as :func:`llamaspec.train.data.answer` returns them, or None when the
    file is missing or was made from something else (another key, other prompt lengths)."""
    path = Path(path)
    if not path.exists():
        return None
    with np.load(path) as kept:
        if str(kept["key"]) != key or kept["prompt_lengths"].tolist() != [len(ids) for ids in prompt_ids]:
            return None
        lengths = kept["answer_lengths"]
        ends = np.cumsum(lengths)
        tokens = kept["answer_tokens"]
        temperatures = kept["temperatures"].tolist()
        categories = json.loads(str(kept["categories"]))
    return [{"category": categories[i], "temperature": temperatures[i], "prompt_ids": list(prompt_ids[i]),
             "answer": tokens[ends[i] - lengths[i]:ends[i]].tolist()} for i in range(len(lengths))]


def spot_check(model, samples: list, max_tokens: int, n: int = 8, n_ctx: int = 512,
               n_threads: Optional[int] = None) -> dict:
    """Re-answer the first ``n`` greedy samples with the target (``max_tokens`` as when they were made)
    and count how many equal the kept answers; ``first_difference``: per sample, the index of the first
    answer token that differs (None where equal).

    Greedy answers are bit-exact on one machine, but a CPU with other kernels (AVX512 against AVX2 dot
    products, say) rounds differently and may flip a near-tie argmax somewhere in an answer, after which
    the two texts part. The kept answers are still the target's own text, and the features are always
    computed on this machine over the kept tokens, so the data stays self-distilled and consistent."""
    from ..batch import Batch

    greedy = [s for s in samples if s["temperature"] == 0.0][:n]
    if not greedy:
        return {"checked": 0, "equal": 0}
    batch = Batch(model, n_seq=len(greedy), spec_type="none", n_ctx=n_ctx, n_threads=n_threads)
    try:
        results = batch.generate([s["prompt_ids"] for s in greedy], max_tokens)
    finally:
        batch.close()
    first_difference = [_first_difference(list(r.tokens), s["answer"]) for r, s in zip(results, greedy)]
    equal = sum(d is None for d in first_difference)
    return {"checked": len(greedy), "equal": int(equal), "first_difference": first_difference}


def _first_difference(a: list, b: list) -> Optional[int]:
    """Index of the first token where a and b differ (where the shorter ends if one is a prefix); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
