"""The confidence schedule's targets, judged from interleaved runs (llamaspec.evaluate).

bench/run.py runs each mode over the whole suite before the next, minutes apart, so rows that do the
same work as plain decoding spread 0.75-1.36x there. Here every prompt runs plain decoding, the fixed
depths and the scheduled mode one after the other, ``--repeats`` times, and each speed-up is the
median of per-repeat ratios (with min-max). Targets: scheduled >= 0.98x of plain decoding on every
task; >= 0.95x of the best fixed depth of the same drafter on code, JSON and repeat tasks.

    python bench/schedule_targets.py [--repeats 3] [--tokens 96] [--threads 2] [--tiny-only]

Writes bench/results/schedule_targets.json and .md (plus the full evaluate() report as JSON).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import llamaspec
from llamaspec.evaluate import builtin_prompts

RESULTS = Path(__file__).resolve().parent / "results"
PREDICTABLE = {"code_python", "code_cpp", "code_completion", "json_output", "repeat_pattern"}


def suites(tiny_only: bool, threads: int) -> list:
    from llamaspec import tiny_models

    out = []
    if not tiny_only:
        from llamaspec.demo import gemma_models

        gemma, q2k = gemma_models(threads)
        out.append(("gemma-3-270m Q4_K_M", gemma, {
            "ngram fixed 4": {"spec_type": "ngram-simple", "n_max": 4},
            "ngram fixed 8": {"spec_type": "ngram-simple", "n_max": 8},
            "ngram scheduled 8": {"spec_type": "ngram-simple", "n_max": 8, "schedule": "confidence"},
            "q2k-draft fixed 4": {"draft": q2k, "spec_type": "draft-simple", "n_max": 4},
            "q2k-draft scheduled 8": {"draft": q2k, "spec_type": "draft-simple", "n_max": 8,
                                      "schedule": "confidence"},
        }))
    tiny = RESULTS.parent / ".tiny"
    if not (tiny / "dspark.gguf").exists():
        tiny_models.write_all(tiny, seed=0)
    out.append(("tiny qwen3 + random heads", str(tiny / "target.gguf"), {
        "dspark fixed 2": {"draft": str(tiny / "dspark.gguf"), "n_max": 2},
        "dspark fixed 8": {"draft": str(tiny / "dspark.gguf"), "n_max": 8},
        "dspark scheduled 8": {"draft": str(tiny / "dspark.gguf"), "n_max": 8, "schedule": "confidence"},
        "ngram fixed 4": {"spec_type": "ngram-mod", "n_max": 4, "ngram_size_n": 2},
        "ngram scheduled 8": {"spec_type": "ngram-mod", "n_max": 8, "ngram_size_n": 2, "schedule": "confidence"},
    }))
    return out


def per_repeat(report, task: str, drafter: str) -> dict:
    return {r.repeat: r.stats.tokens_per_second for r in report.runs if r.task == task and r.drafter == drafter}


def judge(report, drafters: dict) -> list:
    rows = []
    tasks = list(dict.fromkeys(r.task for r in report.runs))
    for name in drafters:
        if "scheduled" not in name:
            continue
        family = name.split(" scheduled")[0]
        fixed = [d for d in drafters if d.startswith(family + " fixed")]
        for task in tasks:
            sched, none = per_repeat(report, task, name), per_repeat(report, task, "none")
            vs_none = [sched[k] / none[k] for k in sched if k in none and none[k] > 0]
            best_name = max(fixed, key=lambda d: statistics.median(per_repeat(report, task, d).values()))
            best = per_repeat(report, task, best_name)
            vs_best = [sched[k] / best[k] for k in sched if k in best and best[k] > 0]
            row = {"mode": name, "task": task,
                   "vs_none": statistics.median(vs_none), "vs_none_min": min(vs_none), "vs_none_max": max(vs_none),
                   "best_fixed": best_name, "vs_best_fixed": statistics.median(vs_best),
                   "vs_best_min": min(vs_best), "vs_best_max": max(vs_best)}
            row["none_target_held"] = row["vs_none"] >= 0.98
            row["fixed_target_held"] = row["vs_best_fixed"] >= 0.95 if task in PREDICTABLE else None
            rows.append(row)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--tiny-only", action="store_true")
    args = parser.parse_args(argv)
    prompts = builtin_prompts()
    out = {"repeats": args.repeats, "tokens": args.tokens, "threads": args.threads, "suites": {}}
    lines = ["# Confidence schedule: targets judged from interleaved runs", "",
             f"`python bench/schedule_targets.py` ({args.repeats} repeats, {args.tokens} tokens, {args.threads} "
             "threads; per task: plain decoding, fixed depths and the scheduled mode run back to back; medians "
             "of per-repeat tok/s ratios, min-max in brackets). Targets: >= 0.98x of none on every task, "
             ">= 0.95x of the best fixed depth on code, JSON and repeat tasks.", ""]
    for title, target, drafters in suites(args.tiny_only, args.threads):
        report = llamaspec.evaluate(target, drafters, prompts=prompts, max_tokens=args.tokens,
                                    repeats=args.repeats, n_threads=args.threads, progress=False)
        rows = judge(report, drafters)
        out["suites"][title] = {"judged": rows, "tasks": report.task_records()}
        (RESULTS / f"schedule_targets_{'gemma' if 'gemma' in title else 'tiny'}_report.json").write_text(
            report.to_json())
        lines += [f"## {title}", "", "| mode | task | vs none | vs best fixed (which) | held |", "|---|---|---|---|---|"]
        for r in rows:
            held = ("yes" if r["none_target_held"] else "NO") + (
                "" if r["fixed_target_held"] is None else (" / yes" if r["fixed_target_held"] else " / NO"))
            lines.append(f"| {r['mode']} | {r['task']} | {r['vs_none']:.2f} ({r['vs_none_min']:.2f}-"
                         f"{r['vs_none_max']:.2f}) | {r['vs_best_fixed']:.2f} ({r['vs_best_min']:.2f}-"
                         f"{r['vs_best_max']:.2f}; {r['best_fixed']}) | {held} |")
        for mode in dict.fromkeys(r["mode"] for r in rows):
            mine = [r for r in rows if r["mode"] == mode]
            n_none = sum(r["none_target_held"] for r in mine)
            fixed = [r for r in mine if r["fixed_target_held"] is not None]
            lines.append(f"\n{mode}: >= 0.98x of none on {n_none}/{len(mine)} tasks; >= 0.95x of the best fixed "
                         f"depth on {sum(r['fixed_target_held'] for r in fixed)}/{len(fixed)} predictable tasks.")
        lines.append("")
        print("\n".join(lines), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "schedule_targets.json").write_text(json.dumps(out, indent=1))
    (RESULTS / "schedule_targets.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
