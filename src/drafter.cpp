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

// drafters that run a model next to the target (llama.cpp gives them the one draft context)
bool is_model_drafter(common_speculative_type type) {
    return type == COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE || type == COMMON_SPECULATIVE_TYPE_DRAFT_EAGLE3 ||
           type == COMMON_SPECULATIVE_TYPE_DRAFT_MTP || is_block_head(type);
}

// drafters that need a separate draft GGUF (MTP uses the target's own nextn layers)
bool needs_draft_file(common_speculative_type type) {
    return is_model_drafter(type) && type != COMMON_SPECULATIVE_TYPE_DRAFT_MTP;
}

// heads that read the target's hidden states at chosen layers (llama_set_embeddings_layer_inp)
bool reads_layer_features(common_speculative_type type) {
    return is_block_head(type) || type == COMMON_SPECULATIVE_TYPE_DRAFT_EAGLE3;
}

std::string type_name(common_speculative_type type) { return common_speculative_type_to_str(type); }

const char * kTypeNames =
    "auto, none, draft-simple, draft-eagle3, draft-mtp, draft-dflash, draft-dspark, ngram (= ngram-simple), "
    "ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache, or a comma-separated chain such as "
    "'ngram-mod,draft-dspark'";

common_speculative_type parse_one(const std::string & name) {
    if (name == "ngram") {
        return COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE;
    }
    static const char * known[] = {"none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash",
                                   "draft-dspark", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod",
                                   "ngram-cache"};
    if (std::find(std::begin(known), std::end(known), name) == std::end(known)) {
        throw std::invalid_argument("unknown spec_type '" + name + "': use " + kTypeNames);
    }
    return common_speculative_type_from_name(name);
}

// The architectures whose llama.cpp graph can run the MTP drafter with one trained nextn head,
// as tested here; auto picks MTP only for these.
bool mtp_tested_arch(const Model & target) {
    return target.architecture() == "qwen35" || target.architecture() == "qwen35moe";
}

void check_layer_features(const Model & target, const Model & head, common_speculative_type type) {
    if (!target.publishes_layer_features()) {
        throw std::invalid_argument("a " + type_name(type) + " head reads the target's hidden states at chosen "
                                    "layers, which llama.cpp's '" + target.architecture() + "' graph does not "
                                    "publish (targets that do: " + layer_feature_architectures() + ")");
    }
    const int32_t * layers = llama_model_target_layer_ids(head.get());
    const uint32_t n_layers = llama_model_target_layer_ids_n(head.get());
    if (n_layers == 0) {
        throw std::invalid_argument("draft head '" + head.path() + "' has no target_layer_ids");
    }
    // EAGLE3 may also read the final hidden state (layer id == n_layer)
    const int32_t limit = type == COMMON_SPECULATIVE_TYPE_DRAFT_EAGLE3 ? target.n_layer() : target.n_layer() - 1;
    for (uint32_t i = 0; i < n_layers; ++i) {
        if (layers[i] < 0 || layers[i] > limit) {
            throw std::invalid_argument("draft head reads target layer " + std::to_string(layers[i]) +
                                        " but the target has " + std::to_string(target.n_layer()) +
                                        " layers: the head was made for another target");
        }
    }
}

void check_block_head(const Model & target, const Model & draft, common_speculative_type type) {
    if (!draft.is_dflash_head()) {
        throw std::invalid_argument("spec_type '" + type_name(type) + "' needs a DFlash/DSpark draft head, but '" +
                                    draft.path() + "' has architecture '" + draft.architecture() + "'");
    }
    if (type == COMMON_SPECULATIVE_TYPE_DRAFT_DSPARK && !draft.info().has_markov_head) {
        throw std::invalid_argument("'" + draft.path() + "' has no DSpark Markov head (markov_w1): "
                                    "use spec_type 'draft-dflash'");
    }
    // llama.cpp asserts on each of these inside the graph: check them while we still can raise
    if (draft.n_embd() != target.n_embd()) {
        throw std::invalid_argument("draft head hidden size " + std::to_string(draft.n_embd()) +
                                    " differs from the target's " + std::to_string(target.n_embd()) +
                                    ": the head was made for another target");
    }
    const llama_token mask = llama_vocab_mask(draft.vocab());
    if (mask < 0 || mask >= draft.n_vocab()) {
        throw std::invalid_argument("draft head '" + draft.path() + "' has no valid mask token "
                                    "(tokenizer.ggml.mask_token_id)");
    }
    if (type == COMMON_SPECULATIVE_TYPE_DRAFT_DSPARK && draft.meta("dflash.block_size").empty()) {
        throw std::invalid_argument("DSpark head '" + draft.path() + "' has no dflash.block_size");
    }
}

