#include "batch_engine.h"

#include "ggml.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace llamaspec {

BatchEngine::BatchEngine(ModelPtr target, ModelPtr draft, const EngineConfig & config, int32_t n_seq)
    : target_(std::move(target)), draft_(std::move(draft)) {
    if (!target_) {
        throw std::invalid_argument("a target model is required");
    }
    if (n_seq < 1 || n_seq > 256) {
        throw std::invalid_argument("the number of sequences must be in 1..256, got " + std::to_string(n_seq));
    }
    if (config.schedule != "fixed" && config.schedule != "confidence") {
        throw std::invalid_argument("schedule must be 'fixed' or 'confidence', got '" + config.schedule + "'");
    }
    const std::vector<common_speculative_type> types = resolve_spec_types(config.spec_type, *target_, draft_.get());
    const bool speculative = types.size() > 1 || types[0] != COMMON_SPECULATIVE_TYPE_NONE;
    if (config.schedule == "confidence" && !speculative) {
        throw std::invalid_argument("schedule 'confidence' needs a drafter (spec_type is 'none')");
    }
    base_ = target_params(*target_, draft_.get(), config, types, n_seq);
    n_max_ = config.n_max;
    reuse_prefix_ = config.reuse_prefix;

    const RollbackPolicy rollback = RollbackPolicy::parse(config.rollback);
    ctx_tgt_ = std::make_unique<Context>(target_, common_context_params_to_llama(base_), (uint32_t) config.n_max + 1,
                                         "target", rollback);
    n_ctx_ = std::min<int32_t>(config.n_ctx, (int32_t) ctx_tgt_->n_ctx_per_seq());
    drafter_ = std::make_unique<Drafter>(base_, target_, *ctx_tgt_, draft_, rollback);
    batch_ = common_batch(ctx_tgt_->get());
    slots_.resize(n_seq);
    eog_tokens_ = end_of_generation_tokens(*target_);
    if (config.schedule == "confidence") {
        // rounds that skip drafting cost the drafter nothing until it drafts again (a head's feature rows are
        // kept per sequence inside llama.cpp; a draft model's deferred tokens are one sequence's)
        drafter_->set_deferred_process(n_seq == 1 || drafter_->block_head());
        const char * per = getenv("LLAMASPEC_BATCH_SCHEDULE");
        schedule_per_batch_ = per != nullptr && std::string(per) == "batch";
        const CostModel costs = measure_costs();
        const int32_t n_schedulers = schedule_per_batch_ ? 1 : n_seq;
        for (int32_t i = 0; i < n_schedulers; ++i) {
            schedulers_.push_back(std::make_unique<Scheduler>(costs, drafter_->sequential()));
        }
    }
}

namespace {

double seconds_since(int64_t t0_us) { return (ggml_time_us() - t0_us) * 1e-6; }

}  // namespace

double BatchEngine::best_draft_seconds(int32_t n, bool per_token, llama_pos n_past, llama_token id_last,
                                       const llama_tokens & history, CostModel & costs) {
    double best = INFINITY;
    llama_tokens draft;
    std::vector<float> confidence;
    for (int rep = 0; rep < kCostRepeats; ++rep) {
        const int64_t t0 = ggml_time_us();
        drafter_->draft(n_past, id_last, history, n, draft, confidence);
        const double seconds = seconds_since(t0) - drafter_->last_catch_up_seconds();
        // nothing is verified: take the drafted steps back, or the next repeat's draft model would decode at
        // positions its cache already holds (llama.cpp: "inconsistent sequence positions")
        drafter_->accept(0, 0, 0, n_past);
        if (rep == 0) {  // the drafter first read the prompt (deferred input): catching up, timed apart
            costs.observe_catch_up(drafter_->last_catch_up_tokens(), drafter_->last_catch_up_seconds());
        } else if (!per_token) {
            best = std::min(best, seconds);
        } else if (!draft.empty()) {
            best = std::min(best, seconds / (double) draft.size());
        }
    }
    return best;
}

