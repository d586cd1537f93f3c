#!/usr/bin/env bash
# One prepared run on a lent CUDA machine (H100/H200, 16 cores, no internet), at most 9 minutes:
#   1. env      the GPU, driver, nvcc, python, cupy                                   -> $OUT/env.txt
#   2. build    llamaspec with CUDA for sm_90 only (pip install .)                     -> $OUT/build.log (tail)
#   3. models   the tiny test models + a random-weight qwen3 of Qwen3-8B's layer shape (36 x 4096, n_ff 12288,
#               32/8 heads; 6.9 B block parameters, Q4_K_M 3.9 GiB) and its 2-block draft, written there
#   4. lossless greedy speculative == plain and batched == solo: draft-simple, n-gram, DSpark (tiny models),
#               depths 1..8, B = 1, 4, 16 (counts of equal outputs)
#   5. cost     verification cost curve cost(k)/cost(1), k = 1..16, on the large model, with the CUDA matmul
#               kernel (mmvq / mmq / cuBLAS ...) each width takes, from ggml-cuda's dispatch rules
#   6. cupy     Context.logits/features(device="cuda") are cupy arrays equal to the numpy ones
#   7. speed    tok/s of plain vs draft-simple vs Batch (B = 1, 4, 16) on the large model
# Steps 3-7 are `python3 bench/gpu.py PART --budget S`, each under its own `timeout`: a part that fails or
# hangs leaves the others' results. All land in $OUT/gpu_<device>.md and .json (saved as each part goes),
# plus $OUT/run.log (the parts' output, tracebacks included): 5 files in $OUT. The models go to
# /tmp/gpu_check_models, never to $OUT (what is under $OUT comes back).
#
# Time budget on the GPU machine (seconds; caps, 540 in all; give the device call timeout_s 560):
#   step      cap   expected  how estimated
#   env         5      2
#   build     300    ~190     the two earlier CUDA builds of this tree: 193 s and 182 s (FA kernels off)
#   models     45     ~16     here (2 cores): 8.7 s to draw the F32 template (one core, as there), 15.9 s to
#                             quantize it (2 threads; /8 with 16), 4.7 s to write the 3.9 GiB target
#   lossless   80     ~50     24 units (3 drafters x 8 depths: 16 prompts solo + B = 1, 4, 16) of 32 tokens;
#                             tiny models are launch-bound on a GPU, ~0.5 ms a pass (H200 run: ~1 ms for 16 layers)
#   cost       40     ~15     5 repeats x 16 widths x 2 samples x best of 3 = 480 passes of ~10 ms, + load
#   cupy       20      ~6     two model loads and four copies
#   speed      80      80     one repeat ~25 s (16 x 128 tokens one after another at ~150 tok/s, then the
#                             spec and Batch rows); the loop runs repeats (at most 3) while they fit
#   report     15      ~3     plus ~3 s of python/CUDA start per part
#   Expected ~6.5 min. Parts stop their loops before work that would not fit; if the build runs long, the
#   part budgets shrink in proportion to what is left, and every timeout is cut to end by 540 s.
# Why the large model is assembled: drawing Qwen3-8B's 7 B parameters in F32 (28 GB, one core) and quantizing
#   them takes minutes (2 of 36 blocks: 8.7 s to draw, 16 s to quantize on 2 cores here); bench/gpu_models.py
#   draws and quantizes 2 blocks and copies them into 36 (speed does not depend on the values).
#
# Build: CUDA for sm_90 as SASS only (90-real: no PTX, H100/H200 are sm_90), FlashAttention kernels off (most of
#   ggml-cuda's compile time; FA then stays off at run time), no NCCL, no fatbin compression. The last two are
#   new and untried on a GPU (this machine's CUDA 13 has no cuBLAS headers, so ggml-cuda cannot be compiled
#   here): if that build fails fast, it is retried once with the earlier runs' flags (90, FA off, NCCL off).
#   Every mmq instance is still compiled: ggml-cuda's dispatch references all of them.
#
# Carry: the machine has no llama.cpp and no internet. `bash tools/gpu_check.sh prepare` (here) fills
#   .devcarry/llama.cpp from vendor/llama.cpp (patched), pruned to what the CPU+CUDA build reads: no other
#   backends, tools/examples/tests/docs/models/scripts, non-x86 CPU kernels, miniaudio/stb headers (the
#   multimodal tool's), .github: ~15 MB. With the checkout (~46 MB, the 38 MB Gemma head included) that is
#   under the 64 MiB a call carries. Then run there with carry [".devcarry"]:
#     run(command="bash tools/gpu_check.sh", carry=[".devcarry"], timeout_s=560)
#
#   here:  bash tools/gpu_check.sh prepare       the carry
#          bash tools/gpu_check.sh --dry-run     every step but the build, on the installed CPU llamaspec, the
#                                                tiny models and a small 'large' model (6 x 512): 17 s on 2
#                                                idle cores (60 s beside a test run), same files in $OUT
#                                                (default /tmp/gpu_check); cupy rehearsed with a numpy stand-in
#   there: bash tools/gpu_check.sh [SECONDS]     the GPU run (default 540)
#
# History: run 1 (2026-12-04, H200): build 193 s; torch/jax imports crashed llamaspec's (fixed: --exclude-libs).
#   Run 2: build 182 s; torch/jax/llamaspec share a process in every order; test_context.py 8/12 (tolerances,
#   since scoped). bench/results/gpu/gpu_h200.md: greedy speculative == plain 0/3 prompts, batched 6/48.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gpu_check}
MODELS=/tmp/gpu_check_models
PARTS=(models lossless cost cupy speed)
declare -A GPU_BUDGET=([models]=45 [lossless]=80 [cost]=40 [cupy]=20 [speed]=80)
declare -A DRY_BUDGET=([models]=20 [lossless]=60 [cost]=40 [cupy]=20 [speed]=45)
GRACE=20          # a part's timeout is its budget + this (its loops stop by the budget; the timeout catches hangs)
REPORT_RESERVE=15
BUILD_TIMEOUT=300
FAST_CMAKE="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF"
FAST_CMAKE+=" -DGGML_CUDA_COMPRESSION_MODE=none"
SAFE_CMAKE="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF"

