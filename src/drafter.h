// Drafting: every drafter (DSpark, DFlash, draft model, n-gram) behind one interface,
// driven through llama.cpp's common_speculative exactly as its own tools drive it.
#pragma once

#include "context.h"
#include "model.h"

#include "common.h"
#include "speculative.h"

#include <functional>
#include <string>
#include <vector>

namespace llamaspec {

// The speculative part of llama.cpp's parameters for one drafter (or chain) and depth.
common_params_speculative make_speculative_params(const std::vector<common_speculative_type> & types, int32_t n_max,
                                                  int32_t ngram_size_n, const Model * draft);

// Resolves a spec_type name ("auto", one llama.cpp type, or a comma-separated chain such as
// "ngram-mod,draft-dspark": llama.cpp asks its n-gram drafters first and the model drafter when
// they find nothing) and checks that the combination can work before llama.cpp could assert:
// draft present when needed, target/draft pairing, head shapes, layer features the target exposes.
// Throws std::invalid_argument otherwise.
std::vector<common_speculative_type> resolve_spec_types(const std::string & name, const Model & target,
                                                        const Model * draft);

// "ngram-mod,draft-dspark"
std::string spec_types_name(const std::vector<common_speculative_type> & types);

// Largest n_max the drafters support (the trained block size of a DFlash/DSpark head).
int32_t max_draft_depth(const std::vector<common_speculative_type> & types, const Model * draft);

class Drafter {
public:
    // ctx_tgt must outlive the drafter. `draft` may be null for self-speculation / none.
    // `base` holds the target's parameters (with .speculative filled by make_speculative_params and
    // n_parallel = the number of sequences served); the draft context derives from it as in
    // llama.cpp's own tools.
    Drafter(const common_params & base, const ModelPtr & target, Context & ctx_tgt, const ModelPtr & draft,
            RollbackPolicy rollback = {});

    // the draft model's / head's context, or null (n-gram drafters)
    const Context * draft_context() const { return ctx_dft_.get(); }

    const std::vector<common_speculative_type> & types() const { return types_; }
    // the spec_type name: one type or a chain "ngram-mod,draft-dspark"
    std::string name() const;
    bool active() const { return types_.size() > 1 || types_.at(0) != COMMON_SPECULATIVE_TYPE_NONE; }
    int32_t n_max() const { return n_max_; }

    // How much of a cached prefix of n_keep target tokens of sequence `seq` this drafter can reuse for
    // the next generation: all of it for n-gram drafters and draft models (which catch up by
    // themselves), what a DFlash/DSpark head has read of it, none for EAGLE3 and MTP heads.
    size_t reusable_prefix(size_t n_keep, llama_seq_id seq = 0) const;

    // Feed a batch that the target just decoded (the drafter may read the target's hidden states).
    void process(const common_batch & batch);

    // Hold the drafter's input back until the next draft and feed the accepted part in one batch
    // (a draft model's: one sequence only; set before the first begin_sequence()),
    // so that rounds without drafting cost the drafter (almost) nothing: a draft model's tokens here,
    // a DFlash/DSpark head's target features inside llama.cpp (patches/0001).
    void set_deferred_process(bool on) { defer_process_ = on; }
    // Deferred target tokens the draft model has yet to read, and what the last catch-up cost.
    // (a DFlash/DSpark head's deferred feature rows count too)
    int32_t n_pending() const;
    int32_t last_catch_up_tokens() const { return last_catch_up_tokens_; }
    double last_catch_up_seconds() const { return last_catch_up_seconds_; }
    // The draft model pays one decode per drafted token (so stopping early saves time).
    bool sequential() const { return model_type_ == COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE; }
    // A DFlash/DSpark head: drafts a block in one decode of its own graph.
    bool block_head() const;

    // Before a round's drafts are asked for (drafting: some sequence drafts this round): with deferred input,
    // the drafter reads what it held back (timed as catching up: last_catch_up_*).
    void begin_round(bool drafting);

    // One sequence's draft (sequence 0; begin_round, request_draft and draft_requested in one):
    // propose at most n_max tokens to follow id_last, which sits at position pos0. `confidence`
    // receives one value per token (NaN where the drafter has none); `keep_drafting`, if set,
    // is asked after each token whether to draft another.
    void draft(llama_pos pos0, llama_token id_last, const llama_tokens & history, int32_t n_max,
               llama_tokens & out, std::vector<float> & confidence,
               std::function<bool(int32_t, float)> keep_drafting = nullptr);

    // The target verified the first n_verified tokens of the draft (the scheduler may cut it; 0 when
    // there was none) and accepted n_accepted of them; the draft KV cache keeps positions < n_past.
    void accept(int32_t n_verified, int32_t n_accepted, llama_pos n_past) { accept(0, n_verified, n_accepted, n_past); }

