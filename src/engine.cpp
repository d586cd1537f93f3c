#include "engine.h"

#include "ggml.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>

namespace llamaspec {

const char * stop_reason_name(StopReason reason) {
    switch (reason) {
        case StopReason::MaxTokens: return "max_tokens";
        case StopReason::EndOfGeneration: return "eos";
        case StopReason::ContextFull: return "context";
        case StopReason::Cancelled: return "cancelled";
        case StopReason::None: break;
    }
    return "";
}

namespace {

double seconds_since(int64_t t0_us) { return (ggml_time_us() - t0_us) * 1e-6; }

}  // namespace

common_params target_params(const Model & target, const Model * draft, const EngineConfig & config,
                            const std::vector<common_speculative_type> & types, int32_t n_seq) {
    const bool speculative = types.size() > 1 || types[0] != COMMON_SPECULATIVE_TYPE_NONE;
    const int32_t depth_limit = max_draft_depth(types, draft);
    if (config.n_max < 1 || config.n_max > depth_limit) {
        throw std::invalid_argument("n_max must be in 1.." + std::to_string(depth_limit) + " for spec_type '" +
                                    spec_types_name(types) + "', got " + std::to_string(config.n_max));
    }
    if (config.n_ctx < config.n_max + 8) {
        throw std::invalid_argument("n_ctx must be at least n_max + 8, got " + std::to_string(config.n_ctx));
    }
    if (config.ngram_size_n < 1 || config.ngram_size_n > 64) {
        throw std::invalid_argument("ngram_size_n must be in 1..64");
    }
    common_params base;
    base.model.path = target.path();
    // every sequence gets n_ctx cells of its own (llama.cpp's non-unified cache: one stream per sequence)
    base.n_ctx = config.n_ctx * n_seq;
    base.n_parallel = n_seq;
    base.kv_unified = false;
    // a whole prompt (or prompt chunk) of one sequence, or the verification batch of all of them, in one call
    base.n_batch = std::max(config.n_ctx, n_seq * (config.n_max + 1));
    base.n_ubatch = std::min(512, config.n_ctx);
    const int32_t n_threads = config.n_threads > 0 ? config.n_threads : common_cpu_get_num_math();
    base.cpuparams.n_threads = n_threads;
    base.cpuparams_batch.n_threads = n_threads;
    base.speculative = make_speculative_params(types, config.n_max, config.ngram_size_n, draft);
    base.speculative.draft.cpuparams.n_threads = n_threads;
    base.speculative.draft.cpuparams_batch.n_threads = n_threads;
    // the verification batch outputs logits at id_last and every drafted position of every sequence
    const auto limits = common_speculative_get_output_limits(base.n_batch, n_seq, speculative ? config.n_max : 0);
    base.n_outputs_max = limits.total;
    base.n_outputs_max_per_seq = limits.per_seq;
    ensure_cache_fits(target, config.n_ctx, n_seq, base.n_ubatch, (uint32_t) config.n_max + 1, draft);
    return base;
}

size_t common_prefix_length(const llama_tokens & a, const llama_tokens & b, size_t limit) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && n < limit && a[n] == b[n]) {
        ++n;
    }
    return n;
}

size_t keep_cached_prefix(Context & ctx, const Drafter & drafter, llama_seq_id seq, const llama_tokens & cached,
                          const llama_tokens & next) {
    const size_t keep = drafter.reusable_prefix(common_prefix_length(cached, next), seq);
    if (keep < cached.size() && !ctx.try_trim(seq, (llama_pos) keep)) {
        return 0;  // e.g. a recurrent state that cannot step back that far
    }
    return keep;
}

std::vector<llama_token> end_of_generation_tokens(const Model & model) {
    std::vector<llama_token> out;
    for (llama_token t = 0; t < model.n_vocab(); ++t) {
        if (model.is_eog(t)) {
            out.push_back(t);
        }
    }
    return out;
}