CostModel BatchEngine::measure_costs() {
    CostModel costs(n_max_);
    // a synthetic context: the cost of a pass depends on its length and the context size, not the text
    const int32_t n_prompt = std::min(32, n_ctx_ - n_max_ - 2);
    llama_tokens prompt(n_prompt);
    for (int32_t i = 0; i < n_prompt; ++i) {
        prompt[i] = (llama_token) ((1 + 31 * (int64_t) i) % target_->n_vocab());
    }
    ctx_tgt_->clear();
    drafter_->reset_state();
    drafter_->begin_sequence(0, prompt);
    batch_.clear();
    for (int32_t i = 0; i < n_prompt; ++i) {
        batch_.add(prompt[i], i, 0, i + 1 == n_prompt);
    }
    ctx_tgt_->decode(batch_, "the prompt");
    drafter_->process(batch_);
    const llama_pos n_past = n_prompt;
    // the fastest of kCostRepeats - 1 passes over n_tokens after the prompt, each taken back (by a checkpoint
    // where a recurrent state cannot step back that far)
    auto best_pass_seconds = [&](int32_t n_tokens) {
        double best = INFINITY;
        for (int rep = 0; rep < kCostRepeats; ++rep) {
            batch_.clear();
            for (int32_t k = 0; k < n_tokens; ++k) {
                batch_.add(prompt[k % n_prompt], n_past + k, 0, true);
            }
            ctx_tgt_->prepare_rollback(0, n_tokens, true);
            const int64_t t0 = ggml_time_us();
            ctx_tgt_->decode(batch_, "a cost-measurement batch");
            const double seconds = seconds_since(t0);
            ctx_tgt_->trim(0, n_past);
            if (rep > 0) {
                best = std::min(best, seconds);
            }
        }
        return best;
    };
    for (int32_t n_tokens = 1; n_tokens <= n_max_ + 1; ++n_tokens) {
        costs.set_verify(n_tokens, best_pass_seconds(n_tokens));
    }
    // batched rounds: passes over up to every sequence's n_max + 1 tokens, at lengths 1.5x apart
    const int32_t longest = std::min<int32_t>({n_seq() * (n_max_ + 1), n_ctx_ - n_prompt - 2,
                                               (int32_t) llama_n_batch(ctx_tgt_->get())});
    for (int32_t n_tokens = n_max_ + 1; n_tokens < longest;) {
        n_tokens = std::min(longest, (int32_t) std::ceil(n_tokens * 1.5));
        costs.set_pass(n_tokens, best_pass_seconds(n_tokens));
    }
    // the passes above went where the first token would: draft after the prompt's first token
    if (drafter_->sequential()) {
        const double best = best_draft_seconds(n_max_, true, n_past, prompt[0], prompt, costs);
        costs.set_draft_step(std::isfinite(best) ? best : 0.0);
    } else if (drafter_->block_head()) {
        // a DFlash/DSpark head: one block of each length (the first of each pays its graph's build, which the
        // schedule would otherwise take for what drafting costs and stop drafting on)
        for (int32_t n = 1; n <= n_max_; ++n) {
            costs.observe_block_draft(n, best_draft_seconds(n, false, n_past, prompt[0], prompt, costs));
        }
    }
    // nothing of it is kept
    ctx_tgt_->clear();
    drafter_->end_sequence(0);
    drafter_->reset_state();
    return costs;
}

void BatchEngine::set_debug_schedule(bool always_draft, const std::vector<double> & verify_seconds) {
    if (schedulers_.empty()) {
        throw std::logic_error("this Generator has no confidence scheduler");
    }
    for (auto & scheduler : schedulers_) {
        scheduler->set_debug_schedule(always_draft, verify_seconds);
    }
}

