"""Acceptance accounting: rounds, positional acceptance P1..Pk and token sums."""

from __future__ import annotations

import math

import numpy as np
import pytest

import llamaspec
from conftest import PROMPTS

N_CTX = 512


@pytest.mark.parametrize("n_max", [1, 3, 4, 7])
@pytest.mark.parametrize("max_tokens", [24, 41])
def test_self_draft_accepts_every_position(models, target_model, n_max, max_tokens):
    """The target as its own draft-simple draft: every drafted position is accepted."""
    with llamaspec.Generator(target_model, models["target"], n_max=n_max, spec_type="draft-simple",
                             n_ctx=N_CTX) as gen:
        result = gen.generate(PROMPTS[0], max_tokens, ignore_eos=True)
    stats = result.stats
    assert len(result.tokens) == max_tokens
    np.testing.assert_array_equal(stats.positional_acceptance, np.ones(n_max))
    assert stats.acceptance_rate == 1.0
    # round 0 is the first token, from the prompt's pass; then each round yields k accepted + 1 bonus token, and
    # the last round drafts only what the budget needs
    assert stats.rounds == 1 + math.ceil((max_tokens - 1) / (n_max + 1))
    assert stats.drafted[0] == 0
    assert (stats.accepted == stats.drafted).all()
    assert stats.n_accepted + stats.rounds == stats.n_generated == max_tokens
    assert stats.mean_accepted_length == pytest.approx(max_tokens / stats.rounds)


@pytest.mark.parametrize("draft,n_max", [("dspark", 8), ("dflash", 7), ("draft_simple", 5)])
def test_partial_acceptance_is_reported(models, target_model, draft, n_max):
    with llamaspec.Generator(target_model, models[draft], n_max=n_max, n_ctx=N_CTX) as gen:
        result = gen.generate(PROMPTS[2], 48, ignore_eos=True)
    stats = result.stats
    P = stats.positional_acceptance
    assert P.shape == (n_max,)
    assert np.all((P[~np.isnan(P)] >= 0) & (P[~np.isnan(P)] <= 1))
    assert stats.n_drafted > 0
    assert 0.0 <= stats.acceptance_rate < 1.0  # random / smaller drafts are wrong sometimes
    # acceptance is a prefix: positional counts never increase with depth
    assert (np.diff(stats.accepted_at) <= 0).all() and (np.diff(stats.drafted_at) <= 0).all()
    assert (stats.accepted <= stats.drafted).all()
    # sums: accepted drafts + one bonus token per round = generated tokens
    assert stats.n_accepted + stats.rounds == stats.n_generated == len(result.tokens) == 48
    assert stats.acceptance_rate == pytest.approx(stats.n_accepted / stats.n_drafted)
    assert stats.tokens_per_second > 0


def test_positional_acceptance_arithmetic():
    """P[i] = rounds with accepted >= i / rounds with drafted >= i, on a hand-made log."""
    log = {"drafted": [3, 3, 2, 0], "accepted": [3, 1, 0, 0], "emitted": [4, 2, 1, 1],
           "draft_seconds": [0.1] * 4, "verify_seconds": [0.1] * 4}
    stats = llamaspec.SpecStats.from_log(log, n_max=4, spec_type="test")
    np.testing.assert_array_equal(stats.drafted_at, [3, 3, 2, 0])
    np.testing.assert_array_equal(stats.accepted_at, [2, 1, 1, 0])
    np.testing.assert_allclose(stats.positional_acceptance[:3], [2 / 3, 1 / 3, 1 / 2])
    assert np.isnan(stats.positional_acceptance[3])
    assert stats.acceptance_rate == pytest.approx(4 / 8)
    assert stats.mean_accepted_length == pytest.approx(8 / 4)
    assert stats.tokens_per_second == pytest.approx(8 / 0.8)
    assert "P1" in stats.table() and "0.667" in stats.table()


def test_context_end_stops_cleanly(models, target_model):
    with llamaspec.Generator(target_model, models["draft_simple"], n_max=4, n_ctx=64) as gen:
        prompt = gen.tokenize(PROMPTS[0])
        result = gen.generate(prompt, 1000, ignore_eos=True)
        n_ctx = gen.n_ctx
    assert result.stop_reason == "context"
    # every position of the context is used: prompt + generated tokens (the last one not decoded)
    assert len(prompt) + len(result.tokens) == n_ctx + 1
    assert result.stats.n_accepted + result.stats.rounds == len(result.tokens)


def test_max_tokens_is_exact(models, target_model):
    with llamaspec.Generator(target_model, models["target"], n_max=8, spec_type="draft-simple",
                             n_ctx=N_CTX) as gen:
        for n in (1, 2, 9, 10, 11):
            result = gen.generate(PROMPTS[3], n, ignore_eos=True)
            assert len(result.tokens) == n and result.stop_reason == "max_tokens"
