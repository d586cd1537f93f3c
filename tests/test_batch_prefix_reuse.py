"""Prefix reuse per sequence in llamaspec.Batch: a finished request's sequence keeps its cache, and the next
request that starts the same way (a chat's next turn) goes to it and decodes only what is new.

Each check compares against a Generator that starts every generation cold (reuse_prefix=False): the output
is the same token for token, and the prefill decodes exactly the tokens the cache did not hold.
"""

from __future__ import annotations

import pytest

import llamaspec
from llamaspec.model import tokenize

# (spec_type, draft name, the set it comes from, target name); for a DSpark head only what the head has
# read can be reused, for EAGLE3 nothing (they start cold: the output must still be the same)
CASES = {
    "none": ("none", None, "target"),
    "draft-simple": ("draft-simple", "draft_simple", "target"),
    "ngram-mod": ("ngram-mod", None, "target"),
    "draft-dspark": ("draft-dspark", "dspark", "target"),
    "draft-dflash": ("draft-dflash", "dflash", "target"),
    "qwen35-draft": ("draft-simple", "qwen35_draft", "qwen35_target"),
    "qwen3-eagle3": ("draft-eagle3", "eagle3_qwen3", "target"),
}
FULL_REUSE = {"none", "draft-simple", "ngram-mod", "qwen35-draft"}

TURN1 = ["You are a helpful assistant. Tell me about the cat the cat the cat.",
         "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"]
TURN2 = [" And the dog? the dog the dog", "\nprint(fib(10))\n"]


def paths(case, models, hybrid_models):
    spec_type, draft, target = CASES[case]
    pool = {**models, **hybrid_models}
    return pool[target], (pool[draft] if draft else None), spec_type


@pytest.mark.parametrize("case", list(CASES))
def test_next_turn_decodes_only_the_new_tokens_and_equals_a_cold_start(models, hybrid_models, case):
    target, draft, spec_type = paths(case, models, hybrid_models)
    cold = llamaspec.Generator(target, draft, n_max=4, spec_type=spec_type, n_ctx=256, reuse_prefix=False)
    batch = llamaspec.Batch(target, draft, n_seq=2, n_max=4, spec_type=spec_type, n_ctx=256)
    turn1 = [cold.tokenize(p) for p in TURN1]
    first = [batch.submit(t, 20, ignore_eos=True) for t in turn1]
    batch.run()
    for request, tokens in zip(first, turn1):
        assert request.tokens == cold.generate(tokens, 20, ignore_eos=True).tokens
    # the next turns, submitted in the other order: each must find the sequence holding its conversation
    extra = [cold.tokenize(t, add_special=False) for t in TURN2]
    turn2 = [t + r.tokens + e for t, r, e in zip(turn1, first, extra)]
    second = [batch.submit(turn2[i], 20, ignore_eos=True) for i in (1, 0)]
    batch.run()
    for request, i in zip(second, (1, 0)):
        assert request.tokens == cold.generate(turn2[i], 20, ignore_eos=True).tokens, i
        # the cache held the prompt, every generated token but the last, which is decoded now with the new turn
        cached = len(turn1[i]) + len(first[i].tokens) - 1
        if case in FULL_REUSE:
            assert request.stats.prefill_tokens == len(turn2[i]) - cached == len(extra[i]) + 1
        else:
            assert len(extra[i]) + 1 <= request.stats.prefill_tokens <= len(turn2[i])
    # a prompt that leaves the conversation part-way: what is shared is reused, the rest decoded again
    branch = turn1[0][:-3] + extra[1]
    held = turn2[0] + second[1].tokens[:-1]  # what conversation 0's sequence holds now
    shared = next(n for n in range(len(branch)) if n == len(held) or branch[n] != held[n] or n == len(branch) - 1)
    request = batch.submit(branch, 12, ignore_eos=True)
    batch.run()
    assert request.tokens == cold.generate(branch, 12, ignore_eos=True).tokens
    if case in ("none", "draft-simple", "ngram-mod"):  # a recurrent target cannot step back without checkpoints
        assert request.stats.prefill_tokens == len(branch) - shared
    batch.close()
    cold.close()


def test_without_reuse_every_prompt_is_decoded_in_full_and_caches_are_freed(models, target_model):
    batch = llamaspec.Batch(target_model, models["draft_simple"], n_seq=2, n_max=4, n_ctx=256, reuse_prefix=False)
    tokens = tokenize(batch.target, TURN1[0])
    first = batch.submit(tokens, 10)
    batch.run()
    assert batch._engine.cache_positions() == [0, 0]
    again = batch.submit(tokens + first.tokens, 10)
    batch.run()
    assert again.stats.prefill_tokens == len(tokens) + len(first.tokens)
    batch.close()


def test_a_cancelled_request_frees_its_cache_and_others_keep_theirs(models, target_model):
    batch = llamaspec.Batch(target_model, models["draft_simple"], n_seq=2, n_max=4, n_ctx=256)
    kept = batch.submit(TURN1[0], 8)
    doomed = batch.submit(TURN1[1], 40)
    while not kept.done:
        batch.step()
    doomed.cancel()
    positions = batch._engine.cache_positions()
    assert sorted(positions)[0] == 0 and sorted(positions)[1] > 0  # one kept for reuse, one freed
    batch.close()
