"""Does a core overlap streaming weights from memory with computing on them? The question behind the
verification cost curve (docs/guide/kernels.md): a pass of k tokens reads the same weights as a one-token
step, so with perfect overlap it would cost max(memory, compute) and with none memory + compute.

Three loops over the same number of 16-row Q8_0 blocks (544 bytes each, the CPU_ROWS8 kernel's inner loop:
per block and column 8 `vpdpbusd`, then a convert and two float operations):

- stream: read a buffer far larger than the caches (256 MB), 544 bytes per block, several streams;
- compute: the kernel over blocks that stay in L2, for C columns;
- both: per block, the stream's reads and the compute, in one loop but independent of each other (the
  compute never waits for the data streamed), which is the best case for overlap.

overlap = (stream + compute - both) / min(stream, compute): 1 when the shorter one hides entirely under
the longer, 0 when they add up.

    python bench/overlap.py [--columns 1,4,9,16] [--threads 2] [--repeats 3] [--out overlap]

Needs gcc and a CPU with AVX-512 VNNI. --threads N runs N processes at once (one per core) and reports
their mean. Writes bench/results/kernels/<out>.json and .md.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kernels import cpu_name, write_report  # bench/ is the script's folder

RESULTS = Path(__file__).resolve().parent / "results" / "kernels"

SOURCE = r"""
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
typedef struct { uint16_t d[16]; uint8_t q[8][64]; } block16;        /* 16 rows x 32 weights, as CPU_ROWS8 */
typedef struct { int32_t bias; float d; int32_t q[8]; } column;     /* one column's block */
enum { L2_BLOCKS = 1024, STREAMS = 8, BLOCK_BYTES = 544 };

/* mode bit 1: stream, bit 2: compute */
/* C (the columns) is a compile-time constant, as in the real kernel, so the sums stay in registers */
static __m512i pass(const block16 * w, const column * y, const char * stream, size_t stream_len,
                    long nblocks, int mode, float * out) {
    __m512 acc[C];
    for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();
    __m512i x0 = _mm512_setzero_si512(), x1 = x0;
    const size_t per_stream = stream_len / STREAMS;
    for (long ib = 0; ib < nblocks; ib++) {
        if (mode & 1) {
            const char * s = stream + (ib % STREAMS) * per_stream + ((ib / STREAMS) * BLOCK_BYTES) % per_stream;
            _mm_prefetch(s + 4096, _MM_HINT_T0);
            for (int o = 0; o < BLOCK_BYTES - 63; o += 128) {
                x0 = _mm512_xor_si512(x0, _mm512_loadu_si512(s + o));
                x1 = _mm512_xor_si512(x1, _mm512_loadu_si512(s + o + 64));
            }
        }
        if (mode & 2) {
            const block16 * b = w + ib % L2_BLOCKS;
            const column * yc = y + (ib % 16) * 16;
            __m512i s[C];
            for (int c = 0; c < C; c++) s[c] = _mm512_set1_epi32(yc[c].bias);
            for (int j = 0; j < 8; j++) {
                const __m512i q = _mm512_loadu_si512(b->q[j]);
                for (int c = 0; c < C; c++) s[c] = _mm512_dpbusd_epi32(s[c], q, _mm512_set1_epi32(yc[c].q[j]));
            }
            const __m512 dx = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) b->d));
            for (int c = 0; c < C; c++)
                acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_set1_ps(yc[c].d)), _mm512_cvtepi32_ps(s[c]), acc[c]);
        }
    }
    for (int c = 0; c < C; c++) _mm512_storeu_ps(out + 16 * c, acc[c]);
    return _mm512_xor_si512(x0, x1);
}

