// _core.mul_mat / mul_mat_reference / time_mul_mat: one ggml MUL_MAT on the CPU backend, outside any model,
// for the kernel tests (every column of an n-column product equals the one-column product bit for bit) and
// the per-type micro-benchmark (bench/kernels.py). The weights are quantized with ggml's own quantizer.
#include "kernel_probe.h"

#include "ggml-cpu.h"
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <memory>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// block_q8_K's layout (ggml-common.h): the scale, 256 quants, 16 group sums
struct block_q8_K_view {
    float   d;
    int8_t  qs[256];
    int16_t bsums[16];
};

using f32_matrix = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

ggml_type type_from_name(const std::string & name) {
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char * tn = ggml_type_name((ggml_type) t);
        if (tn != nullptr && name == tn && ggml_get_type_traits((ggml_type) t)->blck_size > 0) {
            const ggml_type type = (ggml_type) t;
            if (ggml_get_type_traits_cpu(type)->vec_dot == nullptr || ggml_quantize_requires_imatrix(type)) {
                break;
            }
            return type;
        }
    }
    throw std::invalid_argument("unsupported weight type '" + name + "' (e.g. q4_0, q5_0, q8_0, q4_K, q5_K, q6_K, f16, bf16, f32)");
}

// The CPU device's extra buffer type of this name (e.g. "CPU_ROWS8", "CPU_REPACK"), or nullptr.
ggml_backend_buffer_type_t extra_buffer_type(const std::string & name) {
    ggml_backend_reg_t reg = ggml_backend_cpu_reg();
    auto get_extra = (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(
        reg, "ggml_backend_dev_get_extra_bufts");
    if (get_extra == nullptr) {
        return nullptr;
    }
    for (ggml_backend_buffer_type_t * b = get_extra(ggml_backend_reg_dev_get(reg, 0)); b && *b; ++b) {
        if (name == ggml_backend_buft_name(*b)) {
            return *b;
        }
    }
    return nullptr;
}

// A weight matrix (or, n_expert > 1, a stack of experts' matrices of `rows` rows each, as MUL_MAT_ID takes them)
// quantized once with ggml's quantizer; layout "standard" (ggml's own blocks) or the name of an extra CPU buffer
// type that stores it in its own layout (e.g. "CPU_ROWS8"), as a model loader would.
class QuantizedMatrix {
public:
    QuantizedMatrix(ggml_type type, const float * weights, int64_t rows, int64_t k, const std::string & layout,
                    int64_t n_expert = 1) {
        if (rows < 1 || k < 1 || n_expert < 1) {
            throw std::invalid_argument("rows, k and n_expert must be positive");
        }
        if (k % ggml_blck_size(type) != 0) {
            throw std::invalid_argument("k must be a multiple of the type's block size " +
                                        std::to_string(ggml_blck_size(type)));
        }
        std::vector<uint8_t> q(ggml_row_size(type, k) * rows * n_expert);
        ggml_quantize_init(type);
        ggml_quantize_chunk(type, weights, q.data(), 0, rows * n_expert, k, nullptr);
        auto new_tensor = [&] {
            return n_expert == 1 ? ggml_new_tensor_2d(ctx_, type, k, rows) : ggml_new_tensor_3d(ctx_, type, k, rows, n_expert);
        };
        if (layout == "standard") {
            ctx_ = ggml_init({q.size() + ggml_tensor_overhead() + 256, nullptr, false});
            if (ctx_ == nullptr) {
                throw std::runtime_error("ggml_init failed");
            }
            w_ = new_tensor();
            std::memcpy(w_->data, q.data(), q.size());
            return;
        }
        ggml_backend_buffer_type_t buft = extra_buffer_type(layout);
        if (buft == nullptr) {
            throw std::invalid_argument("layout '" + layout + "' is neither 'standard' nor an extra CPU buffer type "
                                        "of this build");
        }
        ctx_ = ggml_init({ggml_tensor_overhead() + 256, nullptr, true});
        w_ = new_tensor();
        buffer_ = ggml_backend_alloc_ctx_tensors_from_buft(ctx_, buft);
        if (buffer_ == nullptr) {
            ggml_free(ctx_);
            throw std::runtime_error("could not allocate the weights in " + layout);
        }
        ggml_backend_buffer_set_usage(buffer_, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        ggml_backend_tensor_set(w_, q.data(), 0, q.size());
    }
    ~QuantizedMatrix() {
        if (buffer_ != nullptr) {
            ggml_backend_buffer_free(buffer_);
        }
        ggml_free(ctx_);
    }
    QuantizedMatrix(const QuantizedMatrix &) = delete;
    QuantizedMatrix & operator=(const QuantizedMatrix &) = delete;

    ggml_tensor * tensor() const { return w_; }

private:
    ggml_context * ctx_ = nullptr;
    ggml_tensor * w_ = nullptr;
    ggml_backend_buffer_t buffer_ = nullptr;
};

// weights x (n columns): one MUL_MAT graph computed by ggml's CPU backend.
class Product {
public:
    Product(const QuantizedMatrix & w, int64_t n, int n_threads) : n_threads_(n_threads) {
        if (n < 1 || n_threads < 1) {
            throw std::invalid_argument("n and n_threads must be positive");
        }
        const int64_t k = w.tensor()->ne[0], rows = w.tensor()->ne[1];
        ctx_ = ggml_init({sizeof(float) * (k*n + rows*n) + 3 * ggml_tensor_overhead() + ggml_graph_overhead() + 1024,
                          nullptr, false});
        if (ctx_ == nullptr) {
            throw std::runtime_error("ggml_init failed");
        }
        x_   = ggml_new_tensor_2d(ctx_, GGML_TYPE_F32, k, n);
        out_ = ggml_mul_mat(ctx_, w.tensor(), x_);
        graph_ = ggml_new_graph(ctx_);
        ggml_build_forward_expand(graph_, out_);
    }
    ~Product() { ggml_free(ctx_); }
    Product(const Product &) = delete;
    Product & operator=(const Product &) = delete;

    float * x() { return (float *) x_->data; }
    const float * out() const { return (const float *) out_->data; }

    void compute() {
        ggml_cplan plan = ggml_graph_plan(graph_, n_threads_, nullptr);
        work_.resize(plan.work_size);
        plan.work_data = work_.data();
        if (ggml_graph_compute(graph_, &plan) != GGML_STATUS_SUCCESS) {
            throw std::runtime_error("ggml_graph_compute failed");
        }
    }

private:
    int n_threads_;
    ggml_context * ctx_ = nullptr;
    ggml_tensor * x_ = nullptr;
    ggml_tensor * out_ = nullptr;
    ggml_cgraph * graph_ = nullptr;
    std::vector<uint8_t> work_;
};

// Random weights of one type, timed against any number of columns (bench/kernels.py).
class MatMulTimer {
public:
    MatMulTimer(const std::string & type_name, int64_t rows, int64_t k, int n_threads, uint32_t seed,
                const std::string & layout)
        : n_threads_(n_threads), rng_(seed) {
        const ggml_type type = type_from_name(type_name);
        std::vector<float> w(rows * k);
        for (float & v : w) {
            v = normal_(rng_);
        }
        matrix_ = std::make_unique<QuantizedMatrix>(type, w.data(), rows, k, layout);
    }

    std::vector<double> time(int64_t n, int repeats) {
        if (repeats < 1) {
            throw std::invalid_argument("repeats must be positive");
        }
        Product p(*matrix_, n, n_threads_);
        for (int64_t i = 0; i < n * matrix_->tensor()->ne[0]; ++i) {
            p.x()[i] = normal_(rng_);
        }
        p.compute();  // warm-up: size the work buffer, bring the weights in
        std::vector<double> seconds;
        for (int i = 0; i < repeats; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            p.compute();
            seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        return seconds;
    }

    size_t nbytes() const { return ggml_nbytes(matrix_->tensor()); }

private:
    int n_threads_;
    std::mt19937 rng_;
    std::normal_distribution<float> normal_{0.0f, 1.0f};
    std::unique_ptr<QuantizedMatrix> matrix_;
};

// out computed by ggml's CPU backend with n_threads (its graph built in ctx)
void compute_on_cpu(ggml_context * ctx, ggml_tensor * out, int n_threads) {
    ggml_cgraph * graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, out);
    ggml_cplan plan = ggml_graph_plan(graph, n_threads, nullptr);
    std::vector<uint8_t> work(plan.work_size);
    plan.work_data = work.data();
    if (ggml_graph_compute(graph, &plan) != GGML_STATUS_SUCCESS) {
        throw std::runtime_error("ggml_graph_compute failed");
    }
}

// experts (k x rows x n_expert) times x (n_tokens x ne11 columns) routed by ids (n_tokens x n_used): one
// MUL_MAT_ID graph on ggml's CPU backend; the result is (n_tokens x n_used) rows of `rows` floats.
std::vector<float> mul_mat_id(const QuantizedMatrix & w, const float * x, int64_t ne11, const int32_t * ids,
                              int64_t n_used, int64_t n_tokens, int n_threads) {
    const int64_t k = w.tensor()->ne[0], rows = w.tensor()->ne[1];
    ggml_context * ctx = ggml_init({sizeof(float) * (k*ne11*n_tokens + rows*n_used*n_tokens) + sizeof(int32_t) * n_used*n_tokens +
                                    4 * ggml_tensor_overhead() + ggml_graph_overhead() + 1024, nullptr, false});
    if (ctx == nullptr) {
        throw std::runtime_error("ggml_init failed");
    }
    std::unique_ptr<ggml_context, decltype(&ggml_free)> owner(ctx, ggml_free);
    ggml_tensor * tx = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, k, ne11, n_tokens);
    ggml_tensor * tids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, n_used, n_tokens);
    std::memcpy(tx->data, x, sizeof(float) * k * ne11 * n_tokens);
    std::memcpy(tids->data, ids, sizeof(int32_t) * n_used * n_tokens);
    ggml_tensor * out = ggml_mul_mat_id(ctx, w.tensor(), tx, tids);
    compute_on_cpu(ctx, out, n_threads);
    const float * o = (const float *) out->data;
    return std::vector<float>(o, o + rows * n_used * n_tokens);
}

