#!/usr/bin/env bash
# Run part of the test suite under valgrind memcheck and report leaks and memory errors that
# involve llamaspec's own code or llama.cpp (CPython's own valgrind noise is not ours).
#   bash tools/memcheck.sh [pytest arguments]   (the default selection takes about 10 minutes on 2 cores:
#   every error path, and greedy + sampled generation with each drafter)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
    set -- tests/test_errors.py tests/test_lossless.py::test_stream_yields_the_same_tokens \
        tests/test_accounting.py::test_max_tokens_is_exact tests/test_sampling.py::test_seeded_sampling_is_repeatable \
        "tests/test_lossless.py::test_greedy_output_equals_target[draft-dspark-dspark-8]" \
        "tests/test_lossless.py::test_greedy_output_equals_target[draft-dflash-dflash-7]" \
        "tests/test_lossless.py::test_greedy_output_equals_target[ngram-mod-None-4]"
fi
# valgrind cannot run AVX-512 code: on such a CPU, check a copy of the same sources built for AVX2 (in build/,
# incremental after the first build, about 7 minutes on 2 cores), imported ahead of the installed package
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
    pkg="$PWD/build/memcheck-pkg"
    if [ -z "${LLAMASPEC_LLAMA_CPP_DIR:-}" ] && [ -f vendor/llama.cpp/include/llama.h ]; then
        export LLAMASPEC_LLAMA_CPP_DIR="$PWD/vendor/llama.cpp"
    fi
    python -m pip install . --no-deps -q --upgrade --target "$pkg" -C build-dir=build/memcheck-build \
        -C cmake.build-type=RelWithDebInfo -C install.strip=false \
        -C cmake.define.GGML_NATIVE=OFF -C cmake.define.GGML_AVX=ON -C cmake.define.GGML_AVX2=ON \
        -C cmake.define.GGML_FMA=ON -C cmake.define.GGML_F16C=ON -C cmake.define.GGML_AVX512=OFF
    export PYTHONPATH="$pkg${PYTHONPATH:+:$PYTHONPATH}"
fi
log="${MEMCHECK_LOG:-build/memcheck.log}"
mkdir -p "$(dirname "$log")"
python_bin=$(python -c "import os, sys; print(os.path.realpath(sys.executable))")
# tools/memcheck.supp: allocations llama.cpp keeps for the life of the process by design (each entry says why)
PYTHONMALLOC=malloc valgrind --leak-check=full --show-leak-kinds=definite,indirect --suppressions=tools/memcheck.supp \
    --log-file="$log" "$python_bin" -m pytest -q -x -p no:cacheprovider "$@"
# a loss record or an error counts as ours when one of its frames is in our code or llama.cpp
ours=$(awk '/^==[0-9]+== ([A-Z]|[0-9,]+ bytes in)/{if (block ~ /(llamaspec|llama_[a-z]|ggml_[a-z]|common_[a-z]|gguf_[a-z])/) n++; block=""} {block = block $0 "\n"} END {print n+0}' "$log")
grep -E "definitely lost|indirectly lost|ERROR SUMMARY" "$log" | tail -3
echo "memcheck: $ours error/leak record(s) involving llamaspec or llama.cpp (log: $log)"
[ "$ours" -eq 0 ]
