"""The few-column matmul kernels (patches/0008, ``llamaspec.set_multidot``), one ggml MUL_MAT at a time.

For every weight type and n = 1..32 columns: every column of the n-column product equals the one-column
product bit for bit (with the batch-invariant mode on; with it off for the n <= 16 the kernels take), the
one-column product equals llama.cpp's own kernel (the switch off), and all of it agrees with ggml's
reference (dequantized weights times the converted columns, in float64). Row counts that are not a
multiple of any tile, one and two threads; Q4_K also as a model loads it with repacking on (CPU_REPACK), and
Q8_0, Q5_0, Q4_K, Q5_K and Q6_K in llamaspec's row-per-lane layout (CPU_ROWS8).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import llamaspec
from llamaspec import _core

# the kernels' types first; the others keep llama.cpp's path and must stay batch-invariant too
MULTIDOT_TYPES = ["q4_0", "q5_0", "q8_0", "q6_K"]
OTHER_TYPES = ["q4_K", "q5_K", "f16", "bf16", "f32"]
ROWS8_TYPES = ["q8_0", "q5_0", "q4_0", "q4_K", "q5_K", "q6_K"]  # what CPU_ROWS8 stores
ROWS = [1, 7, 37]
N_MAX = 32


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


@pytest.fixture(autouse=True)
def restore_switches():
    yield
    llamaspec.set_multidot(True)
    llamaspec.set_batch_invariant(True)
    _core.set_rows8_wide(True)
    _core.set_rows8_long_passes(True)


def operands(weight_type: str, rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    k = 512 if weight_type.endswith("_K") else 96  # K-quants: rows of 256 weights
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, k)).astype(np.float32)
    x = rng.standard_normal((N_MAX, k)).astype(np.float32)
    return w, x


def one_column_results(weight_type: str, w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.stack([_core.mul_mat(weight_type, w, x[c:c + 1])[0] for c in range(len(x))])


@pytest.mark.parametrize("weight_type", MULTIDOT_TYPES + OTHER_TYPES)
def test_every_column_equals_the_one_column_product(weight_type):
    assert llamaspec.multidot() and llamaspec.batch_invariant()  # the defaults
    for seed, rows in enumerate(ROWS):
        w, x = operands(weight_type, rows, seed)
        single = one_column_results(weight_type, w, x)
        reference = _core.mul_mat_reference(weight_type, w, x)
        scale = np.abs(reference).max()
        assert np.abs(single - reference).max() <= 1e-5 * scale, "one-column product far from ggml's reference"
        for n_threads in (1, 2):
            for n in range(1, N_MAX + 1):
                out = _core.mul_mat(weight_type, w, x[:n], n_threads)
                same = (bits(out) == bits(single[:n])).all(axis=1)
                assert same.all(), (f"{weight_type}, {rows} rows, {n} columns, {n_threads} threads: "
                                    f"columns {np.flatnonzero(~same).tolist()} differ from one-column decoding")


@pytest.mark.parametrize("weight_type", MULTIDOT_TYPES)
def test_the_kernels_compute_what_llama_cpp_computes(weight_type):
    """Switched off, llama.cpp's vec_dot / tinyBLAS run: the same bits for one column, and for every column
    of a wider product in batch-invariant mode."""
    w, x = operands(weight_type, 37, 7)
    ours = {n: _core.mul_mat(weight_type, w, x[:n], 2) for n in (1, 2, 5, 9, 16)}
    llamaspec.set_multidot(False)
    for n, out in ours.items():
        assert np.array_equal(bits(out), bits(_core.mul_mat(weight_type, w, x[:n], 2))), f"{n} columns"


@pytest.mark.parametrize("weight_type", MULTIDOT_TYPES)
def test_columns_agree_without_the_batch_invariant_mode(weight_type):
    """Up to 16 columns the kernels take the product whatever the mode: still one-column arithmetic."""
    w, x = operands(weight_type, 37, 3)
    single = one_column_results(weight_type, w, x[:16])
    llamaspec.set_batch_invariant(False)
    for n in range(1, 17):
        assert np.array_equal(bits(_core.mul_mat(weight_type, w, x[:n], 2)), bits(single[:n])), f"{n} columns"


def rows8_expected() -> bool:
    """CPU_ROWS8 is offered by every x86 build with AVX2 (with VNNI its dot products are one instruction, without
    it two: the same integers), so where the CPU and the build have AVX2 it must be there."""
    try:
        flags = open("/proc/cpuinfo").read().split()
    except OSError:
        return False
    return "avx2" in flags and "AVX2 = 1" in _core.system_info()


def layout_available(weight_type: str, layout: str) -> bool:
    try:
        _core.mul_mat(weight_type, *operands(weight_type, 8, 0), 1, layout)
    except ValueError:
        return False
    return True


def require_rows8(weight_type: str) -> None:
    """Skip where the build has no CPU_ROWS8; on an AVX2 build its absence is a failure."""
    if not layout_available(weight_type, "CPU_ROWS8"):
        assert not rows8_expected(), "CPU_ROWS8 is missing on an AVX2 build"
        pytest.skip("CPU_ROWS8 is not in this build")


@pytest.mark.parametrize("weight_type,layout", [("q4_K", "CPU_REPACK"), ("q8_0", "CPU_ROWS8"), ("q4_K", "CPU_ROWS8"),
                                               ("q5_0", "CPU_ROWS8"), ("q4_0", "CPU_ROWS8"), ("q5_K", "CPU_ROWS8"),
                                               ("q6_K", "CPU_ROWS8")])
def test_repacked_weights(weight_type, layout):
    """Weights stored as a model loads them (repacking on): llama.cpp's CPU_REPACK Q4_K (8 rows interleaved,
    taken by the kernels for 2..16 columns) and llamaspec's CPU_ROWS8 Q8_0, Q5_0, Q4_0, Q4_K, Q5_K and Q6_K (8 rows interleaved, one
    output row per vector lane, its own arithmetic for every n): every column equals the one-column product,
    with the kernels on and off, for n = 1..32, and agrees with ggml's float64 reference."""
    if not layout_available(weight_type, layout):
        # offered by every x86 build with AVX2: missing there is a failure, not a skip
        assert not (layout == "CPU_ROWS8" and rows8_expected()), "CPU_ROWS8 is missing on an AVX2 build"
        pytest.skip(f"{layout} is not in this build")
    for seed, rows in enumerate((8, 40, 264)):
        w, x = operands(weight_type, rows, seed)
        single = np.stack([_core.mul_mat(weight_type, w, x[c:c + 1], 1, layout)[0] for c in range(N_MAX)])
        reference = _core.mul_mat_reference(weight_type, w, x)
        assert np.abs(single - reference).max() <= 1e-5 * np.abs(reference).max()
        for on in (True, False):
            llamaspec.set_multidot(on)
            for n_threads in (1, 2):
                for n in range(1, N_MAX + 1):
                    out = _core.mul_mat(weight_type, w, x[:n], n_threads, layout)
                    same = (bits(out) == bits(single[:n])).all(axis=1)
                    assert same.all(), (f"{layout} {weight_type}, {rows} rows, {n} columns, {n_threads} threads, "
                                        f"kernels {'on' if on else 'off'}: columns {np.flatnonzero(~same).tolist()}")


