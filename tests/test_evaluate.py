"""llamaspec.evaluate(): the notebook user's comparison of drafters, on the tiny models."""

from __future__ import annotations

import json

import numpy as np
import pytest

import llamaspec
from llamaspec import SpecStats
from llamaspec.evaluate import auc, builtin_prompts, calibration, load_prompts, loop_length, repeats_needed

PROMPTS = [{"name": "story", "prompt": "Once upon a time"},
           {"name": "repeat", "prompt": "the cat the cat the cat the cat"},
           "def fib(n):\n"]


@pytest.fixture(scope="module")
def report(models, target_model):
    return llamaspec.evaluate(target_model, {
        "draft-simple": {"draft": models["draft_simple"], "spec_type": "draft-simple", "n_max": 4},
        "dspark": {"draft": models["dspark"], "n_max": 4},
        "ngram": "ngram-mod",
    }, prompts=PROMPTS, n_max=4, max_tokens=32, repeats=2, progress=False)


def test_positions_are_the_union_of_the_runs(report):
    positions = report.positions
    assert set(positions.columns) >= {"task", "drafter", "position", "drafted", "accepted", "P", "a", "per_step"}
    assert set(positions["task"]) == {"story", "repeat", "prompt_2"}
    for (task, drafter), group in positions.groupby(["task", "drafter"]):
        runs = [r.stats for r in report.runs if r.task == task and r.drafter == drafter]
        assert len(runs) == 2
        total = SpecStats.combine(runs)
        assert group["accepted"].tolist() == total.accepted_at.tolist()
        assert group["drafted"].tolist() == total.drafted_at.tolist()


def test_tasks_have_interleaved_speedups(report):
    tasks = report.tasks
    rows = tasks[tasks.drafter != "none"]
    assert len(rows) == 9
    assert (rows["speedup_min"] <= rows["speedup"]).all() and (rows["speedup"] <= rows["speedup_max"]).all()
    assert rows["tau"].between(1, 5).all()
    assert tasks[tasks.drafter == "none"]["drafted"].sum() == 0


def test_runs_alternate_their_order_and_ratios_pair_repeats(report):
    """A B C D on even repeats, D C B A on odd ones; speed_ratios pairs runs of the same repeat."""
    order = [[r.drafter for r in report.runs if r.task == "story" and r.repeat == rep] for rep in (0, 1)]
    assert order[0] == ["none", "draft-simple", "dspark", "ngram"] and order[1] == order[0][::-1]
    tok_s = {(r.drafter, r.task, r.repeat): r.stats.tokens_per_second for r in report.runs}
    ratios = report.speed_ratios("dspark", "ngram")
    assert set(ratios) == {"story", "repeat", "prompt_2"}
    assert ratios["story"] == pytest.approx([tok_s[("dspark", "story", k)] / tok_s[("ngram", "story", k)]
                                             for k in (0, 1)])
    medians = {t["task"]: t["speedup"] for t in report.task_records() if t["drafter"] == "dspark"}
    assert medians["repeat"] == pytest.approx(np.median(report.speed_ratios("dspark")["repeat"]))


def test_confidence_calibration_for_the_dspark_head(report):
    cal = report.calibration("dspark")
    assert cal and all(0 <= c["ece"] <= 1 for c in cal.values())
    # scored: the draft tokens the target judged, up to and including each round's first rejection
    judged = sum(int(np.minimum(r.stats.drafted, r.stats.accepted + 1).sum())
                 for r in report.runs if r.drafter == "dspark")
    assert sum(c["n"] for c in cal.values()) == judged
    assert judged < sum(r.stats.n_drafted for r in report.runs if r.drafter == "dspark")
    assert report.calibration("ngram") == {}  # n-gram drafts carry no confidence


def test_json_round_trip_and_markdown(report):
    again = llamaspec.Report.from_json(report.to_json())
    assert again.position_records() == report.position_records()
    assert json.loads(report.to_json())["config"]["repeats"] == 2
    text = report.to_markdown()
    assert "| repeat | ngram |" in text and "P4" in text
    assert "<table>" in report._repr_html_()


def test_metric_helpers():
    assert loop_length([1, 2, 3, 4, 5]) == 0
    assert loop_length([9, 1, 2, 1, 2, 1, 2, 1, 2]) == 8
    assert auc(np.array([0.9, 0.8, 0.2, 0.1]), np.array([True, True, False, False])) == 1.0
    assert auc(np.array([0.5, 0.5]), np.array([True, False])) == 0.5
    perfect = calibration(np.array([0.05, 0.95]), np.array([False, True]))
    assert perfect["ece"] == pytest.approx(0.05) and perfect["auc"] == 1.0
    assert repeats_needed([1.0, 1.0], 0.05) == 1 and repeats_needed([1.0], 0.05) is None
    assert len(builtin_prompts()) == 13
    with pytest.raises(TypeError):
        load_prompts([3])