int main(int argc, char ** argv) {
    const int mode = atoi(argv[1]);
    const size_t stream_len = (size_t) 256 << 20;
    const long nblocks = (long) (stream_len / BLOCK_BYTES);
    block16 * w = aligned_alloc(64, sizeof(block16) * L2_BLOCKS);
    column * y = aligned_alloc(64, sizeof(column) * 256);
    char * stream = aligned_alloc(4096, stream_len + 8192);
    for (size_t i = 0; i < sizeof(block16) * L2_BLOCKS; i++) ((uint8_t *) w)[i] = (uint8_t) rand();
    for (int i = 0; i < L2_BLOCKS; i++) for (int r = 0; r < 16; r++) w[i].d[r] = 0x3c00;
    for (int i = 0; i < 256; i++) { y[i].bias = -(rand() % 4096); y[i].d = 0.01f; for (int j = 0; j < 8; j++) y[i].q[j] = rand(); }
    memset(stream, 1, stream_len + 8192);
    float out[16 * C];
    double best = 1e30; long long sink = 0;
    for (int r = 0; r < 5; r++) {
        const double t0 = now();
        sink += _mm512_reduce_add_epi64(pass(w, y, stream, stream_len, nblocks, mode, out));
        const double t = now() - t0;
        if (t < best) best = t;
    }
    float total = 0;  /* every column's results used, so none is optimised away */
    for (int i = 0; i < 16 * C; i++) total += out[i];
    printf("%.6e %lld %f\n", best, sink, total);
    return 0;
}
"""

MODES = {"stream": 1, "compute": 2, "both": 3}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", default="1,4,9,16")
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="overlap")
    args = parser.parse_args(argv)
    columns = [int(c) for c in args.columns.split(",")]
    t0 = time.time()
    if any(not 1 <= c <= 16 for c in columns):
        parser.error("--columns: each from 1 to 16")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "overlap.c"
        src.write_text(SOURCE)
        for c in columns:  # one program per column count
            subprocess.run(["gcc", "-O3", "-march=native", f"-DC={c}", str(src), "-o", str(Path(tmp) / f"overlap{c}")],
                           check=True)

        def run(c: int, mode: str) -> float:
            out = subprocess.run([str(Path(tmp) / f"overlap{c}"), str(MODES[mode])], check=True, capture_output=True,
                                 text=True)
            return float(out.stdout.split()[0])

        def all_cores(c: int, mode: str) -> float:
            with ThreadPoolExecutor(args.threads) as pool:  # one process per core, at once: their mean
                return statistics.mean(pool.map(lambda _: run(c, mode), range(args.threads)))

        report = {"args": " ".join(sys.argv[1:] if argv is None else argv), "threads": args.threads,
                  "cpu": cpu_name(), "repeats": args.repeats, "rows": []}
        for c in columns:
            got = {mode: [] for mode in MODES}
            for _ in range(args.repeats):  # interleaved: stream, compute, both, stream, ...
                for mode in MODES:
                    got[mode].append(all_cores(c, mode))
            med = {mode: statistics.median(v) for mode, v in got.items()}
            overlap = (med["stream"] + med["compute"] - med["both"]) / min(med["stream"], med["compute"])
            row = {"columns": c, **{f"{m}_ms": 1e3 * v for m, v in med.items()}, "overlap": overlap,
                   "all": {m: v for m, v in got.items()}}
            report["rows"].append(row)
            print(f"C={c}: stream {row['stream_ms']:.1f} ms, compute {row['compute_ms']:.1f} ms, "
                  f"both {row['both_ms']:.1f} ms, overlap {overlap:.2f}", flush=True)
    lines = ["# Streaming and compute on one core: overlap", "",
             f"`python bench/overlap.py {report['args']}` on {report['cpu']}: {args.threads} processes at once "
             f"(their mean), medians of {args.repeats} interleaved repeats, each the best of 5 passes over 256 MB "
             "(493,447 blocks of 16 rows x 32 weights).", "",
             "| columns | stream ms | compute ms | both ms | stream + compute | overlap |", "|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['columns']} | {r['stream_ms']:.1f} | {r['compute_ms']:.1f} | {r['both_ms']:.1f} | "
                     f"{r['stream_ms'] + r['compute_ms']:.1f} | {r['overlap']:.2f} |")
    lines += ["", "overlap: (stream + compute - both) / min(stream, compute); 1 = the shorter hides under the "
              "longer, 0 = they add up.", ""]
    report["seconds"] = time.time() - t0
    write_report(RESULTS, args.out, report, "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
