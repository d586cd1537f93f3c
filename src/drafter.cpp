#include "drafter.h"

#include "llama-ext.h"

#include "ggml.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace llamaspec {

namespace {

bool is_block_head(common_speculative_type type) {
    return type == COMMON_SPECULATIVE_TYPE_DRAFT_DFLASH || type == COMMON_SPECULATIVE_TYPE_DRAFT_DSPARK;
}

bool is_ngram(common_speculative_type type) {
    switch (type) {
        case COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE:
        case COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K:
        case COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K4V:
        case COMMON_SPECULATIVE_TYPE_NGRAM_MOD:
            return true;
        default:
            return false;
    }
}

std::string type_name(common_speculative_type type) { return common_speculative_type_to_str(type); }

}  // namespace

common_speculative_type resolve_spec_type(const std::string & name, const Model & target, const Model * draft) {
    if (target.is_dflash_head()) {
        throw std::invalid_argument("'" + target.path() +
                                    "' is a DFlash/DSpark draft head, not a target model: pass it as the draft");
    }

    common_speculative_type type;
    if (name == "auto") {
        if (draft == nullptr) {
            type = COMMON_SPECULATIVE_TYPE_NONE;
        } else if (draft->is_dflash_head()) {
            type = draft->info().has_markov_head ? COMMON_SPECULATIVE_TYPE_DRAFT_DSPARK
                                                 : COMMON_SPECULATIVE_TYPE_DRAFT_DFLASH;
        } else {
            type = COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE;
        }
    } else if (name == "ngram") {
        type = COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE;
    } else {
        static const char * supported[] = {"none", "draft-simple", "draft-dflash", "draft-dspark", "ngram-simple",
                                           "ngram-map-k", "ngram-map-k4v", "ngram-mod"};
        if (std::find(std::begin(supported), std::end(supported), name) == std::end(supported)) {
            throw std::invalid_argument("unknown spec_type '" + name +
                                        "': use auto, none, draft-simple, draft-dflash, draft-dspark, ngram, "
                                        "ngram-simple, ngram-map-k, ngram-map-k4v or ngram-mod");
        }
        type = common_speculative_type_from_name(name);
    }

    const bool needs_draft = type == COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE || is_block_head(type);
    if (needs_draft && draft == nullptr) {
        throw std::invalid_argument("spec_type '" + type_name(type) + "' needs a draft model");
    }
    if (!needs_draft && draft != nullptr) {
        throw std::invalid_argument("spec_type '" + type_name(type) + "' uses no draft model, but one was given");
    }
    if (draft == nullptr) {
        return type;
    }

    if (type == COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE && draft->is_dflash_head()) {
        throw std::invalid_argument("'" + draft->path() + "' is a DFlash/DSpark head: use spec_type 'auto', "
                                    "'draft-dflash' or 'draft-dspark'");
    }
    if (is_block_head(type)) {
        if (!draft->is_dflash_head()) {
            throw std::invalid_argument("spec_type '" + type_name(type) + "' needs a DFlash/DSpark draft head, but '" +
                                        draft->path() + "' has architecture '" + draft->architecture() + "'");
        }
        if (type == COMMON_SPECULATIVE_TYPE_DRAFT_DSPARK && !draft->info().has_markov_head) {
            throw std::invalid_argument("'" + draft->path() + "' has no DSpark Markov head (markov_w1): "
                                        "use spec_type 'draft-dflash'");
        }
        // llama.cpp asserts on each of these inside the graph: check them while we still can raise
        if (draft->n_embd() != target.n_embd()) {
            throw std::invalid_argument("draft head hidden size " + std::to_string(draft->n_embd()) +
                                        " differs from the target's " + std::to_string(target.n_embd()) +
                                        ": the head was made for another target");
        }
        const llama_token mask = llama_vocab_mask(draft->vocab());
        if (mask < 0 || mask >= draft->n_vocab()) {
            throw std::invalid_argument("draft head '" + draft->path() + "' has no valid mask token "
                                        "(tokenizer.ggml.mask_token_id)");
        }
        if (type == COMMON_SPECULATIVE_TYPE_DRAFT_DSPARK && draft->meta("dflash.block_size").empty()) {
            throw std::invalid_argument("DSpark head '" + draft->path() + "' has no dflash.block_size");
        }
        const int32_t * layers = llama_model_target_layer_ids(draft->get());
        const uint32_t n_layers = llama_model_target_layer_ids_n(draft->get());
        if (n_layers == 0) {
            throw std::invalid_argument("draft head '" + draft->path() + "' has no target_layer_ids");
        }
        for (uint32_t i = 0; i < n_layers; ++i) {
            if (layers[i] < 0 || layers[i] >= target.n_layer()) {
                throw std::invalid_argument("draft head reads target layer " + std::to_string(layers[i]) +
                                            " but the target has " + std::to_string(target.n_layer()) +
                                            " layers: the head was made for another target");
            }
        }
    }
    check_same_vocab(target, *draft);
    return type;
}

