"""Confidence-scheduled drafting: lossless output, the decision rule, and skipping a useless drafter."""

from __future__ import annotations

import numpy as np
import pytest

import llamaspec
from llamaspec import _core
from conftest import PROMPTS

MAX_TOKENS = 40
N_CTX = 512

# (spec_type, draft file or None, n_max): every kind of drafter the scheduler drives
DRAFTERS = [
    ("draft-simple", "draft_simple", 4),
    ("draft-dflash", "dflash", 7),
    ("draft-dspark", "dspark", 8),
    ("ngram-simple", None, 6),
    ("ngram-mod", None, 4),
]


@pytest.fixture(scope="module")
def reference(target_model):
    with llamaspec.Generator(target_model, spec_type="none", n_ctx=N_CTX) as gen:
        return {p: gen.generate(p, MAX_TOKENS, ignore_eos=True).tokens for p in PROMPTS}


# --- lossless under the scheduler ------------------------------------------------------------

@pytest.mark.parametrize("spec_type,draft,n_max", DRAFTERS)
def test_scheduled_greedy_output_equals_target(models, target_model, reference, spec_type, draft, n_max):
    with llamaspec.Generator(target_model, models[draft] if draft else None, n_max=n_max, spec_type=spec_type,
                             n_ctx=N_CTX, ngram_size_n=2, schedule="confidence") as gen:
        assert gen.schedule == "confidence"
        for prompt in PROMPTS:
            result = gen.generate(prompt, MAX_TOKENS, ignore_eos=True)
            assert result.tokens == reference[prompt], (spec_type, prompt)
            stats = result.stats
            assert stats.n_generated == MAX_TOKENS
            assert (stats.chosen_depth <= stats.proposed).all()
            assert (stats.proposed <= n_max).all()
            assert stats.confidence.size == stats.proposed.sum()
            assert len(stats.round_confidence) == stats.rounds


def test_self_draft_accepts_every_verified_token(models, target_model, reference):
    """The target as its own draft never disagrees with itself, whatever depth the scheduler picks."""
    with llamaspec.Generator(target_model, models["target"], n_max=4, spec_type="draft-simple", n_ctx=N_CTX,
                             schedule="confidence") as gen:
        result = gen.generate(PROMPTS[0], MAX_TOKENS, ignore_eos=True)
    assert result.tokens == reference[PROMPTS[0]]
    stats = result.stats
    assert stats.n_drafted > 0  # drafting starts on (optimistic) and is then judged by what it gains
    assert stats.n_accepted == stats.n_drafted


def test_draft_model_cost_is_measured_without_decode_errors(models, target_model, capfd):
    """The cost measurement drafts several times from one position: each repeat's draft-model steps must be
    taken back, or the draft model decodes at positions its cache already holds (llama.cpp logs
    'inconsistent sequence positions', the draft comes back empty and the step cost is never measured)."""
    with llamaspec.Generator(target_model, models["draft_simple"], n_max=4, spec_type="draft-simple", n_ctx=N_CTX,
                             schedule="confidence") as gen:
        state = gen.scheduler_state
    assert state["draft_step_seconds"] > 0
    assert "inconsistent sequence positions" not in capfd.readouterr().err


def test_useless_drafter_is_skipped(models, target_model):
    """The random-weight DFlash head accepts ~nothing: after a few probes the scheduler stops drafting,
    while the fixed schedule drafts in every round."""
    prompt = PROMPTS[3]
    with llamaspec.Generator(target_model, models["dflash"], n_max=7, n_ctx=N_CTX) as fixed:
        fixed_stats = fixed.generate(prompt, 200, ignore_eos=True).stats
    with llamaspec.Generator(target_model, models["dflash"], n_max=7, n_ctx=N_CTX, schedule="confidence") as gen:
        stats = gen.generate(prompt, 200, ignore_eos=True).stats
        state = gen.scheduler_state
    assert (fixed_stats.proposed > 0).mean() > 0.95
    assert (stats.proposed == 0).mean() > 0.8, stats.proposed
    assert not state["drafting_on"]
    assert state["verify_seconds"][1] > 0 and len(state["verify_seconds"]) == 7 + 2