void check_eagle3_head(const Model & target, const Model & draft) {
    if (!draft.is_eagle3_head()) {
        throw std::invalid_argument("spec_type 'draft-eagle3' needs an EAGLE3 head, but '" + draft.path() +
                                    "' has architecture '" + draft.architecture() + "'");
    }
    if (llama_model_target_layer_ids_n(draft.get()) != 3) {
        throw std::invalid_argument("EAGLE3 head '" + draft.path() + "' must read 3 target layers, it lists " +
                                    std::to_string(llama_model_target_layer_ids_n(draft.get())));
    }
    const int64_t fc_in = draft.tensor_dim("fc.weight", 0);
    if (fc_in >= 0 && fc_in != 3 * (int64_t) target.n_embd()) {
        throw std::invalid_argument("EAGLE3 head '" + draft.path() + "' expects target features of width " +
                                    std::to_string(fc_in / 3) + ", the target's hidden size is " +
                                    std::to_string(target.n_embd()) + ": the head was made for another target");
    }
}

}  // namespace

std::vector<common_speculative_type> resolve_spec_types(const std::string & name, const Model & target,
                                                        const Model * draft) {
    if (target.is_dflash_head() || target.is_eagle3_head()) {
        throw std::invalid_argument("'" + target.path() + "' is a draft head (architecture '" +
                                    target.architecture() + "'), not a target model: pass it as the draft");
    }

    std::vector<common_speculative_type> types;
    if (name == "auto") {
        if (draft == nullptr) {
            // the target's own MTP layers where they are known to work, else plain decoding
            types = {target.mtp_loaded() && mtp_tested_arch(target) ? COMMON_SPECULATIVE_TYPE_DRAFT_MTP
                                                                     : COMMON_SPECULATIVE_TYPE_NONE};
        } else if (draft->is_dflash_head()) {
            types = {draft->info().has_markov_head ? COMMON_SPECULATIVE_TYPE_DRAFT_DSPARK
                                                   : COMMON_SPECULATIVE_TYPE_DRAFT_DFLASH};
        } else if (draft->is_eagle3_head()) {
            types = {COMMON_SPECULATIVE_TYPE_DRAFT_EAGLE3};
        } else {
            types = {COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE};
        }
    } else {
        size_t begin = 0;
        while (begin <= name.size()) {
            const size_t end = std::min(name.find(',', begin), name.size());
            const common_speculative_type type = parse_one(name.substr(begin, end - begin));
            if (std::find(types.begin(), types.end(), type) != types.end()) {
                throw std::invalid_argument("spec_type '" + name + "' lists '" + type_name(type) + "' twice");
            }
            types.push_back(type);
            begin = end + 1;
        }
    }
    if (types.size() > 1 && std::find(types.begin(), types.end(), COMMON_SPECULATIVE_TYPE_NONE) != types.end()) {
        throw std::invalid_argument("spec_type 'none' cannot be part of a chain ('" + name + "')");
    }
    if (std::count_if(types.begin(), types.end(), is_model_drafter) > 1) {
        throw std::invalid_argument("spec_type '" + name + "' chains several model drafters; llama.cpp runs one "
                                    "draft model or head at a time (n-gram drafters can be added to it)");
    }

    const auto model_type = std::find_if(types.begin(), types.end(), is_model_drafter);
    const bool needs_draft = model_type != types.end() && needs_draft_file(*model_type);
    if (needs_draft && draft == nullptr) {
        throw std::invalid_argument("spec_type '" + type_name(*model_type) + "' needs a draft model");
    }
    if (!needs_draft && draft != nullptr) {
        throw std::invalid_argument("spec_type '" + name + "' uses no draft model, but one was given");
    }
    if (model_type != types.end() && *model_type == COMMON_SPECULATIVE_TYPE_DRAFT_MTP) {
        if (!target.info().has_nextn || llama_model_n_layer_nextn(target.get()) <= 0) {
            throw std::invalid_argument("spec_type 'draft-mtp' uses the target's own MTP (nextn) layers, and '" +
                                        target.path() + "' has none");
        }
        if (!target.mtp_loaded()) {
            throw std::invalid_argument("the target was loaded without its MTP layers: load it with "
                                        "llamaspec.Model(path, load_mtp=True)");
        }
    }
    if (draft == nullptr) {
        return types;
    }

    const common_speculative_type type = *model_type;
    if (type == COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE && (draft->is_dflash_head() || draft->is_eagle3_head())) {
        throw std::invalid_argument("'" + draft->path() + "' is a " + draft->architecture() +
                                    " head: use spec_type 'auto' or its own type");
    }
    if (is_block_head(type)) {
        check_block_head(target, *draft, type);
    }
    if (type == COMMON_SPECULATIVE_TYPE_DRAFT_EAGLE3) {
        check_eagle3_head(target, *draft);
    }
    if (reads_layer_features(type)) {
        check_layer_features(target, *draft, type);
    }
    check_same_vocab(target, *draft);
    return types;
}

