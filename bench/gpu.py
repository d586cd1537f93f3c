"""A GPU check of a CUDA build: lossless speculative and batched decoding, the verification cost curve, the
cupy arrays of Context, and decoding speed, each part within its own time budget (tools/gpu_check.sh).

    python bench/gpu.py PART [PART ...] [--budget S] [--out DIR] [--models DIR] [--dry-run] [--shape 8b]

Parts, in the order the script runs them (each may run as its own process under ``timeout``):

    models    write the tiny test models and the large random-weight Q4_K_M target + draft (bench/gpu_models.py)
    lossless  greedy speculative == plain, batched == solo (draft-simple, n-gram, DSpark; depths 1..8; B 1, 4, 16)
    cost      cost(k)/cost(1), k = 1..16, on the large model, and the CUDA matmul kernel of each width
    cupy      Context logits/features as cupy arrays, equal to the numpy ones
    speed     tok/s of plain vs draft-simple vs Batch (B = 1, 4, 16) on the large model
    report    close the record: a part still marked running was killed by its timeout (its results so far stay)
    all       every part above in this process, --budget split among them as the GPU plan splits its time

``--budget`` is the part's seconds (for ``all``: the total); loops stop before a unit of work that would not fit.
Every part saves into OUT/gpu_<device>.json as it goes and renders OUT/gpu_<device>.md from it, so a part that
fails or is killed leaves the others' results. The models go to --models (not OUT: OUT comes back from the GPU
machine). ``--dry-run``: a CPU build, the small large model, short runs, and cupy rehearsed with a numpy
stand-in: every Python path of the GPU run, on a CPU (tests/test_gpu_check.py adds --quick --shape tiny).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # gpu_models, gpu_parts, gpu_kernels, verify_cost

import llamaspec  # noqa: E402

import gpu_models  # noqa: E402
import gpu_parts  # noqa: E402

PART_NAMES = ["models", "lossless", "cost", "cupy", "speed"]
# Seconds per part on the GPU machine (tools/gpu_check.sh passes them; `all` splits --budget in these proportions).
PLAN = {"models": 45, "lossless": 80, "cost": 40, "cupy": 20, "speed": 80}
SETTINGS = {
    "gpu": {"lossless": {"prompts": 16, "tokens": 32, "depths": list(range(1, 9)), "batches": [1, 4, 16]},
            "cost": {"repeats": 5, "runs": 3},
            "speed": {"tokens": 128, "repeats": 3, "n_max": 4, "batches": [1, 4, 16]}},
    "dry": {"lossless": {"prompts": 16, "tokens": 16, "depths": list(range(1, 9)), "batches": [1, 4, 16]},
            "cost": {"repeats": 1, "runs": 2},
            "speed": {"tokens": 16, "repeats": 2, "n_max": 4, "batches": [1, 4, 16]}},
    # --quick (tests/test_gpu_check.py): the same code paths, a few seconds each
    "quick": {"lossless": {"prompts": 4, "tokens": 8, "depths": [1, 8], "batches": [1, 4]},
              "cost": {"repeats": 1, "runs": 1},
              "speed": {"tokens": 8, "repeats": 1, "n_max": 4, "batches": [1, 4]}},
}


# --------------------------------------------------------------------------------------------------------
# The record: OUT/gpu_<device>.json, rendered to OUT/gpu_<device>.md after every save
# --------------------------------------------------------------------------------------------------------
class Record:
    def __init__(self, out: Path, name: str, env_file: Path | None):
        out.mkdir(parents=True, exist_ok=True)
        self.json_path, self.md_path = out / f"{name}.json", out / f"{name}.md"
        self.env_file = env_file

    def load(self) -> dict:
        if self.json_path.exists():
            return json.loads(self.json_path.read_text())
        return {"parts": {}}

    def update(self, **fields) -> dict:
        rec = self.load()
        rec.update(fields)
        self.write(rec)
        return rec

    def set_part(self, name: str, **fields) -> None:
        rec = self.load()
        rec["parts"].setdefault(name, {}).update(fields)
        self.write(rec)

    def write(self, rec: dict) -> None:
        if self.env_file is not None and self.env_file.exists():
            rec["env"] = self.env_file.read_text()[-4000:]
        tmp = self.json_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(rec, indent=1, default=str))
        tmp.replace(self.json_path)  # a kill mid-write leaves the previous record
        self.md_path.write_text(render(rec))


class PartRun:
    """What a part sees: models, settings, threads, the deadline, and save()."""

    def __init__(self, record: Record, name: str, budget: float, models: dict, settings: dict, dry_run: bool):
        self.record, self.name, self.models, self.settings, self.dry_run = record, name, models, settings, dry_run
        self.deadline = time.monotonic() + budget
        self.threads = os.cpu_count() if not llamaspec.supports_gpu_offload() else None

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def save(self, data: dict) -> None:
        self.record.set_part(self.name, data=data)


def run_part(record: Record, name: str, budget: float, args) -> bool:
    started = time.time()
    record.set_part(name, status="running", budget_s=budget, started=datetime.datetime.now().isoformat(" ", "seconds"))
    print(f"== {name} (budget {budget:.0f} s)", flush=True)
    try:
        if name == "models":
            t0 = time.perf_counter()
            manifest = gpu_models.write_models(Path(args.models), args.shape, os.cpu_count())
            record.set_part(name, data={**manifest["large"], "tiny_seconds": manifest["tiny_seconds"],
                                        "total_seconds": time.perf_counter() - t0, "folder": args.models})
        else:
            models = gpu_models.read_manifest(Path(args.models))
            settings = SETTINGS["quick" if args.quick else "dry" if args.dry_run else "gpu"]
            gpu_parts.PARTS[name](PartRun(record, name, budget, models, settings, args.dry_run))
        status = "ok"
    except Exception as exc:  # noqa: BLE001 -- one part's failure must not stop the others
        traceback.print_exc()
        record.set_part(name, error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()[-3000:])
        status = "failed"
    seconds = time.time() - started
    record.set_part(name, status=status, seconds=seconds)
    print(f"== {name}: {status} in {seconds:.1f} s", flush=True)
    return status == "ok"


def finish(record: Record) -> None:
    rec = record.load()
    for name in PART_NAMES:
        part = rec["parts"].setdefault(name, {"status": "not run"})
        if part.get("status") == "running":
            part["status"] = ("did not finish: killed by its timeout or crashed, see run.log "
                              "(results saved until then kept)")
    rec["finished"] = datetime.datetime.now().isoformat(" ", "seconds")
    record.write(rec)


# --------------------------------------------------------------------------------------------------------
# Device name
# --------------------------------------------------------------------------------------------------------
def device_label(models_dir: Path) -> str:
    """'NVIDIA H100 80GB HBM3' (what llama.cpp calls the first GPU) or 'CPU'."""
    if not llamaspec.supports_gpu_offload():
        return "CPU"
    from llamaspec import testing

    tiny = models_dir / "tiny" / "target.gguf"
    if not tiny.exists():
        tiny = models_dir / "device-probe.gguf"
        models_dir.mkdir(parents=True, exist_ok=True)
        testing.write_target(tiny, 0)
    devices = llamaspec.Model(str(tiny)).devices
    return devices[0].split(": ", 1)[-1] if devices else "CPU"


def slug(label: str, dry_run: bool) -> str:
    name = re.sub(r"[^a-z0-9]+", "_", label.lower().replace("nvidia", "")).strip("_") or "cpu"
    return f"gpu_{name}" + ("_dry_run" if dry_run else "")


# --------------------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------------------
def render(rec: dict) -> str:
    parts = rec.get("parts", {})
    lines = [f"# GPU check: {rec.get('device', '?')}" + (" (dry run on a CPU build)" if rec.get("dry_run") else ""),
             "", f"`{rec.get('command', '')}`, started {rec.get('started', '?')}, "
             f"large model: {rec.get('shape', '?')} shape. Greedy decoding throughout. "
             "Random weights, so acceptance is low: speculative rows measure drafting and verifying, not a speedup.",
             "", "| part | status | seconds | budget |", "| --- | --- | ---: | ---: |"]
    for name in PART_NAMES:
        p = parts.get(name, {})
        seconds = f"{p['seconds']:.0f}" if "seconds" in p else ""
        budget = f"{p['budget_s']:.0f}" if "budget_s" in p else ""
        status = p.get("status", "not run") + (f": {p['error']}" if "error" in p else "")
        lines.append(f"| {name} | {status.replace('|', '/')} | {seconds} | {budget} |")
    for name, fn in (("models", md_models), ("lossless", md_lossless), ("cost", md_cost), ("cupy", md_cupy),
                     ("speed", md_speed)):
        data = parts.get(name, {}).get("data")
        if data:
            try:
                lines += [""] + fn(data)
            except Exception as exc:  # noqa: BLE001 -- a partial record must still render
                lines += ["", f"## {name}: cannot render ({type(exc).__name__}: {exc})"]
    if rec.get("env"):
        lines += ["", "## Environment", "", "```", rec["env"].strip(), "```"]
    return "\n".join(lines) + "\n"


def md_models(d: dict) -> list:
    sh = d["shape"]
    sec = d["seconds"]
    return ["## Models", "",
            f"Large: random-weight qwen3, {sh['n_layer']} layers x {sh['n_embd']} (n_ff {sh['n_ff']}, heads "
            f"{sh['n_head']}/{sh['n_head_kv']} x {sh['head_dim']}), {d['block_params'] / 1e9:.2f} B block parameters, "
            f"Q4_K_M {d['target_bytes'] / 2**30:.2f} GiB (tensor types: {d['tensor_types']}), tiny 384-token "
            f"vocabulary; the draft is its first 2 blocks ({d['draft_bytes'] / 2**20:.0f} MiB). Written in "
            f"{d['total_seconds']:.1f} s "
            f"(2-layer F32 template {sec['template_f32_write']:.1f} s, quantize {sec['template_quantize']:.1f} s, "
            f"assemble {sec['assemble']:.1f} s; tiny models {d['tiny_seconds']:.1f} s)."]


def frac(pair) -> str:
    return f"{pair[0]}/{pair[1]}"


def md_lossless(d: dict) -> list:
    bs = d["batches"]
    lines = ["## 1. Lossless: greedy speculative == plain decoding, batched == solo (tiny models)", "",
             f"{d['prompts']} prompts, {d['tokens']} tokens each. Solo: `Generator` one prompt at a time vs plain "
             "decoding of the same prompt. Batch: `Batch` of B sequences vs plain (vs the solo speculative output "
             "in parentheses). n-gram: ngram-simple, key length 2 (1 at depth 1, where a 2-token key never drafts). "
             "Random heads: the rows show that drafts were verified (drafted), not that they pay."]
    if d.get("plain_batch"):
        lines += ["", "Plain `Batch` vs one sequence at a time: " +
                  ", ".join(f"B = {b}: {frac(v)}" for b, v in d["plain_batch"].items())]
    lines += ["", "| method | depth | solo == plain | " + " | ".join(f"B = {b}" for b in bs) +
              " | drafted (accepted) |",
              "| --- | ---: | ---: | " + " | ".join("---:" for _ in bs) + " | ---: |"]
    totals: dict = {}
    for r in sorted(d["rows"], key=lambda r: ([m[0] for m in gpu_parts.METHODS].index(r["method"]), r["depth"])):
        cells = [f"{frac(r['batch'][str(b)]['vs_plain'])} ({frac(r['batch'][str(b)]['vs_solo'])})" for b in bs]
        lines.append(f"| {r['method']} | {r['depth']} | {frac(r['solo_vs_plain'])} | " + " | ".join(cells) +
                     f" | {r['drafted']} ({r['accepted']}) |")
        t = totals.setdefault(r["method"], [0, 0, 0, 0])
        t[0] += r["solo_vs_plain"][0]
        t[1] += r["solo_vs_plain"][1]
        for b in bs:
            t[2] += r["batch"][str(b)]["vs_plain"][0]
            t[3] += r["batch"][str(b)]["vs_plain"][1]
    lines += ["", "Totals: " + "; ".join(f"{m}: solo {t[0]}/{t[1]}, batched {t[2]}/{t[3]} equal plain"
                                        for m, t in totals.items())]
    missing = sorted(set(d["depths_planned"]) - {r["depth"] for r in d["rows"]})
    if missing or d.get("units_skipped_for_time"):
        lines.append(f"Not reached within the budget: depths {missing} ({d.get('units_skipped_for_time', '?')} units).")
    return lines


def md_cost(d: dict) -> list:
    kern = d["kernels"]
    lines = [f"## 2. Verification cost curve ({d['model']} model)", "",
             f"cost(k): one `Context.decode` of k tokens (logits for each) after {d['context']} tokens, best of "
             f"{d['runs']} per repeat, median of {d['repeats']} repeats (bench/verify_cost.py's cost_curve); "
             f"{d.get('sides', '')}. Kernels: {kern['how']}, cc {kern['cc']} ({kern['cc_source']}), "
             f"{kern['n_kv']} KV cells."]
    if "curve" in d:
        weights = [row for row in kern["table"] if row["type"] not in ("F16", "F32")]
        attention = [row for row in kern["table"] if row["type"] in ("F16", "F32")]
        lines += ["", "| k | ms (on) | cost(k)/cost(1) on | off | per extra position (on) | weight matmuls | "
                  "attention |",
                  "| ---: | ---: | ---: | ---: | ---: | --- | --- |"]
        for e in d["curve"]:
            k = e["k"]
            w = "/".join(sorted({row["kernels"][k - 1] for row in weights}))
            a = "/".join(sorted({row["kernels"][k - 1] for row in attention}))
            pp = "" if e["on_per_position"] is None else f"{100 * e['on_per_position']:.1f}%"
            lines.append(f"| {k} | {e['on_ms']:.2f} | {e['on_ratio']:.2f} | {e['off_ratio']:.2f} | {pp} | {w} | {a} |")
    lines += ["", "Kernel per matmul and width k = 1..16: " + "; ".join(
        f"{row['matmul']}: " + compress(row["kernels"]) for row in kern["table"])]
    return lines


def compress(kernels: list) -> str:
    """['mmvq', 'mmvq', 'mmq'] -> 'k 1-2 mmvq, k 3 mmq'."""
    out, start = [], 0
    for i in range(1, len(kernels) + 1):
        if i == len(kernels) or kernels[i] != kernels[start]:
            span = f"{start + 1}" if i - 1 == start else f"{start + 1}-{i}"
            out.append(f"k {span} {kernels[start]}")
            start = i
    return ", ".join(out)


def md_cupy(d: dict) -> list:
    lines = ["## 3. cupy arrays from Context", "", f"Status: {d.get('status', '?')}" +
             (f" (cupy {d['cupy']})" if "cupy" in d else "")]
    checks = d.get("checks") or d.get("rehearsal", {}).get("checks")
    if checks:
        if "rehearsal" in d:
            lines.append(f"Rehearsed with {d['rehearsal']['with']}.")
        lines += ["", "| model | array | shape | cupy array | dtype | equal to numpy | max abs diff |",
                  "| --- | --- | --- | --- | --- | --- | ---: |"]
        lines += [f"| {c['model']} | {c['what']} | {c['shape']} | {c['is_cupy']} | {c['dtype']} | {c['equal']} | "
                  f"{c['max_abs_diff']:.3g} |" for c in checks]
    return lines


def md_speed(d: dict) -> list:
    lines = [f"## 4. Speed ({d['model']} model)", "",
             f"{d['tokens']} tokens per sequence, medians of {d['repeats']} repeats; devices: "
             f"{', '.join(d['devices']) or 'CPU'}.", "",
             "| run | aggregate tok/s | acceptance | greedy tokens equal plain |", "| --- | ---: | ---: | ---: |"]
    for key, r in d["runs"].items():
        acc = "" if r.get("acceptance") is None else f"{r['acceptance']:.2f}"
        lines.append(f"| {key} | {r.get('median_tok_s', float('nan')):.1f} | {acc} | {frac(r['equal_plain'])} |")
    if d.get("ratios"):
        lines += ["", "| ratio | value |", "| --- | ---: |"] + [f"| {k} | {v:.2f}x |" for k, v in d["ratios"].items()]
    return lines


# --------------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("parts", nargs="+", choices=PART_NAMES + ["report", "all"])
    ap.add_argument("--budget", type=float, default=None, help="seconds for the part (all: the total)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu_check"))
    ap.add_argument("--models", default="/tmp/gpu_check_models")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--quick", action="store_true", help="with --dry-run: the tests' short settings")
    ap.add_argument("--shape", default=None, choices=sorted(gpu_models.SHAPES),
                    help="large model shape (default: 8b, small with --dry-run)")
    args = ap.parse_args(argv)
    args.dry_run = args.dry_run or args.quick
    args.shape = args.shape or ("small" if args.dry_run else "8b")
    if llamaspec.supports_gpu_offload() and args.dry_run:
        print("note: --dry-run on a GPU build: the parts run on the GPU with the dry run's short settings")

    label = device_label(Path(args.models))
    record = Record(Path(args.out), slug(label, args.dry_run), Path(args.out) / "env.txt")
    if not record.json_path.exists() or "models" in args.parts or "all" in args.parts:
        record.write({"parts": {}})  # a new check starts a new record
    record.update(device=label, dry_run=args.dry_run,
                  shape=args.shape, llamaspec=llamaspec.__version__,
                  **({} if "started" in record.load() else {
                      "started": datetime.datetime.now().isoformat(" ", "seconds"),
                      "command": os.environ.get("GPU_CHECK_COMMAND") or
                      "python bench/gpu.py " + " ".join(sys.argv[1:] if argv is None else argv)}))

    names = PART_NAMES if "all" in args.parts else [p for p in PART_NAMES if p in args.parts]
    total = sum(PLAN[n] for n in names)
    ok = True
    for name in names:
        budget = PLAN[name] if args.budget is None else (args.budget * PLAN[name] / total if "all" in args.parts
                                                         else args.budget)
        ok &= run_part(record, name, budget, args)
    if "report" in args.parts or "all" in args.parts:
        finish(record)
        print(f"wrote {record.md_path} and {record.json_path}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