int64_t BatchEngine::submit(const BatchRequest & request) {
    validate(request.sampling);
    if (request.prompt.empty()) {
        throw std::invalid_argument("the prompt is empty (no tokens)");
    }
    if ((int32_t) request.prompt.size() >= n_ctx_) {
        throw std::invalid_argument("the prompt has " + std::to_string(request.prompt.size()) +
                                    " tokens, which does not fit the context of " + std::to_string(n_ctx_) +
                                    " tokens per sequence (leave room for at least one generated token)");
    }
    for (llama_token t : request.prompt) {
        if (t < 0 || t >= target_->n_vocab()) {
            throw std::invalid_argument("prompt token " + std::to_string(t) + " is outside the vocabulary");
        }
    }
    if (request.max_tokens < 1) {
        throw std::invalid_argument("max_tokens must be >= 1, got " + std::to_string(request.max_tokens));
    }
    if (n_free() == 0) {
        throw std::runtime_error("all " + std::to_string(n_seq()) + " sequences are busy: wait for one to finish");
    }
    Slot & slot = choose_slot(request.prompt);
    llama_tokens cached = std::move(slot.cached);
    slot = Slot{};
    slot.cached = std::move(cached);
    slot.last_used = next_request_ + 1;
    slot.request = next_request_++;
    slot.needs_prefill = true;
    slot.params = request;
    slot.sampler = request.sampling.greedy() ? nullptr : std::make_unique<FusedSampler>(request.sampling);
    slot.rng.seed(request.sampling.seed);
    return slot.request;
}

void BatchEngine::abandon(int64_t request) {
    if (Slot * slot = find(request)) {
        finish((llama_seq_id) (slot - slots_.data()), *slot, StopReason::None);
    }
}

void BatchEngine::set_limits(int64_t request, int32_t max_tokens, bool ignore_eos) {
    if (Slot * slot = find(request)) {
        slot->params.max_tokens = max_tokens;
        slot->params.ignore_eos = ignore_eos;
    }
}

int32_t BatchEngine::n_active() const {
    return (int32_t) std::count_if(slots_.begin(), slots_.end(), [](const Slot & s) { return s.request >= 0; });
}

BatchEngine::Slot * BatchEngine::find(int64_t request) {
    for (Slot & slot : slots_) {
        if (slot.request == request && request >= 0) {
            return &slot;
        }
    }
    return nullptr;
}

const BatchEngine::RequestStats & BatchEngine::stats(int64_t request) const {
    for (const Slot & slot : slots_) {
        if (slot.request == request && request >= 0) {
            return slot.stats;
        }
    }
    const auto it = finished_.find(request);
    if (it == finished_.end()) {
        throw std::out_of_range("unknown or released request " + std::to_string(request));
    }
    return it->second;
}

void BatchEngine::release(int64_t request) { finished_.erase(request); }

BatchEngine::Slot & BatchEngine::choose_slot(const std::vector<llama_token> & prompt) {
    Slot * best = nullptr;
    size_t best_prefix = 0;
    for (Slot & slot : slots_) {
        if (slot.request >= 0) {
            continue;
        }
        // the prompt's last token is decoded with the first draft, never from the cache
        const size_t prefix = common_prefix_length(slot.cached, prompt, prompt.size() - 1);
        const bool better = best == nullptr || prefix > best_prefix ||
                            (prefix == best_prefix && (slot.cached.empty() != best->cached.empty()
                                                           ? slot.cached.empty()  // keep other caches for later
                                                           : slot.last_used < best->last_used));
        if (better) {
            best = &slot;
            best_prefix = prefix;
        }
    }
    return *best;
}

