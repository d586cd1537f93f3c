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
    import sys, time, llamaspec
    gen = llamaspec.Generator(sys.argv[1], spec_type="none", n_ctx=4096)
    print("ready", flush=True)
    t0 = time.perf_counter()
    try:
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
    code = ("import llamaspec, llamaspec.tiny_models as tm, sys; "
            "tm.write_all(sys.argv[1], seed=1); "
            "print(llamaspec.Generator(sys.argv[1] + '/target.gguf', spec_type='none', n_ctx=64)"
            ".generate('hi', 4, ignore_eos=True).stop_reason)")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LLAMASPEC_GGUF_PY")}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("max_tokens")
    import llamaspec.tiny_models as tm
    assert "site-packages" in tm.gguf.__file__ or "_vendor" in tm.gguf.__file__
