// Thin nanobind bindings: Model, Engine, GGUF inspection and log control.
// The round loop runs in C++ with the GIL released; Python only orchestrates.
#include "bindings_batch.h"
#include "bindings_rpc.h"
#include "kernel_probe.h"
#include "bindings_common.h"
#include "context.h"
#include "engine.h"

#include "ggml-cpu.h"
#include "model.h"
#include "sampling.h"

#include "chat.h"
#include "log.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <stdexcept>

namespace nb = nanobind;
using namespace nb::literals;
using namespace llamaspec;

namespace {

std::atomic<int> g_log_level{GGML_LOG_LEVEL_ERROR};

void log_filter(ggml_log_level level, const char * text, void * /*user_data*/) {
    // CONT lines continue the previous message; keep them with errors only when verbose
    const int threshold = g_log_level.load();
    if (level == GGML_LOG_LEVEL_CONT ? threshold <= GGML_LOG_LEVEL_INFO : (int) level >= threshold) {
        std::fputs(text, stderr);
    }
}

void set_verbose(bool verbose) {
    g_log_level = verbose ? GGML_LOG_LEVEL_INFO : GGML_LOG_LEVEL_ERROR;
    common_log_set_verbosity_thold(verbose ? LOG_LEVEL_INFO : LOG_LEVEL_ERROR);
}

// One Engine serves one caller at a time; a second thread gets an error instead of a data race.
class EngineHandle {
public:
    EngineHandle(ModelPtr target, ModelPtr draft, const EngineConfig & config)
        : engine_(std::make_unique<Engine>(std::move(target), std::move(draft), config)) {
        // asked between rounds, with the GIL released: cancel() from any thread, or a pending signal
        // (Ctrl-C) whose Python handler raised; the error is re-raised once the call returns
        engine_->set_interrupt_check([this] {
            if (cancel_.exchange(false)) {
                return true;
            }
            nb::gil_scoped_acquire gil;
            if (PyErr_CheckSignals() != 0) {
                signal_raised_ = true;
                return true;
            }
            return false;
        });
    }

    // Stop the running generation after its current round (callable from any thread).
    void cancel() { cancel_ = true; }
    void clear_cancel() { cancel_ = false; }

    // Call with the GIL held after a run: raises the exception a signal handler set (KeyboardInterrupt).
    void raise_if_signalled() {
        if (signal_raised_) {
            signal_raised_ = false;
            throw nb::python_error();
        }
    }

    template <typename F>
    auto with_engine(F && f) {
        return run_exclusive(busy_, engine_.get(), "this Generator is closed",
                             "this Generator is already in use by another thread; create one Generator per thread",
                             std::forward<F>(f));
    }

    void close() {
        with_engine([](Engine &) { return 0; });  // refuses while another thread runs it
        engine_.reset();
    }
    bool closed() const { return !engine_; }

private:
    std::unique_ptr<Engine> engine_;
    std::atomic<bool> busy_{false};
    std::atomic<bool> cancel_{false};
    bool signal_raised_ = false;
};

nb::bytes to_bytes(const std::string & s) { return nb::bytes(s.data(), s.size()); }

using LogitRows = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using Support = std::pair<std::vector<llama_token>, std::vector<float>>;

Support support_of(const TruncatedDist & dist) {
    Support out{dist.ids, {}};
    out.second.reserve(dist.ids.size());
    for (size_t i = 0; i < dist.ids.size(); ++i) {
        out.second.push_back(dist.prob(i));
    }
    return out;
}


// llama.cpp's own chain with the same parameters: top_k -> top_p -> min_p -> temp -> dist
llama_sampler_ptr llama_chain(const SamplingParams & p) {
    llama_sampler_ptr chain(llama_sampler_chain_init(llama_sampler_chain_default_params()));
    llama_sampler_chain_add(chain.get(), llama_sampler_init_top_k(p.top_k));
    llama_sampler_chain_add(chain.get(), llama_sampler_init_top_p(p.top_p, 0));
    llama_sampler_chain_add(chain.get(), llama_sampler_init_min_p(p.min_p, 0));
    llama_sampler_chain_add(chain.get(), llama_sampler_init_temp(p.temperature));
    llama_sampler_chain_add(chain.get(), llama_sampler_init_dist((uint32_t) p.seed));
    return chain;
}

void apply_chain(llama_sampler * chain, const float * logits, int32_t n_vocab, std::vector<llama_token_data> & buf,
                 llama_token_data_array & arr) {
    buf.resize(n_vocab);
    for (int32_t i = 0; i < n_vocab; ++i) {
        buf[i] = {i, logits[i], 0.0f};
    }
    arr = {buf.data(), buf.size(), -1, false};
    llama_sampler_apply(chain, &arr);
}

}  // namespace