prepare() {
    grep -qsx "/.devcarry/" .git/info/exclude || { mkdir -p .git/info && echo "/.devcarry/" >> .git/info/exclude; }
    rm -rf .devcarry && mkdir -p .devcarry
    local skip=() b d
    for b in virtgpu cann openvino webgpu et metal hexagon sycl vulkan opencl zdnn musa hip rpc blas zendnn; do
        skip+=(--exclude="llama.cpp/ggml/src/ggml-$b"); done
    for d in tools examples tests docs models media scripts ci benches grammars prompts requirements .devops \
             conversion pocs licenses .git .github skills app 'convert_*.py'; do skip+=(--exclude="llama.cpp/$d"); done
    for d in arm loongarch powerpc riscv s390 wasm; do skip+=(--exclude="llama.cpp/ggml/src/ggml-cpu/arch/$d"); done
    for d in kleidiai spacemit; do skip+=(--exclude="llama.cpp/ggml/src/ggml-cpu/$d"); done
    # header-only libraries of the multimodal tool: their CMakeLists stay (vendor/CMakeLists.txt adds them)
    skip+=(--exclude="llama.cpp/vendor/miniaudio/miniaudio.h" --exclude="llama.cpp/vendor/stb/stb_image.h")
    tar -C vendor -cf - "${skip[@]}" llama.cpp | tar -C .devcarry -xf - || exit 1
    local tree carry
    tree=$(du -sb .devcarry | cut -f1)
    carry=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 stat -c %s 2>/dev/null \
             | awk -v t="$tree" '{s += $1} END {print s + t}')
    echo ".devcarry: $((tree / 1000000)) MB; with the checkout $((carry / 1000000)) MB of 67 (64 MiB)"
    (( carry < 67108864 )) || echo "WARNING: over 64 MiB: move python/llamaspec/models/*.gguf aside for the call"
}

write_env() {
    {
        date -u
        nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader 2>&1 | head -4
        nvcc --version 2>&1 | tail -2
        "$PY" --version
        echo "cores: $(nproc), memory: $(free -g | awk '/Mem:/ {print $2}') GiB"
        "$PY" -c "import cupy; print('cupy', cupy.__version__)" 2>&1 | tail -1
        echo "checkout: $(git rev-parse --short HEAD 2>/dev/null || echo '?')," \
             "$(git status --porcelain 2>/dev/null | wc -l) changed files"
    } > "$OUT/env.txt" 2>&1
}