int32_t max_draft_depth(common_speculative_type type, const Model * draft) {
    if (is_block_head(type) && draft != nullptr) {
        const int32_t block_size = std::stoi(draft->meta("dflash.block_size", "16"));
        const bool from_anchor = draft->meta("dflash.sample_from_anchor", "true") == "true";
        // DFlash denoises [id_last, mask * (B-1)]: B-1 drafts; anchor-first DSpark drafts a full block
        return type == COMMON_SPECULATIVE_TYPE_DRAFT_DSPARK && from_anchor ? block_size : block_size - 1;
    }
    return 64;  // draft models and n-gram lookups: a generous bound on one verification batch
}

common_params_speculative make_speculative_params(common_speculative_type type, int32_t n_max,
                                                  int32_t ngram_size_n, const Model * draft) {
    common_params_speculative params;
    params.types = {type};
    params.draft.n_max = n_max;
    params.draft.n_min = 0;
    params.draft.p_min = 0.0f;  // no confidence truncation: the depth is exactly what was asked
    if (draft != nullptr) {
        params.draft.mparams.path = draft->path();
    }
    if (is_ngram(type)) {
        for (auto * ngram : {&params.ngram_simple, &params.ngram_map_k, &params.ngram_map_k4v}) {
            ngram->size_n = (uint16_t) ngram_size_n;
            ngram->size_m = (uint16_t) n_max;
        }
        params.ngram_mod.n_match = ngram_size_n;
        params.ngram_mod.n_max = n_max;
        params.ngram_mod.n_min = 1;
    }
    return params;
}

Drafter::Drafter(const common_params & base, const ModelPtr & target, llama_context * ctx_tgt,
                 const ModelPtr & draft)
    : type_(base.speculative.types.at(0)),
      target_(target),
      draft_model_(draft),
      ctx_tgt_(ctx_tgt),
      params_(base.speculative),
      n_max_(base.speculative.draft.n_max) {
    if (!active()) {
        return;
    }
    if (draft_model_) {
        // the draft context follows the target's, as common_speculative_init_from_params builds it
        common_params params_dft = common_base_params_to_speculative(base);
        llama_context_params cparams = common_context_params_to_llama(params_dft);
        cparams.n_ctx = llama_n_ctx(ctx_tgt);
        cparams.n_rs_seq = 0;
        cparams.ctx_other = ctx_tgt;
        ctx_dft_.reset(llama_init_from_model(draft_model_->get(), cparams));
        if (!ctx_dft_) {
            throw std::runtime_error("could not create the draft context for '" + draft_model_->path() + "'");
        }
        pending_batch_ = common_batch(ctx_dft_.get());
    }
    params_.draft.ctx_tgt = ctx_tgt_;
    params_.draft.ctx_dft = ctx_dft_.get();
    if (is_ngram(type_)) {
        n_max_ = params_.ngram_simple.size_m;
    }
}

