// The round loop: one target context serves n_seq sequences (a Generator is the one-sequence case, engine.h),
// and every round verifies all of their drafts in ONE target decode.
//
// A step admits newly submitted requests, or else runs one round. Admitting decodes their prompts into their own
// sequences and samples each one's first token from its prompt's last logits (it streams at once).
// One round (step()), top to bottom:
//   1. (nothing to admit)
//   2. draft: how many tokens each sequence may draft (its budget, its room, the confidence schedule), then
//      every active sequence's draft, drafted together;
//   3. verify: one batch = for each sequence, its last token and its draft (the schedule may verify fewer);
//      one target decode;
//   4. accept: per sequence, the longest prefix the target agrees with (greedy) or min(1, p/q)
//      acceptance (sampled, with the request's own seed), plus one token from the target;
//   5. roll back each sequence's rejected tail (Context::trim), tell the drafter;
//   6. emit tokens, stop sequences that hit EOS / max_tokens / their context; the schedule learns.
// Requests come and go between rounds (continuous batching); each keeps its own statistics.
// Prefix reuse (config.reuse_prefix): a finished sequence keeps its cache, and a new request goes to the
// free sequence whose cache shares the longest prefix with its prompt, so a chat's next turn decodes only
// the new turn (output identical to a cold start: the batch-invariant kernels make the cached entries
// those a cold prefill computes). A cancelled request's cache is freed.
#pragma once

#include "context.h"
#include "drafter.h"
#include "engine_common.h"
#include "model.h"
#include "sampling.h"
#include "scheduler.h"
#include "stats.h"

#include <functional>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace llamaspec {

struct BatchRequest {
    std::vector<llama_token> prompt;
    SamplingParams sampling;
    int32_t max_tokens = 128;
    bool ignore_eos = false;
    // what the confidence schedule weighs the first probe by: the generation's expected length (-1: max_tokens;
    // 0: unknown)
    int32_t planned_tokens = -1;
};

// What one step() did for one request.
struct BatchEvent {
    int64_t request = -1;
    std::vector<llama_token> tokens;  // emitted this round (accepted drafts + the target's token)
    int32_t drafted = 0;
    int32_t accepted = 0;
    bool finished = false;
    StopReason stop_reason = StopReason::None;
};

class BatchEngine {
public:
    // n_seq sequences of up to config.n_ctx tokens each (the cache holds n_seq * n_ctx cells, split
    // per sequence); raises before allocating when that does not fit in memory. The confidence
    // schedule (config.schedule "confidence") measures its costs here: passes of one sequence and, with n_seq > 1,
    // passes as long as batched rounds make. In batched rounds each sequence has a scheduler of its own (its
    // depth, its acceptance, whether drafting pays for it), pricing its tokens at its share of the round's pass;
    // LLAMASPEC_BATCH_SCHEDULE=batch makes one scheduler decide for the whole batch instead (for A/B runs).
    BatchEngine(ModelPtr target, ModelPtr draft, const EngineConfig & config, int32_t n_seq);

    const Model & target() const { return *target_; }
    std::string spec_type() const { return drafter_->name(); }
    int32_t n_max() const { return n_max_; }
    int32_t n_seq() const { return (int32_t) slots_.size(); }
    int32_t n_ctx() const { return n_ctx_; }  // per sequence
    const Context & target_context() const { return *ctx_tgt_; }
    const Drafter & drafter() const { return *drafter_; }
    // null for the fixed schedule; else the first sequence's scheduler (the batch's, when one serves all)
    const Scheduler * scheduler() const { return schedulers_.empty() ? nullptr : schedulers_[0].get(); }
    // sequence seq's scheduler (null for the fixed schedule)
    const Scheduler * scheduler(int32_t seq) const {
        if (seq < 0 || seq >= n_seq()) {
            throw std::out_of_range("sequence " + std::to_string(seq) + " is out of range");
        }
        return scheduler_for(seq);
    }

    // Queue a request (checked now; its prompt is decoded at the next step(), less the prefix its
    // sequence already holds). Returns its id.
    // Throws std::invalid_argument for a bad request, std::runtime_error when every sequence is busy.
    int64_t submit(const BatchRequest & request);
    // Requests submitted or running (not finished).
    int32_t n_active() const;
    int32_t n_free() const { return n_seq() - n_active(); }

    // One round for every active request (admitting queued ones first). Returns what happened to each.
    std::vector<BatchEvent> step();

    // Stop a request now and free its cache; no-op for an unknown or finished one. Returns whether it ran.
    bool cancel(int64_t request);
    // Stop a running request now but keep its cache for a later prompt that starts the same way (as a finished
    // request's); stop reason None. No-op for an unknown or finished one.
    void abandon(int64_t request);
    // Change a running request's max_tokens and ignore_eos (they apply from its next round).
    void set_limits(int64_t request, int32_t max_tokens, bool ignore_eos);