Engine::Engine(ModelPtr target, ModelPtr draft, const EngineConfig & config)
    : target_(std::move(target)), draft_(std::move(draft)) {
    if (!target_) {
        throw std::invalid_argument("a target model is required");
    }
    const std::vector<common_speculative_type> types = resolve_spec_types(config.spec_type, *target_, draft_.get());
    const bool speculative = types.size() > 1 || types[0] != COMMON_SPECULATIVE_TYPE_NONE;

    base_ = target_params(*target_, draft_.get(), config, types, 1);

    // a verification batch is id_last + up to n_max drafts, and all of it may be taken back (cost measurement)
    const RollbackPolicy rollback = RollbackPolicy::parse(config.rollback);
    ctx_tgt_ = std::make_unique<Context>(target_, common_context_params_to_llama(base_), (uint32_t) config.n_max + 1,
                                         "target", rollback);
    n_ctx_ = std::min<int32_t>(config.n_ctx, (int32_t) ctx_tgt_->n_ctx());
    reuse_prefix_ = config.reuse_prefix;
    drafter_ = std::make_unique<Drafter>(base_, target_, *ctx_tgt_, draft_, rollback);
    batch_ = common_batch(ctx_tgt_->get());
    eog_tokens_ = end_of_generation_tokens(*target_);

    if (config.schedule == "confidence") {
        if (!speculative) {
            throw std::invalid_argument("schedule 'confidence' needs a drafter (spec_type is 'none')");
        }
        drafter_->set_deferred_process(true);
        scheduler_ = std::make_unique<Scheduler>(measure_costs(), drafter_->sequential());
    } else if (config.schedule != "fixed") {
        throw std::invalid_argument("schedule must be 'fixed' or 'confidence', got '" + config.schedule + "'");
    }
}

double Engine::best_draft_seconds(int32_t n, bool per_token, CostModel & costs) {
    double best = INFINITY;
    for (int rep = 0; rep < kCostRepeats; ++rep) {
        const int64_t t0 = ggml_time_us();
        drafter_->draft(n_past_, id_last_, history_, n, draft_tokens_, draft_confidence_);
        const double seconds = seconds_since(t0) - drafter_->last_catch_up_seconds();
        // nothing is verified: take the drafted steps back, or the next repeat's draft model would decode at
        // positions its cache already holds (llama.cpp: "inconsistent sequence positions")
        drafter_->accept(0, 0, n_past_);
        if (rep == 0) {  // the drafter first read the prompt (deferred input): catching up, timed apart
            costs.observe_catch_up(drafter_->last_catch_up_tokens(), drafter_->last_catch_up_seconds());
        } else if (!per_token) {
            best = std::min(best, seconds);
        } else if (!draft_tokens_.empty()) {
            best = std::min(best, seconds / (double) draft_tokens_.size());
        }
    }
    return best;
}

CostModel Engine::measure_costs() {
    const int32_t n_max = drafter_->n_max();
    CostModel costs(n_max);
    // a synthetic context: the cost of a pass depends on its length and the context size, not the text
    const int32_t n_prompt = std::min(32, n_ctx() - n_max - 2);
    std::vector<llama_token> prompt(n_prompt);
    for (int32_t i = 0; i < n_prompt; ++i) {
        prompt[i] = (llama_token) ((1 + 31 * (int64_t) i) % target_->n_vocab());
    }
    start(prompt);
    first_pending_ = false;  // nothing is generated: the passes below go where the first token would
    id_last_ = prompt[0];
    for (int32_t n_tokens = 1; n_tokens <= n_max + 1; ++n_tokens) {
        double best = INFINITY;
        for (int rep = 0; rep < kCostRepeats; ++rep) {
            batch_.clear();
            for (int32_t k = 0; k < n_tokens; ++k) {
                batch_.add(prompt[k % n_prompt], n_past_ + k, 0, true);
            }
            ctx_tgt_->prepare_rollback(0, n_tokens, true);
            const int64_t t0 = ggml_time_us();
            ctx_tgt_->decode(batch_, "a cost-measurement batch");
            const double seconds = seconds_since(t0);
            ctx_tgt_->trim(0, n_past_);
            if (rep > 0) {
                best = std::min(best, seconds);
            }
        }
        costs.set_verify(n_tokens, best);
    }
    if (drafter_->sequential()) {
        const double best = best_draft_seconds(n_max, true, costs);
        costs.set_draft_step(std::isfinite(best) ? best : 0.0);
    } else if (drafter_->block_head()) {
        // a DFlash/DSpark head: one block of each length (the first of each pays its graph's build, which the
        // schedule would otherwise take for what drafting costs and stop drafting on)
        for (int32_t n = 1; n <= n_max; ++n) {
            costs.observe_block_draft(n, best_draft_seconds(n, false, costs));
        }
    }
    started_ = false;
    return costs;
}