void Drafter::begin(const llama_tokens & prompt_history) {
    if (!active()) {
        return;
    }
    if (ctx_dft_) {
        llama_memory_clear(llama_get_memory(ctx_dft_.get()), true);
    }
    // a fresh state per generation, so one generation never depends on the previous one
    spec_.reset();
    pending_.clear();
    spec_.reset(common_speculative_init(params_, 1));
    if (!spec_) {
        throw std::runtime_error("llama.cpp could not initialise the '" + type_name(type_) + "' drafter");
    }
    common_speculative_set_deferred_process(spec_.get(), defer_process_ && is_block_head(type_));
    common_speculative_begin(spec_.get(), 0, prompt_history);
}

void Drafter::process(const common_batch & batch) {
    if (!spec_) {
        return;
    }
    if (defer_process_ && sequential()) {
        for (const auto & t : batch.tokens) {
            pending_.emplace_back(t.id, t.pos[0]);
        }
        return;
    }
    if (!common_speculative_process(spec_.get(), batch)) {
        throw std::runtime_error("the drafter failed to process the target batch");
    }
    // the draft cache may now hold positions the target rejects (not when the input is deferred)
    dft_cache_has_tail_ = !defer_process_;
}

void Drafter::flush_pending() {
    last_catch_up_tokens_ = (int32_t) pending_.size();
    last_catch_up_seconds_ = 0.0;
    if (pending_.empty()) {
        return;
    }
    const int64_t t0 = ggml_time_us();
    const size_t n_batch = llama_n_batch(ctx_dft_.get());
    for (size_t begin = 0; begin < pending_.size(); begin += n_batch) {
        pending_batch_.clear();
        for (size_t i = begin; i < std::min(pending_.size(), begin + n_batch); ++i) {
            pending_batch_.add(pending_[i].first, pending_[i].second, 0, false);
        }
        if (!common_speculative_process(spec_.get(), pending_batch_)) {
            throw std::runtime_error("the drafter failed to process the target tokens");
        }
    }
    pending_.clear();
    last_catch_up_seconds_ = (ggml_time_us() - t0) * 1e-6;
}

void Drafter::draft(llama_pos pos0, llama_token id_last, const llama_tokens & history, int32_t n_max,
                    llama_tokens & out, std::vector<float> & confidence,
                    std::function<bool(int32_t, float)> keep_drafting) {
    out.clear();
    confidence.clear();
    last_catch_up_tokens_ = 0;
    if (!spec_ || n_max <= 0) {
        return;
    }
    flush_pending();
    auto & params = common_speculative_get_draft_params(spec_.get(), 0);
    params.drafting = true;
    params.n_max = n_max;
    params.pos0 = pos0;
    params.id_last = id_last;
    params.prompt = &history;
    params.result = &out;
    params.confidence = &confidence;
    params.keep_drafting = std::move(keep_drafting);
    common_speculative_draft(spec_.get());
    params.keep_drafting = nullptr;
    params.confidence = nullptr;
    if ((int32_t) out.size() > n_max) {
        out.resize(n_max);
    }
    // n-gram lookups carry no confidence
    confidence.resize(out.size(), NAN);
    if (ctx_dft_) {
        // drafting may have written block positions into the draft cache: keep the verified prefix only
        llama_memory_seq_rm(llama_get_memory(ctx_dft_.get()), 0, pos0, -1);
    }
}

void Drafter::accept(int32_t n_accepted, llama_pos n_past) {
    if (!spec_) {
        return;
    }
    // deferred tokens past the accepted prefix were rejected: the draft model never sees them
    while (!pending_.empty() && pending_.back().second >= n_past) {
        pending_.pop_back();
    }
    common_speculative_discard_deferred(spec_.get(), 0, n_past);
    common_speculative_accept(spec_.get(), 0, (uint16_t) n_accepted);
    if (ctx_dft_ && dft_cache_has_tail_) {
        llama_memory_seq_rm(llama_get_memory(ctx_dft_.get()), 0, n_past, -1);
        dft_cache_has_tail_ = false;
    }
}

}  // namespace llamaspec