    // --- several sequences (BatchEngine): one llama.cpp drafter state serves them all ---------
    uint32_t n_seq() const { return n_seq_; }
    // Start sequence `seq` while the others keep their state (after reset_state(): a fresh drafter state, so
    // one generation never depends on the previous one). The first n_keep tokens of prompt_history are still
    // in the target's cache for `seq` (prefix reuse, 0 = cold start; at most reusable_prefix(n_keep, seq)): a
    // draft model keeps what its cache has of them and decodes the rest; the caller feeds the remaining target
    // batches through process().
    void begin_sequence(llama_seq_id seq, const llama_tokens & prompt_history, size_t n_keep = 0);
    // Ask for a draft of `seq` (arguments as draft(); after begin_round()); draft_requested() drafts every request at once
    // (a draft model decodes all sequences' steps in one batch each).
    void request_draft(llama_seq_id seq, llama_pos pos0, llama_token id_last, const llama_tokens & history,
                       int32_t n_max, llama_tokens & out, std::vector<float> & confidence,
                       std::function<bool(int32_t, float)> keep_drafting = nullptr);
    void draft_requested();
    void accept(llama_seq_id seq, int32_t n_verified, int32_t n_accepted, llama_pos n_past);
    // Sequence `seq` is done: free its draft cache, or keep it for a later begin_sequence() with a
    // reused prefix (keep_cache).
    void end_sequence(llama_seq_id seq, bool keep_cache = false);
    // No sequence is running: forget everything llama.cpp's drafters learned (n-gram pools), so the
    // next requests start as a fresh Generator's would (begin_sequence() makes a new state). Draft
    // caches stay: begin_sequence() keeps of them only what the new prompt reuses.
    void reset_state();

private:
    // feed the deferred target tokens to the draft model, in one batch per n_batch
    void flush_pending();
    // how much of a reused target prefix of n_keep tokens sequence seq's draft cache keeps (trimmed to it);
    // 0: nothing, the caller empties it
    size_t keep_draft_cache(llama_seq_id seq, size_t n_keep);
    // the draft model decodes history[from, to) of sequence seq (its catch-up on a reused prefix)
    void catch_up(llama_seq_id seq, const llama_tokens & history, size_t from, size_t to);

    std::vector<common_speculative_type> types_;
    common_speculative_type model_type_;  // the drafter that runs a model (NONE for n-gram only)
    ModelPtr target_;
    ModelPtr draft_model_;
    Context & ctx_tgt_;
    common_params_speculative params_;
    int32_t n_max_ = 0;
    uint32_t n_seq_ = 1;
    bool defer_process_ = false;
    struct Request {
        llama_seq_id seq;
        int32_t n_max;
        llama_pos pos0;
        llama_token id_last;
        llama_tokens * out;
        std::vector<float> * confidence;
    };
    // A draft model decodes id_last and each drafted token but the last while drafting, at the very
    // positions the target then verifies. Those cache entries are kept (drafted_kept_) and process()
    // skips them, so the verified tokens are not decoded a second time (llama-server does decode them
    // again: its TAG_SPEC_AVOID_DRAFT_REEVAL). Only for a lone draft-simple drafter whose cache can
    // drop a tail (RollbackMode::Remove): the draft cache then holds exactly what was drafted.
    struct DraftedKept {
        llama_pos pos0 = 0;
        llama_tokens tokens;  // id_last, then the drafted tokens the draft model decoded, from pos0 on
    };
    bool keeps_drafted_steps_ = false;  // set once the draft context exists
    // is this entry of a target batch already in the draft cache (decoded while drafting)?
    bool already_decoded(const common_batch::token & t) const;
    void forget_drafted(const common_batch & batch);
    std::vector<Request> requests_;  // drafts asked for since the last draft_requested()
    std::vector<std::pair<llama_token, llama_pos>> pending_;  // deferred target tokens, in order
    common_batch pending_batch_;
    std::vector<DraftedKept> drafted_kept_;  // per sequence, until the next process()
    common_batch process_batch_;             // a target batch less what the draft cache already has
    // per sequence: the draft cache may hold positions past the accepted prefix (cleared in
    // accept(); a per-round scan of the draft cache is not free on small targets)
    std::vector<char> dft_cache_has_tail_;
    int32_t last_catch_up_tokens_ = 0;
    double last_catch_up_seconds_ = 0.0;
    // whether the last round drafted: if not, a block head's deferred rows at the next draft are catching up
    bool drafted_last_round_ = false;
    // declared before spec_: the speculative state refers to the draft context and goes first
    std::unique_ptr<Context> ctx_dft_;
    common_speculative_ptr spec_;
};

}  // namespace llamaspec
