"""Self-distillation data (llamaspec.train.data): the target's own answers and its features at the
head's layers, from prompts derived from Python's standard library (never the benchmark suite)."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np

import llamaspec
from llamaspec.train.data import distill
from llamaspec.train.prompts import (build_continuation_prompts, build_copy_prompts, build_general_prompts,
                                     build_prompts, fresh_prompts)


def test_prompts_cover_the_categories_and_avoid_the_suite():
    prompts = build_prompts(120, seed=1)
    assert len(prompts) == 120 and len({p["category"] for p in prompts}) == 12
    assert build_prompts(120, seed=1) == prompts  # reproducible
    suite = json.loads((resources.files("llamaspec") / "prompts.json").read_text())["tasks"]
    texts = {p["prompt"] for p in prompts}
    assert not any(t["prompt"] in texts or t["prompt"][:40] in " ".join(texts) for t in suite)


def test_other_prompt_sets_are_distinct_reproducible_and_avoid_the_suite():
    """The general, continuation and copy sets: every category, no duplicate, the same list for the same seed, and
    no prompt close to a suite prompt (difflib ratio, the bound the sets were written to)."""
    import difflib

    suite = [t["prompt"] for t in json.loads((resources.files("llamaspec") / "prompts.json").read_text())["tasks"]]
    for builder, n_categories in ((build_general_prompts, 11), (build_continuation_prompts, 5), (build_copy_prompts, 5)):
        prompts = builder(110, seed=4)
        assert len(prompts) == 110 and len({p["prompt"] for p in prompts}) == 110
        assert len({p["category"] for p in prompts}) == n_categories
        assert builder(110, seed=4) == prompts and builder(110, seed=5) != prompts
        for p in prompts:
            for t in suite:
                match = difflib.SequenceMatcher(None, p["prompt"], t, autojunk=False)
                assert match.quick_ratio() < 0.6 or match.ratio() < 0.6, (p, t)  # quick_ratio bounds ratio


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


def test_kept_answers_give_the_same_data(target_model, tmp_path):
    """Answers kept in a file (llamaspec.train.answers) make the same data as answering afresh; a file made
    from other prompts or settings is not used; the spot check re-answers greedy samples."""
    from llamaspec.train.answers import answers_key, load_answers, save_answers, spot_check
    from llamaspec.train.data import answer

    prompts = build_prompts(12, seed=3)
    settings = dict(max_tokens=12, n_ctx=256, sampled_share=0.5, seed=0)
    samples = answer(target_model, prompts, n_seq=4, progress=False, **settings)
    key = answers_key("sha-of-the-target", prompts, 12, 256, 0.5, 0)
    save_answers(tmp_path / "set.npz", samples, key)
    prompt_ids = [s["prompt_ids"] for s in samples]
    kept = load_answers(tmp_path / "set.npz", key, prompt_ids)
    assert kept == samples
    assert any(s["temperature"] > 0 for s in kept) and any(s["temperature"] == 0 for s in kept)
    assert load_answers(tmp_path / "set.npz", answers_key("sha-of-the-target", prompts[1:], 12, 256, 0.5, 0),
                        prompt_ids) is None
    assert load_answers(tmp_path / "set.npz", answers_key("another-target", prompts, 12, 256, 0.5, 0),
                        prompt_ids) is None
    assert load_answers(tmp_path / "missing.npz", key, prompt_ids) is None
    check = spot_check(target_model, kept, 12, n_ctx=256)
    assert check["checked"] > 0 and check["equal"] == check["checked"]
    assert check["first_difference"] == [None] * check["checked"]
    # one token changed in every greedy answer: found where it was changed
    at = {i: min(5, len(s["answer"]) - 1) for i, s in enumerate(kept) if s["temperature"] == 0}
    altered = [dict(s, answer=s["answer"][:at[i]] + [(s["answer"][at[i]] + 1) % 100] + s["answer"][at[i] + 1:])
               if i in at else s for i, s in enumerate(kept)]
    check = spot_check(target_model, altered, 12, n_ctx=256)
    assert check["equal"] == 0 and check["first_difference"] == list(at.values())[:check["checked"]]

    fresh = distill(target_model, tmp_path / "fresh", layers=[1, 3], prompts=prompts, n_seq=4, progress=False,
                    **settings)
    reused = distill(target_model, tmp_path / "reused", layers=[1, 3], prompts=prompts, answers=kept,
                     progress=False, **settings)
    assert not fresh["answers_kept"] and reused["answers_kept"]
    assert fresh["samples"] == reused["samples"]
    for name in ("tokens.npy", "features.npy"):
        np.testing.assert_array_equal(np.load(tmp_path / "fresh" / name), np.load(tmp_path / "reused" / name))


def test_more_prompt_sets_add_only_new_prompts():
    """The recipe's --more-seeds sets: drawn with another seed, less every prompt of the first set (whose
    held-out prompts must not reappear in training), reproducible."""
    first = {p["prompt"] for p in build_general_prompts(300, seed=0)}
    more = fresh_prompts(build_general_prompts, 1, 0, 300)
    drawn = more(300, 0)
    assert drawn == more(300, 0)
    assert 0 < len(drawn) < 300  # the two seeds overlap, so some were dropped (else this checks nothing)
    assert not first & {p["prompt"] for p in drawn}
    assert "seed=1" in more.__name__
