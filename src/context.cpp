#include "context.h"

#include "ggml.h"

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
    ctx_.reset(llama_init_from_model(m, params));
    if (!ctx_) {
        throw std::runtime_error("could not create the " + role_ + " context for '" + model_->path() + "' (n_ctx " +
                                 std::to_string(params.n_ctx) + ")");
    }
    n_rs_seq_ = recurrent ? llama_n_rs_seq(ctx_.get()) : 0;
    mode_ = !recurrent ? RollbackMode::Remove : n_rs_seq_ > 0 ? RollbackMode::Snapshots : RollbackMode::Checkpoint;
    checkpoints_.resize(std::max<uint32_t>(1, llama_n_seq_max(ctx_.get())));
    replay_batch_ = common_batch(ctx_.get());
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
    if (llama_state_seq_set_data_ext(ctx_.get(), cp.state.data(), cp.state.size(), seq, flags) != cp.state.size()) {
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

void Context::trim(llama_seq_id seq, llama_pos n_past) {
    llama_memory_t mem = llama_get_memory(ctx_.get());
    Checkpoint & cp = checkpoint_of(seq);
    if (n_past > llama_memory_seq_pos_max(mem, seq)) {
        return;  // nothing past n_past
    }
    if (mode_ != RollbackMode::Checkpoint || n_past <= 0) {
        // KV removal, or a recurrent step back within the snapshots of the latest batch
        if (llama_memory_seq_rm(mem, seq, n_past, -1)) {
            if (n_past <= 0) {
                cp.valid = false;
            }
            while (!cp.log.empty() && cp.log.back().second >= n_past) {
                cp.log.pop_back();
            }
            return;
        }
        if (mode_ == RollbackMode::Remove) {
            throw std::runtime_error("llama.cpp refused to remove positions >= " + std::to_string(n_past) +
                                     " from the " + role_ + "'s cache");
        }
    }
    if (!cp.valid || cp.pos_max >= n_past) {
        throw std::runtime_error(
            "cannot roll the " + role_ + "'s recurrent state back to position " + std::to_string(n_past) + " (" +
            rollback_mode_name(mode_) + " mode, " + std::to_string(n_rs_seq_) + " snapshots" +
            (cp.valid ? ", checkpoint at position " + std::to_string(cp.pos_max) : ", no checkpoint") + ")");
    }
    restore_checkpoint(seq, n_past);
}

void Context::clear() {
    llama_memory_clear(llama_get_memory(ctx_.get()), true);
    for (auto & cp : checkpoints_) {
        cp = Checkpoint{};
    }
}

}  // namespace llamaspec
