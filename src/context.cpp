#include "context.h"

#include "ggml.h"
#include "llama-ext.h"

#include <algorithm>
#include <stdexcept>

namespace llamaspec {

const char * rollback_mode_name(RollbackMode mode) {
    switch (mode) {
        case RollbackMode::Remove: return "remove";
        case RollbackMode::Snapshots: return "snapshots";
        case RollbackMode::Checkpoint: return "checkpoint";
    }
    return "";
}

RollbackPolicy RollbackPolicy::parse(const std::string & name) {
    if (name == "auto") {
        return {};
    }
    if (name == "checkpoint") {
        return {true};
    }
    throw std::invalid_argument("rollback must be 'auto' or 'checkpoint', got '" + name + "'");
}

Context::Context(ModelPtr model, llama_context_params params, uint32_t max_rollback, std::string role,
                 RollbackPolicy policy)
    : model_(std::move(model)), role_(std::move(role)) {
    llama_model * m = model_->get();
    // an MTP context on a hybrid model holds only the nextn layers' attention cache
    const bool recurrent = params.ctx_type != LLAMA_CONTEXT_TYPE_MTP &&
                           (llama_model_is_recurrent(m) || llama_model_is_hybrid(m));
    // llama.cpp keeps the snapshots only where the architecture supports them (else it clamps to 0)
    params.n_rs_seq = recurrent && !policy.force_checkpoint ? max_rollback : 0;
    n_ctx_per_seq_ = params.n_ctx / std::max<uint32_t>(1, params.n_seq_max);
    if (model_->is_dflash_head() && params.ctx_other == nullptr &&
        (model_->tensor_dim("token_embd.weight", 0) < 0 || model_->tensor_dim("output.weight", 0) < 0)) {
        // without its own embeddings and output the head's graph reads the target's (ctx_other)
        throw std::invalid_argument("'" + model_->path() + "' borrows the target's token embeddings / output: it "
                                    "runs inside a Generator or Batch, not in a Context of its own");
    }
    ctx_.reset(llama_init_from_model(m, params));
    if (!ctx_) {
        throw std::runtime_error("could not create the " + role_ + " context for '" + model_->path() + "' (n_ctx " +
                                 std::to_string(params.n_ctx) + ")");
    }
    n_rs_seq_ = recurrent ? llama_n_rs_seq(ctx_.get()) : 0;
    mode_ = !recurrent ? RollbackMode::Remove : n_rs_seq_ > 0 ? RollbackMode::Snapshots : RollbackMode::Checkpoint;
    checkpoints_.resize(std::max<uint32_t>(1, llama_n_seq_max(ctx_.get())));
    if (model_->is_dflash_head()) {
        // as llama.cpp's DFlash/DSpark drafter sets its context up: the block attends both ways unless
        // the head says otherwise, and the confidence head's outputs are kept (embeddings "nextn")
        llama_set_causal_attn(ctx_.get(), model_->meta("dflash.attention.causal", "false") == "true");
        llama_set_embeddings_nextn(ctx_.get(), true, true);
    }
    replay_batch_ = common_batch(ctx_.get());
    user_batch_ = common_batch(ctx_.get());
}

Context::Checkpoint & Context::checkpoint_of(llama_seq_id seq) {
    if (seq < 0 || (size_t) seq >= checkpoints_.size()) {
        throw std::out_of_range("sequence id " + std::to_string(seq) + " is out of range for the " + role_ +
                                " context (" + std::to_string(checkpoints_.size()) + " sequences)");
    }
    return checkpoints_[seq];
}

void Context::decode(common_batch & batch, const char * what) {
    if (batch.size() == 0) {
        return;
    }
    const int32_t rc = llama_process(ctx_.get(), LLAMA_PROCESS_TYPE_DECODE, batch.get());
    if (rc != 0) {
        throw std::runtime_error("the " + role_ + " failed to decode " + what + " (llama.cpp status " +
                                 std::to_string(rc) + ")");
    }
    record(batch);
}

void Context::record(const common_batch & batch) {
    if (mode_ == RollbackMode::Remove) {
        return;
    }
    // remember what a checkpoint restore must decode again
    for (const auto & t : batch.tokens) {
        Checkpoint & cp = checkpoint_of(t.seq_id);
        if (cp.valid) {
            cp.log.emplace_back(t.id, t.pos[0]);
        }
    }
}

void Context::prepare_rollback(llama_seq_id seq, int32_t n_tokens, bool one_batch) {
    if (mode_ == RollbackMode::Remove) {
        return;
    }
    if (mode_ == RollbackMode::Snapshots && one_batch && n_tokens <= (int32_t) n_rs_seq_) {
        return;
    }
    save_checkpoint(seq);
}

void Context::save_checkpoint(llama_seq_id seq) {
    Checkpoint & cp = checkpoint_of(seq);
    llama_memory_t mem = llama_get_memory(ctx_.get());
    const llama_state_seq_flags flags = LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY;
    const size_t size = llama_state_seq_get_size_ext(ctx_.get(), seq, flags);
    cp.state.resize(size);
    const size_t written = llama_state_seq_get_data_ext(ctx_.get(), cp.state.data(), size, seq, flags);
    if (written != size) {
        cp.valid = false;
        throw std::runtime_error("could not save a checkpoint of the " + role_ + "'s sequence state");
    }
    cp.pos_max = llama_memory_seq_pos_max(mem, seq);
    cp.log.clear();
    cp.valid = true;
    ++checkpoints_saved_;
}

void Context::restore_checkpoint(llama_seq_id seq, llama_pos n_past) {
    Checkpoint & cp = checkpoint_of(seq);
    const llama_state_seq_flags flags = LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY;
    if (!cp.state.empty() &&
        llama_state_seq_set_data_ext(ctx_.get(), cp.state.data(), cp.state.size(), seq, flags) != cp.state.size()) {
        cp.valid = false;
        throw std::runtime_error("could not restore the " + role_ + "'s sequence state from its checkpoint");
    }
    // the recurrent part is back at pos_max; the attention part still holds later positions
    if (!llama_memory_seq_rm(llama_get_memory(ctx_.get()), seq, cp.pos_max + 1, -1)) {
        cp.valid = false;
        throw std::runtime_error("could not clear the " + role_ + "'s cache after restoring a checkpoint");
    }
    // decode again the tokens that stay, in order
    std::vector<std::pair<llama_token, llama_pos>> kept;
    for (const auto & entry : cp.log) {
        if (entry.second < n_past) {
            kept.push_back(entry);
        }
    }
    if ((llama_pos) kept.size() != n_past - (cp.pos_max + 1)) {
        cp.valid = false;
        throw std::runtime_error("the " + role_ + "'s checkpoint does not cover positions " +
                                 std::to_string(cp.pos_max + 1) + ".." + std::to_string(n_past - 1));
    }
    cp.log.clear();  // decode() below logs the kept tokens again
    const int64_t t0 = ggml_time_us();
    const size_t n_batch = llama_n_batch(ctx_.get());
    for (size_t begin = 0; begin < kept.size(); begin += n_batch) {
        replay_batch_.clear();
        for (size_t i = begin; i < std::min(kept.size(), begin + n_batch); ++i) {
            replay_batch_.add(kept[i].first, kept[i].second, seq, false);
        }
        decode(replay_batch_, "the tokens kept after a checkpoint restore");
    }
    replay_us_ += ggml_time_us() - t0;
    replay_tokens_ += (int64_t) kept.size();
}

bool Context::try_trim(llama_seq_id seq, llama_pos n_past, std::string * why) {
    llama_memory_t mem = llama_get_memory(ctx_.get());
    Checkpoint & cp = checkpoint_of(seq);
    if (n_past > llama_memory_seq_pos_max(mem, seq)) {
        return true;  // nothing past n_past
    }
    if (mode_ != RollbackMode::Checkpoint || n_past <= 0) {
        // KV removal, or a recurrent step back within the snapshots of the latest batch
        if (llama_memory_seq_rm(mem, seq, n_past, -1)) {
            if (n_past <= 0) {
                // an empty sequence is itself a checkpoint: restoring it is removing everything and
                // decoding the logged tokens again (a draft model that drafts from position 0 needs it)
                cp = Checkpoint{};
                cp.valid = mode_ != RollbackMode::Remove;
            }
            while (!cp.log.empty() && cp.log.back().second >= n_past) {
                cp.log.pop_back();
            }
            return true;
        }
        if (mode_ == RollbackMode::Remove) {
            if (why) {
                *why = "llama.cpp refused to remove positions >= " + std::to_string(n_past) + " from the " + role_ +
                       "'s cache";
            }
            return false;
        }
    }
    if (!cp.valid || cp.pos_max >= n_past) {
        if (why) {
            *why = "cannot roll the " + role_ + "'s recurrent state back to position " + std::to_string(n_past) +
                   " (" + rollback_mode_name(mode_) + " mode, " + std::to_string(n_rs_seq_) + " snapshots" +
                   (cp.valid ? ", checkpoint at position " + std::to_string(cp.pos_max) : ", no checkpoint") + ")";
        }
        return false;
    }
    restore_checkpoint(seq, n_past);
    return true;
}

void Context::trim(llama_seq_id seq, llama_pos n_past) {
    std::string why;
    if (!try_trim(seq, n_past, &why)) {
        throw std::runtime_error(why);
    }
}

void Context::clear() {
    llama_memory_clear(llama_get_memory(ctx_.get()), true);
    n_outputs_ = n_decoded_ = 0;
    output_index_.clear();
    for (auto & cp : checkpoints_) {
        cp = Checkpoint{};
    }
}

void Context::capture_layers(const std::vector<int32_t> & layers) {
    for (int32_t layer : layers) {
        if (layer < 0 || layer >= model_->n_layer()) {
            throw std::invalid_argument("layer " + std::to_string(layer) + " is out of range: '" + model_->path() +
                                        "' has layers 0.." + std::to_string(model_->n_layer() - 1));
        }
    }
    if (!layers.empty() && !model_->publishes_layer_features()) {
        throw std::invalid_argument("llama.cpp's '" + model_->architecture() + "' graph does not publish layer "
                                    "inputs (architectures that do: " + layer_feature_architectures() + ")");
    }
    for (int32_t layer : layers) {
        if (std::find(captured_.begin(), captured_.end(), layer) == captured_.end()) {
            llama_set_embeddings_layer_inp(ctx_.get(), (uint32_t) layer, true);
            captured_.push_back(layer);
        }
    }
}

llama_pos Context::check_user_decode(int32_t n, llama_pos pos0, llama_seq_id seq, const std::string & outputs) {
    if (n <= 0) {
        throw std::invalid_argument("nothing to decode");
    }
    if (outputs != "all" && outputs != "last" && outputs != "none") {
        throw std::invalid_argument("outputs must be 'all', 'last' or 'none', got '" + outputs + "'");
    }
    checkpoint_of(seq);  // range check of seq
    const llama_pos next = n_pos(seq);
    if (pos0 < 0) {
        pos0 = next;
    } else if (pos0 != next) {
        throw std::invalid_argument("sequence " + std::to_string(seq) + " holds positions 0.." +
                                    std::to_string(next - 1) + ": the next tokens go at position " +
                                    std::to_string(next) + ", not " + std::to_string(pos0) + " (trim() first)");
    }
    if ((int64_t) pos0 + n > (int64_t) n_ctx_per_seq_) {
        throw std::invalid_argument("sequence " + std::to_string(seq) + " would reach position " +
                                    std::to_string(pos0 + n - 1) + ", past the context of " +
                                    std::to_string(n_ctx_per_seq_) + " tokens per sequence");
    }
    const size_t n_batch = llama_n_batch(ctx_.get());
    if ((size_t) n > n_batch) {
        throw std::invalid_argument(std::to_string(n) + " tokens exceed this context's batch of " +
                                    std::to_string(n_batch) + " (decode them in parts)");
    }
    return pos0;
}

int32_t Context::finish_user_decode(const char * what) {
    output_index_.clear();
    n_outputs_ = n_decoded_ = 0;
    const int32_t n = user_batch_.size();
    for (int32_t i = 0; i < n; ++i) {
        if (user_batch_.tokens[i].output) {
            output_index_.push_back(i);
        }
    }
    decode(user_batch_, what);
    n_decoded_ = n;
    n_outputs_ = (int32_t) output_index_.size();
    return n_outputs_;
}

int32_t Context::decode_tokens(const std::vector<llama_token> & tokens, llama_pos pos0, llama_seq_id seq,
                               const std::string & outputs) {
    pos0 = check_user_decode((int32_t) tokens.size(), pos0, seq, outputs);
    const int32_t n_vocab = model_->n_vocab();
    for (llama_token t : tokens) {
        if (t < 0 || t >= n_vocab) {
            throw std::invalid_argument("token " + std::to_string(t) + " is outside the vocabulary (0.." +
                                        std::to_string(n_vocab - 1) + ")");
        }
    }
    user_batch_.clear();
    for (size_t i = 0; i < tokens.size(); ++i) {
        const bool out = outputs == "all" || (outputs == "last" && i + 1 == tokens.size());
        user_batch_.add(tokens[i], pos0 + (llama_pos) i, seq, out);
    }
    return finish_user_decode("the tokens");
}

int32_t Context::decode_embeddings(const float * rows, int32_t n_rows, int32_t width, llama_pos pos0,
                                   llama_seq_id seq, const std::string & outputs) {
    pos0 = check_user_decode(n_rows, pos0, seq, outputs);
    const int32_t expected = model_->n_embd_input();
    if (width != expected) {
        throw std::invalid_argument("embedding rows of '" + model_->path() + "' have " + std::to_string(expected) +
                                    " values, got " + std::to_string(width));
    }
    user_batch_.clear();
    for (int32_t i = 0; i < n_rows; ++i) {
        const bool out = outputs == "all" || (outputs == "last" && i + 1 == n_rows);
        const llama_pos pos[4] = {pos0 + i, pos0 + i, pos0 + i, 0};
        user_batch_.add_embd({rows + (size_t) i * width, 1, (size_t) width}, pos, seq, out);
    }
    return finish_user_decode("the embedding rows");
}

const float * Context::logits_row(int32_t i) const {
    if (i < 0 || i >= n_outputs_) {
        throw std::out_of_range("output row " + std::to_string(i) + " is out of range (" +
                                std::to_string(n_outputs_) + " rows from the latest decode)");
    }
    const float * row = llama_get_logits_ith(ctx_.get(), output_index_[i]);
    if (row == nullptr) {
        throw std::runtime_error("llama.cpp returned no logits for output row " + std::to_string(i));
    }
    return row;
}

float Context::confidence(int32_t i) const {
    if (!model_->is_dflash_head()) {
        throw std::invalid_argument("'" + model_->path() + "' is not a DFlash/DSpark head: no confidence outputs");
    }
    logits_row(i);  // range check
    const float * row = llama_get_embeddings_nextn_ith(ctx_.get(), output_index_[i]);
    if (row == nullptr) {
        throw std::runtime_error("llama.cpp returned no confidence for output row " + std::to_string(i));
    }
    return row[0];
}

const float * Context::layer_features(int32_t layer) const {
    if (std::find(captured_.begin(), captured_.end(), layer) == captured_.end()) {
        throw std::invalid_argument("layer " + std::to_string(layer) + " is not captured (capture_layers=[...])");
    }
    if (n_decoded_ == 0) {
        throw std::runtime_error("nothing decoded yet");
    }
    return llama_get_embeddings_layer_inp(ctx_.get(), (uint32_t) layer);
}

}  // namespace llamaspec
