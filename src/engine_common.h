// What the round loop (batch_engine.h) and its one-sequence front (engine.h) share: the engine's
// configuration, llama.cpp's parameters for it, stop reasons and prefix reuse.
#pragma once

#include "context.h"
#include "drafter.h"
#include "model.h"

#include "common.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace llamaspec {

struct EngineConfig {
    std::string spec_type = "auto";
    int32_t n_max = 8;
    int32_t n_ctx = 4096;
    int32_t n_threads = 0;  // 0: llama.cpp's default
    int32_t ngram_size_n = 3;
    std::string schedule = "fixed";  // "fixed": always n_max; "confidence": see scheduler.h
    std::string rollback = "auto";   // "auto" or "checkpoint" (see context.h)
    bool reuse_prefix = true;        // keep the cached common prefix between generations
};

// llama.cpp's parameters for a target serving n_seq sequences of config.n_ctx tokens each with the
// drafters `types`. Throws std::invalid_argument for an n_max beyond the drafter's depth, a too small
// n_ctx or ngram_size_n out of range, and when the cache would not fit in memory (before allocating).
common_params target_params(const Model & target, const Model * draft, const EngineConfig & config,
                            const std::vector<common_speculative_type> & types, int32_t n_seq);

// The target's end-of-generation tokens (masked to -inf with ignore_eos).
std::vector<llama_token> end_of_generation_tokens(const Model & model);

// Length of the common prefix of a and b, at most `limit`.
size_t common_prefix_length(const llama_tokens & a, const llama_tokens & b, size_t limit = SIZE_MAX);

// Prefix reuse: how many leading tokens of `next` the target cache of sequence `seq`, which holds `cached`,
// keeps for the next generation (their common prefix, as far as the drafter can reuse it), the cache trimmed
// to that; 0 when the memory cannot step back that far (e.g. a recurrent state) or nothing is shared: the
// caller then starts the sequence cold.
size_t keep_cached_prefix(Context & ctx, const Drafter & drafter, llama_seq_id seq, const llama_tokens & cached,
                          const llama_tokens & next);

enum class StopReason { None, MaxTokens, EndOfGeneration, ContextFull, Cancelled };
const char * stop_reason_name(StopReason reason);

}  // namespace llamaspec
