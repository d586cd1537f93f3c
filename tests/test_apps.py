"""What apps embedding llamaspec rely on: Ctrl-C, cancel(), stale streams, short reprs, an installed wheel."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import llamaspec
from conftest import PROMPTS

N_CTX = 512


def test_cancel_from_another_thread_stops_within_a_round(models, target_model):
    with llamaspec.Generator(target_model, spec_type="ngram-simple", n_max=4, n_ctx=4096) as gen:
        # a generation long enough to still run when cancel() arrives (4000 tokens take seconds)
        timer = threading.Timer(0.2, gen.cancel)
        timer.start()
        t0 = time.perf_counter()
        result = gen.generate(PROMPTS[0], max_tokens=4000, ignore_eos=True)
        elapsed = time.perf_counter() - t0
        timer.join()
        assert result.stop_reason == "cancelled"
        assert 0 < len(result.tokens) < 4000
        assert elapsed < 0.2 + 0.5
        # the Generator stays usable and a cancel() before a call does not leak into it
        gen.cancel()
        again = gen.generate(PROMPTS[0], max_tokens=8, ignore_eos=True)
        assert again.stop_reason == "max_tokens" and len(again.tokens) == 8
        assert again.tokens == result.tokens[:8]


CTRL_C_SCRIPT = textwrap.dedent("""
    import signal, sys, time, llamaspec
    # a child of a background job inherits SIGINT ignored (POSIX), and Python then installs no handler
    signal.signal(signal.SIGINT, signal.default_int_handler)
    gen = llamaspec.Generator(sys.argv[1], spec_type="none", n_ctx=4096)
    print("ready", flush=True)
    t0 = time.perf_counter()
    try:
        # the tiny model can decode 4000 tokens before the signal comes: keep generating until it does
        # (the signal lands inside a generate() call: Python runs microseconds between them)
        for _ in range(1000):
            gen.generate("Once upon a time", max_tokens=4000, ignore_eos=True)
        print("finished", flush=True)
    except KeyboardInterrupt:
        print("interrupted", time.perf_counter() - t0, flush=True)
        r = gen.generate("Once upon a time", max_tokens=4, ignore_eos=True)
        print("usable", len(r.tokens), flush=True)