std::string spec_types_name(const std::vector<common_speculative_type> & types) {
    std::string out;
    for (const auto type : types) {
        out += (out.empty() ? "" : ",") + type_name(type);
    }
    return out;
}

int32_t max_draft_depth(const std::vector<common_speculative_type> & types, const Model * draft) {
    int32_t depth = 64;  // draft models and n-gram lookups: a generous bound on one verification batch
    for (const auto type : types) {
        if (is_block_head(type) && draft != nullptr) {
            const int32_t block_size = std::stoi(draft->meta("dflash.block_size", "16"));
            const bool from_anchor = draft->meta("dflash.sample_from_anchor", "true") == "true";
            // DFlash denoises [id_last, mask * (B-1)]: B-1 drafts; anchor-first DSpark drafts a full block
            depth = std::min(depth, type == COMMON_SPECULATIVE_TYPE_DRAFT_DSPARK && from_anchor ? block_size
                                                                                                 : block_size - 1);
        }
    }
    return depth;
}

common_params_speculative make_speculative_params(const std::vector<common_speculative_type> & types, int32_t n_max,
                                                  int32_t ngram_size_n, const Model * draft) {
    common_params_speculative params;
    params.types = types;
    params.draft.n_max = n_max;
    params.draft.n_min = 0;
    params.draft.p_min = 0.0f;  // no confidence truncation: the depth is exactly what was asked
    if (draft != nullptr) {
        params.draft.mparams.path = draft->path();
    }
    for (auto * ngram : {&params.ngram_simple, &params.ngram_map_k, &params.ngram_map_k4v}) {
        ngram->size_n = (uint16_t) ngram_size_n;
        ngram->size_m = (uint16_t) n_max;
    }
    params.ngram_mod.n_match = ngram_size_n;
    params.ngram_mod.n_max = n_max;
    params.ngram_mod.n_min = 1;
    return params;
}

Drafter::Drafter(const common_params & base, const ModelPtr & target, Context & ctx_tgt, const ModelPtr & draft,
                 RollbackPolicy rollback)
    : types_(base.speculative.types),
      target_(target),
      draft_model_(draft),
      ctx_tgt_(ctx_tgt),
      params_(base.speculative),
      n_max_(base.speculative.draft.n_max),
      n_seq_((uint32_t) std::max(1, base.n_parallel)),
      dft_cache_has_tail_(n_seq_, 0),
      drafted_kept_(n_seq_) {
    const auto model_type = std::find_if(types_.begin(), types_.end(), is_model_drafter);
    model_type_ = model_type == types_.end() ? COMMON_SPECULATIVE_TYPE_NONE : *model_type;
    if (!active()) {
        return;
    }
    if (draft_model_ || model_type_ == COMMON_SPECULATIVE_TYPE_DRAFT_MTP) {
        // the draft context follows the target's, as common_speculative_init_from_params builds it
        common_params params_dft = common_base_params_to_speculative(base);
        llama_context_params cparams = common_context_params_to_llama(params_dft);
        cparams.n_ctx = ctx_tgt.n_ctx();
        cparams.ctx_other = ctx_tgt.get();
        ModelPtr model = draft_model_;
        std::string role = "draft model";
        if (model_type_ == COMMON_SPECULATIVE_TYPE_DRAFT_MTP) {
            cparams.ctx_type = LLAMA_CONTEXT_TYPE_MTP;  // the target's nextn layers, with their own cache
            model = target_;
            role = "MTP head";
        } else if (is_block_head(model_type_)) {
            role = "DFlash/DSpark head";
        } else if (model_type_ == COMMON_SPECULATIVE_TYPE_DRAFT_EAGLE3) {
            role = "EAGLE3 head";
        }
        // A recurrent draft model rolls back over several batches (its own drafting steps), which
        // snapshots of the latest batch cannot do: it uses checkpoints (max_rollback 0).
        ctx_dft_ = std::make_unique<Context>(model, cparams, 0, role, rollback);
        pending_batch_ = common_batch(ctx_dft_->get());
        process_batch_ = common_batch(ctx_dft_->get());
        keeps_drafted_steps_ = types_.size() == 1 && model_type_ == COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE &&
                               ctx_dft_->rollback_mode() == RollbackMode::Remove;
    }
    params_.draft.ctx_tgt = ctx_tgt_.get();
    params_.draft.ctx_dft = ctx_dft_ ? ctx_dft_->get() : nullptr;
}

