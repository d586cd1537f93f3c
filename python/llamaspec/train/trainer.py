"""Training a DSpark head on self-distilled data (llamaspec.train.data), on CPU.

One training example is one draft round as llama.cpp runs it: an anchor position p of an answer, the
target's features of positions 0..p-1 as context, the block [token_p, mask, ..., mask] at positions
p..p+k-1, and as labels the target's own next tokens p+1..p+k. The Markov head is teacher-forced (its
previous token is the true one); the confidence head learns whether each slot's top token is the label
(binary cross-entropy, weight ``conf_weight``), to be calibrated afterwards.

A step may take several rounds from each sample (``anchors``): they share the sample's context
features, which are encoded once, and each round's block sees only the context before its own anchor
and its own block, so every round is exactly the lone one (tests/test_train_dspark.py). Encoding the
context dominates a step, so 8 rounds per sample train about 5x the rounds per second.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from .dspark import DSparkHead

IGNORE = -100


class DistilledData:
    """The files of llamaspec.train.data (tokens, features memory-mapped, the sample index) of one data
    folder or several (shards, e.g. one per prompt set), read as one set of samples."""

    def __init__(self, path, split: str = "all", holdout_every: int = 20) -> None:
        """``path``: a data folder or a list of them. ``split``: "all", "train" or "heldout" (every
        ``holdout_every``-th sample of each folder is held out)."""
        paths = [Path(p) for p in path] if isinstance(path, (list, tuple)) else [Path(path)]
        keep = {"all": lambda i: True, "train": lambda i: i % holdout_every != 0,
                "heldout": lambda i: i % holdout_every == 0}[split]
        self.shards = []  # (tokens, features) per folder
        self.samples = []
        for shard, folder in enumerate(paths):
            index = json.loads((folder / "index.json").read_text())
            self.shards.append((np.load(folder / "tokens.npy", mmap_mode="r"),
                                np.load(folder / "features.npy", mmap_mode="r")))
            self.samples += [dict(s, shard=shard) for i, s in enumerate(index["samples"])
                             if keep(i) and s["n_total"] - s["n_prompt"] >= 1]
        self.width = self.shards[0][1].shape[1]
        if any(features.shape[1] != self.width for _, features in self.shards):
            raise ValueError("the data folders captured different layers or widths")
        # anchors: every answer position that has a next token (p from n_prompt - 1 to n_total - 2)
        weights = np.array([s["n_total"] - s["n_prompt"] for s in self.samples], dtype=np.float64)
        self.weights = weights / weights.sum()

    def batch(self, rng: np.random.Generator, batch_size: int, block: int, mask_token: int,
              anchors: int = 1, copy_sources: bool = False) -> tuple:
        """``batch_size`` samples with ``anchors`` draft rounds each (anchors drawn independently; one
        sample's rounds share its context features): (features [B, P, W] float32 padded, anchor positions
        [B, A], tokens [B, A, k], markov_prev [B, A, k], labels [B, A, k]), and with ``copy_sources`` each
        round's :func:`copy_source` row for its first label [B, A] (-1: none)."""
        picks = rng.choice(len(self.samples), size=batch_size, p=self.weights)
        drawn = []
        for i in picks:
            s = self.samples[i]
            drawn.append((s, rng.integers(s["n_prompt"] - 1, s["n_total"] - 1, size=anchors)))
        longest = max(int(p.max()) for _, p in drawn)
        features = np.zeros((batch_size, max(longest, 1), self.width), dtype=np.float32)
        positions = np.zeros((batch_size, anchors), dtype=np.int64)
        tokens = np.full((batch_size, anchors, block), mask_token, dtype=np.int64)
        prev = np.zeros((batch_size, anchors, block), dtype=np.int64)
        labels = np.full((batch_size, anchors, block), IGNORE, dtype=np.int64)
        sources = np.full((batch_size, anchors), -1, dtype=np.int64)
        for b, (s, ps) in enumerate(drawn):
            shard_tokens, shard_features = self.shards[s["shard"]]
            o, end = s["offset"], s["offset"] + s["n_total"]
            last = int(ps.max())  # the context all of this sample's rounds share
            features[b, :last] = shard_features[o:o + last]
            seq = shard_tokens[o:end]
            for a, p in enumerate(int(p) for p in ps):
                positions[b, a] = p
                tokens[b, a, 0] = seq[p]
                n_next = min(block, s["n_total"] - 1 - p)
                labels[b, a, :n_next] = seq[p + 1:p + 1 + n_next]
                prev[b, a, :n_next] = seq[p:p + n_next]
                if copy_sources:
                    sources[b, a] = copy_source(seq, p + 1)
        out = (torch.from_numpy(features), torch.from_numpy(positions), torch.from_numpy(tokens),
               torch.from_numpy(prev), torch.from_numpy(labels))
        return out + (torch.from_numpy(sources),) if copy_sources else out

    def token_counts(self, n_vocab: int, part: str = "answer") -> np.ndarray:
        """How often each token id occurs in this split's answers (the labels) or prompts."""
        counts = np.zeros(n_vocab, dtype=np.int64)
        for s in self.samples:
            o = s["offset"]
            lo, hi = (o + s["n_prompt"], o + s["n_total"]) if part == "answer" else (o, o + s["n_prompt"])
            counts += np.bincount(self.shards[s["shard"]][0][lo:hi], minlength=n_vocab)
        return counts