def test_confidences_are_reported(models, target_model):
    """Draft-model and DSpark drafts carry a confidence in [0, 1] per proposed token; n-gram drafts NaN."""
    for draft, spec_type in (("draft_simple", "draft-simple"), ("dspark", "draft-dspark")):
        with llamaspec.Generator(target_model, models[draft], n_max=4, spec_type=spec_type, n_ctx=N_CTX) as gen:
            stats = gen.generate(PROMPTS[1], 16, ignore_eos=True).stats
        assert stats.confidence.size == stats.n_drafted > 0  # fixed schedule: all proposed are verified
        assert np.all((stats.confidence >= 0) & (stats.confidence <= 1))
    with llamaspec.Generator(target_model, n_max=4, spec_type="ngram-simple", n_ctx=N_CTX, ngram_size_n=2) as gen:
        stats = gen.generate(PROMPTS[2], 32, ignore_eos=True).stats
    assert stats.n_drafted > 0 and np.isnan(stats.confidence).all()


def test_dspark_confidence_comes_from_its_confidence_head(models, target_model, tmp_path):
    """Two DSpark heads with the same weights, one with a conf_proj confidence head: they draft the same
    tokens, but the first reports the head's sigmoid outputs, the second the draft's top-token probability."""
    from llamaspec import testing as tiny_models

    plain = tmp_path / "dspark-noconf.gguf"
    tiny_models.write_dspark(plain, models["target"], block_size=8, seed=2, with_confidence=False)
    assert llamaspec.inspect_gguf(models["dspark"])["has_confidence_head"]
    assert not llamaspec.inspect_gguf(str(plain))["has_confidence_head"]
    runs = []
    for head in (models["dspark"], str(plain)):
        with llamaspec.Generator(target_model, head, n_max=8, n_ctx=N_CTX) as gen:
            runs.append(gen.generate(PROMPTS[0], 16, ignore_eos=True).stats)
    with_head, without_head = runs
    assert with_head.drafted.tolist() == without_head.drafted.tolist()
    assert with_head.accepted.tolist() == without_head.accepted.tolist()
    assert with_head.confidence.size == without_head.confidence.size > 0
    assert np.abs(with_head.confidence - without_head.confidence).max() > 0.05


def test_schedule_errors(models, target_model):
    with pytest.raises(ValueError, match="schedule must be"):
        llamaspec.Generator(target_model, models["dspark"], schedule="dynamic")
    with pytest.raises(ValueError, match="needs a drafter"):
        llamaspec.Generator(target_model, spec_type="none", schedule="confidence")


# --- the decision rule, with given costs ---------------------------------------------------------

def flat_costs(n_max: int, per_extra_token: float = 0.05) -> list:
    """A target pass over n tokens costs 1 + per_extra_token * (n - 1) seconds."""
    return [1.0 + per_extra_token * n for n in range(n_max + 1)]


def drafting(sched, n_max: int):
    """A scheduler past its first probe, which paid (2 tokens in one plain pass's time): drafting is on."""
    assert sched.plan(n_max) == n_max  # the first round probes
    sched.observe([0.99], 1, 1, 2, 0.0, 1.0)
    assert sched.drafting_on
    return sched


def test_verify_depth_follows_the_confidence():
    sched = _core.Scheduler(flat_costs(4))
    assert sched.verify_depth([0.95, 0.95, 0.95, 0.95]) == 4
    # a confident prefix, then a token the drafter doubts: verifying past it is not worth it
    assert sched.verify_depth([0.95, 0.95, 0.02, 0.95]) == 2
    assert sched.verify_depth([0.01, 0.99]) == 0
    assert sched.verify_depth([]) == 0


def test_verify_depth_weighs_the_cost_of_longer_passes():
    cheap = _core.Scheduler(flat_costs(4, 0.05))
    dear = _core.Scheduler(flat_costs(4, 0.9))  # each verified token costs 0.9 of a plain pass
    confidence = [0.85, 0.85, 0.85, 0.85]
    assert cheap.verify_depth(confidence) == 4
    assert dear.verify_depth(confidence) < cheap.verify_depth(confidence)