std::string Drafter::name() const { return spec_types_name(types_); }

size_t Drafter::reusable_prefix(size_t n_keep, llama_seq_id seq) const {
    if (!active() || model_type_ == COMMON_SPECULATIVE_TYPE_NONE || model_type_ == COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE) {
        return n_keep;
    }
    if (is_block_head(model_type_) && ctx_dft_) {
        // a DFlash/DSpark head's cache holds what it read of the target's features, position by position;
        // features it never read (deferred at the end of the last generation) would need the target again
        return std::min(n_keep, (size_t) ctx_dft_->n_pos(seq));
    }
    return 0;  // EAGLE3 and MTP carry one feature row across batches inside llama.cpp's drafter: start cold
}

size_t Drafter::keep_draft_cache(llama_seq_id seq, size_t n_keep) {
    const size_t keep = std::min<size_t>(reusable_prefix(n_keep, seq), (size_t) ctx_dft_->n_pos(seq));
    return keep > 0 && ctx_dft_->try_trim(seq, (llama_pos) keep) ? keep : 0;
}

bool Drafter::already_decoded(const common_batch::token & t) const {
    if (t.seq_id < 0 || (uint32_t) t.seq_id >= n_seq_ || !t.seq_ids_extra.empty()) {
        return false;
    }
    const DraftedKept & kept = drafted_kept_[t.seq_id];
    const llama_pos i = t.pos[0] - kept.pos0;
    if (i < 0 || i >= (llama_pos) kept.tokens.size()) {
        return false;
    }
    if (kept.tokens[i] != t.id) {
        // the engines verify exactly id_last + the draft: anything else is a bug here, not bad input
        throw std::logic_error("the target batch differs from what the draft model drafted at position " +
                               std::to_string(t.pos[0]));
    }
    return true;
}

void Drafter::forget_drafted(const common_batch & batch) {
    // a sequence's kept steps serve its next target batch only (the others' may still be coming)
    for (const auto & t : batch.tokens) {
        if (t.seq_id >= 0 && (uint32_t) t.seq_id < n_seq_) {
            drafted_kept_[t.seq_id].tokens.clear();
        }
    }
}

void Drafter::process(const common_batch & batch) {
    if (!spec_) {
        return;
    }
    if (defer_process_ && sequential()) {
        for (const auto & t : batch.tokens) {
            if (!(keeps_drafted_steps_ && already_decoded(t))) {
                pending_.emplace_back(t.id, t.pos[0]);
            }
        }
        forget_drafted(batch);
        return;
    }
    const common_batch * input = &batch;
    if (keeps_drafted_steps_) {
        process_batch_.clear();
        for (const auto & t : batch.tokens) {
            if (!already_decoded(t)) {
                process_batch_.add(t.id, t.pos[0], t.seq_id, false);
            }
        }
        forget_drafted(batch);
        input = &process_batch_;
    }
    if (!common_speculative_process(spec_.get(), *input)) {
        throw std::runtime_error("the drafter failed to process the target batch");
    }
    if (ctx_dft_) {
        ctx_dft_->record(*input);
    }
    // the draft cache may now hold positions the target rejects (not when the input is deferred:
    // a DFlash/DSpark head keeps the features until its next draft; EAGLE3 and MTP decode them now)
    if (ctx_dft_ && !(defer_process_ && is_block_head(model_type_))) {
        for (const auto & t : batch.tokens) {
            dft_cache_has_tail_.at(t.seq_id) = 1;
        }
    }
}