@pytest.mark.parametrize("weight_type", ROWS8_TYPES)
def test_rows8_widths_give_the_same_bits(weight_type):
    """CPU_ROWS8 passes take two 8-row groups at once (16 rows per 512-bit vector where the build has AVX-512
    VNNI, pairs of 256-bit vectors otherwise) or one (the switch off), and up to 16 columns per pass over the
    weights (8 with AVX-512 and 4 without, that switch off): every width, pass length, column count and thread
    count gives the same bits. 40 and 264 rows: pairs of 8-row groups and a group left over."""
    require_rows8(weight_type)
    for seed, rows in enumerate((40, 264)):
        w, x = operands(weight_type, rows, seed + 7)
        results = {}
        for wide in (False, True):
            _core.set_rows8_wide(wide)
            assert _core.get_rows8_wide() == wide
            for long in (False, True):
                _core.set_rows8_long_passes(long)
                assert _core.get_rows8_long_passes() == long
                for n_threads in (1, 2):
                    for n in (1, 5, 8, 9, 16, 17):
                        out = _core.mul_mat(weight_type, w, x[:n], n_threads, "CPU_ROWS8")
                        results[(wide, long, n_threads, n)] = bits(out)
        first = {n: results[(False, False, 1, n)] for n in (1, 5, 8, 9, 16, 17)}
        for (wide, long, n_threads, n), out in results.items():
            assert (out == first[n]).all(), (f"{weight_type}, {rows} rows, {n} columns, wide {wide}, long passes "
                                             f"{long}, {n_threads} threads")
            assert (out == first[17][:n]).all(), f"{weight_type}: {n} columns differ from the first {n} of 17"


