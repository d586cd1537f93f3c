"""Which CUDA matmul kernel ggml runs for a weight type and a number of activation columns (the tokens of
one verification pass), on an NVIDIA GPU of a given compute capability.

Derived from the dispatch rules of the vendored tree, not observed: ``ggml_cuda_mul_mat`` in
vendor/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu tries, in this order, mmvf (float vector kernel,
``ggml_cuda_should_use_mmvf``, mmvf.cu), mmf (float tensor-core kernel for few columns,
``ggml_cuda_should_use_mmf``, mmf.cu), mmvq (quantized vector kernel, ``ggml_cuda_should_use_mmvq``,
mmvq.cu), mmq (quantized tiles, ``ggml_cuda_should_use_mmq``, mmq.cu), else cuBLAS. Only the NVIDIA
branches are mirrored (FORCE_MMQ / FORCE_CUBLAS off, as tools/gpu_check.sh builds). With one column the
graph may also fuse a matmul with its neighbours (``ggml_cuda_should_fuse_mul_mat_vec_q/_f``, e.g. the FFN's
gate and up with the GLU): the same kernel family with an epilogue, not told apart here.

On sm_90 (H100/H200) this gives, for Q4_K/Q6_K weights: mmvq for 1..8 columns, mmq from 9 (never cuBLAS:
Hopper has int8 tensor cores, so ``turing_mma_available``); a Q4_K_M model's verification widths thus
switch kernel family between k = 8 and k = 9, and with it the arithmetic (mmvq: per-row dot products of
q8_1 activations; mmq: tiles through the tensor cores).
"""

from __future__ import annotations

