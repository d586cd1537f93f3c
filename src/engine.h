// One sequence of the round loop (batch_engine.h), with the interface a Generator needs: start() reads a prompt,
// run() makes rounds until a stop or a round limit (so a stream can take one round at a time), and the
// generation's statistics. Every round, the confidence schedule and prefix reuse are the batch engine's own.
#pragma once

#include "batch_engine.h"
#include "engine_common.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llamaspec {

class Engine {
public:
    Engine(ModelPtr target, ModelPtr draft, const EngineConfig & config);

    const Model & target() const { return rounds_engine_.target(); }
    std::string spec_type() const { return rounds_engine_.spec_type(); }
    int32_t n_max() const { return rounds_engine_.n_max(); }
    // null for the fixed schedule
    const Scheduler * scheduler() const { return rounds_engine_.scheduler(); }
    // the context size asked for (llama.cpp pads its cache to a multiple of 256; we keep to this)
    int32_t n_ctx() const { return rounds_engine_.n_ctx(); }
    const Context & target_context() const { return rounds_engine_.target_context(); }
    const Drafter & drafter() const { return rounds_engine_.drafter(); }

    // End the previous generation (its cache is kept for prefix reuse) and decode the prompt into the target
    // (less the prefix its cache already holds); its last token's logits give the first generated token, which
    // run() emits before any round. Greedy unless sampling.temperature > 0 (then the seeded RNG restarts from
    // sampling.seed). max_tokens: the most tokens the generation will make (0: unknown), for the confidence
    // schedule; ignore_eos masks the end-of-generation tokens from the first token on.
    void start(const std::vector<llama_token> & prompt, const SamplingParams & sampling = {}, int32_t max_tokens = 0,
               bool ignore_eos = false);

    // Test-only: see BatchEngine::set_debug_accept_all and set_debug_schedule.
    void set_debug_accept_all(bool on) { rounds_engine_.set_debug_accept_all(on); }
    void set_debug_schedule(bool always_draft, const std::vector<double> & verify_seconds) {
        rounds_engine_.set_debug_schedule(always_draft, verify_seconds);
    }

    // Run rounds until max_new_tokens were generated in total, an end-of-generation token
    // (unless ignore_eos), the context is full, max_rounds rounds ran (0 = no limit; the first token counts as
    // one) or the interrupt check says so (stop reason Cancelled). Returns the tokens this call generated.
    std::vector<llama_token> run(int32_t max_new_tokens, int32_t max_rounds, bool ignore_eos);

    // Asked between rounds and between prompt chunks: true stops the generation (Ctrl-C, cancel()).
    void set_interrupt_check(std::function<bool()> check);

    StopReason stop_reason() const { return stop_reason_; }
    const std::vector<llama_token> & generated() const { return generated_; }
    const RoundLog & rounds() const;
    double prefill_seconds() const;
    // prompt tokens the last start() decoded (fewer than the prompt when a cached prefix was reused)
    int32_t prefill_tokens() const;

private:
    // the current (or last) request's statistics, or empty ones before the first start()
    const BatchEngine::RequestStats & stats() const;
    // tokens (and a stop) from one step's event for the request
    void take(const BatchEvent & event);

    BatchEngine rounds_engine_;  // one sequence
    int64_t request_ = -1;       // the current generation's request (running or finished)
    bool started_ = false;       // run() may make rounds
    std::optional<BatchEvent> first_;  // the first token's event, sampled by start(), returned by run()
    std::vector<llama_token> generated_;
    StopReason stop_reason_ = StopReason::None;
    std::function<bool()> interrupted_;
    BatchEngine::RequestStats no_stats_;
};

}  // namespace llamaspec