void Engine::start(const std::vector<llama_token> & prompt, const SamplingParams & sampling, int32_t max_tokens) {
    validate(sampling);
    if (prompt.empty()) {
        throw std::invalid_argument("the prompt is empty (no tokens)");
    }
    if ((int32_t) prompt.size() >= n_ctx()) {
        throw std::invalid_argument("the prompt has " + std::to_string(prompt.size()) +
                                    " tokens, which does not fit the context of " + std::to_string(n_ctx()) +
                                    " tokens (leave room for at least one generated token)");
    }
    const int32_t n_vocab = target_->n_vocab();
    for (llama_token t : prompt) {
        if (t < 0 || t >= n_vocab) {
            throw std::invalid_argument("prompt token " + std::to_string(t) + " is outside the vocabulary");
        }
    }

    started_ = false;
    sampling_ = sampling;
    sampler_ = sampling.greedy() ? nullptr : std::make_unique<FusedSampler>(sampling);
    rng_.seed(sampling.seed);

    const int64_t t0 = ggml_time_us();
    generated_.clear();
    rounds_.clear();
    stop_reason_ = StopReason::None;

    // prefix reuse: keep what the cache already holds of the new prompt (all of it but the last token, whose
    // logits give the first token, when the prompt extends the previous one, as a chat's next turn does), if
    // the drafter and the memory allow it
    const llama_tokens reusable(prompt.begin(), prompt.end() - 1);
    const size_t keep = reuse_prefix_ && cache_valid_
                            ? keep_cached_prefix(*ctx_tgt_, *drafter_, 0, history_, reusable) : 0;
    cache_valid_ = false;
    if (keep == 0) {
        ctx_tgt_->clear();
    }
    history_.assign(prompt.begin(), prompt.end());
    history_.reserve(n_ctx());
    id_last_ = LLAMA_TOKEN_NULL;  // the first token comes from the prompt's last logits (run())
    n_past_ = (llama_pos) history_.size();
    prefill_tokens_ = (int32_t) (history_.size() - keep);

    drafter_->begin(history_, keep);
    if (scheduler_) {
        scheduler_->begin_generation(max_tokens);
    }
    // llama.cpp may round the context up past n_batch: feed the prompt in n_batch chunks
    const size_t n_batch = llama_n_batch(ctx_tgt_->get());
    for (size_t begin = keep; begin < history_.size(); begin += n_batch) {
        const size_t end = std::min(history_.size(), begin + n_batch);
        batch_.clear();
        for (size_t i = begin; i < end; ++i) {
            batch_.add(history_[i], (llama_pos) i, 0, i + 1 == history_.size());
        }
        if (interrupted_ && interrupted_()) {
            stop_reason_ = StopReason::Cancelled;
            return;  // not started: run() refuses until the next start(); the cache is not reused
        }
        ctx_tgt_->decode(batch_, "the prompt");
        drafter_->process(batch_);
    }
    first_index_ = batch_.size() - 1;
    first_pending_ = true;
    cache_valid_ = true;
    started_ = true;
    prefill_us_ = ggml_time_us() - t0;
}

std::vector<llama_token> Engine::run(int32_t max_new_tokens, int32_t max_rounds, bool ignore_eos) {
    if (!started_) {
        throw std::runtime_error("start() must be called before run()");
    }
    ignore_eos_ = ignore_eos;
    const size_t first = generated_.size();
    for (int32_t r = 0; max_rounds <= 0 || r < max_rounds; ++r) {
        const int32_t budget = max_new_tokens - (int32_t) generated_.size();
        if (budget <= 0) {
            stop_reason_ = StopReason::MaxTokens;
            break;
        }
        if (interrupted_ && interrupted_()) {
            stop_reason_ = StopReason::Cancelled;
            break;
        }
        if (!(first_pending_ ? first_token(ignore_eos) : round(budget, ignore_eos))) {
            break;
        }
    }
    if (stop_reason_ == StopReason::None && (int32_t) generated_.size() >= max_new_tokens) {
        stop_reason_ = StopReason::MaxTokens;
    }
    if (stop_reason_ != StopReason::None) {
        started_ = false;
    }
    return std::vector<llama_token>(generated_.begin() + first, generated_.end());
}

float * Engine::logits_at(int32_t batch_index) {
    float * logits = llama_get_logits_ith(ctx_tgt_->get(), batch_index);
    if (logits == nullptr) {
        throw std::runtime_error("the target produced no logits at batch index " + std::to_string(batch_index));
    }
    if (ignore_eos_) {
        for (llama_token t : eog_tokens_) {
            logits[t] = -INFINITY;
        }
    }
    return logits;
}