    // Asked before each decode of the prompts being admitted: true cancels those requests (their events say
    // so), e.g. Ctrl-C while a long prompt is read.
    void set_interrupt_check(std::function<bool()> check) { interrupted_ = std::move(check); }

    // Statistics of a request, running or finished (kept until release()). The draft and verify
    // seconds of a round are the whole batch's: what each of its sequences waited for.
    struct RequestStats {
        RoundLog rounds;
        double prefill_seconds = 0.0;
        int32_t prefill_tokens = 0;  // prompt tokens decoded (fewer than the prompt's when a prefix was reused)
        StopReason stop_reason = StopReason::None;
    };
    const RequestStats & stats(int64_t request) const;
    // Forget a finished request's statistics.
    void release(int64_t request);

    // Test-only: accept every drafted token unverified (breaks losslessness on purpose, to show
    // that the distribution tests can detect a broken acceptance step).
    void set_debug_accept_all(bool on) { debug_accept_all_ = on; }
    // Test-only: see Scheduler::set_debug_schedule.
    void set_debug_schedule(bool always_draft, const std::vector<double> & verify_seconds);

private:
    struct Slot {
        int64_t request = -1;  // -1: free
        bool needs_prefill = false;
        llama_tokens cached;    // free or being admitted: the tokens its cache kept from the last request
        uint64_t last_used = 0; // when its last request was submitted (the least recent cache goes first)
        BatchRequest params;
        llama_tokens history;  // tokens in the target cache
        llama_token id_last = LLAMA_TOKEN_NULL;
        llama_pos n_past = 0;
        int32_t n_generated = 0;
        std::unique_ptr<FusedSampler> sampler;
        std::mt19937_64 rng;
        llama_tokens draft;
        std::vector<float> confidence;
        int32_t i_batch = 0;  // batch index of id_last in this round's verification batch
        size_t n_keep = 0;    // prompt tokens its cache already held when admitted (prefix reuse)
        bool cache_unknown = false;  // a round failed while it ran: its cache is not kept for reuse
        RequestStats stats;
    };

    std::vector<BatchEvent> round();  // step() without its failure handling
    Slot * find(int64_t request);
    // the free slot for a prompt: the longest reusable cached prefix, else an empty or the least recent one
    Slot & choose_slot(const std::vector<llama_token> & prompt);
    // decode the prompts of the requests admitted since the last step, all in shared batches, and sample each
    // one's first token from its prompt's last logits (events; a request may finish there)
    std::vector<BatchEvent> prefill_admitted();
    // verification of one slot's draft at its rows of the batch; fills `out` with accepted + one token
    int32_t verify(Slot & slot, std::vector<llama_token> & out);
    void finish(llama_seq_id seq, Slot & slot, StopReason reason);
    // finish the request (the event says so) at an end-of-generation token or its max_tokens
    void finish_if_done(llama_seq_id seq, Slot & slot, bool hit_eog, BatchEvent & event);
    // a round threw: what the caches hold is unknown, so no cached prefix is reused from now on
    void forget_cached_prefixes();
    // start-up measurement for the scheduler (sequence 0, before any request): target passes over
    // 1..n_max+1 tokens, draft steps or blocks
    CostModel measure_costs();
    // each timing of measure_costs: the first run is a warm-up; the fastest of the rest counts (noise only adds)
    static constexpr int kCostRepeats = 4;
    // seconds of a draft of up to n tokens of sequence 0 from (n_past, id_last, history) (per drafted token if
    // per_token; infinite if nothing was drafted), the fastest of kCostRepeats - 1 after a warm-up whose
    // catching up on the prompt goes to costs
    double best_draft_seconds(int32_t n, bool per_token, llama_pos n_past, llama_token id_last,
                              const llama_tokens & history, CostModel & costs);

    ModelPtr target_;
    ModelPtr draft_;
    common_params base_;
    std::unique_ptr<Context> ctx_tgt_;
    std::unique_ptr<Drafter> drafter_;
    // the confidence schedule: one scheduler per sequence, or one for the whole batch (schedule_per_batch_)
    std::vector<std::unique_ptr<Scheduler>> schedulers_;
    bool schedule_per_batch_ = false;
    Scheduler * scheduler_for(llama_seq_id seq) const {
        return schedulers_.empty() ? nullptr : schedulers_[schedule_per_batch_ ? 0 : seq].get();
    }
    common_batch batch_;
    std::vector<Slot> slots_;  // slot i decodes into sequence i
    std::map<int64_t, RequestStats> finished_;
    int32_t n_ctx_ = 0;
    int32_t n_max_ = 0;
    int64_t next_request_ = 0;
    bool reuse_prefix_ = true;
    std::vector<llama_token> eog_tokens_;
    TruncatedDist dist_;
    bool debug_accept_all_ = false;
    std::function<bool()> interrupted_;
};

}  // namespace llamaspec