std::vector<BatchEvent> BatchEngine::prefill_admitted() {
    const int64_t t0 = ggml_time_us();
    std::vector<llama_seq_id> admitted;
    for (size_t seq = 0; seq < slots_.size(); ++seq) {
        Slot & slot = slots_[seq];
        if (slot.request < 0 || !slot.needs_prefill) {
            continue;
        }
        const auto & prompt = slot.params.prompt;
        slot.history.assign(prompt.begin(), prompt.end());
        slot.history.reserve(n_ctx_);
        slot.id_last = LLAMA_TOKEN_NULL;  // sampled from the prompt's last logits below
        slot.n_past = (llama_pos) slot.history.size();
        // prefix reuse: what the sequence's cache still holds of the new prompt, less its last token (whose
        // logits give the first token)
        const llama_tokens reusable(prompt.begin(), prompt.end() - 1);
        const size_t keep =
            reuse_prefix_ ? keep_cached_prefix(*ctx_tgt_, *drafter_, (llama_seq_id) seq, slot.cached, reusable) : 0;
        if (keep == 0) {
            ctx_tgt_->trim((llama_seq_id) seq, 0);
        }
        slot.cached = llama_tokens();
        slot.n_keep = keep;
        drafter_->begin_sequence((llama_seq_id) seq, slot.history, keep);
        if (Scheduler * scheduler = scheduler_for((llama_seq_id) seq)) {
            const int32_t planned = slot.params.planned_tokens;
            scheduler->begin_generation(planned < 0 ? slot.params.max_tokens : planned);
        }
        admitted.push_back((llama_seq_id) seq);
    }
    // every admitted prompt, packed into as few target decodes as the batch size allows (one decode
    // per prompt costs a graph and a pass over the weights each); each prompt's last token outputs the logits
    // its first token is sampled from, right after the decode that holds it (a later decode overwrites them)
    const size_t n_batch = llama_n_batch(ctx_tgt_->get());
    std::vector<std::pair<llama_seq_id, int32_t>> last_rows;  // (sequence, batch index) in the batch being filled
    std::vector<BatchEvent> events;
    bool cancelled = false;  // the interrupt check said so: the admitted requests end unstarted
    auto flush = [&] {
        if (batch_.size() == 0 || cancelled) {
            return;
        }
        if (interrupted_ && interrupted_()) {
            cancelled = true;
            return;
        }
        ctx_tgt_->decode(batch_, "the prompts");
        drafter_->process(batch_);
        for (const auto & [seq, row] : last_rows) {
            const int64_t t_sample = ggml_time_us();
            Slot & slot = slots_[seq];
            std::vector<llama_token> out;
            slot.i_batch = row;
            slot.draft.clear();  // no draft: one token from the target, as a round without one samples it
            verify(slot, out);
            slot.id_last = out[0];
            slot.n_generated = 1;
            // its pass is the prompt's (prefill_seconds): the round logs only the sampling
            slot.stats.rounds.add({}, 0, 0, 1, 0.0, seconds_since(t_sample));
            BatchEvent event;
            event.request = slot.request;
            event.tokens.push_back(slot.id_last);
            events.push_back(std::move(event));
        }
        last_rows.clear();
        batch_.clear();
    };
    batch_.clear();
    for (llama_seq_id seq : admitted) {
        const Slot & slot = slots_[seq];
        for (size_t i = slot.n_keep; i < slot.history.size(); ++i) {
            if ((size_t) batch_.size() == n_batch) {
                flush();
            }
            const bool last = i + 1 == slot.history.size();
            if (last) {
                last_rows.emplace_back(seq, batch_.size());
            }
            batch_.add(slot.history[i], (llama_pos) i, seq, last);
        }
    }
    flush();
    if (cancelled) {
        events.clear();
        for (llama_seq_id seq : admitted) {
            Slot & slot = slots_[seq];
            BatchEvent event;
            event.request = slot.request;
            event.finished = true;
            event.stop_reason = StopReason::Cancelled;
            finish(seq, slot, StopReason::Cancelled);
            events.push_back(std::move(event));
        }
        return events;
    }
    const double seconds = seconds_since(t0);
    for (llama_seq_id seq : admitted) {
        Slot & slot = slots_[seq];
        slot.needs_prefill = false;
        slot.stats.prefill_tokens = (int32_t) (slot.history.size() - slot.n_keep);
        slot.stats.prefill_seconds = seconds;  // the requests admitted together share one prefill
    }
    // a first token may end its request (end of generation, max_tokens 1); not before: finishing moves the stats
    for (BatchEvent & event : events) {
        Slot & slot = *find(event.request);
        finish_if_done((llama_seq_id) (&slot - slots_.data()), slot,
                       !slot.params.ignore_eos && target_->is_eog(slot.id_last), event);
    }
    return events;
}

