"""Second-turn latency of a chat with and without prefix reuse, side by side (Gemma 3 270M, PyPI).

Each repeat runs, on a Generator with reuse_prefix=True and then on one with reuse_prefix=False
(interleaved, A B A B ...), a first turn (a long system message + question, 48 generated tokens) and
a second turn that appends the reply and a follow-up question. Reported per turn 2: prompt tokens
decoded, prefill seconds, and time to the first generated token; medians and ratios.

    python bench/prefix_reuse.py [--repeats 5] [--threads 2]

Writes bench/results/prefix_reuse/prefix_reuse.json and .md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import llamaspec

RESULTS = Path(__file__).resolve().parent / "results" / "prefix_reuse"

SYSTEM = ("You are a careful assistant for a small bookshop. You answer questions about opening hours, "
          "book orders, gift cards and events. Keep answers short and friendly, and say when you are unsure. "
          "Opening hours: Monday to Friday 9:00-18:00, Saturday 10:00-16:00, closed on Sunday. Orders arrive "
          "in three to five working days; rare books may take two weeks. Gift cards are sold in store only. "
          "Events: a reading club meets on the first Thursday of every month at 19:00.")
TURNS = ["When does the reading club meet?", "Can I buy a gift card online?"]


def second_turn(gen: llamaspec.Generator, n_tokens: int) -> dict:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TURNS[0]}]
    first = gen.chat(messages, max_tokens=n_tokens, ignore_eos=True)
    messages += [first.message, {"role": "user", "content": TURNS[1]}]
    t0 = time.perf_counter()
    stream = gen.chat_stream(messages, max_tokens=n_tokens, ignore_eos=True)  # reads the prompt here
    next(stream)
    first_token = time.perf_counter() - t0
    for _ in stream:
        pass
    stats = gen.last_stats
    return {"prompt_tokens_decoded": stats.prefill_tokens, "prefill_seconds": stats.prefill_seconds,
            "time_to_first_token": first_token, "prompt_tokens": len(gen.chat_prompt(messages)[0])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("-n", "--tokens", type=int, default=48)
    args = parser.parse_args(argv)
    from llamaspec.demo import gemma_models

    target, _ = gemma_models(args.threads)
    model = llamaspec.Model(target)
    gens = {"reuse": llamaspec.Generator(model, spec_type="ngram-simple", n_max=8, n_ctx=2048,
                                         n_threads=args.threads),
            "cold": llamaspec.Generator(model, spec_type="ngram-simple", n_max=8, n_ctx=2048,
                                        n_threads=args.threads, reuse_prefix=False)}
    runs = {name: [] for name in gens}
    for _ in range(args.repeats):
        for name, gen in gens.items():
            runs[name].append(second_turn(gen, args.tokens))
    summary = {}
    for name, rs in runs.items():
        summary[name] = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
    ratio = {k: summary["reuse"][k] / summary["cold"][k] for k in ("prefill_seconds", "time_to_first_token")}
    report = {"model": str(target), "threads": args.threads, "repeats": args.repeats, "runs": runs,
              "median": summary, "ratio_reuse_to_cold": ratio}
    lines = ["# Prefix reuse: second chat turn, Gemma 3 270M Q4_K_M", "",
             f"`python bench/prefix_reuse.py` ({args.threads} threads, {args.repeats} interleaved repeats, medians; "
             "n-gram drafting, ChatML template).", "",
             "| turn 2 | prompt tokens | decoded | prefill s | time to first token s |", "|---|---|---|---|---|"]
    for name in gens:
        m = summary[name]
        lines.append(f"| {name} | {m['prompt_tokens']:.0f} | {m['prompt_tokens_decoded']:.0f} | "
                     f"{m['prefill_seconds']:.3f} | {m['time_to_first_token']:.3f} |")
    lines += ["", f"reuse / cold: prefill {ratio['prefill_seconds']:.3f}x, "
                  f"time to first token {ratio['time_to_first_token']:.3f}x"]
    print("\n".join(lines))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "prefix_reuse.json").write_text(json.dumps(report, indent=1))
    (RESULTS / "prefix_reuse.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
