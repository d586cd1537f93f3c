// _core.BatchEngine: batched speculative decoding for llamaspec.Batch (python/llamaspec/batch.py).
// step() runs one round for every sequence with the GIL released; Python keeps the queues.
#include "batch_engine.h"
#include "bindings_batch.h"
#include "bindings_common.h"

#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <memory>
#include <stdexcept>

namespace nb = nanobind;
using namespace nb::literals;
using namespace llamaspec;

namespace {

// One caller at a time: a second thread gets an error instead of a data race (llamaspec.Batch
// serialises its callers with a lock, so this only catches direct misuse of _core).
class BatchHandle {
public:
    BatchHandle(ModelPtr target, ModelPtr draft, const EngineConfig & config, int32_t n_seq)
        : engine_(std::make_unique<BatchEngine>(std::move(target), std::move(draft), config, n_seq)) {}

    template <typename F>
    auto with_engine(F && f) {
        return run_exclusive(busy_, engine_.get(), "this batch is closed",
                             "this BatchEngine is already in use by another thread", std::forward<F>(f));
    }

    void close() {
        with_engine([](BatchEngine &) { return 0; });
        engine_.reset();
    }
    bool closed() const { return !engine_; }

private:
    std::unique_ptr<BatchEngine> engine_;
    std::atomic<bool> busy_{false};
};

}  // namespace