void BatchEngine::finish_if_done(llama_seq_id seq, Slot & slot, bool hit_eog, BatchEvent & event) {
    if (hit_eog || slot.n_generated >= slot.params.max_tokens) {
        event.finished = true;
        event.stop_reason = hit_eog ? StopReason::EndOfGeneration : StopReason::MaxTokens;
        finish(seq, slot, event.stop_reason);
    }
}

void BatchEngine::finish(llama_seq_id seq, Slot & slot, StopReason reason) {
    slot.stats.stop_reason = reason;
    finished_[slot.request] = std::move(slot.stats);
    slot.request = -1;
    // between rounds the cache holds exactly history: keep it for the next prompt that starts the same way,
    // unless the request was cancelled (a client that went away: its cells are freed now)
    const bool keep = reuse_prefix_ && reason != StopReason::Cancelled && !slot.needs_prefill && !slot.cache_unknown;
    if (keep) {
        slot.cached = std::move(slot.history);
    } else {
        ctx_tgt_->trim(seq, 0);
        slot.cached = llama_tokens();
    }
    drafter_->end_sequence(seq, keep);
    slot.history = llama_tokens();
    slot.draft.clear();
}

void BatchEngine::forget_cached_prefixes() {
    for (size_t seq = 0; seq < slots_.size(); ++seq) {
        Slot & slot = slots_[seq];
        if (slot.request >= 0) {
            slot.cache_unknown = true;
        } else if (!slot.cached.empty()) {
            slot.cached = llama_tokens();
            try {  // called while an exception unwinds: never throw from here
                ctx_tgt_->trim((llama_seq_id) seq, 0);
            } catch (...) {
            }
        }
    }
}

bool BatchEngine::cancel(int64_t request) {
    Slot * slot = find(request);
    if (slot == nullptr) {
        return false;
    }
    finish((llama_seq_id) (slot - slots_.data()), *slot, StopReason::Cancelled);
    return true;
}

int32_t BatchEngine::verify(Slot & slot, std::vector<llama_token> & out) {
    auto row = [&](int32_t i) {
        const int32_t batch_index = slot.i_batch + i;
        float * logits = llama_get_logits_ith(ctx_tgt_->get(), batch_index);
        if (logits == nullptr) {
            throw std::runtime_error("the target produced no logits at batch index " + std::to_string(batch_index));
        }
        if (slot.params.ignore_eos) {
            for (llama_token t : eog_tokens_) {
                logits[t] = -INFINITY;
            }
        }
        return (const float *) logits;
    };
    return verify_draft(row, target_->n_vocab(), slot.draft, slot.sampler.get(), slot.rng, dist_, debug_accept_all_,
                        out);
}

std::vector<BatchEvent> BatchEngine::step() {
    struct FailureGuard {
        BatchEngine * engine;
        bool done = false;
        ~FailureGuard() {
            if (!done) {
                engine->forget_cached_prefixes();
            }
        }
    } guard{this};
    std::vector<BatchEvent> events = round();
    guard.done = true;
    return events;
}