def test_calibration_learns_from_observed_acceptance():
    """A drafter that is confidently wrong: the 0.9-confidence bin learns its real acceptance, and the
    scheduler stops verifying such tokens."""
    sched = _core.Scheduler(flat_costs(4))
    assert sched.predict(0, 0.93) == pytest.approx(0.95)  # before evidence: the bin's centre
    assert sched.verify_depth([0.93]) == 1
    for _ in range(100):
        sched.plan(4)
        sched.observe([0.93], 1, 0, 1, 0.01, 1.05)
    assert sched.predict(0, 0.93) < 0.05
    assert sched.verify_depth([0.93]) == 0
    # this text's confidences are worth less than they say: the other bins are scaled down with it ...
    assert sched.predict(0, 0.25) < 0.2
    # n-gram drafts (no confidence) are calibrated per position instead
    assert sched.predict(0, float("nan")) < 0.1
    sched.begin_generation()  # ... until a new text, where only what the bins learnt carries over
    assert sched.predict(0, 0.25) == pytest.approx(0.25)
    assert sched.predict(0, 0.93) < 0.05
    assert sched.predict(0, float("nan")) < 0.2  # a position's rate weighs as a few tokens in a new text


def run_rounds(sched, n_rounds: int, draft_s: float, verify_s: float) -> list:
    """Rounds in which drafting never pays (1 token emitted, plain pass 1 s); returns the drafted rounds' indices."""
    drafted = []
    for r in range(n_rounds):
        if sched.plan(4):
            drafted.append(r)
            sched.observe([0.5], 1, 0, 1, draft_s, verify_s)
        else:
            sched.observe([], 0, 0, 1, 0.0, 1.0)
    return drafted


def test_rounds_that_lose_time_turn_drafting_off_then_probe_with_backoff():
    sched = _core.Scheduler(flat_costs(4))
    assert not sched.drafting_on and sched.plan(4) == 4  # nothing measured yet: the first round drafts
    sched.observe([0.5], 1, 0, 1, 0.01, 1.05)  # 1 token in 1.06 s: worse than plain decoding
    drafted = run_rounds(sched, 300, 0.01, 1.05)
    assert not sched.drafting_on
    gaps = np.diff([-1] + drafted)
    # the confidence taken at its word at first (0.5: half the tokens accepted) gives way to the evidence, and
    # the running worth of drafted rounds turns negative, within ~30 rounds of 0.06 plain passes lost each
    streak = int(np.argmax(gaps > 1))
    assert 0 < streak <= 30, drafted
    probes = gaps[streak:]
    assert len(probes) >= 5 and (probes[1:] >= probes[:-1]).all() and probes[-1] == 64  # exponential backoff
    # probes that pay turn drafting back on; after one that paid, the next comes within two rounds
    waits = []
    while not sched.drafting_on:
        waited = 0
        while not sched.plan(4):
            sched.observe([], 0, 0, 1, 0.0, 1.0)
            waited += 1
        waits.append(waited)
        sched.observe([0.99] * 4, 4, 4, 5, 0.1, 1.2)
    assert len(waits) <= 10 and max(waits[1:], default=0) <= 2, waits


def test_drafting_that_pays_on_average_stays_on_through_rejection_streaks():
    """A block drafter whose first token is accepted 45% of the time and the next 60% of the times after that,
    verified at depth 2 for 1.08 plain passes plus a 0.15 block: 0.5 tokens a round more than plain decoding on
    average, although most rounds emit one token (later positions: 20%). Drafting stays on (a running average of the rounds' own
    outcomes fell below zero after a few rejections in a row and switched it off)."""
    rng = np.random.default_rng(0)
    sched = _core.Scheduler(flat_costs(8, 0.04))
    acceptance = [0.45, 0.6] + [0.2] * 6
    drafted = 0
    for _ in range(400):
        n = sched.plan(8)
        if n == 0:
            sched.observe([], 0, 0, 1, 0.0, 1.0)
            continue
        drafted += 1
        nan = [float("nan")] * n
        depth = sched.verify_depth(nan)
        accepted = 0
        while accepted < depth and rng.random() < acceptance[accepted]:
            accepted += 1
        sched.observe(nan, depth, accepted, accepted + 1, 0.15, 1.0 + 0.04 * depth)
    assert drafted > 0.95 * 400, drafted
    assert sched.drafting_on


