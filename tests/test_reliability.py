"""Reliability: corrupt files, odd prompts, random parameters, threads, and memory over many runs."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import llamaspec
from conftest import PROMPTS


@pytest.mark.parametrize("offset", [0, 1, 3, 4, 5, 7, 8, 12, 16, 24, 40, 100])
def test_flipped_header_bytes(models, tmp_path, offset):
    data = bytearray(open(models["target"], "rb").read())
    data[offset] ^= 0xFF
    path = tmp_path / f"flipped-{offset}.gguf"
    path.write_bytes(bytes(data))
    try:
        gen = llamaspec.Generator(str(path), n_ctx=128)
    except ValueError:
        return  # refused with a clear error
    # a flip that leaves a loadable model (e.g. inside a string) must still generate
    with gen:
        gen.generate("hello", 4)


def test_odd_prompts(target_model):
    with llamaspec.Generator(target_model, n_ctx=256) as gen:
        assert len(gen.generate(b"\xff\xfe\x00 not utf-8", 4, ignore_eos=True).tokens) == 4
        assert len(gen.generate("é漢字🙂\x00\t", 4, ignore_eos=True).tokens) == 4
        with pytest.raises(ValueError, match="Unicode"):
            gen.generate("lone surrogate \udcff", 4)
        with pytest.raises(TypeError):
            gen.generate([1, "2"], 4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=st.binary(max_size=120), n_max=st.integers(-2, 12), max_tokens=st.integers(-1, 24),
       temperature=st.sampled_from([0.0, 0.5, 1.0, 3.0, -1.0]), top_k=st.integers(-1, 500),
       top_p=st.floats(-0.5, 1.5, allow_nan=False), min_p=st.floats(-0.5, 1.5, allow_nan=False),
       drafter=st.sampled_from(["dspark", "dflash", "draft_simple", None]), seed=st.integers(0, 2**32))
def test_fuzz_prompts_and_parameters(models, target_model, prompt, n_max, max_tokens, temperature, top_k,
                                     top_p, min_p, drafter, seed):
    """Any combination either works or raises ValueError; never an abort."""
    try:
        gen = llamaspec.Generator(target_model, models[drafter] if drafter else None, n_max=n_max, n_ctx=96)
    except ValueError:
        assert n_max < 1 or n_max > {"dspark": 8, "dflash": 7}.get(drafter, 64)
        return
    with gen:
        try:
            result = gen.generate(prompt, max_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                                  min_p=min_p, seed=seed)
        except ValueError:
            return
        assert 1 <= len(result.tokens) <= max_tokens
        assert result.stop_reason in ("max_tokens", "eos", "context")


def test_one_generator_per_thread_in_parallel(models, target_model):
    expected = {}
    with llamaspec.Generator(target_model, models["dspark"], n_max=8, n_ctx=512) as gen:
        for p in PROMPTS:
            expected[p] = gen.generate(p, 48, ignore_eos=True).tokens
    results, errors = {}, []

    def worker(prompt):
        try:
            with llamaspec.Generator(target_model, models["dspark"], n_max=8, n_ctx=512) as gen:
                results[prompt] = gen.generate(prompt, 48, ignore_eos=True).tokens
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(p,)) for p in PROMPTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == expected


def test_sharing_one_generator_is_refused(models, target_model):
    """A second thread gets a clear error while the first decodes (the GIL is released meanwhile)."""
    gen = llamaspec.Generator(target_model, models["draft_simple"], n_max=4, n_ctx=2048)
    done = threading.Event()

    def long_generation():
        gen.generate(PROMPTS[0], 1900, ignore_eos=True)
        done.set()

    worker = threading.Thread(target=long_generation)
    worker.start()
    refused = None
    while not done.is_set():
        try:
            gen.generate("hi", 1)
        except RuntimeError as exc:
            refused = exc
            break
        time.sleep(0.001)
    worker.join()
    assert refused is not None and "another thread" in str(refused)
    assert len(gen.generate("hi", 2, ignore_eos=True).tokens) == 2  # usable again afterwards
    gen.close()


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def test_soak_memory_does_not_grow(models, target_model):
    """Many generations and Generators: resident memory stays flat after warm-up."""
    def cycle():
        with llamaspec.Generator(target_model, models["dspark"], n_max=8, n_ctx=256) as gen:
            for i, p in enumerate(PROMPTS):
                gen.generate(p, 32, ignore_eos=True, temperature=0.8 if i % 2 else 0.0, seed=i)

    for _ in range(5):
        cycle()
    before = rss_mib()
    for _ in range(60):
        cycle()
    growth = rss_mib() - before
    print(f"RSS after warm-up {before:.1f} MiB, growth over 60 cycles (240 generations) {growth:.2f} MiB")
    assert growth < 8.0
