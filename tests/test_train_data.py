"""Self-distillation data (llamaspec.train.data): the target's own answers and its features at the
head's layers, from prompts derived from Python's standard library (never the benchmark suite)."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np

import llamaspec
from llamaspec.train.data import distill
from llamaspec.train.prompts import build_prompts


def test_prompts_cover_the_categories_and_avoid_the_suite():
    prompts = build_prompts(120, seed=1)
    assert len(prompts) == 120 and len({p["category"] for p in prompts}) == 12
    assert build_prompts(120, seed=1) == prompts  # reproducible
    suite = json.loads((resources.files("llamaspec") / "prompts.json").read_text())["tasks"]
    texts = {p["prompt"] for p in prompts}
    assert not any(t["prompt"] in texts or t["prompt"][:40] in " ".join(texts) for t in suite)


def test_distill_writes_answers_and_features(models, target_model, tmp_path):
    prompts = build_prompts(10, seed=2)
    index = distill(target_model, tmp_path, layers=[1, 3], prompts=prompts, max_tokens=12, n_seq=4, n_ctx=256,
                    progress=False)
    tokens = np.load(tmp_path / "tokens.npy")
    features = np.load(tmp_path / "features.npy")
    assert tokens.shape[0] == features.shape[0] == index["n_tokens"]
    assert features.shape[1] == 2 * target_model.n_embd and features.dtype == np.float32
    assert json.loads((tmp_path / "index.json").read_text())["n_samples"] == 10
    gen = llamaspec.Generator(target_model, spec_type="none", n_ctx=256)
    ctx = llamaspec.Context(target_model, n_ctx=256, capture_layers=[1, 3])
    for sample, item in zip(index["samples"], prompts):
        ids = tokens[sample["offset"]:sample["offset"] + sample["n_total"]].tolist()
        prompt_ids = ids[:sample["n_prompt"]]
        assert prompt_ids == target_model.tokenize(item["prompt"].encode(), True)[:len(prompt_ids)]
        if sample["temperature"] == 0:  # greedy answers are the target's own greedy output
            assert ids[sample["n_prompt"]:] == gen.generate(prompt_ids, 12).tokens[:sample["n_total"] - sample["n_prompt"]]
        ctx.clear()
        ctx.decode(ids, logits=False)
        expected = np.concatenate([ctx.features(1), ctx.features(3)], axis=1)
        np.testing.assert_array_equal(features[sample["offset"]:sample["offset"] + len(ids)], expected)
    assert {s["temperature"] for s in index["samples"]} == {0.0, 0.8}