void check_shapes(const f32_matrix & w, const f32_matrix & x) {
    if (w.shape(1) != x.shape(1)) {
        throw std::invalid_argument("weights and x must have the same number of columns (k)");
    }
}

// an (n x rows) numpy array that owns v
template <typename T>
nb::ndarray<nb::numpy, T, nb::ndim<2>> to_numpy(std::vector<T> && v, size_t n, size_t rows) {
    auto * owned = new std::vector<T>(std::move(v));
    nb::capsule free_it(owned, [](void * p) noexcept { delete (std::vector<T> *) p; });
    return nb::ndarray<nb::numpy, T, nb::ndim<2>>(owned->data(), {n, rows}, free_it);
}

}  // namespace

// GEGLU as a model computes it (ggml_geglu_split: gelu(a) * b in one op), or as two ops (ggml_gelu, then ggml_mul),
// on the CPU backend: the kernel test compares the fused op's vector path with ggml's scalar GELU element by element.
static std::vector<float> geglu(const float * a, const float * b, int64_t n, int64_t rows, bool two_ops, int n_threads) {
    if (n < 1 || rows < 1 || n_threads < 1) {
        throw std::invalid_argument("shape and n_threads must be positive");
    }
    ggml_context * ctx = ggml_init({sizeof(float) * 4 * n * rows + 6 * ggml_tensor_overhead() + ggml_graph_overhead() + 1024,
                                    nullptr, false});
    if (ctx == nullptr) {
        throw std::runtime_error("ggml_init failed");
    }
    std::unique_ptr<ggml_context, decltype(&ggml_free)> owner(ctx, ggml_free);
    ggml_tensor * ta = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, rows);
    ggml_tensor * tb = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, rows);
    std::memcpy(ta->data, a, sizeof(float) * n * rows);
    std::memcpy(tb->data, b, sizeof(float) * n * rows);
    ggml_tensor * out = two_ops ? ggml_mul(ctx, ggml_gelu(ctx, ta), tb) : ggml_geglu_split(ctx, ta, tb);
    compute_on_cpu(ctx, out, n_threads);
    const float * o = (const float *) out->data;
    return std::vector<float>(o, o + n * rows);
}

