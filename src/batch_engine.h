// Batched speculative decoding: several sequences share one target context, and every round
// verifies all of their drafts in ONE target decode.
//
// A step admits newly submitted requests, or else runs one round. Admitting decodes their prompts into their own
// sequences and samples each one's first token from its prompt's last logits (it streams at once).
// One round (step()), top to bottom:
//   1. (nothing to admit)
//   2. draft: ask the drafter for every active sequence's draft, drafted together;
//   3. verify: one batch = for each sequence, its last token and its draft; one target decode;
//   4. accept: per sequence, the longest prefix the target agrees with (greedy) or min(1, p/q)
//      acceptance (sampled, with the request's own seed), plus one token from the target;
//   5. roll back each sequence's rejected tail (Context::trim), tell the drafter;
//   6. emit tokens, stop sequences that hit EOS / max_tokens / their context.
// Requests come and go between rounds (continuous batching); each keeps its own statistics.
// Prefix reuse (config.reuse_prefix): a finished sequence keeps its cache, and a new request goes to the
// free sequence whose cache shares the longest prefix with its prompt, so a chat's next turn decodes only
// the new turn (output identical to a cold start: the batch-invariant kernels make the cached entries
// those a cold prefill computes). A cancelled request's cache is freed.
#pragma once

#include "context.h"
#include "drafter.h"
#include "engine.h"
#include "model.h"
#include "sampling.h"
#include "stats.h"

#include <map>
#include <memory>
#include <random>
#include <vector>

namespace llamaspec {

struct BatchRequest {
    std::vector<llama_token> prompt;
    SamplingParams sampling;
    int32_t max_tokens = 128;
    bool ignore_eos = false;
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
    // schedule is single-sequence only (config.schedule must be "fixed").
    BatchEngine(ModelPtr target, ModelPtr draft, const EngineConfig & config, int32_t n_seq);

    const Model & target() const { return *target_; }
    std::string spec_type() const { return drafter_->name(); }
    int32_t n_max() const { return n_max_; }
    int32_t n_seq() const { return (int32_t) slots_.size(); }
    int32_t n_ctx() const { return n_ctx_; }  // per sequence
    const Context & target_context() const { return *ctx_tgt_; }
    const Drafter & drafter() const { return *drafter_; }

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

    // Test-only: see Engine::set_debug_accept_all.
    void set_debug_accept_all(bool on) { debug_accept_all_ = on; }

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

    ModelPtr target_;
    ModelPtr draft_;
    common_params base_;
    std::unique_ptr<Context> ctx_tgt_;
    std::unique_ptr<Drafter> drafter_;
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
};

}  // namespace llamaspec