std::vector<BatchEvent> BatchEngine::round() {
    std::vector<BatchEvent> events;
    // 1. admit: decode the prompts of new requests. Requests that start on an idle batch get a fresh
    // drafter, as a Generator's generate() does (n-gram pools are shared only by overlapping requests).
    const bool admitting = std::any_of(slots_.begin(), slots_.end(),
                                       [](const Slot & s) { return s.request >= 0 && s.needs_prefill; });
    if (admitting) {
        const bool idle = std::none_of(slots_.begin(), slots_.end(),
                                       [](const Slot & s) { return s.request >= 0 && !s.needs_prefill; });
        if (idle) {
            drafter_->reset_state();
        }
        // the new requests' first tokens go out now; the next step runs the round (time to first token is the
        // prompt's pass, not the prompt's pass plus a speculative round)
        return prefill_admitted();
    }

    // 2. draft for every sequence with room left, all at once
    const int64_t t_draft = ggml_time_us();
    std::vector<llama_seq_id> running;
    std::vector<int32_t> n_draft_max(slots_.size(), 0);
    for (size_t seq = 0; seq < slots_.size(); ++seq) {
        Slot & slot = slots_[seq];
        if (slot.request < 0) {
            continue;
        }
        const int32_t room = n_ctx_ - slot.n_past;  // id_last goes to n_past, each draft token one further
        if (room <= 0) {
            BatchEvent event;
            event.request = slot.request;
            event.finished = true;
            event.stop_reason = StopReason::ContextFull;
            events.push_back(std::move(event));
            finish((llama_seq_id) seq, slot, StopReason::ContextFull);
            continue;
        }
        const int32_t budget = slot.params.max_tokens - slot.n_generated;
        // never draft past the token budget: a round yields at most n_draft + 1 tokens
        n_draft_max[seq] = std::max(0, std::min({n_max_, room - 1, budget - 1}));
        running.push_back((llama_seq_id) seq);
    }
    if (running.empty()) {
        return events;
    }
    const int32_t n_running = (int32_t) running.size();
    if (!schedulers_.empty()) {
        // each sequence's draft is priced at its share of the round's pass (CostModel::verify)
        for (auto & scheduler : schedulers_) {
            scheduler->set_batch(n_running, !schedule_per_batch_);
        }
        const int32_t n_pending = drafter_->n_pending();
        if (schedule_per_batch_) {  // one block length (or none) for every sequence
            const int32_t limit = *std::max_element(n_draft_max.begin(), n_draft_max.end());
            const int32_t planned = schedulers_[0]->plan(limit, n_pending);
            for (llama_seq_id seq : running) {
                n_draft_max[seq] = std::min(n_draft_max[seq], planned);
            }
        } else {
            for (llama_seq_id seq : running) {
                n_draft_max[seq] = scheduler_for(seq)->plan(n_draft_max[seq], n_pending);
            }
        }
    }
    drafter_->begin_round(std::any_of(running.begin(), running.end(),
                                      [&](llama_seq_id seq) { return n_draft_max[seq] > 0; }));
    for (llama_seq_id seq : running) {
        Slot & slot = slots_[seq];
        std::function<bool(int32_t, float)> keep_drafting;
        // a sequential drafter stops where the next token would not pay (its scheduler's state follows one
        // sequence's draft: not with one scheduler for the batch)
        if (!schedulers_.empty() && !schedule_per_batch_ && drafter_->sequential()) {
            keep_drafting = [scheduler = scheduler_for(seq)](int32_t index, float confidence) {
                return scheduler->keep_drafting(index, confidence);
            };
        }
        drafter_->request_draft(seq, slot.n_past, slot.id_last, slot.history, n_draft_max[seq], slot.draft,
                                slot.confidence, std::move(keep_drafting));
    }
    drafter_->draft_requested();
    if (!schedulers_.empty()) {
        for (auto & scheduler : schedulers_) {  // what the drafter spent reading deferred input is not drafting
            scheduler->observe_catch_up(drafter_->last_catch_up_tokens(), drafter_->last_catch_up_seconds());
        }
        for (llama_seq_id seq : running) {  // the schedule may verify fewer than were drafted
            slots_[seq].draft.resize(scheduler_for(seq)->verify_depth(slots_[seq].confidence));
        }
    }
    const double draft_s = seconds_since(t_draft);

    // 3. verify: every sequence's last token and draft in one target decode
    const int64_t t_verify = ggml_time_us();
    batch_.clear();
    for (llama_seq_id seq : running) {
        Slot & slot = slots_[seq];
        slot.i_batch = batch_.size();
        batch_.add(slot.id_last, slot.n_past, seq, true);
        for (size_t i = 0; i < slot.draft.size(); ++i) {
            batch_.add(slot.draft[i], slot.n_past + 1 + (llama_pos) i, seq, true);
        }
        if (!slot.draft.empty()) {  // without drafts nothing is ever taken back
            ctx_tgt_->prepare_rollback(seq, 1 + (int32_t) slot.draft.size(), true);
        }
    }
    ctx_tgt_->decode(batch_, "the verification batch");
    drafter_->process(batch_);
    const int32_t n_verified_total = batch_.size();

    // 4. accept per sequence (all before any rollback: a checkpoint restore decodes again and
    // overwrites the batch's logits), 5. roll back each rejected tail
    std::vector<std::vector<llama_token>> accepted(running.size());
    std::vector<int32_t> n_accepted(running.size());
    for (size_t r = 0; r < running.size(); ++r) {
        n_accepted[r] = verify(slots_[running[r]], accepted[r]);
    }
    for (size_t r = 0; r < running.size(); ++r) {
        const llama_seq_id seq = running[r];
        Slot & slot = slots_[seq];
        slot.history.push_back(slot.id_last);
        slot.history.insert(slot.history.end(), accepted[r].begin(), accepted[r].end() - 1);
        slot.n_past += 1 + n_accepted[r];
        ctx_tgt_->trim(seq, slot.n_past);
        drafter_->accept(seq, (int32_t) slot.draft.size(), n_accepted[r], slot.n_past);
        slot.id_last = accepted[r].back();
    }
    const double verify_s = seconds_since(t_verify);
    // (a lone sequence's scheduler learns its pass in observe()); a round whose sequences verified different
    // numbers of tokens ran as several ubatches (CostModel::verify), not as one pass over its tokens
    const auto one_ubatch = [&] {
        return std::all_of(running.begin(), running.end(), [&](llama_seq_id seq) {
            return slots_[seq].draft.size() == slots_[running[0]].draft.size();
        });
    };
    if (n_running > 1 && !schedulers_.empty() && one_ubatch()) {
        for (auto & scheduler : schedulers_) {
            scheduler->observe_pass(n_verified_total, verify_s);
        }
    }

    // 6. emit, and stop the sequences that are done
    for (size_t r = 0; r < running.size(); ++r) {
        const llama_seq_id seq = running[r];
        Slot & slot = slots_[seq];
        BatchEvent event;
        event.request = slot.request;
        event.drafted = (int32_t) slot.draft.size();
        event.accepted = n_accepted[r];
        bool hit_eog = false;
        for (llama_token t : accepted[r]) {
            event.tokens.push_back(t);
            if (!slot.params.ignore_eos && target_->is_eog(t)) {
                hit_eog = true;
                break;
            }
        }
        slot.n_generated += (int32_t) event.tokens.size();
        if (Scheduler * scheduler = scheduler_for(seq)) {  // its share of the round's time
            scheduler->observe(slot.confidence, event.drafted, event.accepted, (int32_t) event.tokens.size(),
                               draft_s / n_running, verify_s / n_running);
        }
        slot.stats.rounds.add(slot.confidence, event.drafted, event.accepted, (int32_t) event.tokens.size(), draft_s,
                              verify_s);
        finish_if_done(seq, slot, hit_eog, event);
        events.push_back(std::move(event));
    }
    return events;
}

}  // namespace llamaspec
