"""Two builds of llamaspec on the 13-task suite: what a change to the engine (the schedule, a drafter) does
to the speed-ups of chosen modes, side by side.

    python bench/build_ab.py --baseline DIR [--modes dspark-2,dspark-sched] [--repeats 3] [--out NAME]

DIR holds the baseline's ``llamaspec`` package folder (for example a copy of site-packages/llamaspec with the
``_core`` built before the change); the candidate is the installed package. Each repeat runs
``spec_e2e.py --kernels on --repeats 1`` once per build, in its own process (the order alternates per repeat:
A B, B A, ...), and each process measures every mode's tok/s over plain decoding in the same evaluate() call,
so the machine's drift between processes cancels. Per task the median over repeats; pooled: the median of the
processes' pooled ratios. Writes bench/results/build_ab/<NAME>.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "build_ab"
SPEC_E2E_RESULTS = HERE / "results" / "spec_e2e"


def run_once(baseline: str | None, modes: str, max_tokens: int, threads: int, stem: str) -> dict:
    """One spec_e2e process; baseline: the folder put first on PYTHONPATH (None: the installed package)."""
    env = dict(os.environ)
    if baseline:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (baseline, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, str(HERE / "spec_e2e.py"), "--kernels", "on", "--repeats", "1", "--modes", modes,
           "--max-tokens", str(max_tokens), "-t", str(threads), "--out", stem]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    out = {}
    for ext in ("json", "md"):
        path = SPEC_E2E_RESULTS / f"{stem}.{ext}"
        if ext == "json":
            out = json.loads(path.read_text())
        path.unlink()
    return out


def summarise(runs: list) -> dict:
    names = list(runs[0]["on"])
    out = {}
    for n in names:
        tasks = list(runs[0]["on"][n]["per_task"])
        out[n] = {
            "per_task": {t: statistics.median(r["on"][n]["per_task"][t] for r in runs) for t in tasks},
            "pooled": statistics.median(r["on"][n]["pooled"] for r in runs),
            "rounds_drafting": statistics.median(r["on"][n]["rounds_drafting"] for r in runs),
            "mean_depth": statistics.median(r["on"][n]["mean_depth"] for r in runs),
        }
    return out


def markdown(result: dict) -> str:
    a, b = result["baseline"], result["candidate"]
    lines = [
        "# Two builds on the suite: baseline (A) vs candidate (B)",
        "",
        f"`python bench/build_ab.py {result['args']}`; baseline {result['baseline_dir']}, {result['repeats']} "
        f"repeats, processes alternating; {result['max_tokens']} tokens, greedy, PyPI Gemma 3 270M Q4_K_M, "
        f"{result['threads']} threads, our kernels. Lossless: {result['lossless']}.",
        "",
        "| mode | pooled A | pooled B | lowest task A | lowest task B | rounds drafting A | B | mean depth A | B |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n in a:
        low_a = min(a[n]["per_task"].items(), key=lambda kv: kv[1])
        low_b = min(b[n]["per_task"].items(), key=lambda kv: kv[1])
        lines.append(f"| {n} | {a[n]['pooled']:.2f}x | {b[n]['pooled']:.2f}x | {low_a[1]:.2f}x ({low_a[0]}) | "
                     f"{low_b[1]:.2f}x ({low_b[0]}) | {100 * a[n]['rounds_drafting']:.0f}% | "
                     f"{100 * b[n]['rounds_drafting']:.0f}% | {a[n]['mean_depth']:.2f} | {b[n]['mean_depth']:.2f} |")
    names = list(a)
    lines += ["", "Per task, speed-up over plain decoding (A -> B):", "",
              "| task | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for t in a[names[0]]["per_task"]:
        lines.append(f"| {t} | " + " | ".join(f"{a[n]['per_task'][t]:.2f} -> {b[n]['per_task'][t]:.2f}"
                                              for n in names) + " |")
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="folder holding the baseline's llamaspec package")
    parser.add_argument("--modes", default="dspark-2,dspark-sched")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--out", default="build_ab")
    args = parser.parse_args(argv)
    if not (Path(args.baseline) / "llamaspec" / "__init__.py").is_file():
        sys.exit(f"{args.baseline} holds no llamaspec package")
    sides = {"baseline": [], "candidate": []}
    t0 = time.time()
    for rep in range(args.repeats):
        order = ("baseline", "candidate") if rep % 2 == 0 else ("candidate", "baseline")
        for side in order:
            sides[side].append(run_once(args.baseline if side == "baseline" else None, args.modes,
                                        args.max_tokens, args.threads, f"_build_ab_{side}"))
            print(f"repeat {rep}, {side}: {time.time() - t0:.0f} s", flush=True)
    lossless = [r["lossless"] for runs in sides.values() for r in runs]
    result = {"args": " ".join(sys.argv[1:] if argv is None else argv), "baseline_dir": args.baseline,
              "repeats": args.repeats, "max_tokens": args.max_tokens, "threads": args.threads,
              "lossless": "; ".join(sorted(set(lossless))), "runs": sides,
              "baseline": summarise(sides["baseline"]), "candidate": summarise(sides["candidate"]),
              "seconds": time.time() - t0}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(result, indent=1))
    text = markdown(result)
    (RESULTS / f"{args.out}.md").write_text(text)
    print(text)
    print(f"wrote {RESULTS / args.out}.md ({result['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
