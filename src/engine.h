// Verification: the target context and the speculative round loop
// (draft -> one batched target decode -> accept longest greedy prefix -> roll back -> bonus token).
#pragma once

#include "context.h"
#include "drafter.h"
#include "model.h"
#include "sampling.h"
#include "scheduler.h"
#include "stats.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace llamaspec {

struct EngineConfig {
    std::string spec_type = "auto";
    int32_t n_max = 8;
    int32_t n_ctx = 4096;
    int32_t n_threads = 0;  // 0: llama.cpp's default
    int32_t ngram_size_n = 3;
    std::string schedule = "fixed";  // "fixed": always n_max; "confidence": see scheduler.h
    std::string rollback = "auto";   // "auto" or "checkpoint" (see context.h)
    bool reuse_prefix = true;        // keep the cached common prefix between generations
};

// llama.cpp's parameters for a target serving n_seq sequences of config.n_ctx tokens each with the
// drafters `types`. Throws std::invalid_argument for an n_max beyond the drafter's depth, a too small
// n_ctx or ngram_size_n out of range, and when the cache would not fit in memory (before allocating).
common_params target_params(const Model & target, const Model * draft, const EngineConfig & config,
                            const std::vector<common_speculative_type> & types, int32_t n_seq);

// The target's end-of-generation tokens (masked to -inf with ignore_eos).
std::vector<llama_token> end_of_generation_tokens(const Model & model);

// Length of the common prefix of a and b, at most `limit`.
size_t common_prefix_length(const llama_tokens & a, const llama_tokens & b, size_t limit = SIZE_MAX);

// Prefix reuse, for one sequence and a single-sequence Engine alike: how many leading tokens of `next` the
// target cache of sequence `seq`, which holds `cached`, keeps for the next generation (their common prefix,
// as far as the drafter can reuse it), the cache trimmed to that; 0 when the memory cannot step back that
// far (e.g. a recurrent state) or nothing is shared: the caller then starts the sequence cold.
size_t keep_cached_prefix(Context & ctx, const Drafter & drafter, llama_seq_id seq, const llama_tokens & cached,
                          const llama_tokens & next);

enum class StopReason { None, MaxTokens, EndOfGeneration, ContextFull, Cancelled };
const char * stop_reason_name(StopReason reason);

class Engine {
public:
    Engine(ModelPtr target, ModelPtr draft, const EngineConfig & config);

    const Model & target() const { return *target_; }
    std::string spec_type() const { return drafter_->name(); }
    int32_t n_max() const { return drafter_->n_max(); }
    // null for the fixed schedule
    const Scheduler * scheduler() const { return scheduler_.get(); }
    // the context size asked for (llama.cpp pads its cache to a multiple of 256; we keep to this)
    int32_t n_ctx() const { return n_ctx_; }
    const Context & target_context() const { return *ctx_tgt_; }
    const Drafter & drafter() const { return *drafter_; }

    // Reset both contexts and decode the prompt into the target (less the prefix its cache already holds); its
    // last token's logits give the first generated token, which run() emits before any round.
    // Greedy unless sampling.temperature > 0 (then the seeded RNG restarts from sampling.seed).
    // max_tokens: the most tokens the generation will make (0: unknown), for the confidence schedule.
    void start(const std::vector<llama_token> & prompt, const SamplingParams & sampling = {}, int32_t max_tokens = 0);

    // Test-only: accept every drafted token unverified (breaks losslessness on purpose, to show
    // that the distribution tests can detect a broken acceptance step).
    void set_debug_accept_all(bool on) { debug_accept_all_ = on; }
    // Test-only: see Scheduler::set_debug_schedule.
    void set_debug_schedule(bool always_draft, const std::vector<double> & verify_seconds) {
        if (!scheduler_) {
            throw std::logic_error("this Generator has no confidence scheduler");
        }
        scheduler_->set_debug_schedule(always_draft, verify_seconds);
    }

    // Run rounds until max_new_tokens were generated in total, an end-of-generation token
    // (unless ignore_eos), the context is full, max_rounds rounds ran (0 = no limit) or the
    // interrupt check says so (stop reason Cancelled). Returns the tokens this call generated.
    std::vector<llama_token> run(int32_t max_new_tokens, int32_t max_rounds, bool ignore_eos);

    // Asked between rounds and between prompt chunks: true stops the generation (Ctrl-C, cancel()).
    void set_interrupt_check(std::function<bool()> check) { interrupted_ = std::move(check); }

    StopReason stop_reason() const { return stop_reason_; }
    const std::vector<llama_token> & generated() const { return generated_; }
    const RoundLog & rounds() const { return rounds_; }
    double prefill_seconds() const { return prefill_us_ * 1e-6; }
    // prompt tokens the last start() decoded (fewer than the prompt when a cached prefix was reused)
    int32_t prefill_tokens() const { return prefill_tokens_; }

private:
    // one speculative round; appends to generated_ and rounds_, returns false when generation must stop
    bool round(int32_t budget, bool ignore_eos);
    // the generation's first token, from the logits the prompt's pass left (a round of its own, without a draft)
    bool first_token(bool ignore_eos);
    // the target's logits at a batch index; with ignore_eos, end-of-generation tokens masked to -inf
    // (llama.cpp's --ignore-eos semantics)
    float * logits_at(int32_t batch_index);
    // greedy or sampled verification of draft_tokens_ at the batch rows from first_row; fills `out` with accepted
    // drafts + one more token
    int32_t verify(int32_t first_row, std::vector<llama_token> & out);
    // start-up measurement for the scheduler: target passes over 1..n_max+1 tokens, draft steps
    CostModel measure_costs();
    // each timing of measure_costs: the first run is a warm-up; the fastest of the rest counts (noise only adds)
    static constexpr int kCostRepeats = 4;
    // seconds of a draft of up to n tokens from the current position (per drafted token if per_token; infinite
    // if nothing was drafted), the fastest of kCostRepeats - 1 after a warm-up whose catching up on the prompt
    // goes to costs
    double best_draft_seconds(int32_t n, bool per_token, CostModel & costs);

    ModelPtr target_;
    ModelPtr draft_;
    common_params base_;
    // declaration order is destruction order reversed: the drafter refers to the target context
    std::unique_ptr<Context> ctx_tgt_;
    std::unique_ptr<Drafter> drafter_;
    std::unique_ptr<Scheduler> scheduler_;
    common_batch batch_;

    std::vector<llama_token> history_;  // tokens already in the target KV cache
    llama_token id_last_ = LLAMA_TOKEN_NULL;
    llama_pos n_past_ = 0;
    int32_t n_ctx_ = 0;
    bool started_ = false;
    bool reuse_prefix_ = true;
    bool cache_valid_ = false;  // the target's cache holds exactly history_ (prefix reuse relies on it)
    bool first_pending_ = false;  // start() decoded the prompt; run() samples the first token next
    int32_t first_index_ = 0;     // the batch index of the prompt's last token in its last pass
    int32_t prefill_tokens_ = 0;

    std::vector<llama_token> generated_;
    llama_tokens draft_tokens_;
    std::vector<float> draft_confidence_;
    RoundLog rounds_;
    StopReason stop_reason_ = StopReason::None;
    bool ignore_eos_ = false;
    bool debug_accept_all_ = false;
    std::vector<llama_token> eog_tokens_;
    SamplingParams sampling_;
    std::unique_ptr<FusedSampler> sampler_;
    std::mt19937_64 rng_;
    TruncatedDist dist_;
    int64_t prefill_us_ = 0;
    std::function<bool()> interrupted_;
};

}  // namespace llamaspec