void bind_batch(nb::module_ & m) {
    nb::class_<BatchHandle>(m, "BatchEngine")
        .def("__init__", [](BatchHandle * self, ModelPtr target, ModelPtr draft, const std::string & spec_type,
                            int n_max, int n_ctx, int n_threads, int ngram_size_n, const std::string & rollback,
                            int n_seq, bool reuse_prefix, const std::string & schedule) {
                 EngineConfig config;
                 config.schedule = schedule;
                 config.spec_type = spec_type;
                 config.n_max = n_max;
                 config.n_ctx = n_ctx;
                 config.n_threads = n_threads;
                 config.ngram_size_n = ngram_size_n;
                 config.rollback = rollback;
                 config.reuse_prefix = reuse_prefix;
                 nb::gil_scoped_release release;
                 new (self) BatchHandle(std::move(target), std::move(draft), config, n_seq);
             },
             "target"_a, "draft"_a.none(), "spec_type"_a = "auto", "n_max"_a = 8, "n_ctx"_a = 4096,
             "n_threads"_a = 0, "ngram_size_n"_a = 3, "rollback"_a = "auto", "n_seq"_a = 4, "reuse_prefix"_a = true,
             "schedule"_a = "fixed",
             "n_seq sequences of n_ctx tokens each in one target context; raises before allocating when they do "
             "not fit. reuse_prefix: finished sequences keep their cache for prompts that start the same way. "
             "schedule: 'fixed' (n_max every round) or 'confidence' (each sequence's depth chosen per round).")
        .def_prop_ro("schedule", [](BatchHandle & h) {
            return h.with_engine([](BatchEngine & e) { return std::string(e.scheduler() ? "confidence" : "fixed"); });
        })
        .def_prop_ro("spec_type", [](BatchHandle & h) {
            return h.with_engine([](BatchEngine & e) { return e.spec_type(); });
        })
        .def_prop_ro("n_max", [](BatchHandle & h) { return h.with_engine([](BatchEngine & e) { return e.n_max(); }); })
        .def_prop_ro("n_ctx", [](BatchHandle & h) { return h.with_engine([](BatchEngine & e) { return e.n_ctx(); }); },
                     "Tokens per sequence.")
        .def_prop_ro("n_seq", [](BatchHandle & h) { return h.with_engine([](BatchEngine & e) { return e.n_seq(); }); })
        .def_prop_ro("n_active", [](BatchHandle & h) {
            return h.with_engine([](BatchEngine & e) { return e.n_active(); });
        }, "Requests submitted and not finished.")
        .def_prop_ro("closed", &BatchHandle::closed)
        .def("submit", [](BatchHandle & h, const std::vector<llama_token> & prompt, int max_tokens, float temperature,
                          int top_k, float top_p, float min_p, uint64_t seed, bool ignore_eos) {
            BatchRequest request;
            request.prompt = prompt;
            request.max_tokens = max_tokens;
            request.sampling = make_sampling_params(temperature, top_k, top_p, min_p, seed);
            request.ignore_eos = ignore_eos;
            return h.with_engine([&](BatchEngine & e) { return e.submit(request); });
        }, "prompt"_a, "max_tokens"_a, "temperature"_a = 0.0f, "top_k"_a = 0, "top_p"_a = 1.0f, "min_p"_a = 0.0f,
           "seed"_a = 0, "ignore_eos"_a = false,
           "Queue a request (its prompt is decoded at the next step()); returns its id. RuntimeError when every "
           "sequence is busy.")
        .def("step", [](BatchHandle & h) {
            const std::vector<BatchEvent> events = h.with_engine([](BatchEngine & e) {
                nb::gil_scoped_release release;
                return e.step();
            });
            nb::list out;
            for (const BatchEvent & ev : events) {
                out.append(nb::make_tuple(ev.request, ev.tokens, ev.drafted, ev.accepted, ev.finished,
                                          std::string(stop_reason_name(ev.stop_reason))));
            }
            return out;
        }, "One speculative round for every active request: a list of (request, tokens, drafted, accepted, "
           "finished, stop_reason).")
        .def("cancel", [](BatchHandle & h, int64_t request) {
            return h.with_engine([&](BatchEngine & e) { return e.cancel(request); });
        }, "request"_a, "Stop a request now and free its cache; False if it was not running.")
        .def("stats", [](BatchHandle & h, int64_t request) {
            return h.with_engine([&](BatchEngine & e) {
                const BatchEngine::RequestStats & s = e.stats(request);
                nb::dict d = round_log_dict(s.rounds);
                d["prefill_seconds"] = s.prefill_seconds;
                d["prefill_tokens"] = s.prefill_tokens;
                d["stop_reason"] = std::string(stop_reason_name(s.stop_reason));
                return d;
            });
        }, "request"_a, "The round log of a running or finished (unreleased) request.")
        .def("release", [](BatchHandle & h, int64_t request) {
            h.with_engine([&](BatchEngine & e) {
                e.release(request);
                return 0;
            });
        }, "request"_a, "Forget a finished request's statistics.")
        .def("cache_positions", [](BatchHandle & h) {
            return h.with_engine([](BatchEngine & e) {
                std::vector<int32_t> out;
                for (int32_t seq = 0; seq < e.n_seq(); ++seq) {
                    out.push_back(e.target_context().n_pos(seq));
                }
                return out;
            });
        }, "Positions each sequence holds in the target cache (0: empty; a finished sequence keeps its cache for "
           "prefix reuse).")
        .def("scheduler_state", [](BatchHandle & h, int32_t seq) {
            return h.with_engine([&](BatchEngine & e) { return scheduler_state_dict(e.scheduler(seq)); });
        }, "seq"_a = 0, "Sequence seq's confidence scheduler: cost model (pass_seconds: the batched lengths), "
           "calibration, state; empty for the fixed schedule.")
        .def("memory_info", [](BatchHandle & h) {
            return h.with_engine([](BatchEngine & e) { return memory_info(e.target_context(), e.drafter()); });
        })
        .def("_set_debug_accept_all", [](BatchHandle & h, bool on) {
            h.with_engine([&](BatchEngine & e) {
                e.set_debug_accept_all(on);
                return 0;
            });
        }, "on"_a, "TEST ONLY: accept every draft unverified (breaks losslessness).")
        .def("close", &BatchHandle::close, "Free the context; later calls raise RuntimeError.");
}