void Drafter::flush_pending() {
    last_catch_up_tokens_ = (int32_t) pending_.size();
    last_catch_up_seconds_ = 0.0;
    if (pending_.empty()) {
        return;
    }
    const int64_t t0 = ggml_time_us();
    const size_t n_batch = llama_n_batch(ctx_dft_->get());
    for (size_t begin = 0; begin < pending_.size(); begin += n_batch) {
        pending_batch_.clear();
        for (size_t i = begin; i < std::min(pending_.size(), begin + n_batch); ++i) {
            pending_batch_.add(pending_[i].first, pending_[i].second, 0, false);
        }
        if (!common_speculative_process(spec_.get(), pending_batch_)) {
            throw std::runtime_error("the drafter failed to process the target tokens");
        }
        ctx_dft_->record(pending_batch_);
    }
    pending_.clear();
    last_catch_up_seconds_ = (ggml_time_us() - t0) * 1e-6;
}

bool Drafter::block_head() const { return is_block_head(model_type_); }

int32_t Drafter::n_pending() const {
    const int32_t deferred_rows = spec_ && is_block_head(model_type_) ? common_speculative_n_deferred(spec_.get()) : 0;
    return (int32_t) pending_.size() + deferred_rows;
}

void Drafter::begin_round(bool drafting) {
    last_catch_up_tokens_ = 0;
    last_catch_up_seconds_ = 0.0;
    if (spec_ && drafting) {
        flush_pending();
        if (!drafted_last_round_ && is_block_head(model_type_)) {
            // a DFlash/DSpark head first reads the features of the rounds it skipped (or of the prompt):
            // timed apart, as catching up, so that the schedule does not price drafting by it
            const int64_t t0 = ggml_time_us();
            const int32_t n_rows = common_speculative_flush_deferred(spec_.get());
            if (n_rows < 0) {
                throw std::runtime_error("the drafter failed to read the target's features");
            }
            last_catch_up_tokens_ += n_rows;
            last_catch_up_seconds_ += (ggml_time_us() - t0) * 1e-6;
        }
    }
    drafted_last_round_ = spec_ && drafting;
}

void Drafter::draft(llama_pos pos0, llama_token id_last, const llama_tokens & history, int32_t n_max,
                    llama_tokens & out, std::vector<float> & confidence,
                    std::function<bool(int32_t, float)> keep_drafting) {
    begin_round(n_max > 0);
    request_draft(0, pos0, id_last, history, n_max, out, confidence, std::move(keep_drafting));
    draft_requested();
}

void Drafter::begin_sequence(llama_seq_id seq, const llama_tokens & prompt_history, size_t n_keep) {
    if (seq < 0 || (uint32_t) seq >= n_seq_) {
        throw std::out_of_range("sequence " + std::to_string(seq) + " is out of range for a drafter of " +
                                std::to_string(n_seq_) + " sequences");
    }
    if (!active()) {
        return;
    }
    size_t catch_up_from = n_keep;  // the draft model decodes prompt_history[catch_up_from, n_keep) below
    if (ctx_dft_) {
        catch_up_from = keep_draft_cache(seq, n_keep);
        if (catch_up_from == 0) {
            ctx_dft_->trim(seq, 0);
        }
    }
    if (!spec_) {
        spec_.reset(common_speculative_init(params_, n_seq_));
        if (!spec_) {
            throw std::runtime_error("llama.cpp could not initialise the '" + name() + "' drafter");
        }
        common_speculative_set_deferred_process(spec_.get(), defer_process_ && is_block_head(model_type_));
    }
    dft_cache_has_tail_.at(seq) = 0;
    drafted_kept_.at(seq).tokens.clear();
    common_speculative_begin(spec_.get(), seq, prompt_history);
    if (ctx_dft_ && catch_up_from < n_keep) {
        catch_up(seq, prompt_history, catch_up_from, n_keep);
    }
}

void Drafter::catch_up(llama_seq_id seq, const llama_tokens & history, size_t from, size_t to) {
    const size_t n_batch = llama_n_batch(ctx_dft_->get());
    for (size_t begin = from; begin < to; begin += n_batch) {
        pending_batch_.clear();
        for (size_t i = begin; i < std::min(to, begin + n_batch); ++i) {
            pending_batch_.add(history[i], (llama_pos) i, seq, false);
        }
        if (!common_speculative_process(spec_.get(), pending_batch_)) {
            throw std::runtime_error("the drafter failed to process the target tokens");
        }
        ctx_dft_->record(pending_batch_);
    }
}

