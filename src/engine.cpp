#include "engine.h"

#include <climits>
#include <stdexcept>

namespace llamaspec {

Engine::Engine(ModelPtr target, ModelPtr draft, const EngineConfig & config)
    : rounds_engine_(std::move(target), std::move(draft), config, 1) {}

void Engine::set_interrupt_check(std::function<bool()> check) {
    interrupted_ = check;
    rounds_engine_.set_interrupt_check(std::move(check));
}

const BatchEngine::RequestStats & Engine::stats() const {
    return request_ >= 0 ? rounds_engine_.stats(request_) : no_stats_;
}

const RoundLog & Engine::rounds() const { return stats().rounds; }
double Engine::prefill_seconds() const { return stats().prefill_seconds; }
int32_t Engine::prefill_tokens() const { return stats().prefill_tokens; }

void Engine::start(const std::vector<llama_token> & prompt, const SamplingParams & sampling, int32_t max_tokens,
                   bool ignore_eos) {
    BatchRequest request;
    request.prompt = prompt;
    request.sampling = sampling;
    request.max_tokens = max_tokens > 0 ? max_tokens : INT32_MAX;
    request.ignore_eos = ignore_eos;
    request.planned_tokens = max_tokens;
    if (request_ >= 0) {
        // the previous generation ends here whatever its state; its cache serves the new prompt's prefix
        rounds_engine_.abandon(request_);
        rounds_engine_.release(request_);
    }
    started_ = false;
    first_.reset();
    generated_.clear();
    stop_reason_ = StopReason::None;
    request_ = rounds_engine_.submit(request);  // checks the prompt and the sampling parameters
    // the prompt's pass and the first token (one event: the one request)
    BatchEvent first = std::move(rounds_engine_.step().at(0));
    if (first.stop_reason == StopReason::Cancelled) {
        stop_reason_ = StopReason::Cancelled;  // not started: run() refuses until the next start()
        return;
    }
    first_ = std::move(first);
    started_ = true;
}

void Engine::take(const BatchEvent & event) {
    generated_.insert(generated_.end(), event.tokens.begin(), event.tokens.end());
    if (event.finished) {
        stop_reason_ = event.stop_reason;
    }
}

std::vector<llama_token> Engine::run(int32_t max_new_tokens, int32_t max_rounds, bool ignore_eos) {
    if (!started_) {
        throw std::runtime_error("start() must be called before run()");
    }
    rounds_engine_.set_limits(request_, max_new_tokens, ignore_eos);
    const size_t first = generated_.size();
    for (int32_t r = 0; (max_rounds <= 0 || r < max_rounds) && stop_reason_ == StopReason::None; ++r) {
        if (first_) {  // the first token, sampled when the prompt was read
            take(*first_);
            first_.reset();
            continue;
        }
        if ((int32_t) generated_.size() >= max_new_tokens) {
            stop_reason_ = StopReason::MaxTokens;
            break;
        }
        if (interrupted_ && interrupted_()) {
            stop_reason_ = StopReason::Cancelled;
            break;
        }
        for (const BatchEvent & event : rounds_engine_.step()) {
            take(event);
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

}  // namespace llamaspec
