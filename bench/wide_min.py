"""Where CPU_ROWS8's 512-bit (16-row) passes start to pay, measured on whole models as they stream their weights
from memory: the build's thresholds (off) against ``GGML_CPU_ROWS8_WIDE_MIN=<n>`` (on, ``--on``), in alternating processes.
``--env NAME --on V [--off W]`` compares another start-up switch the same way (off: unset, or W), and
``--baseline DIR`` two builds: off is the ``llamaspec`` package in DIR (put first on PYTHONPATH, for example a
copy of site-packages/llamaspec with the ``_core`` built before a change), on the installed one.

bench/kernels.py --switch wide times one matrix over and over, and on a CPU with a large L3 cache (the Intel
Xeon measured here) its matrices stay in the cache, so it can miss what a model sees: weights that come from
memory, where two streams of rows in flight (16-row passes) keep more of the memory's bandwidth busy. Both widths
give the same bits, so the threshold changes only the speed.

For each model and repeat, one process per setting (order alternating per repeat): a 128-token context, then the
best of ``--runs`` `Context.decode` passes of k tokens (logits for each) for every k in ``--ks``. Medians over
repeats; ratios off / on (> 1: the forced threshold is faster).

    python bench/wide_min.py [--models gemma,qwen3-q4_k_m,qwen3-q5_k_m,qwen3-q8_0] [--on 1] [--ks 1,2,3,4,9]
    python bench/wide_min.py --env GGML_CPU_ROWS8_Q4K_FLOAT --off 0 --on 1 --models qwen3-q4_k_m --ks 1,4,9,16
    python bench/wide_min.py --baseline /tmp/before --models gemma,qwen3-q8_0 --ks 1,2,4,9,16

Writes bench/results/kernels/<out>.json and .md (default wide_min).
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
RESULTS = HERE / "results" / "kernels"
CONTEXT = 128

# one setting's measurement, in a process of its own (the threshold is read once per process)
CHILD = r"""
import json, sys
import numpy as np
import llamaspec
sys.path.insert(0, sys.argv[6])
from verify_cost import best_pass_seconds
path, ks, runs, threads, context = sys.argv[1], [int(k) for k in sys.argv[2].split(",")], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
ctx = llamaspec.Context(path, n_ctx=1024, n_threads=threads)
tokens = np.random.default_rng(0).integers(10, min(5000, ctx.model.n_vocab), size=context + max(ks)).tolist()
ctx.decode(tokens[:context], logits=False)
print(json.dumps({k: best_pass_seconds(ctx, tokens[context:context + k], context, runs) for k in ks}))
"""


def side_env(args: argparse.Namespace, on: bool) -> dict:
    """The environment of one side's process: the switch set to --on / --off (unset when None), or with
    --baseline the off side importing llamaspec from that folder first."""
    env = dict(os.environ)
    if args.baseline:
        if not on:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (args.baseline, env.get("PYTHONPATH")) if p)
        return env
    value = args.on if on else args.off
    env.pop(args.env, None)
    if value is not None:
        env[args.env] = value
    return env


def measure(path: str, ks: list, runs: int, threads: int, env: dict) -> dict:
    """One process's best pass per k, run with the environment ``env``."""
    done = subprocess.run([sys.executable, "-c", CHILD, path, ",".join(map(str, ks)), str(runs), str(threads),
                           str(CONTEXT), str(HERE)], env=env, capture_output=True, text=True, check=True)
    return {int(k): v for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def markdown(report: dict) -> str:
    title = (f"the build in {report['baseline']} (off) vs the installed build (on)" if report.get("baseline") else
             f"{report.get('env', 'GGML_CPU_ROWS8_WIDE_MIN')}={report.get('off') or '(unset)'} (off) vs "
             f"={report.get('on', report.get('wide_min'))} (on)")
    lines = [
        f"# CPU_ROWS8 on whole models: {title}",
        "",
        f"`python bench/wide_min.py {report['args']}` on {report['cpu']}, {report['threads']} threads, "
        f"{report['repeats']} repeats (one process per setting, order alternating per repeat), best of "
        f"{report['runs']} passes per process, medians. A pass: one `Context.decode` of k tokens with logits for "
        f"each, after a {CONTEXT}-token context."
        + (" Both settings give the same bits." if report.get("env", "GGML_CPU_ROWS8_WIDE_MIN") == "GGML_CPU_ROWS8_WIDE_MIN"
           and not report.get("baseline") else ""),
        "",
        "| model | k | off ms | on ms | off/on |",
        "|---|---|---|---|---|",
    ]
    for name, m in report["models"].items():
        for row in m:
            lines.append(f"| {name} | {row['k']} | {row['off_ms']:.2f} | {row['on_ms']:.2f} | {row['speedup']:.3f}x |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gemma,qwen3-q4_k_m,qwen3-q5_k_m,qwen3-q8_0")
    parser.add_argument("--env", default="GGML_CPU_ROWS8_WIDE_MIN", help="the start-up switch compared")
    parser.add_argument("--on", default="1", help="its value on the 'on' side (default 1: 16-row passes from one column)")
    parser.add_argument("--off", default=None, help="its value on the 'off' side (default: unset)")
    parser.add_argument("--baseline", default=None,
                        help="folder holding a baseline build's llamaspec package: off = that build, on = installed")
    parser.add_argument("--ks", default="1,2,3,4,9")
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out", default="wide_min")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from kernels import cpu_name, write_report
    from verify_cost import model_path

    ks = [int(k) for k in args.ks.split(",")]
    t0 = time.time()
    report = {"args": " ".join(sys.argv[1:] if argv is None else argv), "cpu": cpu_name(), "threads": args.threads,
              "repeats": args.repeats, "runs": args.runs, "models": {}}
    if args.baseline:
        report["baseline"] = args.baseline
    else:
        report.update({"env": args.env, "on": args.on, "off": args.off})
    for name in args.models.split(","):
        path = model_path(name, args.threads)
        seconds = {(k, on): [] for k in ks for on in (False, True)}
        for rep in range(args.repeats):
            for on in ((False, True) if rep % 2 == 0 else (True, False)):
                got = measure(path, ks, args.runs, args.threads, side_env(args, on))
                for k in ks:
                    seconds[(k, on)].append(got[k])
        med = {key: 1e3 * statistics.median(v) for key, v in seconds.items()}
        report["models"][name] = [{"k": k, "off_ms": med[(k, False)], "on_ms": med[(k, True)],
                                   "speedup": med[(k, False)] / med[(k, True)],
                                   "off_all": seconds[(k, False)], "on_all": seconds[(k, True)]} for k in ks]
        print(name, [f"{r['k']}: {r['speedup']:.3f}x" for r in report["models"][name]], flush=True)
    report["seconds"] = time.time() - t0
    write_report(RESULTS, args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