MMVQ_MAX_BATCH_SIZE = 8  # mmvq.cuh
MMVF_MAX_BATCH_SIZE = 8  # mmvf.cuh
MMF_ROWS_PER_BLOCK = 32  # mmf.cuh
MMQ_TYPES = {"Q1_0", "Q2_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
             "IQ1_S", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS", "IQ4_NL", "MXFP4", "NVFP4"}
FLOAT_TYPES = {"F32", "F16", "BF16"}

CC_VOLTA, CC_TURING, CC_AMPERE, CC_ADA, CC_HOPPER, CC_BLACKWELL = 700, 750, 800, 890, 900, 1200


def _mmvq(type_name: str, cc: int, ncols: int) -> bool:
    """ggml_cuda_should_use_mmvq, NVIDIA branches."""
    if type_name in FLOAT_TYPES:
        return False
    if cc == CC_ADA:
        return ncols <= {"Q2_K": 4, "Q3_K": 6}.get(type_name, MMVQ_MAX_BATCH_SIZE)
    if cc == CC_BLACKWELL:
        return ncols <= {"Q2_K": 5, "Q3_K": 5, "Q4_K": 5, "Q5_K": 6, "Q6_K": 7}.get(type_name, MMVQ_MAX_BATCH_SIZE)
    if cc == CC_VOLTA:
        return ncols <= {"Q2_K": 4, "Q3_K": 6, "Q4_K": 5, "Q5_K": 6, "Q6_K": 7}.get(type_name, MMVQ_MAX_BATCH_SIZE)
    return ncols <= MMVQ_MAX_BATCH_SIZE


def _mmq(type_name: str, cc: int, ncols: int) -> bool:
    """ggml_cuda_should_use_mmq, NVIDIA (48 KiB of shared memory per block assumed, as on every sm_70+)."""
    if type_name not in MMQ_TYPES:
        return False
    if cc >= CC_TURING:  # turing_mma_available
        return True
    return cc < CC_VOLTA or ncols < 64  # dp4a; MMQ_DP4A_MAX_BATCH_SIZE with fp16 tensor cores


def _mmvf(type_name: str, cc: int, ncols: int, rows: int, channels: int) -> bool:
    """ggml_cuda_should_use_mmvf for contiguous, aligned F32/F16/BF16 src0 (rows = ne01, channels = ne02*ne03)."""
    if type_name == "F32":
        return ncols <= (3 if cc >= CC_AMPERE else 4 if cc >= CC_TURING else 3)
    if type_name in ("F16", "BF16"):
        small = rows <= 512 or channels == 1
        if cc >= CC_AMPERE:  # ampere_mma_available
            return small and ncols == 1
        tensor_cores = cc >= CC_VOLTA if type_name == "F16" else False
        return small and ncols <= 3 if tensor_cores else ncols <= 8
    return False


def _mmf(type_name: str, cc: int, ncols: int, rows: int, row_len: int) -> bool:
    """ggml_cuda_should_use_mmf (MUL_MAT, not MUL_MAT_ID) for contiguous, aligned src0."""
    if type_name not in FLOAT_TYPES:
        return False
    values_per_4_bytes = 4 // (4 if type_name == "F32" else 2)
    if row_len % (32 * values_per_4_bytes) or rows % MMF_ROWS_PER_BLOCK or ncols > 16:
        return False
    if type_name == "F32":
        return cc >= CC_AMPERE
    if type_name == "F16":
        return cc == CC_VOLTA or cc >= CC_TURING
    return cc >= CC_AMPERE  # BF16


def cuda_matmul_kernel(type_name: str, cc: int, ncols: int, rows: int = 4096, row_len: int = 4096,
                       channels: int = 1) -> str:
    """'mmvq', 'mmq', 'mmvf', 'mmf' or 'cuBLAS' for src0 of ``type_name`` [rows x row_len] (x channels), src1 of
    ``ncols`` columns, F32 activations and output (a llama.cpp decode), on an NVIDIA GPU of compute capability
    ``cc`` (e.g. 900)."""
    if _mmvf(type_name, cc, ncols, rows, channels):
        kernel = "mmvf"
    elif _mmf(type_name, cc, ncols, rows, row_len):
        kernel = "mmf"
    elif _mmvq(type_name, cc, ncols):
        kernel = "mmvq"
    elif _mmq(type_name, cc, ncols):
        kernel = "mmq"
    else:
        return "cuBLAS"
    return kernel


def model_matmuls(shape: dict, weight_types: dict, n_kv: int, n_vocab: int = 384) -> list:
    """The matmuls of a qwen3 block + head as (label, type, rows, row_len, channels), for cuda_matmul_kernel.

    ``weight_types``: tensor name suffix -> list of type names (e.g. {"attn_v.weight": ["Q4_K", "Q6_K"]}).
    Attention without FlashAttention (the CUDA build has its kernels off): K·Q and V·softmax read the F16
    cache of ``n_kv`` cells."""
    e, hd = shape["n_embd"], shape["head_dim"]
    q, kv, ff = shape["n_head"] * hd, shape["n_head_kv"] * hd, shape["n_ff"]
    dims = {"attn_q.weight": (q, e), "attn_k.weight": (kv, e), "attn_v.weight": (kv, e), "attn_output.weight": (e, q),
            "ffn_gate.weight": (ff, e), "ffn_up.weight": (ff, e), "ffn_down.weight": (e, ff),
            "output.weight": (n_vocab, e)}
    out = [(f"{name.split('.')[0]} {t}", t, *dims[name], 1)
           for name, types in weight_types.items() if name in dims for t in types]
    out.append(("attention K*Q, F16 cache", "F16", n_kv, hd, shape["n_head_kv"]))
    out.append(("attention V*softmax, F16 cache", "F16", hd, n_kv, shape["n_head_kv"]))
    return out


def kernel_table(shape: dict, weight_types: dict, cc: int, n_kv: int, k_max: int = 16) -> list:
    """[{'matmul': label, 'type': type, 'kernels': [kernel for k = 1..k_max]}] for the model's matmuls."""
    return [{"matmul": label, "type": t, "kernels": [cuda_matmul_kernel(t, cc, k, rows, row_len, ch)
                                                      for k in range(1, k_max + 1)]}
            for label, t, rows, row_len, ch in model_matmuls(shape, weight_types, n_kv)]


def weight_types_of(path: str) -> dict:
    """Matmul weight name suffix -> the type names it has across the model's blocks."""
    from llamaspec import testing

    seen: dict = {}
    for t in testing.gguf.GGUFReader(path).tensors:
        suffix = t.name.split(".", 2)[2] if t.name.startswith("blk.") else t.name
        seen.setdefault(suffix, set()).add(t.tensor_type.name)
    return {k: sorted(v) for k, v in seen.items()
            if k.endswith(".weight") and "norm" not in k and k != "token_embd.weight"}
