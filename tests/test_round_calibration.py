"""Calibration of a DSpark head on real rounds (llamaspec.train.round_calibration): the fit, the prompts,
and the fold into the GGUF, checked through the engine's own confidences."""

from __future__ import annotations

import numpy as np
import pytest

import llamaspec

pytest.importorskip("torch")  # the train extra: the Platt fit runs on torch

from llamaspec.train import round_calibration  # noqa: E402

PROMPT = "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"


def _rounds(target, head, max_tokens=48):
    with llamaspec.Generator(target, head, n_max=4, spec_type="draft-dspark", n_ctx=256) as gen:
        result = gen.generate(PROMPT, max_tokens, ignore_eos=True)
    return result.tokens, result.stats


def test_folded_calibration_maps_the_engines_confidences(models, target_model, tmp_path):
    a, c = 0.5, -0.7
    folded = tmp_path / "calibrated.gguf"
    round_calibration.fold_into_gguf(models["dspark"], str(folded), a, c)
    tokens, stats = _rounds(target_model, models["dspark"])
    tokens_folded, stats_folded = _rounds(target_model, str(folded))
    assert tokens_folded == tokens  # lossless either way
    compared = 0
    for before, after, n_before, n_after in zip(stats.round_confidence, stats_folded.round_confidence,
                                                stats.drafted, stats_folded.drafted):
        if n_before != n_after:
            break  # the drafts diverge from here on
        before = np.clip(np.asarray(before, dtype=np.float64), 1e-6, 1 - 1e-6)
        expected = 1.0 / (1.0 + np.exp(-(a * np.log(before / (1 - before)) + c)))
        np.testing.assert_allclose(np.asarray(after, dtype=np.float64), expected, atol=2e-4)
        compared += len(before)
    assert compared >= 4
    assert np.mean(np.concatenate([np.asarray(x) for x in stats_folded.round_confidence])) != pytest.approx(
        np.mean(np.concatenate([np.asarray(x) for x in stats.round_confidence])), abs=1e-3)


def test_fold_refuses_a_head_without_confidence(models, tmp_path):
    with pytest.raises(ValueError, match="conf_proj"):
        round_calibration.fold_into_gguf(models["dflash"], str(tmp_path / "x.gguf"), 1.0, 0.0)
    assert not (tmp_path / "x.gguf").exists()


def test_fit_on_rounds_recovers_a_known_miscalibration():
    """Confidences sigmoid(z) whose truth is sigmoid(2 z - 1): the fit finds (2, -1) and the held-out ECE drops."""
    rng = np.random.default_rng(0)
    per_prompt = []
    for _ in range(200):
        z = rng.normal(0.0, 1.0, 60)
        accepted = rng.random(60) < 1.0 / (1.0 + np.exp(-(2 * z - 1)))
        per_prompt.append((rng.integers(1, 9, 60), 1.0 / (1.0 + np.exp(-z)), accepted))
    record = round_calibration.fit_on_rounds(per_prompt)
    assert record["a"] == pytest.approx(2.0, abs=0.15)
    assert record["c"] == pytest.approx(-1.0, abs=0.1)
    assert record["after"]["pooled"]["ece"] < 0.03 < record["before"]["pooled"]["ece"]
    assert record["log_loss_after"] < record["log_loss_before"]
    assert record["fit_tokens"] == record["test_tokens"] == 100 * 60


def test_calibration_prompts_are_new_to_training_and_the_suite():
    from llamaspec.evaluate import builtin_prompts
    from llamaspec.train.prompts import build_continuation_prompts, build_general_prompts, build_prompts

    prompts = [item["prompt"] for item in round_calibration.calibration_prompts(64)]
    assert len(prompts) == len(set(prompts)) == 64
    used = {item["prompt"] for builder in (build_prompts, build_general_prompts) for seed in (0, 1)
            for item in builder(2000, seed)}
    used |= {item["prompt"] for item in build_continuation_prompts(2000, 0)}
    used |= {task["prompt"] for task in builtin_prompts()}
    assert not used & set(prompts)


def test_prompts_file_forms_and_bad_input(tmp_path):
    lines = tmp_path / "prompts.txt"
    lines.write_text("first prompt\n\nsecond prompt\n")
    assert [p["prompt"] for p in round_calibration.load_prompts(str(lines))] == ["first prompt", "second prompt"]
    listed = tmp_path / "prompts.json"
    listed.write_text('["a", {"prompt": "b", "category": "mine"}]')
    assert round_calibration.load_prompts(str(listed))[1] == {"prompt": "b", "category": "mine"}
    for bad in ("[]", '[{"text": "no prompt key"}]', '{"prompt": "not a list"}'):
        listed.write_text(bad)
        with pytest.raises(ValueError):
            round_calibration.load_prompts(str(listed))
    with pytest.raises(ValueError, match="at least two prompts"):
        round_calibration.run("unused.gguf", "unused.gguf", target="unused", prompts=[{"prompt": "one"}])
    with pytest.raises(ValueError, match="a > 0"):
        round_calibration.fold_into_gguf("unused.gguf", str(tmp_path / "x.gguf"), -1.0, 0.0)


def test_fold_in_place_changes_only_the_confidence_head(models, tmp_path):
    from llamaspec._gguf import import_gguf as _import_gguf

    gguf = _import_gguf()
    head = tmp_path / "head.gguf"
    head.write_bytes(open(models["dspark"], "rb").read())
    before = {t.name: np.array(t.data) for t in gguf.GGUFReader(str(head)).tensors}
    round_calibration.fold_into_gguf(str(head), str(head), 2.0, 0.5)
    after = {t.name: np.array(t.data) for t in gguf.GGUFReader(str(head)).tensors}
    assert before.keys() == after.keys()
    for name in before:
        if name == "conf_proj.weight":
            np.testing.assert_allclose(after[name], 2.0 * before[name], rtol=1e-6)
        elif name == "conf_proj.bias":
            np.testing.assert_allclose(after[name], 2.0 * before[name] + 0.5, rtol=1e-6)
        else:
            np.testing.assert_array_equal(after[name], before[name])


def test_calibration_prompts_stay_out_of_the_named_sets():
    from llamaspec.train.prompts import build_general_prompts, build_prompts

    wide = [(0, 2000), (1, 2000), (round_calibration.CALIBRATION_SEED, 40)]
    prompts = {item["prompt"] for item in round_calibration.calibration_prompts(32, exclude=wide)}
    named = {item["prompt"] for builder in (build_prompts, build_general_prompts) for seed, count in wide
             for item in builder(count, seed)}
    assert prompts and not prompts & named