void Drafter::request_draft(llama_seq_id seq, llama_pos pos0, llama_token id_last, const llama_tokens & history,
                            int32_t n_max, llama_tokens & out, std::vector<float> & confidence,
                            std::function<bool(int32_t, float)> keep_drafting) {
    out.clear();
    confidence.clear();
    if (!spec_ || n_max <= 0) {
        return;
    }
    if (ctx_dft_) {
        // the draft model's own steps are taken back below: one step per drafted token
        ctx_dft_->prepare_rollback(seq, n_max + 1, false);
    }
    auto & params = common_speculative_get_draft_params(spec_.get(), seq);
    params.drafting = true;
    params.n_max = n_max;
    params.pos0 = pos0;
    params.id_last = id_last;
    params.prompt = &history;
    params.result = &out;
    params.confidence = &confidence;
    params.keep_drafting = std::move(keep_drafting);
    requests_.push_back({seq, n_max, pos0, id_last, &out, &confidence});
}

void Drafter::draft_requested() {
    if (requests_.empty()) {
        return;
    }
    common_speculative_draft(spec_.get());
    for (const Request & r : requests_) {
        auto & params = common_speculative_get_draft_params(spec_.get(), r.seq);
        params.keep_drafting = nullptr;
        params.confidence = nullptr;
        if ((int32_t) r.out->size() > r.n_max) {
            r.out->resize(r.n_max);
        }
        // n-gram lookups carry no confidence
        r.confidence->resize(r.out->size(), NAN);
        if (keeps_drafted_steps_) {
            // the draft model decoded id_last at pos0 and draft token i at pos0 + 1 + i (all but the last):
            // keep them for the verification batch, which holds the same tokens at the same positions
            const llama_pos n_decoded = std::min<llama_pos>(ctx_dft_->n_pos(r.seq) - r.pos0,
                                                            (llama_pos) r.out->size() + 1);
            DraftedKept & kept = drafted_kept_[r.seq];
            kept.pos0 = r.pos0;
            kept.tokens.clear();
            if (n_decoded > 0) {
                kept.tokens.push_back(r.id_last);
                kept.tokens.insert(kept.tokens.end(), r.out->begin(), r.out->begin() + (n_decoded - 1));
                dft_cache_has_tail_[r.seq] = 1;  // accept() trims the rejected ones
            }
            ctx_dft_->trim(r.seq, r.pos0 + std::max<llama_pos>(n_decoded, 0));
        } else if (ctx_dft_) {
            // drafting may have written block positions into the draft cache: keep the verified prefix only
            ctx_dft_->trim(r.seq, r.pos0);
        }
    }
    requests_.clear();
}

void Drafter::accept(llama_seq_id seq, int32_t n_verified, int32_t n_accepted, llama_pos n_past) {
    if (!spec_) {
        return;
    }
    // deferred tokens past the accepted prefix were rejected: the draft model never sees them
    while (!pending_.empty() && pending_.back().second >= n_past) {
        pending_.pop_back();
    }
    common_speculative_discard_deferred(spec_.get(), seq, n_past);
    // n-gram drafters judge their tables by acceptance: only over what the target saw (patch 0005)
    common_speculative_set_verified(spec_.get(), seq, (uint16_t) n_verified);
    common_speculative_accept(spec_.get(), seq, (uint16_t) n_accepted);
    if (ctx_dft_ && dft_cache_has_tail_.at(seq)) {
        ctx_dft_->trim(seq, n_past);
        dft_cache_has_tail_[seq] = 0;
    }
}

void Drafter::reset_state() {
    spec_.reset();
    pending_.clear();
    drafted_last_round_ = false;
    std::fill(dft_cache_has_tail_.begin(), dft_cache_has_tail_.end(), 0);
    for (auto & kept : drafted_kept_) {
        kept.tokens.clear();
    }
}

void Drafter::end_sequence(llama_seq_id seq, bool keep_cache) {
    if (spec_) {  // a head's feature rows deferred and never read: not for the sequence's next request
        common_speculative_discard_deferred(spec_.get(), seq, 0);
    }
    if (ctx_dft_ && !keep_cache) {
        ctx_dft_->trim(seq, 0);
    }
    if (seq >= 0 && (uint32_t) seq < n_seq_) {
        dft_cache_has_tail_[seq] = 0;
        drafted_kept_[seq].tokens.clear();
    }
}

}  // namespace llamaspec