def test_a_new_generation_relearns_the_acceptance_quickly():
    """Prompts differ: a drafter that lost on one (every first token rejected) may win on the next. What the
    last generation taught weighs as a few tokens only, so drafting comes back within a few rounds."""
    sched = _core.Scheduler(flat_costs(4))
    run_rounds(sched, 200, 0.01, 1.05)
    assert not sched.drafting_on
    sched.begin_generation()
    rounds = 0
    while not sched.drafting_on:
        rounds += 1
        if sched.plan(4):
            sched.observe([0.99] * 4, 4, 4, 5, 0.01, 1.2)  # the new prompt: every drafted token accepted
        else:
            sched.observe([], 0, 0, 1, 0.0, 1.0)
    assert rounds <= 4, rounds


def test_a_new_generation_drafts_from_the_start_when_recent_texts_paid():
    """What the last texts accepted at each position is a prior for a new one: it drafts from its first round,
    and one round that loses (two tokens verified at 0.13 and 0.43) does not switch drafting off, as it did when
    the first probe alone decided; rounds that keep losing do. A prompt dear to read keeps the first-probe path."""
    sched = _core.Scheduler(flat_costs(4))
    for _ in range(50):  # a text where the first two drafted tokens are always accepted
        n = sched.plan(4)
        sched.observe([0.9] * n, min(n, 2), min(n, 2), min(n, 2) + 1, 0.01, 1.1) if n else \
            sched.observe([], 0, 0, 1, 0.0, 1.0)
    assert sched.drafting_on
    sched.observe_catch_up(10, 1.0)  # the drafter reads 0.1 s per skipped token
    sched.begin_generation(100)  # a first probe may cost 2 s
    assert not sched.drafting_on and sched.plan(4, 100) == 0  # 10 s to read the prompt: as any probe
    sched.begin_generation(100)
    assert sched.plan(4, 10) > 0 and sched.drafting_on
    losing = 0
    while sched.drafting_on:
        sched.observe([0.13, 0.43], 2, 0, 1, 0.3, 1.1)  # worth about -0.2 tokens by the calibration
        losing += 1
        if sched.drafting_on:
            assert sched.plan(4) > 0
    assert 3 <= losing <= 20, losing


def test_a_new_generation_probes_at_once_when_the_prompt_is_cheap_to_read():
    """A probe makes the drafter read what it skipped, first of all the prompt: a new generation's first round
    probes when that costs at most 2% of the generation's plain-decoding time, else it waits as any probe."""
    for pending, probes in ((10, True), (100, False)):
        sched = _core.Scheduler(flat_costs(4))
        run_rounds(sched, 200, 0.01, 1.05)
        assert not sched.drafting_on
        sched.observe_catch_up(10, 1.0)  # the drafter reads 0.1 s per skipped token
        sched.begin_generation(100)  # at most 100 tokens, 1 s each: 2 s for the first probe
        assert bool(sched.plan(4, pending)) == probes, pending


def test_dear_probes_cost_at_most_one_percent_of_the_time():
    """A probe that costs 1.05 s more than a plain round waits for 105 s of plain rounds."""
    sched = _core.Scheduler(flat_costs(4))
    sched.plan(4)
    sched.observe([0.5], 1, 0, 1, 1.0, 1.05)
    drafted = run_rounds(sched, 300, 1.0, 1.05)
    gaps = np.diff([-1] + drafted)
    # shorter blocks, never timed, are tried first (their cost is estimated optimistically), then probes only
    streak = int(np.argmax(gaps > 1))
    assert streak <= 3 and len(gaps) - streak >= 2 and (gaps[streak:] >= 105).all(), drafted