def balance_fc(head: DSparkHead, data: DistilledData, n_rows: int = 20000, seed: int = 0) -> np.ndarray:
    """Scale the initial fc columns of each target layer by (mean RMS / that layer's feature RMS), so every
    layer starts with an equal share of the encoded context. Gemma's residual grows with depth (RMS ~40 at
    layer 2, ~900 at layer 16): with a plain init the late layers drown the early ones, which carry what
    copying needs (bench/research/dspark_copy_attention.py). Returns the per-layer RMS measured on ``n_rows`` rows."""
    n_layers = len(head.c.target_layers)
    rng = np.random.default_rng(seed)
    squares, count = np.zeros(n_layers), 0
    for i in rng.choice(len(data.samples), size=min(len(data.samples), 200), replace=False):
        s = data.samples[i]
        rows = np.asarray(data.shards[s["shard"]][1][s["offset"]:s["offset"] + s["n_total"]], dtype=np.float64)
        squares += (rows.reshape(len(rows), n_layers, -1) ** 2).sum((0, 2))
        count += len(rows) * rows.shape[1] // n_layers
        if count >= n_rows * rows.shape[1] // n_layers:
            break
    rms = np.sqrt(squares / count)
    scale_fc_by_layer_rms(head.fc.weight, rms)
    return rms


def scale_fc_by_layer_rms(fc_weight: torch.Tensor, rms) -> None:
    """In place: multiply the fc columns reading target layer i by mean(rms) / rms[i] (one RMS per layer,
    in the order the features are concatenated)."""
    rms = torch.as_tensor(np.asarray(rms, dtype=np.float64))
    with torch.no_grad():
        w = fc_weight.view(fc_weight.shape[0], len(rms), -1)
        w.mul_((rms.mean() / rms).to(w.dtype)[None, :, None])