TWO_GROUP_CHILD = """
import hashlib, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from test_kernels import ROWS8_TYPES, operands
from llamaspec import _core
_core.set_rows8_wide(sys.argv[2] == "1")
for weight_type in ROWS8_TYPES:
    w, x = operands(weight_type, 264, 11)
    for n_threads in (1, 2):
        for n in range(1, 18):
            out = _core.mul_mat(weight_type, w, x[:n], n_threads, "CPU_ROWS8")
            print(weight_type, n_threads, n, hashlib.sha256(np.ascontiguousarray(out, np.float32).tobytes()).hexdigest())
"""


def test_rows8_two_groups_per_pass_for_every_type_and_width():
    """Passes over two 8-row groups at once (AVX-512 VNNI: 512-bit vectors from a type's threshold of columns;
    AVX2: pairs of 256-bit vectors up to one) forced for every type and 1..17 columns, with
    GGML_CPU_ROWS8_WIDE_MIN=1 and GGML_CPU_ROWS8_PAIRS_MAX=64 (read at start-up: a process of its own), give
    the bits of one group per pass (the switch off)."""
    require_rows8("q8_0")
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, GGML_CPU_ROWS8_WIDE_MIN="1", GGML_CPU_ROWS8_PAIRS_MAX="64")
    runs = {}
    for wide in ("0", "1"):
        proc = subprocess.run([sys.executable, "-c", TWO_GROUP_CHILD, here, wide], env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs[wide] = proc.stdout.splitlines()
    assert len(runs["1"]) == len(ROWS8_TYPES) * 2 * 17
    assert runs["0"] == runs["1"]


@pytest.mark.parametrize("weight_type", ROWS8_TYPES)
def test_rows8_experts_give_each_experts_one_column_product(weight_type):
    """MUL_MAT_ID in CPU_ROWS8 (a mixture of experts' FFN): every (token, slot) row equals its expert's matrix times
    that column as a one-column MUL_MAT in CPU_ROWS8 computes it, bit for bit, whatever else is routed with it: 1 to
    20 tokens, a column shared by a token's experts (gate, up) or one per slot (down), 1 and 2 threads, 40 rows
    (a pair of groups and one left over); and it agrees with llama.cpp's MUL_MAT_ID (standard layout) to 1e-5."""
    require_rows8(weight_type)
    n_expert, n_used, rows = 6, 3, 40
    k = 512 if weight_type.endswith("_K") else 96
    rng = np.random.default_rng(5)
    w = rng.standard_normal((n_expert * rows, k)).astype(np.float32)
    pool = rng.standard_normal((60, k)).astype(np.float32)
    single = [np.stack([_core.mul_mat(weight_type, w[e * rows:(e + 1) * rows], pool[c:c + 1], 1, "CPU_ROWS8")[0]
                        for c in range(len(pool))]) for e in range(n_expert)]
    for n_tokens in (1, 2, 5, 9, 20):
        ids = np.stack([rng.choice(n_expert, n_used, replace=False) for _ in range(n_tokens)]).astype(np.int32)
        for shared in (True, False):
            x = pool[:n_tokens] if shared else pool[:n_tokens * n_used]
            expected = np.stack([single[ids[t, s]][t if shared else t * n_used + s]
                                 for t in range(n_tokens) for s in range(n_used)])
            standard = _core.mul_mat_id(weight_type, w, n_expert, x, ids, 1, "standard")
            scale = np.abs(standard).max()
            for n_threads in (1, 2):
                out = _core.mul_mat_id(weight_type, w, n_expert, x, ids, n_threads, "CPU_ROWS8")
                assert np.array_equal(bits(out), bits(expected)), (weight_type, n_tokens, shared, n_threads)
                assert np.abs(out - standard).max() <= 1e-5 * scale, "far from llama.cpp's MUL_MAT_ID"


def test_mul_mat_id_rejects_bad_routing():
    w = np.zeros((4 * 8, 64), np.float32)
    x = np.zeros((2, 64), np.float32)
    with pytest.raises(ValueError):
        _core.mul_mat_id("q8_0", w, 4, x, np.array([[0, 4], [1, 2]], np.int32))  # expert 4 of 0..3
    with pytest.raises(ValueError):
        _core.mul_mat_id("q8_0", w, 3, x, np.array([[0, 1], [1, 2]], np.int32))  # 32 rows are not 3 experts
    with pytest.raises(ValueError):
        _core.mul_mat_id("q8_0", w, 4, np.zeros((3, 64), np.float32), np.array([[0, 1], [1, 2]], np.int32))


EXPERT_LOGITS_CHILD = """
import sys
import numpy as np
import llamaspec
llamaspec.set_verbose(True)  # the loader's buffer sizes, on stderr
ctx = llamaspec.Context(sys.argv[1], n_ctx=128, n_threads=1)
ctx.decode(list(range(5, 37)))
np.save(sys.argv[2], ctx.logits())
"""


def rows8_buffer_mib(log: str) -> float:
    found = re.findall(r"CPU_ROWS8 model buffer size =\s*([0-9.]+) MiB", log)
    assert found, "no CPU_ROWS8 buffer in the loader's log"
    return float(found[0])


def test_quantized_moe_target_puts_its_experts_in_rows8_and_stays_lossless(hybrid_models, tmp_path):
    """A qwen35moe target quantized to Q8_0: its experts' matrices go to CPU_ROWS8 (its CPU_ROWS8 buffer is larger
    than with GGML_CPU_ROWS8_EXPERTS=0, which keeps them in llama.cpp's layout; the logits agree to rounding), and
    greedy speculative decoding (n-gram, depths 4 and 8), alone and in batched rounds of 3 sequences (more tokens
    routed per expert), still equals plain decoding token for token."""
    require_rows8("q8_0")
    path = str(tmp_path / "qwen35moe-q8_0.gguf")
    llamaspec.quantize(hybrid_models["qwen35moe_target"], path, "Q8_0")
    logits, rows8_mib = {}, {}
    for experts in ("1", "0"):
        out = tmp_path / f"logits-{experts}.npy"
        proc = subprocess.run([sys.executable, "-c", EXPERT_LOGITS_CHILD, path, str(out)], capture_output=True,
                              text=True, timeout=300, env=dict(os.environ, GGML_CPU_ROWS8_EXPERTS=experts))
        assert proc.returncode == 0, proc.stderr[-2000:]
        logits[experts] = np.load(out)
        rows8_mib[experts] = rows8_buffer_mib(proc.stdout + proc.stderr)
    assert rows8_mib["1"] > rows8_mib["0"], f"the experts are not in CPU_ROWS8: {rows8_mib}"
    assert np.abs(logits["1"] - logits["0"]).max() <= 1e-3 * np.abs(logits["0"]).max()
    prompts = ["the cat sat on the mat. the cat sat on the", "one two three one two three one two three"]
    with llamaspec.Generator(path, spec_type="none", n_ctx=512, n_threads=2) as gen:
        reference = {p: gen.generate(p, 96, ignore_eos=True).tokens for p in prompts}
    for n_max in (4, 8):
        with llamaspec.Generator(path, spec_type="ngram-simple", n_max=n_max, n_ctx=512, n_threads=2,
                                 ngram_size_n=2) as gen:
            drafted = 0
            for p in prompts:
                result = gen.generate(p, 96, ignore_eos=True)
                assert result.tokens == reference[p], (n_max, p)
                drafted += result.stats.n_drafted
            assert drafted > 0
            batched = gen.generate_batch(prompts + prompts[:1], [96, 96, 40], n_seq=3)
            assert [r.tokens for r in batched] == [reference[prompts[0]], reference[prompts[1]],
                                                   reference[prompts[0]][:40]], n_max


def sign_patterns(k: int, seed: int) -> np.ndarray:
    """16 rows of +-1 (all +, all -, alternating in runs of 1, 2, 4, 8, 16, halves, random) with a few rows at
    mixed magnitudes: every quant type's extreme codes, multiplied by extreme column values."""
    j = np.arange(k)
    rows = [np.ones(k), -np.ones(k)]
    for run in (1, 2, 4, 8, 16):
        rows += [np.where((j // run) % 2 == 0, 1.0, -1.0), np.where((j // run) % 2 == 0, -1.0, 1.0)]
    rng = np.random.default_rng(seed)
    rows += [np.where(j < k // 2, 1.0, -1.0), rng.choice([-1.0, 1.0], k),
             np.where(j % 3 == 0, -1.0, 0.25), np.where(j % 5 == 0, 1.0, -0.5)]
    return np.asarray(rows, dtype=np.float32)


@pytest.mark.parametrize("weight_type", ROWS8_TYPES)
def test_rows8_extreme_quants_keep_exact_sums(weight_type):
    """Weights at their type's largest codes against columns at +-127: without VNNI, CPU_ROWS8 forms each dot
    product from int16 pair sums (maddubs), and a chain that left int16 would saturate or wrap; the sums must
    stay exact, so the product agrees with ggml's float64 reference as closely as for random operands."""
    require_rows8(weight_type)
    k = 512 if weight_type.endswith("_K") else 96
    w = sign_patterns(k, 0)
    x = np.concatenate([sign_patterns(k, 1), sign_patterns(k, 2)[::-1]])
    reference = _core.mul_mat_reference(weight_type, w, x)
    for n in (1, 4, 9, 16):
        for c0 in range(0, len(x), n):
            out = _core.mul_mat(weight_type, w, x[c0:c0 + n], 1, "CPU_ROWS8")
            err = np.abs(out - reference[c0:c0 + n]).max()
            assert err <= 1e-5 * np.abs(reference).max(), f"{weight_type}, {n} columns from {c0}: error {err}"


def test_the_check_sees_a_difference_when_there_is_one():
    """Without the batch-invariant mode and without the kernels, llama.cpp's tiled K-quant path rounds a wide
    batch differently from one column: the comparison above is able to fail."""
    w, x = operands("q6_K", 64, 11)
    single = one_column_results("q6_K", w, x[:16])
    llamaspec.set_batch_invariant(False)
    llamaspec.set_multidot(False)
    wide = _core.mul_mat("q6_K", w, x[:16], 2)
    assert not np.array_equal(bits(wide), bits(single))


def test_bad_input_raises():
    w, x = operands("q8_0", 4, 0)
    with pytest.raises(ValueError, match="unsupported weight type"):
        _core.mul_mat("q9_9", w, x)
    with pytest.raises(ValueError, match="block size"):
        _core.mul_mat("q8_0", w[:, :40], x[:, :40])
    with pytest.raises(ValueError, match="same number of columns"):
        _core.mul_mat("q8_0", w, x[:, :64])
    with pytest.raises(ValueError, match="positive"):
        _core.MatMulTimer("q8_0", 0, 64)
    with pytest.raises(ValueError, match="layout"):
        _core.mul_mat("q8_0", w, x, 1, "CPU_NOSUCH")


def test_rows8_column_quantizer_writes_what_ggml_writes():
    """CPU_ROWS8's K-quant kernels quantize their columns to Q8_K with their own (SIMD) code: byte for byte what
    ggml's from_float writes, for plain values, ties in magnitude of either sign (the first one decides the
    scale's sign), exact halves (rounded to even), zero blocks, tiny and huge values, NaN and infinity."""
    rng = np.random.default_rng(5)
    blocks = [rng.standard_normal(256) for _ in range(8)]
    tie = rng.standard_normal(256)
    tie[[3, 200]] = [-4.0, 4.0]  # equal magnitude, the negative first
    blocks.append(tie)
    tie2 = tie.copy()
    tie2[[3, 200]] = [4.0, -4.0]
    blocks.append(tie2)
    halves = (rng.integers(-254, 255, 256) / 2).astype(np.float64)  # k + 0.5 after scaling by -127 / -127
    halves[0] = -127.0
    blocks.append(halves)
    blocks.append(np.zeros(256))
    blocks.append(rng.standard_normal(256) * 1e-30)
    blocks.append(rng.standard_normal(256) * 1e30)
    one = np.zeros(256)
    one[77] = -2.5
    blocks.append(one)
    nan = rng.standard_normal(256)
    nan[10] = np.nan
    blocks.append(nan)
    inf = rng.standard_normal(256)
    inf[20] = np.inf
    blocks.append(inf)
    x = np.concatenate(blocks).astype(np.float32)
    for n_blocks in (1, 3, len(blocks)):
        part = np.ascontiguousarray(x[:256 * n_blocks])
        assert _core.quantize_q8_K(part, rows8=True) == _core.quantize_q8_K(part, rows8=False)
    for start in range(len(blocks)):
        part = np.ascontiguousarray(x[256 * start:256 * (start + 1)])
        assert _core.quantize_q8_K(part, rows8=True) == _core.quantize_q8_K(part, rows8=False), f"block {start}"
    with pytest.raises(ValueError):
        _core.quantize_q8_K(np.zeros(100, np.float32), rows8=True)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 640, 2053])
def test_fused_geglu_equals_ggml_gelu_times_gate(n):
    """patches/0014: the fused GEGLU (Gemma's FFN) takes 16 values at a time with AVX-512; every value equals
    ggml's scalar GELU (the f16 table) times the gate, as two ops compute it: the cut-offs at -10 and 10 and the
    values around them, f16 rounding ties, zeros, tiny and huge values, rows of lengths that leave a remainder."""
    rng = np.random.default_rng(n)
    rows = 5
    a = (rng.standard_normal((rows, n)) * 4).astype(np.float32)
    special = np.array([-10.0, 10.0, np.nextafter(np.float32(-10), np.float32(0)), np.nextafter(np.float32(10), np.float32(0)),
                        -10.5, 10.5, 0.0, -0.0, 1e-30, -1e-30, 1e30, -1e30, 65504.0, 70000.0,
                        1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, -(1.0 + 2.0**-11)], dtype=np.float32)  # f16 ties
    flat = a.reshape(-1)
    flat[rng.choice(flat.size, size=min(flat.size, 3 * len(special)), replace=False)] = np.resize(special, min(flat.size, 3 * len(special)))
    b = rng.standard_normal((rows, n)).astype(np.float32)
    for threads in (1, 2):
        fused = np.array(_core.geglu(a, b, False, threads), dtype=np.float32)
        two_ops = np.array(_core.geglu(a, b, True, threads), dtype=np.float32)
        assert np.array_equal(fused, two_ops), (n, threads, np.flatnonzero(fused != two_ops)[:5])
    expected = np.where(a.reshape(-1) >= 10, a.reshape(-1) * b.reshape(-1), fused)  # beyond the table: x * gate
    assert np.array_equal(fused, np.where(a.reshape(-1) <= -10, 0.0, expected))
    assert np.abs(fused).max() > 0  # the check sees values
