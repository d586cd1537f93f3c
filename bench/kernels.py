"""Micro-benchmark of one MUL_MAT per weight type and number of columns: llama.cpp's CPU kernels against the
few-column kernels of patches/0008 (``llamaspec.set_multidot``), side by side in one process.

For every type and n = 1..16: one random weight matrix (default 16384 x 4096: larger than the L3 cache of the
AMD machines measured, so the weights stream from memory as a model's do; not on the Intel Xeon, whose L3 holds
it: there bench/wide_min.py measures on whole models), n random columns, each mode timed in
turn (off, on / on, off alternating per repeat), medians of the per-repeat best of a few runs.
Reported per type: milliseconds, cost(n) / cost(1) of each mode (cost(1) of the same mode), and off / on.

    python bench/kernels.py [--types q8_0,q5_0,q4_0,q6_K] [--rows 16384] [--k 4096] [--threads 2]
    python bench/kernels.py --switch wide --types q8_0@CPU_ROWS8,q4_K@CPU_ROWS8,...   # CPU_ROWS8: 8-row passes
                                                      # (off) against 16-row AVX-512 passes (on); the same bits
    python bench/kernels.py --switch long --types q8_0@CPU_ROWS8,...   # CPU_ROWS8: passes of up to 8 columns (off)
                                                      # against up to 16 (on, AVX-512); the same bits

Writes bench/results/kernels/kernels.json and kernels.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import llamaspec
from llamaspec import _core

RESULTS = Path(__file__).resolve().parent / "results" / "kernels"
# type[@layout]: q4_K@CPU_REPACK / q8_0@CPU_ROWS8 are Q4_K / Q8_0 as a model loads them (8 rows interleaved)
TYPES = ["q8_0", "q8_0@CPU_ROWS8", "q5_0", "q5_0@CPU_ROWS8", "q4_0@CPU_REPACK", "q4_0", "q4_0@CPU_ROWS8", "q6_K",
         "q6_K@CPU_ROWS8", "q4_K@CPU_REPACK",
         "q4_K@CPU_ROWS8", "q4_K", "q5_K", "q5_K@CPU_ROWS8"]


SWITCHES = {"multidot": llamaspec.set_multidot, "wide": _core.set_rows8_wide, "long": _core.set_rows8_long_passes}


def measure_type(spec: str, rows: int, k: int, threads: int, ns: list, repeats: int, runs: int,
                 switch: str = "multidot") -> dict:
    weight_type, _, layout = spec.partition("@")
    timer = _core.MatMulTimer(weight_type, rows, k, threads, 0, layout or "standard")
    seconds = {(n, on): [] for n in ns for on in (False, True)}
    for rep in range(repeats):
        for n in ns:
            for on in ((False, True) if rep % 2 == 0 else (True, False)):
                SWITCHES[switch](on)
                seconds[(n, on)].append(min(timer.time(n, runs)))
    SWITCHES[switch](True)
    ms = {key: 1e3 * statistics.median(v) for key, v in seconds.items()}
    rows_out = []
    for n in ns:
        rows_out.append({
            "n": n,
            "off_ms": ms[(n, False)], "on_ms": ms[(n, True)],
            "off_cost_ratio": ms[(n, False)] / ms[(1, False)], "on_cost_ratio": ms[(n, True)] / ms[(1, True)],
            "on_cost_over_off_cost1": ms[(n, True)] / ms[(1, False)],
            "speedup": ms[(n, False)] / ms[(n, True)],
        })
    return {"type": spec, "rows": rows, "k": k, "weight_mb": timer.nbytes / 1e6, "by_n": rows_out}


def summary(report: dict) -> list:
    """Per weight type, as a model loads it: llama.cpp's kernels (the switch off at load) against ours (on:
    CPU_ROWS8 where the type has it), at a few widths."""
    by_spec = {t["type"]: {r["n"]: r for r in t["by_n"]} for t in report["types"]}
    ns = [n for n in (1, 2, 4, 9, 16) if all(n in rows for rows in by_spec.values())]
    lines = ["## Summary: llama.cpp's kernels -> ours, as a model loads the type", "",
             "| type | " + " | ".join(f"n = {n}, ms" for n in ns) + " | cost(9)/cost(1) |",
             "|---|" + "---|" * (len(ns) + 1)]
    weight_types = dict.fromkeys(spec.partition("@")[0] for spec in by_spec)
    for weight_type in weight_types:
        # llama.cpp's side as a model loads it: Q4_K repacked (CPU_REPACK) when measured so
        base_spec = next((s for s in (f"{weight_type}@CPU_REPACK", weight_type) if s in by_spec), None)
        if base_spec is None:
            continue
        base = by_spec[base_spec]
        ours = by_spec.get(f"{weight_type}@CPU_ROWS8", base)
        cells = [f"{base[n]['off_ms']:.2f} -> {ours[n]['on_ms']:.2f}" for n in ns]
        ratio = (f"{base[9]['off_ms'] / base[1]['off_ms']:.2f} -> {ours[9]['on_ms'] / ours[1]['on_ms']:.2f}"
                 if 9 in ns and 1 in ns else "")
        lines.append(f"| {weight_type} | " + " | ".join(cells) + f" | {ratio} |")
    return lines + [""]


# CPU_ROWS8's A/B switches: (title, summary heading, what off and on are)
ROWS8_SWITCHES = {
    "wide": ("8-row (256-bit) against 16-row (512-bit) passes", "8-row passes -> 16-row passes",
             "Off = 8 rows per 256-bit vector, on = 16 rows per 512-bit vector (`_core.set_rows8_wide`)"),
    "long": ("passes of up to 8 columns against up to 16", "passes of up to 8 columns -> up to 16",
             "Off = at most 8 columns per pass over the weights (9-16 columns: two passes), on = up to 16 in one "
             "pass (`_core.set_rows8_long_passes`, AVX-512 builds)"),
}


def switch_summary(report: dict) -> list:
    """CPU_ROWS8 per type, off -> on, for one of ROWS8_SWITCHES."""
    ns = [n for n in (1, 2, 4, 8, 9, 12, 16) if all(n in {r["n"] for r in t["by_n"]} for t in report["types"])]
    lines = [f"## Summary: CPU_ROWS8, {ROWS8_SWITCHES[report['switch']][1]} (ms, and off/on)", "",
             "| type | " + " | ".join(f"n = {n}" for n in ns) + " |", "|---|" + "---|" * len(ns)]
    for t in report["types"]:
        by_n = {r["n"]: r for r in t["by_n"]}
        lines.append(f"| {t['type']} | " + " | ".join(
            f"{by_n[n]['off_ms']:.2f} -> {by_n[n]['on_ms']:.2f} ({by_n[n]['speedup']:.2f}x)" for n in ns) + " |")
    return lines + [""]


def markdown(report: dict) -> str:
    if report.get("switch") in ROWS8_SWITCHES:
        title, _, off_on = ROWS8_SWITCHES[report["switch"]]
        lines = [
            f"# CPU_ROWS8: {title}",
            "",
            f"`python bench/kernels.py {report['args']}` on {report['cpu']}, {report['threads']} threads, "
            f"{report['repeats']} interleaved repeats (off/on order alternating), median of per-repeat best of "
            f"{report['runs']} runs. {off_on}; both give the same bits (tests/test_kernels.py).",
            "",
        ]
        lines += switch_summary(report)
        return "\n".join(lines + table_lines(report))
    lines = [
        "# Few-column matmul kernels: one MUL_MAT per type and number of columns",
        "",
        f"`python bench/kernels.py {report['args']}` on {report['cpu']}, {report['threads']} threads, "
        f"{report['repeats']} interleaved repeats (off/on order alternating), median of per-repeat best of "
        f"{report['runs']} runs. Off = llama.cpp's kernels (vec_dot, llamafile tinyBLAS, tiled off: the "
        "batch-invariant mode is on, as llamaspec runs); on = patches/0008. Both give the same bits "
        "(tests/test_kernels.py). q4_K@CPU_REPACK: Q4_K as a model loads it with repacking on; plain q4_K and q5_K "
        "(not repacked) are not taken by the kernels (equal times expected). q8_0@CPU_ROWS8 and q4_K@CPU_ROWS8: "
        "Q8_0 and Q4_K as a model loads them with the kernels on (8 rows interleaved, one output row per vector "
        "lane, its own arithmetic for every n); the layout is chosen at load time, so their off and on columns "
        "both run the interleaved kernel: compare their on column with the off column of q8_0 and "
        "q4_K@CPU_REPACK (llama.cpp's kernels for a model loaded with the switch off).",
        "",
    ]
    lines += summary(report)
    return "\n".join(lines + table_lines(report))


def table_lines(report: dict) -> list:
    lines = []
    for t in report["types"]:
        lines += [f"## {t['type']}: {t['rows']} x {t['k']} ({t['weight_mb']:.1f} MB)", "",
                  "| n | off ms | on ms | off cost(n)/cost(1) | on cost(n)/cost(1) | off/on |",
                  "|---|---|---|---|---|---|"]
        for r in t["by_n"]:
            lines.append(f"| {r['n']} | {r['off_ms']:.3f} | {r['on_ms']:.3f} | {r['off_cost_ratio']:.2f} | "
                         f"{r['on_cost_ratio']:.2f} | {r['speedup']:.2f}x |")
        lines.append("")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", default=",".join(TYPES), help="type[@layout], e.g. q4_K@CPU_REPACK")
    parser.add_argument("--rows", type=int, default=16384)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5, help="runs per repeat (the best is kept)")
    parser.add_argument("--ns", default=",".join(str(n) for n in range(1, 17)))
    parser.add_argument("--out", default="kernels", help="result file stem in bench/results/kernels/")
    parser.add_argument("--switch", default="multidot", choices=sorted(SWITCHES),
                        help="what off/on toggles: llama.cpp's kernels vs ours, CPU_ROWS8's 8 vs 16-row passes (wide), "
                             "or its passes of up to 8 vs 16 columns (long)")
    args = parser.parse_args(argv)
    ns = [int(n) for n in args.ns.split(",")]
    if ns[0] != 1:
        ns = [1] + ns
    report = {"args": " ".join(sys.argv[1:] if argv is None else argv), "cpu": cpu_name(), "threads": args.threads,
              "repeats": args.repeats, "runs": args.runs, "switch": args.switch, "types": []}
    t0 = time.time()
    for weight_type in args.types.split(","):
        entry = measure_type(weight_type, args.rows, args.k, args.threads, ns, args.repeats, args.runs, args.switch)
        report["types"].append(entry)
        print(markdown({**report, "types": [entry]}).split("\n", 6)[-1], flush=True)
    report["seconds"] = time.time() - t0
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(report, indent=1))
    (RESULTS / f"{args.out}.md").write_text(markdown(report))
    print(f"wrote {RESULTS / args.out}.md ({report['seconds']:.0f} s)")
    return 0


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def write_report(folder: Path, stem: str, result: dict, text: str) -> None:
    """A benchmark's result as <folder>/<stem>.json and its table as .md, printed too."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.json").write_text(json.dumps(result, indent=1))
    (folder / f"{stem}.md").write_text(text)
    print(text)
    print(f"wrote {folder / stem}.md ({result['seconds']:.0f} s)")


if __name__ == "__main__":
    raise SystemExit(main())
