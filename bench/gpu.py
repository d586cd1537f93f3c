"""A CUDA build on one GPU: speed of plain, speculative and batched decoding, and whether they agree.

Run where a GPU is lent (nothing is downloaded there, so the models are written here by code):
a random-weight ``qwen3`` target of a realistic layer size (speed does not depend on the weights;
the vocabulary is the tiny test one, so the output head costs almost nothing) quantized to
Q4_K_M, and a 2-layer draft that shares the target's embeddings, head and first two blocks (so
some drafts are accepted). Side by side in one run, interleaved (A B A B ..., --repeats times),
medians and ratios:

1. single sequence: ``Generator`` draft-simple (n_max 4) vs plain decoding;
2. ``Batch`` plain decoding of B sequences vs B sequential ``Generator.generate`` calls;
3. ``Batch`` draft-simple vs ``Batch`` plain at the same B.

Every run generates exactly --tokens tokens per sequence (ignore_eos). Each row also says whether
the greedy tokens equal plain single-sequence decoding: on CUDA no kernel is batch-invariant, so a
verification batch may round differently from a one-token decode (the CPU build's guarantee does
not carry over; the table counts how often that shows).

    python bench/gpu.py [--repeats 3] [--tokens 128] [--batches 1,4,16] [--out bench/results/gpu_h200]

Writes OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from importlib import resources
from pathlib import Path

import llamaspec
from llamaspec import tiny_models

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_SHAPE = dict(n_layer=16, n_embd=1024, n_head=16, n_head_kv=8, head_dim=128, n_ff=3072, n_ctx_train=4096)


def write_models(folder: Path) -> tuple[Path, Path]:
    """The Q4_K_M target and its 2-layer Q4_K_M draft (same seed: shared embeddings, head, first blocks)."""
    f32_target, f32_draft = folder / "target-f32.gguf", folder / "draft-f32.gguf"
    target, draft = folder / "target-q4_k_m.gguf", folder / "draft-q4_k_m.gguf"
    tiny_models.write_target(f32_target, seed=0, **TARGET_SHAPE)
    tiny_models.write_draft_simple(f32_draft, seed=0, **{**TARGET_SHAPE, "n_layer": 2})
    llamaspec.quantize(f32_target, target, "Q4_K_M")
    llamaspec.quantize(f32_draft, draft, "Q4_K_M")
    return target, draft


def suite_prompts(n: int) -> list[str]:
    tasks = json.loads(resources.files("llamaspec").joinpath("prompts.json").read_text())["tasks"]
    prompts = [task["prompt"] for task in tasks]
    return [prompts[i % len(prompts)] for i in range(n)]


def timed(run) -> tuple:
    """(seconds, token lists, results) of one call that returns GenerationResults (or one)."""
    start = time.perf_counter()
    results = run()
    seconds = time.perf_counter() - start
    results = results if isinstance(results, list) else [results]
    return seconds, [list(r.tokens) for r in results], results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--n-max", type=int, default=4)
    ap.add_argument("--out", default=str(RESULTS / "gpu_h200"))
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    n_tok = args.tokens

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        target_path, draft_path = write_models(Path(tmp))
        model_seconds = time.perf_counter() - t0
        target, draft = llamaspec.load_model(target_path), llamaspec.load_model(draft_path)
        devices = target.devices
        prompts = suite_prompts(max(batches))
        kw = dict(max_tokens=n_tok, ignore_eos=True)

        plain = llamaspec.Generator(target, spec_type="none", n_ctx=1024, reuse_prefix=False)
        spec = llamaspec.Generator(target, draft, spec_type="draft-simple", n_max=args.n_max, n_ctx=1024,
                                   reuse_prefix=False)
        batch_plain = {b: llamaspec.Batch(target, spec_type="none", n_seq=b, n_ctx=1024) for b in batches}
        batch_spec = {b: llamaspec.Batch(target, draft, spec_type="draft-simple", n_seq=b, n_max=args.n_max,
                                         n_ctx=1024) for b in batches}

        # Reference tokens: plain single-sequence decoding of every prompt (also the warm-up).
        reference = [list(plain.generate(p, **kw).tokens) for p in prompts]
        spec.generate(prompts[0], **kw)

        runs: dict[str, list[float]] = {}
        same: dict[str, list[bool]] = {}
        accept: dict[str, list[float]] = {}

        def record(key: str, seconds: float, tokens: list[list[int]], results, refs: list[list[int]]) -> None:
            runs.setdefault(key, []).append(sum(len(t) for t in tokens) / seconds)
            same.setdefault(key, []).extend(t == r for t, r in zip(tokens, refs))
            stats = [r.stats for r in results]
            drafted = sum(s.n_drafted for s in stats)
            if drafted:
                accept.setdefault(key, []).append(sum(s.n_accepted for s in stats) / drafted)

        for _ in range(args.repeats):
            for key, gen in (("single plain", plain), ("single draft-simple", spec)):
                record(key, *timed(lambda: gen.generate(prompts[0], **kw)), reference[:1])
            for b in batches:
                record(f"B={b} sequential plain",
                       *timed(lambda: [plain.generate(p, **kw) for p in prompts[:b]]), reference[:b])
                record(f"B={b} batch plain", *timed(lambda: batch_plain[b].generate(prompts[:b], **kw)),
                       reference[:b])
                record(f"B={b} batch draft-simple", *timed(lambda: batch_spec[b].generate(prompts[:b], **kw)),
                       reference[:b])

    rows = []
    for key, rates in runs.items():
        rows.append({"run": key, "tok_s": statistics.median(rates), "tok_s_runs": rates,
                     "same_tokens_as_plain": f"{sum(same[key])}/{len(same[key])}",
                     "acceptance": statistics.median(accept[key]) if key in accept else None})
    med = {r["run"]: r["tok_s"] for r in rows}
    ratios = {"single draft-simple / plain": med["single draft-simple"] / med["single plain"]}
    for b in batches:
        ratios[f"B={b} batch plain / sequential plain"] = med[f"B={b} batch plain"] / med[f"B={b} sequential plain"]
        ratios[f"B={b} batch draft-simple / batch plain"] = (med[f"B={b} batch draft-simple"]
                                                             / med[f"B={b} batch plain"])

    out = Path(args.out)
    record_json = {"target": TARGET_SHAPE, "quant": "Q4_K_M", "draft_layers": 2, "n_max": args.n_max,
                   "tokens_per_sequence": n_tok, "repeats": args.repeats, "devices": devices,
                   "model_write_seconds": model_seconds, "rows": rows, "ratios": ratios}
    out.with_suffix(".json").write_text(json.dumps(record_json, indent=1))
    lines = [f"# {out.name}: {'GPU' if devices else 'CPU-only'} build, random-weight qwen3 target {TARGET_SHAPE['n_layer']} layers x "
             f"{TARGET_SHAPE['n_embd']} (Q4_K_M), 2-layer draft, {n_tok} tokens per sequence, "
             f"medians of {args.repeats} interleaved repeats",
             "", "`python bench/gpu.py " + f"--repeats {args.repeats} --tokens {n_tok} --batches {args.batches}`"
             f" on {', '.join(devices or ['no GPU'])} (build: tools/gpu_check.sh, FlashAttention kernels off). "
             "Random weights: acceptance is low, so the draft-simple rows measure the cost of drafting "
             "and verifying, not a speedup.", "",
             "| run | aggregate tok/s | acceptance | greedy tokens equal plain decoding |", "| --- | ---: | ---: | ---: |"]
    for r in rows:
        acc = "" if r["acceptance"] is None else f"{r['acceptance']:.2f}"
        lines.append(f"| {r['run']} | {r['tok_s']:.1f} | {acc} | {r['same_tokens_as_plain']} |")
    lines += ["", "| ratio | value |", "| --- | ---: |"]
    lines += [f"| {k} | {v:.2f}x |" for k, v in ratios.items()]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