def test_probes_verify_at_least_one_token():
    sched = _core.Scheduler(flat_costs(4, 0.9))  # verification so dear that no depth pays
    assert sched.verify_depth([0.5, 0.5]) == 0
    assert sched.plan(4) == 4  # the first round probes
    assert sched.verify_depth([0.5, 0.5]) == 1
    assert sched.verify_depth([]) == 0


def test_sequential_drafter_stops_when_the_next_step_does_not_pay():
    # a draft step costs 0.3 of a target pass
    sched = drafting(_core.Scheduler(flat_costs(6), 0.3, True), 6)
    assert sched.plan(6) == 6
    assert sched.keep_drafting(0, 0.95)
    assert not sched.keep_drafting(1, 0.05)  # survival collapsed: the next token would not pay its step
    free = drafting(_core.Scheduler(flat_costs(6), 0.0, True), 6)
    free.plan(6)
    assert all(free.keep_drafting(i, 0.95) for i in range(5))
    assert not free.keep_drafting(5, 0.95)  # n_max reached


def test_probe_waits_while_the_catch_up_is_dear():
    """Draft-model input is deferred while drafting is off: a probe waits until reading the skipped
    tokens costs a small share of the time since the last probe."""
    sched = _core.Scheduler(flat_costs(4))
    sched.observe_catch_up(10, 1.0)  # 0.1 s per deferred token
    sched.plan(4)
    sched.observe([0.5], 1, 0, 1, 1.0, 1.05)
    for _ in range(5):
        sched.plan(4)
        sched.observe([0.5], 1, 0, 1, 1.0, 1.05)
    assert not sched.drafting_on
    # 100 pending tokens = 10 s of catch-up: no probe within the next 100 one-second rounds
    waited = 0
    while not sched.plan(4, 100):
        sched.observe([], 0, 0, 1, 0.0, 1.0)
        waited += 1
    assert waited > 100


def test_catching_up_is_not_charged_to_drafting():
    """A probe whose drafter first reads what it skipped: the reading is the price of having skipped, not of
    drafting. A round that pays without it turns drafting on, though with it the round lost time."""
    for catch_up, on in ((0.0, True), (2.0, True)):
        sched = _core.Scheduler(flat_costs(4))
        sched.plan(4)
        sched.observe_catch_up(20, catch_up)  # this round's draft began by reading 20 skipped tokens
        # 3 tokens in 0.2 + 1.15 s of drafting and verifying (+ the catch-up, inside the draft time)
        sched.observe([0.9, 0.9], 2, 2, 3, 0.2 + catch_up, 1.15)
        assert sched.drafting_on == on
    # the same round charged with its catch-up would have lost time: 3 tokens in 3.35 s
    sched = _core.Scheduler(flat_costs(4))
    sched.plan(4)
    sched.observe([0.9, 0.9], 2, 2, 3, 2.2, 1.15)
    assert not sched.drafting_on


def test_block_head_costs_are_measured_when_the_generator_is_made(models, target_model):
    """A DSpark head's block of every length is timed at construction (a length's first block pays its graph's
    build, which the schedule would otherwise take for its cost), apart from reading the prompt's features."""
    gen = llamaspec.Generator(target_model, models["dspark"], n_max=4, schedule="confidence")
    try:
        state = gen.scheduler_state
        blocks = np.asarray(state["block_draft_seconds"])
        assert (blocks[1:5] > 0).all() and (blocks[1:5] < 1.0).all(), blocks
        assert state["catch_up_seconds_per_token"] > 0  # the prompt's features, read before the first block
        result = gen.generate("def fib(n):", max_tokens=12, ignore_eos=True)
        assert len(result.tokens) == 12
    finally:
        gen.close()


def block_rounds(sched, n_rounds: int, block_seconds) -> int:
    """Rounds of a block drafter whose first two positions are always accepted and the third never;
    a block of n positions costs block_seconds(n). Returns the block length planned last."""
    n = 0
    for _ in range(n_rounds):
        n = sched.plan(8)
        nan = [float("nan")] * n
        depth = sched.verify_depth(nan)
        accepted = min(depth, 2)
        sched.observe(nan, depth, accepted, accepted + 1, block_seconds(n), 1.0 + 0.05 * depth)
    return sched.plan(8)


