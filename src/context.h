// Context: one llama_context (RAII) and the one place that knows how to roll a sequence back.
//
// Speculative decoding writes tokens into a cache and then takes some of them back. How that can
// be done depends on the memory behind the context:
//   - attention KV cache: positions are simply removed (llama_memory_seq_rm);
//   - recurrent / hybrid memory (Gated DeltaNet, Mamba, ...) keeps one state per sequence, which
//     cannot be "partly erased". Architectures that support it keep per-token snapshots of the
//     latest batch (n_rs_seq): the state can step back up to n_rs_seq tokens into that batch;
//   - otherwise, or further back, the sequence's recurrent state is saved beforehand (a
//     checkpoint, llama.cpp's state_seq API) and restored, and the tokens between the checkpoint
//     and the point kept are decoded again.
// Every caller trims through Context::trim; a rollback that cannot be done raises, never passes
// silently.
#pragma once

#include "model.h"

#include "common.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace llamaspec {

enum class RollbackMode {
    Remove,     // attention-only memory: remove positions
    Snapshots,  // recurrent state with per-token snapshots of the latest batch (n_rs_seq > 0), checkpoint beyond
    Checkpoint  // recurrent state: save/restore the sequence state and decode the kept tokens again
};
const char * rollback_mode_name(RollbackMode mode);

// "auto" picks the cheapest mode the memory supports; "checkpoint" forces state checkpoints on a
// recurrent/hybrid memory (to test and measure that path where snapshots would also work).
struct RollbackPolicy {
    bool force_checkpoint = false;
    static RollbackPolicy parse(const std::string & name);
};

class Context {
public:
    // `role` names the context in error messages ("target", "draft model"). `max_rollback` is the most
    // tokens one trim may take back from the end of the latest batch: it sizes the recurrent snapshots
    // where the architecture has them (params.n_rs_seq is overwritten).
    Context(ModelPtr model, llama_context_params params, uint32_t max_rollback, std::string role,
            RollbackPolicy policy = {});

    Context(const Context &) = delete;
    Context & operator=(const Context &) = delete;

    llama_context * get() const { return ctx_.get(); }
    const Model & model() const { return *model_; }
    const std::string & role() const { return role_; }
    RollbackMode rollback_mode() const { return mode_; }
    uint32_t n_ctx() const { return llama_n_ctx(ctx_.get()); }
    // positions one sequence may hold, as asked (llama.cpp pads its cache to a multiple of 256)
    uint32_t n_ctx_per_seq() const { return n_ctx_per_seq_; }

    // Decode a batch; throws std::runtime_error naming `what` when llama.cpp fails.
    void decode(common_batch & batch, const char * what);
    // A batch that llama.cpp's drafter code decoded into this context on our behalf.
    void record(const common_batch & batch);

    // The next tokens of `seq` (n_tokens of them, in one batch unless one_batch is false) may later be
    // taken back in part: save what a trim will need. A no-op where removal or snapshots suffice.
    void prepare_rollback(llama_seq_id seq, int32_t n_tokens, bool one_batch);

    // Keep positions < n_past of `seq`, drop the rest. Throws std::runtime_error when it cannot be done.
    void trim(llama_seq_id seq, llama_pos n_past);
    // The same, returning false (and why) where trim() would throw, with the sequence unchanged.
    bool try_trim(llama_seq_id seq, llama_pos n_past, std::string * why = nullptr);
    // Positions of `seq` in the cache (last position + 1; 0 when empty).
    llama_pos n_pos(llama_seq_id seq) const {
        return llama_memory_seq_pos_max(llama_get_memory(ctx_.get()), seq) + 1;
    }

    // Empty every sequence.
    void clear();

    // --- direct use (llamaspec.Context) ------------------------------------------------------
    // Capture the input hidden state of these layers (what DFlash/DSpark/EAGLE3 heads read) at
    // every token of later decodes. Throws std::invalid_argument for a layer out of range or an
    // architecture whose graph does not publish them.
    void capture_layers(const std::vector<int32_t> & layers);
    const std::vector<int32_t> & captured_layers() const { return captured_; }

    // Decode tokens of one sequence at positions pos0, pos0 + 1, ...; outputs (logits) at every
    // token ("all"), the last one ("last") or none. Checks ids, positions and room before llama.cpp
    // could assert. Returns the number of output rows.
    int32_t decode_tokens(const std::vector<llama_token> & tokens, llama_pos pos0, llama_seq_id seq,
                          const std::string & outputs);
    // The same with rows of input embeddings instead of token ids ([n_rows, width] floats, width =
    // model().n_embd_input()): what a DFlash/DSpark head's context reads, the target's features.
    int32_t decode_embeddings(const float * rows, int32_t n_rows, int32_t width, llama_pos pos0, llama_seq_id seq,
                              const std::string & outputs);
    int32_t n_outputs() const { return n_outputs_; }
    int32_t n_decoded() const { return n_decoded_; }  // tokens of the latest decode_tokens()
    // row i of the latest outputs (n_vocab floats), owned by llama.cpp until the next decode
    const float * logits_row(int32_t i) const;
    // A DSpark head's confidence (sigmoid of its confidence head) at output row i of the latest decode
    float confidence(int32_t i) const;
    // [n_decoded, n_embd] input of `layer` for the latest decode_tokens(), owned by llama.cpp
    const float * layer_features(int32_t layer) const;

    // Seconds and tokens spent re-decoding after checkpoint restores (the price of Checkpoint mode).
    double replay_seconds() const { return replay_us_ * 1e-6; }
    int64_t replay_tokens() const { return replay_tokens_; }
    int64_t checkpoints_saved() const { return checkpoints_saved_; }

private:
    struct Checkpoint {
        bool valid = false;
        llama_pos pos_max = -1;                              // last position the saved state covers
        std::vector<uint8_t> state;                          // recurrent part of the sequence state
        std::vector<std::pair<llama_token, llama_pos>> log;  // tokens decoded since, in order
    };
    Checkpoint & checkpoint_of(llama_seq_id seq);
    // checks of a user decode of n entries into seq at pos0 (< 0: where it ends); returns pos0
    llama_pos check_user_decode(int32_t n, llama_pos pos0, llama_seq_id seq, const std::string & outputs);
    // decode user_batch_ and remember which entries have outputs
    int32_t finish_user_decode(const char * what);
    void save_checkpoint(llama_seq_id seq);
    void restore_checkpoint(llama_seq_id seq, llama_pos n_past);

    ModelPtr model_;
    std::string role_;
    llama_context_ptr ctx_;
    RollbackMode mode_ = RollbackMode::Remove;
    uint32_t n_rs_seq_ = 0;
    uint32_t n_ctx_per_seq_ = 0;
    std::vector<Checkpoint> checkpoints_;  // per sequence
    std::vector<int32_t> captured_;
    common_batch user_batch_;
    std::vector<int32_t> output_index_;  // batch index of each output row of the latest decode_tokens()
    int32_t n_outputs_ = 0;
    int32_t n_decoded_ = 0;
    common_batch replay_batch_;
    int64_t replay_us_ = 0;
    int64_t replay_tokens_ = 0;
    int64_t checkpoints_saved_ = 0;
};

}  // namespace llamaspec