NB_MODULE(_core, m) {
    m.doc() = "llamaspec native core: llama.cpp speculative decoding with per-round statistics";

    llama_backend_init();
    // batch-invariant CPU kernels on by default: greedy speculative output equals plain decoding bit for
    // bit (patches/0002); bench/batch_invariance.py measures the cost (about 1% on plain decoding)
    ggml_cpu_set_batch_invariant(true);
    llama_log_set(log_filter, nullptr);
    set_verbose(false);
    bind_batch(m);
    bind_rpc(m);
    bind_kernels(m);

    m.def("set_verbose", &set_verbose, "verbose"_a, "Show llama.cpp's informational logs (default: errors only).");
    m.def("system_info", [] { return std::string(llama_print_system_info()); });

    m.def("inspect_gguf", [](const std::string & path) {
        const GgufInfo info = inspect_gguf(path);
        nb::dict d;
        d["path"] = info.path;
        d["architecture"] = info.architecture;
        d["n_tensors"] = info.n_tensors;
        d["has_markov_head"] = info.has_markov_head;
        d["has_confidence_head"] = info.has_confidence_head;
        d["has_nextn"] = info.has_nextn;
        return d;
    }, "path"_a, "Read a GGUF header (no weights). Raises ValueError for a missing, unreadable or non-GGUF file.");

    m.def("set_batch_invariant", [](bool on) { ggml_cpu_set_batch_invariant(on); }, "on"_a,
          "Process-wide: compute every row of a matmul / attention in the same order whatever the batch shape "
          "(CPU backend), so verification batches give the logits of one-token decoding.");
    m.def("get_batch_invariant", [] { return ggml_cpu_get_batch_invariant(); });
    // not llama_supports_gpu_offload(): that is also true of any build with the RPC backend (ours), GPU or not
    m.def("supports_gpu_offload", [] {
        return ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_GPU) != nullptr ||
               ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_IGPU) != nullptr;
    }, "This build has a GPU backend (CUDA, ...) and a device for it, so models load onto the GPU.");

    nb::class_<Context>(m, "Context")
        .def(nb::new_([](ModelPtr model, int n_ctx, int n_seq, int n_batch, int n_threads,
                         const std::vector<int32_t> & capture_layers, const std::string & rollback,
                         int max_rollback, const std::string & cache_type, const std::string & flash_attn) {
                 if (!model) {
                     throw std::invalid_argument("a model is required");
                 }
                 if (cache_type != "f16" && cache_type != "f32") {
                     throw std::invalid_argument("cache_type must be 'f16' or 'f32', got '" + cache_type + "'");
                 }
                 if (flash_attn != "auto" && flash_attn != "on" && flash_attn != "off") {
                     throw std::invalid_argument("flash_attn must be 'auto', 'on' or 'off', got '" + flash_attn + "'");
                 }
                 if (n_ctx < 8 || n_seq < 1 || n_seq > 256 || n_batch < 1) {
                     throw std::invalid_argument("need n_ctx >= 8, 1 <= n_seq <= 256 and n_batch >= 1");
                 }
                 llama_context_params params = llama_context_default_params();
                 params.n_ctx = (uint32_t) n_ctx * (uint32_t) n_seq;  // n_ctx tokens per sequence
                 params.n_seq_max = (uint32_t) n_seq;
                 params.n_batch = (uint32_t) n_batch;
                 params.n_ubatch = (uint32_t) std::min(n_batch, 512);
                 params.kv_unified = false;
                 const int threads = n_threads > 0 ? n_threads : common_cpu_get_num_math();
                 params.n_threads = params.n_threads_batch = threads;
                 params.no_perf = true;
                 params.type_k = params.type_v = cache_type == "f32" ? GGML_TYPE_F32 : GGML_TYPE_F16;
                 // llama.cpp's CPU flash attention computes in f16 whatever the cache type
                 params.flash_attn_type = flash_attn == "on"    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                                          : flash_attn == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                                : LLAMA_FLASH_ATTN_TYPE_AUTO;
                 ensure_cache_fits(*model, n_ctx, n_seq, (int32_t) params.n_ubatch, (uint32_t) max_rollback);
                 nb::gil_scoped_release release;
                 auto ctx = std::make_shared<Context>(model, params, (uint32_t) max_rollback, "context",
                                                      RollbackPolicy::parse(rollback));
                 ctx->capture_layers(capture_layers);
                 return ctx;
             }), "model"_a, "n_ctx"_a = 4096, "n_seq"_a = 1, "n_batch"_a = 512, "n_threads"_a = 0,
             "capture_layers"_a = std::vector<int32_t>(), "rollback"_a = "auto", "max_rollback"_a = 16,
             "cache_type"_a = "f16", "flash_attn"_a = "auto")
        .def_prop_ro("n_ctx", &Context::n_ctx_per_seq)
        .def_prop_ro("n_seq", [](const Context & c) { return (int) llama_n_seq_max(c.get()); })
        .def_prop_ro("rollback", [](const Context & c) { return std::string(rollback_mode_name(c.rollback_mode())); })
        .def_prop_ro("captured_layers", &Context::captured_layers)
        .def_prop_ro("n_outputs", &Context::n_outputs)
        .def_prop_ro("n_decoded", &Context::n_decoded)
        .def_prop_ro("graphs_reused", [](const Context & c) { return llama_perf_context(c.get()).n_reused; })
        .def("n_pos", &Context::n_pos, "seq"_a = 0)
        .def("decode", [](Context & c, const std::vector<llama_token> & tokens, int pos, int seq,
                          const std::string & outputs) {
            nb::gil_scoped_release release;
            return c.decode_tokens(tokens, pos, seq, outputs);
        }, "tokens"_a, "pos"_a = -1, "seq"_a = 0, "outputs"_a = "all")
        .def("decode_embeddings", [](Context & c, nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu> rows,
                                     int pos, int seq, const std::string & outputs) {
            const int32_t n_rows = (int32_t) rows.shape(0), width = (int32_t) rows.shape(1);
            nb::gil_scoped_release release;
            return c.decode_embeddings(rows.data(), n_rows, width, pos, seq, outputs);
        }, "rows"_a, "pos"_a = -1, "seq"_a = 0, "outputs"_a = "none")
        .def_prop_ro("n_embd_input", [](const Context & c) { return c.model().n_embd_input(); })
        .def("confidence", [](const Context & c) {
            std::vector<float> out;
            for (int32_t i = 0; i < c.n_outputs(); ++i) {
                out.push_back(c.confidence(i));
            }
            return out;
        }, "A DSpark head's confidence at every output row of the latest decode.")
        .def("_logits_into", [](const Context & c, nb::ndarray<float, nb::ndim<2>, nb::c_contig, nb::device::cpu> out) {
            const size_t n_vocab = (size_t) c.model().n_vocab();
            if ((int64_t) out.shape(0) != c.n_outputs() || out.shape(1) != n_vocab) {
                throw std::invalid_argument("output array has the wrong shape");
            }
            for (int32_t i = 0; i < c.n_outputs(); ++i) {
                std::copy_n(c.logits_row(i), n_vocab, out.data() + (size_t) i * n_vocab);
            }
        }, "out"_a)
        .def("_features_into", [](const Context & c, int layer,
                                  nb::ndarray<float, nb::ndim<2>, nb::c_contig, nb::device::cpu> out) {
            const size_t n_embd = (size_t) c.model().n_embd();
            if ((int64_t) out.shape(0) != c.n_decoded() || out.shape(1) != n_embd) {
                throw std::invalid_argument("output array has the wrong shape");
            }
            const float * data = c.layer_features(layer);
            std::copy_n(data, (size_t) c.n_decoded() * n_embd, out.data());
        }, "layer"_a, "out"_a)
        .def("trim", &Context::trim, "seq"_a, "n_past"_a)
        .def("clear", &Context::clear);

    m.def("chat_prompt", [](const ModelPtr & model, const std::vector<std::pair<std::string, std::string>> & messages,
                            bool add_generation_prompt, const std::string & template_override) {
        if (!model) {
            throw std::invalid_argument("a model is required");
        }
        common_chat_templates_inputs inputs;
        for (const auto & [role, content] : messages) {
            common_chat_msg msg;
            msg.role = role;
            msg.content = content;
            inputs.messages.push_back(std::move(msg));
        }
        inputs.add_generation_prompt = add_generation_prompt;
        inputs.use_jinja = true;
        common_chat_params params;
        try {
            // the GGUF's own template (tokenizer.chat_template) unless overridden, rendered with jinja
            // as llama-server renders it
            auto templates = common_chat_templates_init(model->get(), template_override);
            params = common_chat_templates_apply(templates.get(), inputs);
        } catch (const std::exception & e) {
            throw std::invalid_argument(std::string("could not apply the chat template: ") + e.what());
        }
        return std::make_pair(params.prompt, params.additional_stops);
    }, "model"_a, "messages"_a, "add_generation_prompt"_a = true, "template"_a = "",
       "Render (role, content) messages with the model's chat template: (prompt text, extra stop strings).");

    m.def("quantize", [](const std::string & src, const std::string & dst, const std::string & type, int n_threads) {
        static const std::pair<const char *, llama_ftype> types[] = {
            {"Q2_K", LLAMA_FTYPE_MOSTLY_Q2_K}, {"Q3_K_S", LLAMA_FTYPE_MOSTLY_Q3_K_S},
            {"Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M}, {"Q5_K_M", LLAMA_FTYPE_MOSTLY_Q5_K_M},
            {"Q6_K", LLAMA_FTYPE_MOSTLY_Q6_K}, {"Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},
            {"Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0}, {"F16", LLAMA_FTYPE_MOSTLY_F16}};
        const auto * found = std::find_if(std::begin(types), std::end(types),
                                          [&](const auto & t) { return type == t.first; });
        if (found == std::end(types)) {
            throw std::invalid_argument("quantization type must be one of Q2_K, Q3_K_S, Q4_K_M, Q5_K_M, Q6_K, Q8_0, "
                                        "Q4_0, F16");
        }
        inspect_gguf(src);  // clear errors for a missing or non-GGUF input
        llama_model_quantize_params params = llama_model_quantize_default_params();
        params.ftype = found->second;
        params.allow_requantize = true;
        params.nthread = n_threads;
        uint32_t rc;
        {
            nb::gil_scoped_release release;
            rc = llama_model_quantize(src.c_str(), dst.c_str(), &params);
        }
        if (rc != 0) {
            throw std::runtime_error("quantizing '" + src + "' failed");
        }
    }, "src"_a, "dst"_a, "type"_a = "Q2_K", "n_threads"_a = 0,
       "Requantize a GGUF (as llama-quantize --allow-requantize), e.g. to make a weaker draft of a model.");

    m.def("fused_truncate", [](LogitRows logits, float temperature, int top_k, float top_p, float min_p) {
        FusedSampler sampler(make_sampling_params(temperature, top_k, top_p, min_p, 0));
        std::vector<Support> out(logits.shape(0));
        TruncatedDist dist;
        for (size_t r = 0; r < logits.shape(0); ++r) {
            sampler.truncate(logits.data() + r * logits.shape(1), (int32_t) logits.shape(1), dist);
            out[r] = support_of(dist);
        }
        return out;
    }, "logits"_a, "temperature"_a, "top_k"_a = 0, "top_p"_a = 1.0f, "min_p"_a = 0.0f,
       "The fused sampler's truncated distribution (ids, probs) for each row of logits.");

    // The fused truncation sampler on numpy logits, with the engine's seeded RNG (llamaspec.Sampler).
    struct SamplerHandle {
        SamplingParams params;
        std::unique_ptr<FusedSampler> sampler;  // null: greedy
        std::mt19937_64 rng;
        TruncatedDist dist;
    };
    using LogitRow = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
    nb::class_<SamplerHandle>(m, "Sampler")
        .def("__init__", [](SamplerHandle * self, float temperature, int top_k, float top_p, float min_p,
                            uint64_t seed) {
            new (self) SamplerHandle();
            self->params = make_sampling_params(temperature, top_k, top_p, min_p, seed);
            if (!self->params.greedy()) {
                self->sampler = std::make_unique<FusedSampler>(self->params);
            }
            self->rng.seed(seed);
        }, "temperature"_a = 0.0f, "top_k"_a = 40, "top_p"_a = 0.95f, "min_p"_a = 0.05f, "seed"_a = 0)
        .def("distribution", [](SamplerHandle & h, LogitRow logits) {
            const int32_t n = (int32_t) logits.shape(0);
            if (!h.sampler) {
                return Support{{greedy_token(logits.data(), n)}, {1.0f}};
            }
            h.sampler->truncate(logits.data(), n, h.dist);
            return support_of(h.dist);
        }, "logits"_a, "The truncated support (token ids) and its probabilities (greedy: the argmax, 1.0).")
        .def("sample", [](SamplerHandle & h, LogitRow logits) {
            const int32_t n = (int32_t) logits.shape(0);
            if (!h.sampler) {
                return greedy_token(logits.data(), n);
            }
            h.sampler->truncate(logits.data(), n, h.dist);
            return h.dist.draw(uniform01(h.rng));
        }, "logits"_a, "One draw from the truncated distribution (greedy: the argmax).")
        .def("reseed", [](SamplerHandle & h, uint64_t seed) { h.rng.seed(seed); }, "seed"_a);

    m.def("llama_chain_truncate", [](LogitRows logits, float temperature, int top_k, float top_p, float min_p) {
        const SamplingParams params = make_sampling_params(temperature, top_k, top_p, min_p, 1234);
        std::vector<Support> out(logits.shape(0));
        std::vector<llama_token_data> buf;
        llama_token_data_array arr;
        for (size_t r = 0; r < logits.shape(0); ++r) {
            llama_sampler_ptr chain = llama_chain(params);
            apply_chain(chain.get(), logits.data() + r * logits.shape(1), (int32_t) logits.shape(1), buf, arr);
            for (size_t i = 0; i < arr.size; ++i) {
                out[r].first.push_back(arr.data[i].id);
                out[r].second.push_back(arr.data[i].p);
            }
        }
        return out;
    }, "logits"_a, "temperature"_a, "top_k"_a = 0, "top_p"_a = 1.0f, "min_p"_a = 0.0f,
       "llama.cpp's sampler chain (top_k, top_p, min_p, temp, dist) on each row: (ids, probs).");

    m.def("time_samplers", [](LogitRows logits, float temperature, int top_k, float top_p, float min_p, int repeats) {
        const SamplingParams params = make_sampling_params(temperature, top_k, top_p, min_p, 1);
        const int32_t n_vocab = (int32_t) logits.shape(1);
        nb::gil_scoped_release release;
        FusedSampler sampler(params);
        TruncatedDist dist;
        std::mt19937_64 rng(1);
        size_t sink = 0;
        llama_sampler_ptr chain = llama_chain(params);
        std::vector<llama_token_data> buf;
        llama_token_data_array arr;
        int64_t fused_us = 0, llama_us = 0;
        for (int k = 0; k < repeats; ++k) {  // interleaved: fused, llama.cpp, fused, ...
            const int64_t t0 = ggml_time_us();
            for (size_t r = 0; r < logits.shape(0); ++r) {
                sampler.truncate(logits.data() + r * n_vocab, n_vocab, dist);
                sink += dist.draw(uniform01(rng));
            }
            const int64_t t1 = ggml_time_us();
            for (size_t r = 0; r < logits.shape(0); ++r) {
                apply_chain(chain.get(), logits.data() + r * n_vocab, n_vocab, buf, arr);
                sink += arr.selected;
            }
            const int64_t t2 = ggml_time_us();
            fused_us += t1 - t0;
            llama_us += t2 - t1;
        }
        const int64_t t0 = 0, t1 = fused_us, t2 = fused_us + llama_us;
        (void) sink;
        return std::make_pair((t1 - t0) * 1e-6, (t2 - t1) * 1e-6);
    }, "logits"_a, "temperature"_a, "top_k"_a = 0, "top_p"_a = 1.0f, "min_p"_a = 0.0f, "repeats"_a = 1,
       "Seconds for (fused sampler, llama.cpp chain) to truncate and draw from every row, `repeats` times.");

    nb::class_<Model>(m, "Model")
        .def(nb::new_([](const std::filesystem::path & path, int n_gpu_layers, bool repack, bool load_mtp,
                         const std::vector<std::string> & rpc, double rpc_timeout, bool rpc_head_local) {
                 nb::gil_scoped_release release;
                 return std::make_shared<Model>(path.string(), n_gpu_layers, repack, load_mtp, rpc, rpc_timeout,
                                                rpc_head_local);
             }), "path"_a, "n_gpu_layers"_a = -1, "repack"_a = true, "load_mtp"_a = true,
             "rpc"_a = std::vector<std::string>(), "rpc_timeout"_a = 5.0, "rpc_head_local"_a = false,
             "Load a GGUF. repack=False disables the CPU weight repacking whose kernels round differently "
             "per batch shape (bit-exact greedy equality with plain decoding on quantized models). "
             "load_mtp: also load the MTP (nextn) layers the GGUF may carry (spec_type draft-mtp). "
             "rpc: 'host:port' of rpc-servers that hold n_gpu_layers of the layers (ConnectionError when one "
             "cannot be used, checked within rpc_timeout seconds); rpc_head_local: keep the output head here, "
             "so hidden states instead of logits come back over the network.")
        .def_prop_ro("rpc", &Model::rpc, "The RPC servers ('host:port') the model's layers were offloaded to.")
        .def_prop_ro("is_eagle3_head", &Model::is_eagle3_head)
        .def_prop_ro("has_mtp", [](const Model & model) { return model.mtp_loaded(); },
                     "The MTP (nextn) layers are loaded, so spec_type 'draft-mtp' can use them.")
        .def_prop_ro("path", &Model::path)
        .def_prop_ro("architecture", &Model::architecture)
        .def_prop_ro("n_vocab", &Model::n_vocab)
        .def_prop_ro("bos", [](const Model & model) { return llama_vocab_bos(model.vocab()); })
        .def_prop_ro("add_bos", [](const Model & model) { return llama_vocab_get_add_bos(model.vocab()); })
        .def_prop_ro("n_layer", &Model::n_layer)
        .def_prop_ro("n_embd", &Model::n_embd)
        .def_prop_ro("n_ctx_train", &Model::n_ctx_train)
        .def_prop_ro("devices", &Model::devices,
                     "GPU devices the model's offloaded layers (n_gpu_layers of them) go to, e.g. 'CUDA0: NVIDIA H200'; empty on a CPU-only build.")
        .def_prop_ro("is_draft_head", [](const Model & model) { return model.is_dflash_head() || model.is_eagle3_head(); })
        .def_prop_ro("has_markov_head", [](const Model & model) { return model.info().has_markov_head; })
        .def_prop_ro("has_confidence_head", [](const Model & model) { return model.info().has_confidence_head; })
        .def("meta", &Model::meta, "key"_a, "default"_a = "")
        .def("tokenize", &Model::tokenize, "text"_a, "add_special"_a = true)
        .def("tokenize", [](const Model & model, nb::bytes data, bool add_special) {
            return model.tokenize(std::string(data.c_str(), data.size()), add_special);
        }, "data"_a, "add_special"_a = true, "Tokenize raw bytes (UTF-8 or not) as the model's tokenizer sees them.")
        .def("token_to_piece", [](const Model & model, int token) {
            if (token < 0 || token >= model.n_vocab()) {
                throw std::out_of_range("token id outside the vocabulary");
            }
            return to_bytes(model.token_to_piece(token));
        }, "token"_a)
        .def("detokenize", [](const Model & model, const std::vector<llama_token> & tokens) {
            std::string text;
            for (llama_token t : tokens) {
                if (t < 0 || t >= model.n_vocab()) {
                    throw std::out_of_range("token id outside the vocabulary");
                }
                text += model.token_to_piece(t);
            }
            return to_bytes(text);
        }, "tokens"_a)
        .def("is_eog", &Model::is_eog, "token"_a);

    // The scheduler's decision rule on its own, with given costs (for tests and notebooks).
    nb::class_<Scheduler>(m, "Scheduler")
        .def("__init__", [](Scheduler * self, const std::vector<double> & verify_seconds, double draft_step_seconds,
                            bool sequential, const std::vector<std::pair<int32_t, double>> & passes) {
                 if (verify_seconds.size() < 2) {
                     throw std::invalid_argument("verify_seconds needs the cost of 1..n_max+1 tokens (n_max >= 1)");
                 }
                 CostModel costs((int32_t) verify_seconds.size() - 1);
                 for (size_t n = 0; n < verify_seconds.size(); ++n) {
                     if (!(verify_seconds[n] > 0)) {
                         throw std::invalid_argument("verify_seconds must be positive");
                     }
                     costs.set_verify((int32_t) n + 1, verify_seconds[n]);
                 }
                 for (const auto & [n_tokens, seconds] : passes) {
                     if (n_tokens <= (int32_t) verify_seconds.size() || !(seconds > 0)) {
                         throw std::invalid_argument("passes: (total tokens > n_max + 1, positive seconds) pairs");
                     }
                     costs.set_pass(n_tokens, seconds);
                 }
                 costs.set_draft_step(draft_step_seconds);
                 new (self) Scheduler(costs, sequential);
             }, "verify_seconds"_a, "draft_step_seconds"_a = 0.0, "sequential"_a = false,
             "passes"_a = std::vector<std::pair<int32_t, double>>(),
             "verify_seconds[i]: seconds of a target pass over i + 1 tokens, i = 0..n_max; passes: (total tokens, "
             "seconds) of longer passes, as batched rounds make (interpolated between).")
        .def("set_batch", &Scheduler::set_batch, "n_sequences"_a, "own_depth"_a = false,
             "The sequences that share the next round's pass: each one's tokens are priced at its share of it. "
             "own_depth: each sequence picks its own depth, and tokens beyond the others' take a pass of their own.")
        .def("observe_pass", &Scheduler::observe_pass, "total_tokens"_a, "seconds"_a)
        .def("verify_cost", [](const Scheduler & s, int32_t n_tokens) { return s.costs().verify(n_tokens); },
             "n_tokens"_a, "A sequence's share of a round's pass when it verifies n_tokens (at the current batch).")
        .def("plan", &Scheduler::plan, "n_max"_a, "n_pending"_a = 0)
        .def("observe_catch_up", &Scheduler::observe_catch_up, "n_tokens"_a, "seconds"_a)
        .def("keep_drafting", &Scheduler::keep_drafting, "index"_a, "confidence"_a)
        .def("verify_depth", &Scheduler::verify_depth, "confidence"_a)
        .def("observe", &Scheduler::observe, "confidence"_a, "n_verified"_a, "n_accepted"_a, "n_emitted"_a,
             "draft_seconds"_a, "verify_seconds"_a)
        .def("predict", [](const Scheduler & s, int32_t position, float confidence) {
            return s.calibration().predict(position, confidence);
        }, "position"_a, "confidence"_a)
        .def("begin_generation", &Scheduler::begin_generation, "max_tokens"_a = 0)
        .def_prop_ro("drafting_on", &Scheduler::drafting_on)
        .def_prop_ro("expected_gain", &Scheduler::expected_gain,
                     "Tokens a drafted round is expected to yield over plain decoding in its time (at the best depth).");

    nb::class_<EngineHandle>(m, "Engine")
        .def("__init__", [](EngineHandle * self, ModelPtr target, ModelPtr draft, const std::string & spec_type,
                            int n_max, int n_ctx, int n_threads, int ngram_size_n, const std::string & schedule,
                            const std::string & rollback, bool reuse_prefix) {
                 EngineConfig config;
                 config.reuse_prefix = reuse_prefix;
                 config.schedule = schedule;
                 config.rollback = rollback;
                 config.spec_type = spec_type;
                 config.n_max = n_max;
                 config.n_ctx = n_ctx;
                 config.n_threads = n_threads;
                 config.ngram_size_n = ngram_size_n;
                 nb::gil_scoped_release release;
                 new (self) EngineHandle(std::move(target), std::move(draft), config);
             },
             "target"_a, "draft"_a.none(), "spec_type"_a = "auto", "n_max"_a = 8, "n_ctx"_a = 4096,
             "n_threads"_a = 0, "ngram_size_n"_a = 3, "schedule"_a = "fixed", "rollback"_a = "auto",
             "reuse_prefix"_a = true)
        .def_prop_ro("spec_type", [](EngineHandle & h) {
            return h.with_engine([](Engine & e) { return e.spec_type(); });
        })
        .def_prop_ro("n_max", [](EngineHandle & h) { return h.with_engine([](Engine & e) { return e.n_max(); }); })
        .def_prop_ro("n_ctx", [](EngineHandle & h) { return h.with_engine([](Engine & e) { return e.n_ctx(); }); })
        .def_prop_ro("closed", &EngineHandle::closed)
        .def_prop_ro("schedule", [](EngineHandle & h) {
            return h.with_engine([](Engine & e) { return std::string(e.scheduler() ? "confidence" : "fixed"); });
        })
        .def("scheduler_state", [](EngineHandle & h) {
            return h.with_engine([](Engine & e) { return scheduler_state_dict(e.scheduler()); });
        }, "The confidence scheduler's cost model and acceptance calibration (empty for the fixed schedule).")
        .def("start", [](EngineHandle & h, const std::vector<llama_token> & prompt, float temperature, int top_k,
                         float top_p, float min_p, uint64_t seed, int32_t max_tokens, bool ignore_eos) {
            const SamplingParams sampling = make_sampling_params(temperature, top_k, top_p, min_p, seed);
            h.clear_cancel();
            h.with_engine([&](Engine & e) {
                nb::gil_scoped_release release;
                e.start(prompt, sampling, max_tokens, ignore_eos);
                return 0;
            });
            h.raise_if_signalled();
        }, "prompt"_a, "temperature"_a = 0.0f, "top_k"_a = 0, "top_p"_a = 1.0f, "min_p"_a = 0.0f, "seed"_a = 0,
           "max_tokens"_a = 0, "ignore_eos"_a = false,
           "End the previous generation and decode the prompt tokens (less the prefix the cache keeps); the first "
           "token is sampled from its last logits (run() returns it). Greedy unless temperature > 0. max_tokens: the "
           "most tokens this generation will make (0: unknown), which the confidence schedule weighs its first "
           "probe by; ignore_eos: end-of-generation tokens are never sampled.")
        .def("_set_debug_accept_all", [](EngineHandle & h, bool on) {
            h.with_engine([&](Engine & e) {
                e.set_debug_accept_all(on);
                return 0;
            });
        }, "on"_a, "TEST ONLY: accept every draft unverified (breaks losslessness).")
        .def("_set_debug_schedule", [](EngineHandle & h, bool always_draft, const std::vector<double> & verify_seconds) {
            h.with_engine([&](Engine & e) {
                e.set_debug_schedule(always_draft, verify_seconds);
                return 0;
            });
        }, "always_draft"_a, "verify_seconds"_a = std::vector<double>(),
           "TEST ONLY: the confidence scheduler drafts every round (depths still chosen per round), "
           "with the given target pass costs (index n-1: n tokens) instead of measured ones when given.")
        .def("run", [](EngineHandle & h, int max_new_tokens, int max_rounds, bool ignore_eos) {
            auto tokens = h.with_engine([&](Engine & e) {
                nb::gil_scoped_release release;
                return e.run(max_new_tokens, max_rounds, ignore_eos);
            });
            h.raise_if_signalled();
            return tokens;
        }, "max_new_tokens"_a, "max_rounds"_a = 0, "ignore_eos"_a = false,
           "Run speculative rounds; returns the tokens generated by this call.")
        .def_prop_ro("stop_reason", [](EngineHandle & h) {
            return h.with_engine([](Engine & e) { return std::string(stop_reason_name(e.stop_reason())); });
        })
        .def_prop_ro("prefill_seconds", [](EngineHandle & h) {
            return h.with_engine([](Engine & e) { return e.prefill_seconds(); });
        })
        .def_prop_ro("prefill_tokens", [](EngineHandle & h) {
            return h.with_engine([](Engine & e) { return e.prefill_tokens(); });
        }, "Prompt tokens the last start() decoded (the rest came from the cache: prefix reuse).")
        .def("round_log", [](EngineHandle & h) {
            return h.with_engine([](Engine & e) { return round_log_dict(e.rounds()); });
        }, "Per-round statistics of the current generation (lists, converted to numpy by the Python layer).")
        .def("cancel", &EngineHandle::cancel,
             "Stop the running generation after its current round (any thread; stop reason 'cancelled').")
        .def("memory_info", [](EngineHandle & h) {
            return h.with_engine([](Engine & e) { return memory_info(e.target_context(), e.drafter()); });
        }, "How each context rolls a sequence back (remove / snapshots / checkpoint) and what checkpoints cost.")
        .def("close", &EngineHandle::close, "Free the contexts; later calls raise RuntimeError.");
}