def test_block_drafter_gets_the_block_length_that_pays():
    """DFlash/DSpark blocks cost more the longer they are: once two positions are all that is ever
    accepted, a block of 2 is planned; when the block's cost does not depend on its length the
    whole block is drafted (verify_depth still cuts what is not worth verifying)."""
    growing = _core.Scheduler(flat_costs(8))
    assert growing.plan(8) == 8  # nothing measured yet: the whole block
    growing.observe([float("nan")] * 8, 3, 2, 3, 0.8, 1.15)
    assert block_rounds(growing, 40, lambda n: 0.1 * n) == 2
    flat = _core.Scheduler(flat_costs(8))
    assert block_rounds(flat, 40, lambda n: 0.1) == 8
    # a sequential drafter (draft-simple) stops by keep_drafting() instead: plan() gives the limit
    sequential = drafting(_core.Scheduler(flat_costs(8), 0.1, True), 8)
    assert sequential.plan(8) == 8


# --- batched rounds (Batch, schedule="confidence") ------------------------------------------------

BATCH_DRAFTERS = [("draft-simple", "draft_simple", 4), ("draft-dspark", "dspark", 8), ("ngram-mod", None, 4)]


@pytest.mark.parametrize("per", ["sequence", "batch"])
@pytest.mark.parametrize("spec_type,draft,n_max", BATCH_DRAFTERS)
def test_scheduled_batch_greedy_equals_target(models, target_model, reference, monkeypatch, spec_type, draft,
                                              n_max, per):
    """Each sequence's depth chosen per round (or one for the batch: LLAMASPEC_BATCH_SCHEDULE=batch), requests
    of different lengths joining and leaving: every request's output equals the target's greedy decoding."""
    monkeypatch.setenv("LLAMASPEC_BATCH_SCHEDULE", per)
    with llamaspec.Batch(target_model, models[draft] if draft else None, n_seq=3, n_max=n_max, spec_type=spec_type,
                         n_ctx=N_CTX, ngram_size_n=2, schedule="confidence") as batch:
        assert batch.schedule == "confidence"
        results = batch.generate(PROMPTS * 2, MAX_TOKENS, ignore_eos=True)
    for prompt, result in zip(PROMPTS * 2, results):
        assert result.tokens == reference[prompt], (spec_type, per, prompt)
        assert (result.stats.chosen_depth <= result.stats.proposed).all()
        assert (result.stats.proposed <= n_max).all()


@pytest.mark.parametrize("target,draft,spec_type", [("qwen35_target", "qwen35_draft", "draft-simple"),
                                                     ("qwen35moe_target", None, "ngram-mod")])
def test_scheduled_batch_on_hybrid_targets(hybrid_models, target, draft, spec_type):
    """Cost passes longer than a recurrent state's snapshots reach are taken back by checkpoints; output equals
    each prompt's plain greedy decoding."""
    prompts = PROMPTS * 2
    with llamaspec.Generator(hybrid_models[target], spec_type="none", n_ctx=256) as plain:
        expected = [plain.generate(p, 24, ignore_eos=True).tokens for p in prompts]
    with llamaspec.Batch(hybrid_models[target], hybrid_models[draft] if draft else None, n_seq=3, n_max=4,
                         spec_type=spec_type, n_ctx=256, ngram_size_n=2, schedule="confidence") as batch:
        results = batch.generate(prompts, 24, ignore_eos=True)
        assert batch.scheduler_state(2)["pass_seconds"]  # the batched lengths were measured
    assert [r.tokens for r in results] == expected


def test_generate_batch_keeps_the_generators_schedule(models, target_model, reference):
    with llamaspec.Generator(target_model, models["target"], n_max=4, spec_type="draft-simple", n_ctx=N_CTX,
                             schedule="confidence") as gen:
        results = gen.generate_batch(PROMPTS, MAX_TOKENS, n_seq=2, ignore_eos=True)
        assert gen._batch.schedule == "confidence"
    for prompt, result in zip(PROMPTS, results):
        assert result.tokens == reference[prompt]
        # the target as its own draft agrees with itself on every token it verifies
        assert result.stats.n_accepted == result.stats.n_drafted
    assert sum(r.stats.n_drafted for r in results) > 0  # the schedule probes (then stops: a step of the draft
    # costs the target's own, so drafting cannot pay here)