def keep_masked_at_zero(weight: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Zero ``weight`` where ``mask`` is 0 now and its gradient there in every backward pass, so those
    entries stay exactly 0 (AdamW never moves a weight whose gradient is always 0; its decoupled decay
    only scales it):
    a sparsity pattern trained into dense tensors, which the exported graph runs unchanged."""
    with torch.no_grad():
        weight.mul_(mask)
    weight.register_hook(lambda grad: grad * mask)
    return mask


def reserve_fc_slice(fc_weight: torch.Tensor, n_layers: int, n_slice: int) -> torch.Tensor:
    """Keep the first ``n_slice`` outputs of fc free of the last target layer (its columns are the last
    of the concatenated features). Gemma's last captured layer is ~20x larger than the early ones and
    carries little of the previous token; a slice fed only by the early layers gives the attention's
    keys a place where a copy's anchor is not drowned (bench/research/dspark_copy_attention.py). Returns the
    0/1 mask."""
    if not 0 <= n_slice <= fc_weight.shape[0]:
        raise ValueError(f"n_slice must be in [0, {fc_weight.shape[0]}], got {n_slice}")
    mask = torch.ones_like(fc_weight)
    mask.view(fc_weight.shape[0], n_layers, -1)[:n_slice, -1] = 0
    return keep_masked_at_zero(fc_weight, mask)


def keys_from_fc_slice(k_weight: torch.Tensor, n_slice: int, n_rows: int) -> torch.Tensor:
    """Let the first ``n_rows`` outputs of a key projection (key/value head 0 when ``n_rows`` is the head
    dimension) read only the first ``n_slice`` inputs, the slice :func:`reserve_fc_slice` keeps free of
    the last target layer: that head then finds rows by what the early layers say. Returns the mask."""
    if not 0 <= n_slice <= k_weight.shape[1] or not 0 <= n_rows <= k_weight.shape[0]:
        raise ValueError(f"n_slice/n_rows out of range for a {tuple(k_weight.shape)} key projection")
    mask = torch.ones_like(k_weight)
    mask[:n_rows, n_slice:] = 0
    return keep_masked_at_zero(k_weight, mask)


def copy_source(seq, t: int) -> int:
    """The latest context row s <= t - 2 where the trigram seq[t-2:t+1] ended before (s holds the token at
    t and, before it, the anchor seq[t-1]: the row a copying head should attend to when drafting t), or
    -1. Row t - 1 is the anchor itself, which is in the block, not the context."""
    for s in range(t - 2, 1, -1):
        if seq[s] == seq[t] and seq[s - 1] == seq[t - 1] and seq[s - 2] == seq[t - 2]:
            return s
    return -1


def draft_vocabulary(data: DistilledData, n_vocab: int, size: int, always: tuple = (),
                     prior: Optional[np.ndarray] = None) -> tuple:
    """A reduced draft vocabulary of ``size`` token ids (sorted), and the share of ``data``'s answer
    tokens it covers. Ranked by answer count, then prompt count (targets copy from their prompts), then
    ``prior`` (e.g. the tokenizer's scores: BPE merge order, a frequency ranking of its training text);
    ``always`` (e.g. the end-of-generation tokens) are in regardless."""
    answers = data.token_counts(n_vocab, "answer")
    prompts = data.token_counts(n_vocab, "prompt")
    prior = np.zeros(n_vocab) if prior is None else np.asarray(prior, dtype=np.float64)
    order = np.lexsort((-prior, -prompts, -answers))  # the last key is the primary one
    chosen = set(int(t) for t in always)
    for t in order:
        if len(chosen) >= size:
            break
        chosen.add(int(t))
    vocab = np.array(sorted(chosen), dtype=np.int64)
    return vocab, float(answers[vocab].sum() / max(1, answers.sum()))


def losses(head: DSparkHead, batch: tuple, conf_weight: float = 0.1, copy_weight: float = 0.0,
           bf16: bool = False) -> dict:
    """Cross-entropy of every slot's label over the draft vocabulary (labels it lacks count as misses
    but carry no gradient) plus ``conf_weight`` x the confidence head's BCE on whether the slot's top
    token is its label. With ``copy_weight`` (and a batch made with ``copy_sources``) also that weight x
    the negative log attention of the first layer's head 0, at each round's first slot, on the round's
    copy source row: a training signal towards copying, which the head's graph can do only in its
    attention (bench/research/dspark_copy_attention.py). ``bf16``: the head's forward pass under CPU autocast to
    bfloat16 (matrix products 2-3x faster where the CPU has AVX512-BF16; weights and the loss stay float32)."""
    features, anchors, tokens, prev, labels = batch[:5]
    first = head.layers[0]
    first.record_attention = copy_weight > 0
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits, conf = head.forward_batch(features, anchors, tokens, prev)
    finally:
        first.record_attention = False
    logits = logits.float()
    conf = conf.float() if conf is not None else None
    k = tokens.shape[-1]  # every round as one row of k slots
    logits, labels = logits.reshape(-1, k, logits.shape[-1]), labels.reshape(-1, k)
    conf = conf.reshape(-1, k) if conf is not None else None
    valid = labels != IGNORE
    target = head.draft_labels(labels)
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.where(target >= 0, target, IGNORE).reshape(-1),
                         ignore_index=IGNORE)
    hits = (logits.argmax(-1) == target) & valid
    out = {"ce": ce, "hits": hits, "valid": valid, "conf": conf}
    total = ce
    if conf is not None:
        bce = F.binary_cross_entropy(conf[valid], hits[valid].float())
        out["bce"] = bce
        total = total + conf_weight * bce
    if copy_weight > 0:
        sources = batch[5].reshape(-1)
        slot0 = first.attention[:, 0, ::k, :].float()  # [B, A, P + A k]: head 0 at each block's first slot
        rows = slot0.reshape(-1, slot0.shape[-1])
        has = sources >= 0
        any_source = bool(has.any())
        copy_nll = -torch.log(rows[has, sources[has]] + 1e-9).mean() if any_source else total * 0
        first.attention = None
        out["copy_nll"] = copy_nll
        out["copy_hit"] = (rows[has].argmax(-1) == sources[has]).float().mean() if any_source else None
        total = total + copy_weight * copy_nll
    out["loss"] = total
    return out


def train(head: DSparkHead, data: DistilledData, steps: int, batch_size: int = 32, anchors: int = 1,
          lr: float = 1e-3, warmup: int = 50, conf_weight: float = 0.1, copy_weight: float = 0.0,
          freeze: tuple = ("token_embd", "output"), seed: int = 0,
          log_every: int = 25, checkpoint: Optional[str] = None, checkpoint_every: int = 100,
          progress: bool = False, bf16: bool = False) -> list:
    """AdamW with warmup and cosine decay; ``freeze`` keeps the target's embeddings/head fixed. A step
    trains on ``batch_size`` samples x ``anchors`` rounds each; ``copy_weight`` and ``bf16``: see :func:`losses`.

    With ``checkpoint`` the head, optimiser and history are saved every ``checkpoint_every`` steps and a
    run that finds the file resumes from it (step k's batch depends only on (seed, k), so a resumed run
    sees the batches an uninterrupted one would). Returns the history (step, loss, ce, bce, per-slot
    top-1 accuracy, seconds)."""
    torch.manual_seed(seed)
    for name, param in head.named_parameters():
        param.requires_grad_(not any(name.startswith(f) for f in freeze))
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)

    def schedule(step):
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    history: list = []
    first = 0
    elapsed = 0.0
    if checkpoint and Path(checkpoint).exists():
        saved = torch.load(checkpoint, weights_only=False)
        head.load_state_dict(saved["state"])
        opt.load_state_dict(saved["opt"])
        sched.load_state_dict(saved["sched"])
        first, history, elapsed = saved["step"], saved["history"], saved.get("seconds", 0.0)

    def save(step):
        if checkpoint:
            tmp = str(checkpoint) + ".tmp"
            torch.save({"state": head.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                        "step": step, "history": history, "seconds": elapsed + time.perf_counter() - t0}, tmp)
            Path(tmp).replace(checkpoint)

    head.train()
    t0 = time.perf_counter()
    hits = torch.zeros(head.c.block_size)
    seen = torch.zeros(head.c.block_size)
    for step in range(first, steps):
        rng = np.random.default_rng([seed, step])
        batch = data.batch(rng, batch_size, head.c.block_size, head.c.mask_token_id, anchors,
                           copy_sources=copy_weight > 0)
        out = losses(head, batch, conf_weight, copy_weight, bf16)
        opt.zero_grad()
        out["loss"].backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        hits += out["hits"].sum(0).float()
        seen += out["valid"].sum(0).float()
        if (step + 1) % log_every == 0 or step + 1 == steps:
            record = {"step": step + 1, "loss": out["loss"].item(), "ce": out["ce"].item(),
                      "bce": out["bce"].item() if "bce" in out else float("nan"),
                      **({"copy_nll": round(out["copy_nll"].item(), 4)} if "copy_nll" in out else {}),
                      "accuracy": [round(float(h / max(s, 1)), 4) for h, s in zip(hits, seen)],
                      "lr": sched.get_last_lr()[0], "seconds": round(elapsed + time.perf_counter() - t0, 1)}
            history.append(record)
            hits.zero_()
            seen.zero_()
            if progress:
                print(f"step {record['step']}/{steps} loss {record['loss']:.3f} ce {record['ce']:.3f} "
                      f"acc {record['accuracy']} " + (f"copy-nll {record['copy_nll']:.3f} " if "copy_nll" in record else "")
                      + f"{record['seconds']:.0f} s", flush=True)
        if (step + 1) % checkpoint_every == 0 or step + 1 == steps:
            save(step + 1)
    head.eval()
    return history
