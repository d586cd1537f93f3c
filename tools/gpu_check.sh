#!/usr/bin/env bash
# One prepared run on a lent CUDA machine (H200): CUDA build of llamaspec, whether it shares a process
# with torch/jax, the cupy/device tests,
# (GPU_BENCH=1) bench/gpu.py, then as much of the test suite as the time left allows. Everything lands in $OUT.
#
# The machine has no internet and no llama.cpp: carry a pruned, patched tree (see README, "GPU"):
#   LLAMA_TREE=.devcarry/llama.cpp (ggml without the other backends, src, include, common, cmake,
#   vendor, gguf-py; about 24 MB). With the 38 MB Gemma head the tree passes the 64 MiB limit: move
#   python/llamaspec/models/*.gguf aside for the call (nothing there has its Gemma target) and back after.
# Second run (2026-12-04, session 23): build 182 s; torch/jax/llamaspec share a process in every order; 8 of
# 12 tests of test_context.py passed (3 exact CPU tolerances, now scoped; no gemma package there); the
# suite (-q) was cut at 355 s with ~30 failures unnamed, hence -v now.
# First run (2026-12-04, session 22): build 193 s; then every python that had imported torch, jax or scipy.linalg
# crashed importing llamaspec (static libstdc++ of that image's /opt/gcc; fixed by --exclude-libs in
# CMakeLists.txt), so pytest never reached a test there.
#
#   here:  bash tools/gpu_check.sh prepare      (fills .devcarry/llama.cpp from vendor/llama.cpp)
#   there: bash tools/gpu_check.sh [SECONDS_BUDGET, default 560]   (device run, carry [".devcarry"])
set -uo pipefail
if [[ "${1:-}" == prepare ]]; then
    grep -qx "/.devcarry/" .git/info/exclude || echo "/.devcarry/" >> .git/info/exclude
    rm -rf .devcarry && mkdir -p .devcarry
    skip=(); for b in virtgpu cann openvino webgpu et metal hexagon sycl vulkan opencl zdnn musa hip rpc blas zendnn; do
        skip+=(--exclude="llama.cpp/ggml/src/ggml-$b"); done
    for d in tools examples tests docs models media scripts ci benches grammars prompts requirements .devops \
             conversion pocs licenses .git; do skip+=(--exclude="llama.cpp/$d"); done
    tar -C vendor -cf - "${skip[@]}" llama.cpp | tar -C .devcarry -xf - && du -sh .devcarry
    exit
fi
export PYTHONUNBUFFERED=1
budget=${1:-560}
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"
export PATH="/usr/local/cuda/bin:$PATH"
export LLAMASPEC_LLAMA_CPP_DIR="$PWD/${LLAMA_TREE:-.devcarry/llama.cpp}"
# FlashAttention kernels off: they are most of ggml-cuda's compile time (FA then stays off at run time).
export CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF"
export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)

{ date; nvidia-smi -L; nvcc --version | tail -2; python3 --version; nproc
  python3 -c "import cupy; print('cupy', cupy.__version__)" 2>&1 | tail -1; } > "$out/env.txt" 2>&1

start=$SECONDS
if ! python3 -m pip install --no-deps --no-build-isolation -v . > "$out/build.log" 2>&1; then
    echo "BUILD FAILED after $((SECONDS - start)) s"; tail -40 "$out/build.log"; exit 1
fi
echo "build: $((SECONDS - start)) s" | tee -a "$out/env.txt"
cd /tmp  # import the installed package, not python/ in the checkout
python3 -c "import llamaspec; print('gpu offload:', llamaspec.supports_gpu_offload())" | tee -a "$out/env.txt"
cd - > /dev/null

# Does the CUDA build share a process with torch / jax (a notebook that trains and serves)? Either order.
tiny=/tmp/gpu_check_target.gguf
python3 -c "from llamaspec import tiny_models; tiny_models.write_target('$tiny')"
for order in "import torch; torch.zeros(1, device='cuda'); import llamaspec" \
             "import llamaspec; import torch; torch.zeros(1, device='cuda')" \
             "import jax; jax.numpy.zeros(1).block_until_ready(); import llamaspec"; do
    timeout 90 python3 -X faulthandler -c "$order
g = llamaspec.Generator('$tiny', spec_type='none', n_ctx=256)
print(len(g.generate('hello', 8, ignore_eos=True).tokens), 'tokens')" > /tmp/coexist.log 2>&1
    echo "coexist rc $? [$order]: $(tail -1 /tmp/coexist.log)" | tee -a "$out/env.txt"
    { echo "== $order"; cat /tmp/coexist.log; } >> "$out/coexist.log"
done
# With the image's pytest plugins autoloaded (they import torch/jax: the crash above), then with autoload
# off, naming the plugins the suite needs.
timeout 60 python3 -X faulthandler -m pytest --co -q --trace-config -p no:cacheprovider tests/test_context.py \
    > "$out/collect_autoload.log" 2>&1
echo "collect with autoload rc $?"; tail -8 "$out/collect_autoload.log"
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
plugins="-p xdist.plugin -p pytest_timeout -p no:cacheprovider"
timeout 120 python3 -X faulthandler -m pytest -q -rsfE $plugins tests/test_context.py > "$out/test_context.log" 2>&1
echo "test_context rc $?"; tail -5 "$out/test_context.log"
if [[ -n "${GPU_BENCH:-}" ]]; then
    timeout 150 python3 bench/gpu.py --out "$out/gpu_h200" 2>&1 | tail -25
fi
left=$(( budget - SECONDS ))
echo "test suite: $left s left"
if (( left > 30 )); then
    # -v: one line per finished test, so a run cut by the time limit still says which failed
    timeout "$left" python3 -X faulthandler -m pytest -v $plugins -n 8 --timeout 240 -rfE \
        --junitxml="$out/junit.xml" tests > "$out/tests.log" 2>&1
    echo "pytest rc $?"; grep -E "(FAILED|ERROR) " "$out/tests.log" | sed 's/^\[gw[0-9]*\] *\[ *[0-9]*%\] *//' | sort -u | head -60
    tail -3 "$out/tests.log"
fi