""")


def test_ctrl_c_interrupts_a_generation(models):
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C_SCRIPT, models["target"]], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        sent = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        line = proc.stdout.readline().split()
        latency = time.perf_counter() - sent
        assert line and line[0] == "interrupted", line
        assert latency < 1.0, f"KeyboardInterrupt took {latency:.2f} s"
        assert proc.stdout.readline().split() == ["usable", "4"]
    finally:
        proc.kill()
        proc.wait()


def test_a_new_generation_makes_older_streams_stale(target_model):
    with llamaspec.Generator(target_model, spec_type="ngram-simple", n_max=4, n_ctx=N_CTX) as gen:
        first = gen.stream(PROMPTS[0], max_tokens=32, ignore_eos=True)
        next(first)
        second = gen.stream(PROMPTS[1], max_tokens=32, ignore_eos=True)
        with pytest.raises(RuntimeError, match="superseded"):
            next(first)
        assert "".join(c.text for c in second)  # the newer stream is unaffected
        third = gen.stream(PROMPTS[2], max_tokens=8, ignore_eos=True)
        gen.generate(PROMPTS[3], max_tokens=4, ignore_eos=True)
        with pytest.raises(RuntimeError, match="superseded"):
            next(third)


def test_short_reprs(target_model):
    with llamaspec.Generator(target_model, spec_type="ngram-simple", n_max=4, n_ctx=N_CTX) as gen:
        result = gen.generate(PROMPTS[2], max_tokens=64, ignore_eos=True)
    text = repr(result)
    assert len(text) < 400 and "array" not in text
    assert "stop_reason='max_tokens'" in text and "P=[" in repr(result.stats)


def test_installed_package_needs_no_source_checkout(tmp_path):
    """tiny_models runs from the installed wheel alone (its own copy of gguf-py), outside the checkout."""
    code = ("import llamaspec, llamaspec.testing as tm, sys; "
            "tm.write_all(sys.argv[1], seed=1); "
            "print(llamaspec.Generator(sys.argv[1] + '/target.gguf', spec_type='none', n_ctx=64)"
            ".generate('hi', 4, ignore_eos=True).stop_reason)")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LLAMASPEC_GGUF_PY")}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("max_tokens")
    import llamaspec.testing as tm
    assert "site-packages" in tm.gguf.__file__ or "_vendor" in tm.gguf.__file__


def test_memory_guard_refuses_what_cannot_fit(target_model, hybrid_models):
    """A context whose cache cannot fit raises ValueError naming the sizes (it used to be OOM-killed)."""
    for target in (target_model, hybrid_models["qwen35_target"]):
        with pytest.raises(ValueError, match=r"needs about \d+ MiB .* only \d+ MiB are free"):
            llamaspec.Generator(target, spec_type="none", n_ctx=2**30)
    with pytest.raises(ValueError, match="needs about"):
        llamaspec.Generator(target_model, spec_type="ngram-mod", n_ctx=2**31 - 1)


def test_context_longer_than_training_warns(target_model):
    assert target_model.n_ctx_train == 2048
    with pytest.warns(UserWarning, match="exceeds the 2048 tokens"):
        llamaspec.Generator(target_model, spec_type="none", n_ctx=4096).close()


# --- stop strings and tokens ---------------------------------------------------------------------

def test_stop_strings_straddling_tokens(target_model):
    with llamaspec.Generator(target_model, spec_type="ngram-simple", n_max=4, n_ctx=N_CTX) as gen:
        full = gen.generate(PROMPTS[0], 64, ignore_eos=True)
        pieces = [gen.detokenize([t]) for t in full.tokens]
        # a stop string that begins inside token 20 and ends inside token 22 (spans three tokens)
        start = sum(len(p) for p in pieces[:20]) + len(pieces[20]) - 1
        stop = full.text[start:start + len(pieces[20][-1:]) + len(pieces[21]) + 1]
        assert len(stop) >= 3 and full.text.find(stop) == start, "pick a stop string that occurs first there"
        result = gen.generate(PROMPTS[0], 64, ignore_eos=True, stop=["never appears", stop])
        assert result.stop_reason == "stop" and gen.last_stop_reason == "stop"
        assert result.text == full.text[:start]
        assert result.tokens == full.tokens[:21]  # up to the token where the stop string begins
        # streaming never shows the stop string, and gives the same text
        chunks = list(gen.stream(PROMPTS[0], 64, ignore_eos=True, stop=stop))
        assert "".join(c.text for c in chunks) == result.text
        assert [t for c in chunks for t in c.tokens] == result.tokens
        # a stop string that never occurs changes nothing
        same = gen.generate(PROMPTS[0], 64, ignore_eos=True, stop="\x00never")
        assert same.tokens == full.tokens and same.text == full.text and same.stop_reason == "max_tokens"


def test_stop_tokens(target_model):
    with llamaspec.Generator(target_model, spec_type="ngram-simple", n_max=4, n_ctx=N_CTX) as gen:
        full = gen.generate(PROMPTS[1], 48, ignore_eos=True)
        token = full.tokens[10]
        first = full.tokens.index(token)
        result = gen.generate(PROMPTS[1], 48, ignore_eos=True, stop_tokens=[token])
        assert result.stop_reason == "stop"
        assert result.tokens == full.tokens[:first + 1]  # kept as the last token, as an EOS is
        assert result.text == gen.detokenize(full.tokens[:first])
        with pytest.raises(ValueError):
            gen.generate(PROMPTS[1], 8, stop=[""])


# --- prefix reuse ---------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["qwen3", "qwen35"])
@pytest.mark.parametrize("spec_type,draft", [("none", None), ("ngram-mod", None), ("draft-simple", "draft"),
                                             ("draft-dspark", "dspark")])
def test_prefix_reuse_equals_cold_start(hybrid_models, arch, spec_type, draft):
    target = hybrid_models["target" if arch == "qwen3" else "qwen35_target"]
    draft_path = None if draft is None else hybrid_models[
        "dspark" if draft == "dspark" else "draft_simple" if arch == "qwen3" else "qwen35_draft"]
    first_prompt = "Once upon a time there was a"
    with llamaspec.Generator(target, draft_path, spec_type=spec_type, n_max=4, n_ctx=N_CTX, n_threads=1) as warm, \
            llamaspec.Generator(target, draft_path, spec_type=spec_type, n_max=4, n_ctx=N_CTX, n_threads=1,
                                reuse_prefix=False) as cold:
        first = warm.generate(first_prompt, 24, ignore_eos=True)
        n_first = len(warm.tokenize(first_prompt))
        assert first.stats.prefill_tokens == n_first  # the last token's logits give the first token
        # the next turn extends the previous prompt and output: only the new tokens are read
        follow = warm.tokenize(first_prompt) + first.tokens + warm.tokenize(" and then", add_special=False)
        second = warm.generate(follow, 24, ignore_eos=True)
        # the cache held the first prompt and all generated tokens but the last (sampled, never decoded)
        assert second.stats.prefill_tokens == len(follow) - (n_first + len(first.tokens) - 1)
        assert second.tokens == cold.generate(follow, 24, ignore_eos=True).tokens
        assert cold.last_stats.prefill_tokens == len(follow)
        # a prompt that shares only part of the cache: attention targets trim, hybrids start cold
        other = warm.tokenize(first_prompt) + warm.tokenize(" dragon", add_special=False)
        third = warm.generate(other, 24, ignore_eos=True)
        assert third.tokens == cold.generate(other, 24, ignore_eos=True).tokens
        cached = follow + second.tokens[:-1]  # what the cache held after the second call
        n_common = next(i for i, (a, b) in enumerate(zip(cached + [-1], other[:-1] + [-2])) if a != b)
        assert 0 < n_common < len(cached)
        expected = len(other) - (n_common if arch == "qwen3" else 0)
        assert third.stats.prefill_tokens == expected


# --- chat -----------------------------------------------------------------------------------------

def test_chat_uses_the_template_and_reuses_the_prefix(target_model):
    with llamaspec.Generator(target_model, spec_type="ngram-mod", n_max=4, n_ctx=N_CTX) as gen:
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}]
        tokens, _ = gen.chat_prompt(messages)
        assert gen.detokenize(tokens).startswith("<|im_start|>system\nBe brief.<|im_end|>") or \
            "system" in gen.target.detokenize(tokens).decode()
        reply = gen.chat(messages, max_tokens=24, ignore_eos=True)
        assert reply.message["role"] == "assistant" and reply.message["content"] == reply.text
        assert reply.tokens == gen.generate(tokens, 24, ignore_eos=True).tokens
        messages += [reply.message, {"role": "user", "content": "Again."}]
        again = gen.chat(messages, max_tokens=8, ignore_eos=True)
        n_prompt = len(gen.chat_prompt(messages)[0])
        assert again.stats.prefill_tokens < n_prompt // 2  # only the new turn was read
        chunks = list(gen.chat_stream(messages, max_tokens=8, ignore_eos=True))
        assert "".join(c.text for c in chunks) == again.text
        with pytest.raises(TypeError):
            gen.chat([{"role": "user"}])


def test_context_memory_guard_and_bad_input(target_model):
    with pytest.raises(ValueError, match="sequences needs about"):
        llamaspec.Context(target_model, n_ctx=2**26, n_seq=64)
    ctx = llamaspec.Context(target_model, n_ctx=64, n_seq=2, capture_layers=[0, 2])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ctx.decode([1, 2, target_model.n_vocab])
    with pytest.raises(ValueError, match="out of range"):
        llamaspec.Context(target_model, n_ctx=64, capture_layers=[target_model.n_layer])
    with pytest.raises((ValueError, IndexError)):
        ctx.decode([1, 2], seq=2)
    ctx.decode([5, 6, 7], seq=1)
    with pytest.raises(ValueError, match="next tokens go at position 3"):
        ctx.decode([8], pos=7, seq=1)
    with pytest.raises(ValueError, match="past the context"):
        ctx.decode(list(range(10, 80)), seq=1)
    assert ctx.n_pos(1) == 3 and ctx.n_pos(0) == 0