build() {  # CUDA build of the checkout into site-packages; the fast flags, then once the proven ones
    export PATH="/usr/local/cuda/bin:$PATH"
    export LLAMASPEC_LLAMA_CPP_DIR="$PWD/.devcarry/llama.cpp"
    export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
    [[ -f "$LLAMASPEC_LLAMA_CPP_DIR/include/llama.h" ]] \
        || { echo "no $LLAMASPEC_LLAMA_CPP_DIR: run prepare here, carry .devcarry"; return 1; }
    local flags start=$SECONDS rc
    for flags in "$FAST_CMAKE" "$SAFE_CMAKE"; do
        export CMAKE_ARGS="$flags"
        echo "== CMAKE_ARGS=$flags" >> /tmp/gpu_check_build.log
        timeout $((BUILD_TIMEOUT - (SECONDS - start))) "$PY" -m pip install --no-deps --no-build-isolation -v . \
            >> /tmp/gpu_check_build.log 2>&1
        rc=$?
        (( rc == 0 || SECONDS - start > 90 )) && break  # a slow failure will not be quicker the second time
        rm -rf build/*/CMakeCache.txt build/*/CMakeFiles
    done
    { grep -m 40 -E "error|FAILED|CMake Error" /tmp/gpu_check_build.log; echo "== last lines"
      tail -120 /tmp/gpu_check_build.log; } > "$OUT/build.log"
    echo "build: rc $rc in $((SECONDS - start)) s with CMAKE_ARGS=$CMAKE_ARGS" | tee -a "$OUT/env.txt"
    (cd /tmp && "$PY" -c "import llamaspec; print('gpu offload:', llamaspec.supports_gpu_offload())") 2>&1 \
        | tail -1 | tee -a "$OUT/env.txt"
    return $rc
}

run_part() {  # run_part NAME BUDGET TIMEOUT [gpu.py options...]
    local name=$1 budget=$2 limit=$3 rc start=$SECONDS
    shift 3
    timeout -k 5 "$limit" "$PY" -X faulthandler bench/gpu.py "$name" --budget "$budget" --out "$OUT" \
        --models "$MODELS" "$@" >> "$OUT/run.log" 2>&1
    rc=$?
    if (( rc == 124 || rc == 137 )); then echo "   ($name killed by its ${limit} s timeout)" >> "$OUT/run.log"
    elif (( rc > 128 )); then echo "   ($name died of signal $((rc - 128)))" >> "$OUT/run.log"; fi
    printf '%-9s rc %-3s %4d s (budget %d)\n' "$name" "$rc" $((SECONDS - start)) "$budget"
}

run_parts() {  # run_parts TOTAL_SECONDS BUDGET_ARRAY_NAME [gpu.py options...]
    local total=$1
    local -n budgets=$2
    shift 2
    local planned=0 name left budget limit
    for name in "${PARTS[@]}"; do planned=$((planned + budgets[$name])); done
    left=$((total - SECONDS - REPORT_RESERVE - 5 * ${#PARTS[@]}))
    for name in "${PARTS[@]}"; do
        budget=${budgets[$name]}
        (( left < planned )) && budget=$((budget * left / planned))
        (( budget < 5 )) && budget=5
        limit=$((budget + GRACE))
        (( limit > total - SECONDS - REPORT_RESERVE )) && limit=$((total - SECONDS - REPORT_RESERVE))
        if (( limit < 5 )); then echo "$name: no time left" | tee -a "$OUT/run.log"; continue; fi
        run_part "$name" "$budget" "$limit" "$@"
    done
    timeout -k 2 "$REPORT_RESERVE" "$PY" bench/gpu.py report --out "$OUT" --models "$MODELS" "$@" >> "$OUT/run.log" 2>&1
    echo "report rc $?; results: $(ls "$OUT"/gpu_*.md 2>/dev/null | tr '\n' ' ')"
}

main() {
    local dry=0 total=540
    case "${1:-}" in
        prepare) prepare; return ;;
        --dry-run) dry=1; total=${2:-240} ;;
        "") ;;
        *[!0-9]*) echo "usage: $0 [prepare | --dry-run [SECONDS] | SECONDS]"; return 2 ;;
        *) total=$1 ;;
    esac
    export PYTHONUNBUFFERED=1 GPU_CHECK_COMMAND="bash tools/gpu_check.sh $*"
    mkdir -p "$OUT" && rm -f "$OUT"/gpu_*.md "$OUT"/gpu_*.json "$OUT"/{env,build,run}.{txt,log}
    rm -rf "$MODELS"
    : > /tmp/gpu_check_build.log
    write_env
    if (( dry )); then
        local installed
        installed=$(cd /tmp && "$PY" -c 'import llamaspec; print(llamaspec.__file__)' 2>&1)
        echo "dry run: no build (the installed llamaspec: $installed)" | tee "$OUT/build.log"
        run_parts "$total" DRY_BUDGET --dry-run
    else
        build || { echo "BUILD FAILED"; tail -40 "$OUT/build.log"; return 1; }
        run_parts "$total" GPU_BUDGET
    fi
    echo "total: $SECONDS s"
    sed -n '/^| part/,/^$/p' "$OUT"/gpu_*.md 2>/dev/null
}

main "$@"
