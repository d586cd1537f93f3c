#include "engine_common.h"

#include <algorithm>
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

}  // namespace llamaspec
