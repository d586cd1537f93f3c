"""The GPU check's Python driver (bench/gpu.py, run by tools/gpu_check.sh on a lent GPU) rehearsed on this build:
every part with the tiny models and short settings, so that a GPU run never meets a Python error first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import llamaspec

ROOT = Path(__file__).resolve().parents[1]
PARTS = ["models", "lossless", "cost", "cupy", "speed"]


def test_gpu_check_dry_run(tmp_path):
    out, models = tmp_path / "out", tmp_path / "models"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu.py"), "all", "--quick", "--shape", "tiny",
                           "--budget", "40", "--out", str(out), "--models", str(models)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (record_path,) = out.glob("gpu_*.json")
    assert record_path.with_suffix(".md").read_text().startswith("# GPU check")
    record = json.loads(record_path.read_text())
    parts = record["parts"]
    assert {name: parts[name]["status"] for name in PARTS} == dict.fromkeys(PARTS, "ok"), parts
    assert not any(f.stat().st_size > 10**6 for f in out.iterdir())  # the models stay out of OUT

    large = parts["models"]["data"]
    assert large["shape"]["n_layer"] == 3 and large["tensor_types"]["Q4_K"] > 0

    lossless = parts["lossless"]["data"]
    assert {(r["method"], r["depth"]) for r in lossless["rows"]} == {
        (m, d) for m in ("draft-simple", "n-gram", "DSpark") for d in (1, 8)}
    assert all(r["drafted"] > 0 for r in lossless["rows"] if r["method"] != "n-gram")

    cost = parts["cost"]["data"]
    assert [e["k"] for e in cost["curve"]] == list(range(1, 17))
    weights = [row for row in cost["kernels"]["table"] if row["type"] in ("Q4_K", "Q6_K")]
    assert weights
    if cost["kernels"]["cc"] == 900:  # sm_90 (also what a machine without nvidia-smi assumes)
        assert all(row["kernels"] == ["mmvq"] * 8 + ["mmq"] * 8 for row in weights)

    speed = parts["speed"]["data"]
    assert speed["repeats"] == 1 and len(speed["ratios"]) == 5

    cupy = parts["cupy"]["data"]
    if not llamaspec.supports_gpu_offload():
        # the CPU build's guarantee: speculative and batched greedy output equal plain decoding, every row
        for r in lossless["rows"]:
            assert r["solo_vs_plain"][0] == r["solo_vs_plain"][1], r
            assert all(v["vs_plain"][0] == v["vs_plain"][1] for v in r["batch"].values()), r
        assert cupy["status"] == "skipped: no CUDA"
        assert all(c["is_cupy"] and c["equal"] for c in cupy["rehearsal"]["checks"])


def test_gpu_check_script_parses():
    assert subprocess.run(["bash", "-n", str(ROOT / "tools" / "gpu_check.sh")]).returncode == 0


def test_a_part_out_of_time_keeps_what_it_measured(tmp_path):
    """A part whose budget is spent stops before the next unit of work and says what it left out; the report
    still renders."""
    out, models = tmp_path / "out", tmp_path / "models"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu.py"), "models", "lossless", "report", "--quick",
                           "--shape", "tiny", "--budget", "0.001", "--out", str(out), "--models", str(models)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (record_path,) = out.glob("gpu_*.json")
    parts = json.loads(record_path.read_text())["parts"]
    assert parts["lossless"]["status"] == "ok" and parts["cost"]["status"] == "not run"
    data = parts["lossless"]["data"]
    assert len(data["plain_batch"]) == 1 and data["rows"] == [] and data["units_skipped_for_time"] == 7
    assert "Not reached within the budget" in record_path.with_suffix(".md").read_text()