void bind_kernels(nb::module_ & m) {
    m.def("geglu", [](f32_matrix a, f32_matrix b, bool two_ops, int n_threads) {
        if (a.shape(0) != b.shape(0) || a.shape(1) != b.shape(1)) {
            throw std::invalid_argument("a and b must have the same shape");
        }
        const int64_t rows = (int64_t) a.shape(0), n = (int64_t) a.shape(1);
        std::vector<float> out;
        {
            nb::gil_scoped_release release;
            out = geglu(a.data(), b.data(), n, rows, two_ops, n_threads);
        }
        return out;
    }, "a"_a, "b"_a, "two_ops"_a = false, "n_threads"_a = 1,
       "gelu(a) * b on ggml's CPU backend, row by row: the fused GEGLU op a model uses, or (two_ops) ggml_gelu then "
       "ggml_mul. Flat list of rows x n floats.");
    m.def("set_multidot", [](bool on) { ggml_cpu_set_multidot(on); }, "on"_a,
          "Process-wide: MUL_MAT with 1..16 columns reads each weight block once for all columns (patches/0008).");
    m.def("get_multidot", [] { return ggml_cpu_get_multidot(); });
    m.def("set_rows8_wide", [](bool on) { ggml_cpu_set_rows8_wide(on); }, "on"_a,
          "Process-wide: CPU_ROWS8 passes take two 8-row groups at once: 16 rows per 512-bit vector where the build has "
          "AVX-512 VNNI, else pairs of 256-bit vectors (same bits).");
    m.def("get_rows8_wide", [] { return ggml_cpu_get_rows8_wide(); });
    m.def("set_rows8_long_passes", [](bool on) { ggml_cpu_set_rows8_long_passes(on); }, "on"_a,
          "Process-wide: CPU_ROWS8 takes up to 16 columns per pass over the weights; off, up to 8 where the build has "
          "AVX-512, else 4 (same bits).");
    m.def("get_rows8_long_passes", [] { return ggml_cpu_get_rows8_long_passes(); });
    m.def("set_fa_rows", [](bool on) { ggml_cpu_set_fa_rows(on); }, "on"_a,
          "Process-wide: in batch-invariant mode, flash attention computes the query rows that share a K/V head "
          "together, with f32 sums (F16 caches; patches/0013). Off: ggml's per-row path.");
    m.def("get_fa_rows", [] { return ggml_cpu_get_fa_rows(); });
    m.def("set_geglu_simd", [](bool on) { ggml_cpu_set_geglu_simd(on); }, "on"_a,
          "Process-wide: the fused GEGLU takes 16 values at a time with AVX-512 (patches/0014; the same bits). Off: "
          "ggml's scalar loop.");
    m.def("get_geglu_simd", [] { return ggml_cpu_get_geglu_simd(); });

    m.def("quantize_q8_K", [](nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu> x, bool rows8) {
        const int64_t k = (int64_t) x.shape(0);
        if (k == 0 || k % 256 != 0) {
            throw std::invalid_argument("the length must be a positive multiple of 256");
        }
        std::string out(ggml_row_size(GGML_TYPE_Q8_K, k), '\0');
        if (rows8) {
            ggml_cpu_rows8_quantize_q8_K(x.data(), out.data(), k);
        } else {
            ggml_get_type_traits_cpu(GGML_TYPE_Q8_K)->from_float(x.data(), out.data(), k);
        }
        return nb::bytes(out.data(), out.size());
    }, "x"_a, "rows8"_a,
       "x (float32, a multiple of 256 long) as Q8_K blocks: ggml's from_float, or (rows8) the quantizer of CPU_ROWS8's "
       "K-quant kernels, which must write the same bytes.");

    m.def("mul_mat", [](const std::string & type_name, f32_matrix w, f32_matrix x, int n_threads,
                        const std::string & layout) {
        check_shapes(w, x);
        const int64_t rows = (int64_t) w.shape(0), k = (int64_t) w.shape(1), n = (int64_t) x.shape(0);
        std::vector<float> out;
        {
            nb::gil_scoped_release release;
            const QuantizedMatrix matrix(type_from_name(type_name), w.data(), rows, k, layout);
            Product p(matrix, n, n_threads);
            std::memcpy(p.x(), x.data(), sizeof(float) * n * k);
            p.compute();
            out.assign(p.out(), p.out() + n * rows);
        }
        return to_numpy(std::move(out), (size_t) n, (size_t) rows);
    }, "type"_a, "weights"_a, "x"_a, "n_threads"_a = 1, "layout"_a = "standard",
       "weights (rows x k, float32) quantized to `type`, times x (n x k): the (n x rows) result of ggml's CPU MUL_MAT. "
       "layout: 'standard' or an extra CPU buffer type that stores the weights its own way ('CPU_ROWS8').");

    m.def("mul_mat_id", [](const std::string & type_name, f32_matrix w, int64_t n_expert, f32_matrix x,
                           nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> ids, int n_threads,
                           const std::string & layout) {
        check_shapes(w, x);
        if (n_expert < 1 || w.shape(0) % n_expert != 0) {
            throw std::invalid_argument("the weights' rows must be n_expert matrices of equal height");
        }
        if (n_threads < 1) {
            throw std::invalid_argument("n_threads must be positive");
        }
        const int64_t rows = (int64_t) w.shape(0) / n_expert, k = (int64_t) w.shape(1);
        const int64_t n_tokens = (int64_t) ids.shape(0), n_used = (int64_t) ids.shape(1);
        if (n_tokens < 1 || n_used < 1 || n_used > n_expert) {
            throw std::invalid_argument("ids must be (n_tokens x n_used), 1 <= n_used <= n_expert");
        }
        if ((int64_t) x.shape(0) != n_tokens && (int64_t) x.shape(0) != n_tokens * n_used) {
            throw std::invalid_argument("x must have n_tokens rows (one column per token, shared by its experts) or "
                                        "n_tokens x n_used (one per token and slot)");
        }
        for (int64_t i = 0; i < n_tokens * n_used; ++i) {
            if (ids.data()[i] < 0 || ids.data()[i] >= n_expert) {
                throw std::invalid_argument("ids must lie in [0, n_expert)");
            }
        }
        const int64_t ne11 = (int64_t) x.shape(0) / n_tokens;
        std::vector<float> out;
        {
            nb::gil_scoped_release release;
            const QuantizedMatrix experts(type_from_name(type_name), w.data(), rows, k, layout, n_expert);
            out = mul_mat_id(experts, x.data(), ne11, ids.data(), n_used, n_tokens, n_threads);
        }
        return to_numpy(std::move(out), (size_t) (n_tokens * n_used), (size_t) rows);
    }, "type"_a, "weights"_a, "n_expert"_a, "x"_a, "ids"_a, "n_threads"_a = 1, "layout"_a = "standard",
       "A mixture of experts' product (ggml's CPU MUL_MAT_ID): weights (n_expert * rows x k, float32: the experts' "
       "matrices one after another) quantized to `type`; x (n_tokens or n_tokens * n_used rows of k); ids (n_tokens x "
       "n_used, int32): the experts of each token. The (n_tokens * n_used x rows) result: row t * n_used + s is "
       "expert ids[t, s] times token t's column (its slot's, with n_tokens * n_used rows of x). layout as for mul_mat.");

    m.def("mul_mat_reference", [](const std::string & type_name, f32_matrix w, f32_matrix x) {
        check_shapes(w, x);
        const ggml_type type = type_from_name(type_name);
        const int64_t rows = (int64_t) w.shape(0), k = (int64_t) w.shape(1), n = (int64_t) x.shape(0);
        if (k % ggml_blck_size(type) != 0) {
            throw std::invalid_argument("k must be a multiple of the type's block size");
        }
        // the weights as ggml stores them, and x as the kernels see it (converted to the vec_dot type)
        const ggml_type vec_dot_type = ggml_get_type_traits_cpu(type)->vec_dot_type;
        auto round_trip = [k](ggml_type t, const float * src, int64_t nrows) {
            std::vector<float> dst(nrows * k);
            if (t == GGML_TYPE_F32) {
                std::memcpy(dst.data(), src, sizeof(float) * nrows * k);
                return dst;
            }
            std::vector<uint8_t> q(ggml_row_size(t, k) * nrows);
            for (int64_t r = 0; r < nrows; ++r) {
                ggml_get_type_traits_cpu(t)->from_float(src + r*k, q.data() + r*ggml_row_size(t, k), k);
                const uint8_t * row = q.data() + r*ggml_row_size(t, k);
                if (t == GGML_TYPE_Q8_K) {  // ggml has no to_float for its intermediate type: d * q
                    for (int64_t i = 0; i < k; ++i) {
                        const block_q8_K_view * b = (const block_q8_K_view *) row + i / 256;
                        dst[r*k + i] = b->d * (float) b->qs[i % 256];
                    }
                } else {
                    ggml_get_type_traits(t)->to_float(row, dst.data() + r*k, k);
                }
            }
            return dst;
        };
        std::vector<float> wq;
        {
            // ggml_quantize_chunk, as MulMat quantizes (from_float may pick another rounding for some types)
            std::vector<uint8_t> q(ggml_row_size(type, k) * rows);
            ggml_quantize_init(type);
            ggml_quantize_chunk(type, w.data(), q.data(), 0, rows, k, nullptr);
            wq.resize(rows * k);
            for (int64_t r = 0; r < rows; ++r) {
                if (type == GGML_TYPE_F32) {  // stored as it is (ggml has no to_float for f32)
                    std::memcpy(wq.data() + r*k, q.data() + r*ggml_row_size(type, k), sizeof(float) * k);
                } else {
                    ggml_get_type_traits(type)->to_float(q.data() + r*ggml_row_size(type, k), wq.data() + r*k, k);
                }
            }
        }
        const std::vector<float> xq = round_trip(vec_dot_type, x.data(), n);
        std::vector<double> ref(n * rows);
        for (int64_t c = 0; c < n; ++c) {
            for (int64_t r = 0; r < rows; ++r) {
                double s = 0;
                for (int64_t i = 0; i < k; ++i) {
                    s += (double) wq[r*k + i] * (double) xq[c*k + i];
                }
                ref[c*rows + r] = s;
            }
        }
        return to_numpy(std::move(ref), (size_t) n, (size_t) rows);
    }, "type"_a, "weights"_a, "x"_a,
       "The same product in float64 from the dequantized weights and the dequantized converted x (ggml's reference).");

    nb::class_<MatMulTimer>(m, "MatMulTimer",
            "Random weights (rows x k) quantized to a type, timed against n random columns (bench/kernels.py).")
        .def(nb::init<const std::string &, int64_t, int64_t, int, uint32_t, const std::string &>(),
             "type"_a, "rows"_a, "k"_a, "n_threads"_a = 1, "seed"_a = 0, "layout"_a = "standard")
        .def("time", [](MatMulTimer & t, int64_t n, int repeats) {
            nb::gil_scoped_release release;
            return t.time(n, repeats);
        }, "n"_a, "repeats"_a = 5, "Seconds of each of `repeats` MUL_MATs with n columns (after one warm-up).")
        .def_prop_ro("nbytes", &MatMulTimer::nbytes, "Bytes of the quantized weights.");
}