def test_useless_drafter_is_skipped_in_batched_rounds(models, target_model):
    """The random-weight DFlash head accepts ~nothing: each sequence's scheduler stops drafting for it."""
    with llamaspec.Batch(target_model, models["dflash"], n_seq=3, n_max=7, n_ctx=N_CTX, schedule="confidence") as b:
        results = b.generate(PROMPTS[:3], 200, ignore_eos=True)
        state = b.scheduler_state(1)
    for result in results:
        assert (result.stats.proposed == 0).mean() > 0.8, result.stats.proposed
    assert not state["drafting_on"]
    # passes as long as a round of 3 sequences can make (3 x 8 tokens) were measured beyond one sequence's 1..8
    assert len(state["verify_seconds"]) == 7 + 2 and state["pass_seconds"][-1][0] == 3 * 8


def test_a_batched_sequence_pays_its_share_of_the_pass():
    """Passes that cost 1 + 0.05 s per extra token: alone, a draft token of confidence 0.15 pays (0.05 of a plain
    step); in a round of 4 sequences it does not, since a plain round already verifies 4 tokens and each drafted
    token then costs 0.05 / (1.15 / 4) = 0.17 of a sequence's plain share."""
    sched = drafting(_core.Scheduler(flat_costs(4)), 4)
    assert sched.verify_depth([0.15]) == 1
    sched.set_batch(4)
    assert sched.verify_cost(1) == pytest.approx((1.0 + 0.05 * 3) / 4)
    assert sched.verify_cost(2) == pytest.approx((1.0 + 0.05 * 7) / 4)  # past n_max + 1: extrapolated
    assert sched.verify_depth([0.15]) == 0
    assert sched.verify_depth([0.95, 0.95]) == 2
    # measured longer passes replace the extrapolation: memory-bound passes that cost as much for 16 tokens
    # as for one make drafting cheap again
    flat = drafting(_core.Scheduler(flat_costs(4, 0.0), passes=[(8, 1.0), (16, 1.0), (20, 1.0)]), 4)
    flat.set_batch(4)
    assert flat.verify_cost(1) == pytest.approx(0.25) and flat.verify_cost(4) == pytest.approx(0.25)
    assert flat.verify_depth([0.15]) == 1
    # a round's pass corrects the nearest measured length
    for _ in range(50):
        flat.observe_pass(16, 2.0)
    assert flat.verify_cost(4) == pytest.approx(0.5, rel=0.02)


def test_a_sequence_drafting_alone_in_a_batch_pays_a_pass_of_its_own():
    """Per-sequence depths in a batched round: llama.cpp puts as many tokens of every sequence into one ubatch
    (one cache stream per sequence), so the tokens one sequence verifies beyond the others' go through a pass of
    their own. Memory-bound passes (the same time for 1..20 tokens) made drafting look free at a sequence's
    share of one long pass; priced as that extra pass, a draft of confidence 0.95 no longer pays in a round of
    4, while a lone sequence still drafts it."""
    passes = [(8, 1.0), (16, 1.0), (20, 1.0)]
    sched = drafting(_core.Scheduler(flat_costs(4, 0.0), passes=passes), 4)
    assert sched.verify_depth([0.95, 0.95]) == 2
    sched.set_batch(4, own_depth=True)
    assert sched.verify_cost(1) == pytest.approx(0.25)
    assert sched.verify_cost(3) == pytest.approx(0.25 + 1.0)  # its share of the round, and a pass of 2 tokens
    assert sched.verify_depth([0.95, 0.95]) == 0
    sched.set_batch(4)  # every sequence at one depth: one pass, shared
    assert sched.verify_cost(3) == pytest.approx(0.25)
    assert sched.verify_depth([0.95, 0.95]) == 2
