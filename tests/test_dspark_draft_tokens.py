"""patches/0011: a DSpark head with a confidence head drafts its tokens in its own graph (the argmax of each
position's biased logits, taken in the draft vocabulary and mapped by d2t) and outputs no logits. The logits path
it replaces (``LLAMASPEC_DSPARK_DRAFT_TOKENS=0``, read whenever a drafter is made) took the same token from the
full-vocabulary logits, so both must draft the same tokens with the same confidences.

Drafts are compared directly: with accept-all (a test-only switch that takes every drafted token unverified) the
output is the drafted tokens themselves, round by round.
"""

from __future__ import annotations

import numpy as np
import pytest

import llamaspec
from llamaspec import testing as tiny_models
from conftest import PROMPTS

MAX_TOKENS = 40


@pytest.fixture(scope="module")
def heads(tmp_path_factory, models) -> dict:
    """Tiny DSpark heads on the tiny target: full and reduced (d2t) draft vocabulary, anchor-first and bonus-anchor."""
    out = tmp_path_factory.mktemp("dspark-heads")
    specs = {"full": {}, "d2t": {"draft_vocab_size": 300},
             "d2t-bonus-anchor": {"draft_vocab_size": 300, "sample_from_anchor": False}}
    paths = {}
    for name, kwargs in specs.items():
        paths[name] = str(out / f"{name}.gguf")
        tiny_models.write_dspark(paths[name], models["target"], block_size=8, seed=5, **kwargs)
    return paths


def run(target_model, head: str, logits_path: bool, monkeypatch, accept_all: bool, n_max: int = 6) -> list:
    if logits_path:
        monkeypatch.setenv("LLAMASPEC_DSPARK_DRAFT_TOKENS", "0")
    else:
        monkeypatch.delenv("LLAMASPEC_DSPARK_DRAFT_TOKENS", raising=False)
    out = []
    with llamaspec.Generator(target_model, head, spec_type="draft-dspark", n_max=n_max, n_ctx=512) as gen:
        gen._engine._set_debug_accept_all(accept_all)
        for prompt in PROMPTS[:3]:
            result = gen.generate(prompt, MAX_TOKENS, ignore_eos=True)
            out.append((result.tokens, result.stats.drafted.tolist(), result.stats.accepted.tolist(),
                        result.stats.confidence))
    return out


@pytest.mark.parametrize("head", ["full", "d2t", "d2t-bonus-anchor"])
def test_drafts_made_in_the_graph_equal_the_logits_path(heads, target_model, monkeypatch, head):
    drafted_by = {}
    for logits_path in (True, False):
        drafted_by[logits_path] = run(target_model, heads[head], logits_path, monkeypatch, accept_all=True)
    for (tokens_a, drafted_a, _, conf_a), (tokens_b, drafted_b, _, conf_b) in zip(drafted_by[True],
                                                                                   drafted_by[False]):
        assert tokens_a == tokens_b  # accept-all: these are the drafted tokens (and each round's bonus)
        assert drafted_a == drafted_b and sum(drafted_a) > 0
        np.testing.assert_array_equal(conf_a, conf_b)


@pytest.mark.parametrize("head", ["full", "d2t"])
def test_both_paths_are_lossless_with_the_same_rounds(heads, target_model, monkeypatch, head):
    with llamaspec.Generator(target_model, spec_type="none", n_ctx=512) as plain:
        reference = [plain.generate(p, MAX_TOKENS, ignore_eos=True).tokens for p in PROMPTS[:3]]
    results = {lp: run(target_model, heads[head], lp, monkeypatch, accept_all=False) for lp in (True, False)}
    for a, b, ref in zip(results[True], results[False], reference):
        assert a[0] == ref and b[0] == ref
        assert a[1:3] == b[1:3]  # drafted and accepted per round


def test_a_new_generation_keeps_the_schedulers(models, capfd):
    """patches/0015: every generation makes the drafter afresh, and a DSpark drafter sets the target's layer
    features and the head's draft-token output on; set to the value they already had, neither context rebuilds
    its scheduler (llama.cpp logs each rebuild: "sched_reserve: reserving"). The first generation does."""
    try:
        with llamaspec.Generator(models["target"], models["dspark"], spec_type="draft-dspark", n_max=2, n_ctx=512,
                                 verbose=True) as gen:
            gen.generate(PROMPTS[0], 3)
            first = capfd.readouterr().err
            again = [gen.generate(p, 3).tokens for p in PROMPTS[:2]]
            later = capfd.readouterr().err
            assert again[0] == gen.generate(PROMPTS[0], 3).tokens
    finally:
        llamaspec._core.set_verbose(False)
    assert "sched_reserve: reserving" in first
    assert "sched_reserve: reserving" not in later