int32_t Engine::verify(int32_t first_row, std::vector<llama_token> & out) {
    return verify_draft([this, first_row](int32_t i) { return logits_at(first_row + i); }, target_->n_vocab(),
                        draft_tokens_, sampler_.get(), rng_, dist_, debug_accept_all_, out);
}

bool Engine::first_token(bool ignore_eos) {
    // the prompt's pass left the logits of its last token: the first token is sampled from them as a round
    // without a draft would (same sampler and RNG), and streams before any drafting
    const int64_t t0 = ggml_time_us();
    std::vector<llama_token> out;
    draft_tokens_.clear();
    verify(first_index_, out);
    first_pending_ = false;
    id_last_ = out[0];
    generated_.push_back(id_last_);
    // its pass is the prompt's (prefill_seconds): the round logs only the sampling
    rounds_.add({}, 0, 0, 1, 0.0, seconds_since(t0));
    if (!ignore_eos && target_->is_eog(id_last_)) {
        stop_reason_ = StopReason::EndOfGeneration;
        return false;
    }
    return true;
}

bool Engine::round(int32_t budget, bool ignore_eos) {
    // id_last goes to position n_past; every draft token needs one more position
    const int32_t room = n_ctx() - n_past_;
    if (room <= 0) {
        stop_reason_ = StopReason::ContextFull;
        return false;
    }
    cache_valid_ = false;  // until the round completes: an exception mid-round leaves the cache unknown
    // never draft past the token budget: a round yields at most n_draft + 1 tokens
    int32_t n_draft_max = std::max(0, std::min({drafter_->n_max(), room - 1, budget - 1}));

    const int64_t t_draft = ggml_time_us();
    std::function<bool(int32_t, float)> keep_drafting;
    if (scheduler_) {
        n_draft_max = scheduler_->plan(n_draft_max, drafter_->n_pending());
        if (drafter_->sequential()) {
            keep_drafting = [this](int32_t index, float confidence) {
                return scheduler_->keep_drafting(index, confidence);
            };
        }
    }
    drafter_->draft(n_past_, id_last_, history_, n_draft_max, draft_tokens_, draft_confidence_,
                    std::move(keep_drafting));
    if (scheduler_) {
        scheduler_->observe_catch_up(drafter_->last_catch_up_tokens(), drafter_->last_catch_up_seconds());
        draft_tokens_.resize(scheduler_->verify_depth(draft_confidence_));
    }
    const double draft_s = seconds_since(t_draft);

    const int64_t t_verify = ggml_time_us();
    batch_.clear();
    batch_.add(id_last_, n_past_, 0, true);
    for (size_t i = 0; i < draft_tokens_.size(); ++i) {
        batch_.add(draft_tokens_[i], n_past_ + 1 + (llama_pos) i, 0, true);
    }
    if (!draft_tokens_.empty()) {  // without drafts nothing is ever taken back
        ctx_tgt_->prepare_rollback(0, batch_.size(), true);
    }
    ctx_tgt_->decode(batch_, "the verification batch");
    drafter_->process(batch_);

    std::vector<llama_token> accepted;
    const int32_t n_accepted = verify(0, accepted);

    // keep id_last and the accepted draft tokens in the KV cache, drop the rejected tail
    history_.push_back(id_last_);
    history_.insert(history_.end(), accepted.begin(), accepted.end() - 1);
    n_past_ += 1 + n_accepted;
    ctx_tgt_->trim(0, n_past_);
    cache_valid_ = true;
    drafter_->accept((int32_t) draft_tokens_.size(), n_accepted, n_past_);
    id_last_ = accepted.back();
    const double verify_s = seconds_since(t_verify);

    int32_t n_emitted = 0;
    bool hit_eog = false;
    for (llama_token t : accepted) {
        generated_.push_back(t);
        ++n_emitted;
        if (!ignore_eos && target_->is_eog(t)) {
            hit_eog = true;
            break;
        }
    }
    if (scheduler_) {
        scheduler_->observe(draft_confidence_, (int32_t) draft_tokens_.size(), n_accepted, n_emitted, draft_s,
                            verify_s);
    }
    rounds_.add(draft_confidence_, (int32_t) draft_tokens_.size(), n_accepted, n_emitted, draft_s, verify_s);

    if (hit_eog) {
        stop_reason_ = StopReason::EndOfGeneration;
        return false;
    }
    return true;
}

}  // namespace llamaspec
