#include "sampling.h"

#include <algorithm>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <functional>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

// ggml-cpu's vectorised exp-and-sum (ggml/src/ggml-cpu/vec.h, C linkage): y = exp(x - max), returns the sum
extern "C" double ggml_vec_soft_max_f32(const int n, float * y, const float * x, float max);

namespace llamaspec {

namespace {

// top-p's nucleus is located on a histogram of the logits below the max before anything is sorted:
// kBins bins of kBinWidth logits each; everything further below shares the last bin.
constexpr int kBins = 256;
constexpr float kBinWidth = 0.125f;

}  // namespace

void validate(const SamplingParams & p) {
    auto bad = [](const std::string & what) { throw std::invalid_argument(what); };
    if (!std::isfinite(p.temperature)) bad("temperature must be a finite number");
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) bad("top_p must be in (0, 1], got " + std::to_string(p.top_p));
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) bad("min_p must be in [0, 1], got " + std::to_string(p.min_p));
    if (p.top_k < 0) bad("top_k must be >= 0 (0 = off), got " + std::to_string(p.top_k));
}

llama_token greedy_token(const float * logits, int32_t n_vocab) {
    // Two vectorised passes over the row (a 262,144-token row is read at memory speed, where one pass keeping
    // per-lane maxima and indices took 0.27 ms, 2% of a Gemma 3 270M step): its maximum, then the first index
    // holding it, which is np.argmax's answer (ties: the first). NaN never wins (max keeps the running value);
    // a row with nothing above -inf gives 0.
    float best = -INFINITY;
    int32_t i = 0;
#if defined(__AVX512F__)
    __m512 lanes = _mm512_set1_ps(-INFINITY);
    for (; i + 16 <= n_vocab; i += 16) {
        lanes = _mm512_max_ps(_mm512_loadu_ps(logits + i), lanes);  // NaN in the row: the running value
    }
    best = _mm512_reduce_max_ps(lanes);
#elif defined(__AVX2__)
    __m256 lanes = _mm256_set1_ps(-INFINITY);
    for (; i + 8 <= n_vocab; i += 8) {
        lanes = _mm256_max_ps(_mm256_loadu_ps(logits + i), lanes);
    }
    float lane[8];
    _mm256_storeu_ps(lane, lanes);
    for (float v : lane) {
        best = v > best ? v : best;
    }
#endif
    for (; i < n_vocab; ++i) {
        best = logits[i] > best ? logits[i] : best;
    }
    if (best == -INFINITY) {
        return 0;
    }
    i = 0;
#if defined(__AVX512F__)
    const __m512 target = _mm512_set1_ps(best);
    for (; i + 16 <= n_vocab; i += 16) {
        const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_loadu_ps(logits + i), target, _CMP_EQ_OQ);
        if (hit != 0) {
            return i + __builtin_ctz(hit);
        }
    }
#elif defined(__AVX2__)
    const __m256 target = _mm256_set1_ps(best);
    for (; i + 8 <= n_vocab; i += 8) {
        const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(logits + i), target, _CMP_EQ_OQ));
        if (hit != 0) {
            return i + __builtin_ctz(hit);
        }
    }
#endif
    for (; i < n_vocab; ++i) {
        if (logits[i] == best) {
            return i;
        }
    }
    return 0;
}

SamplingParams make_sampling_params(float temperature, int32_t top_k, float top_p, float min_p, uint64_t seed) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = seed;
    validate(p);
    return p;
}

float TruncatedDist::prob_of(llama_token token) const {
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] == token) {
            return prob(i);
        }
    }
    return 0.0f;
}

llama_token TruncatedDist::draw(double u, llama_token excluded) const {
    double mass = total;
    if (excluded != LLAMA_TOKEN_NULL) {
        mass -= prob_of(excluded) * total;
    }
    const double goal = u * mass;
    double run = 0.0;
    llama_token last = LLAMA_TOKEN_NULL;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] == excluded) {
            continue;
        }
        run += weights[i];
        last = ids[i];
        if (run > goal) {
            return ids[i];
        }
    }
    return last;  // rounding at the very end of the CDF
}

FusedSampler::FusedSampler(const SamplingParams & params) : params_(params) { validate(params); }

void FusedSampler::collect_top_k(const float * logits, int32_t n_vocab, int32_t k) {
    // A sample of the logits gives a floor that some (but not many) more than k logits clear; one
    // compare-only pass collects those and a selection on the few finds the k best. The sample is 64
    // runs of 16 neighbours spread over the vocabulary: 64 cache lines rather than 1024 (a row that
    // is not in cache costs one memory access per line).
    constexpr int32_t kRuns = 64, kRun = 16;
    sample_.clear();
    if (n_vocab <= kRuns * kRun) {
        sample_.assign(logits, logits + n_vocab);
    } else {
        const int32_t stride = n_vocab / kRuns;
        for (int32_t r = 0; r < kRuns; ++r) {
            sample_.insert(sample_.end(), logits + r * stride, logits + r * stride + kRun);
        }
    }
    const size_t expected = (size_t) k * sample_.size() / n_vocab;  // sampled logits among the k best
    const size_t rank = std::min(sample_.size() - 1, 4 * expected + 8);
    std::nth_element(sample_.begin(), sample_.begin() + rank, sample_.end(), std::greater<float>());
    collect_above(logits, n_vocab, sample_[rank]);
    if ((int32_t) candidates_.size() < k) {
        collect_above(logits, n_vocab, -INFINITY);  // an unlucky sample: select among everything
    }
    auto better = [](const Candidate & a, const Candidate & b) { return a.logit > b.logit; };
    std::nth_element(candidates_.begin(), candidates_.begin() + (k - 1), candidates_.end(), better);
    candidates_.resize(k);
    // llama.cpp's top-k leaves its k tokens sorted and later sums their mass in that order
    std::sort(candidates_.begin(), candidates_.end(), better);
}

void FusedSampler::collect_above(const float * logits, int32_t n_vocab, float floor) {
    candidates_.clear();
    for (int32_t i = 0; i < n_vocab; ++i) {
        if (logits[i] >= floor) {
            candidates_.push_back({logits[i], i});
        }
    }
}

void FusedSampler::collect_min_p(const float * logits, int32_t n_vocab, float gap, float & max_logit) {
    // one pass with a running max: a token is kept while it clears the floor of the max so far,
    // a superset of the final min-p set that finish() trims with the true max
    candidates_.clear();
    max_logit = -INFINITY;
    for (int32_t i = 0; i < n_vocab; ++i) {
        const float l = logits[i];
        if (l > max_logit) max_logit = l;
        if (l >= max_logit + gap) candidates_.push_back({l, i});
    }
}

void FusedSampler::truncate(const float * logits, int32_t n_vocab, TruncatedDist & out) {
    const bool use_top_k = params_.top_k > 0 && params_.top_k < n_vocab;
    const bool use_top_p = params_.top_p < 1.0f;
    const bool use_min_p = params_.min_p > 0.0f;
    const float min_p_gap = use_min_p ? std::log(params_.min_p) : -INFINITY;

    float max_logit = -INFINITY;
    float mass_total = 0.0f;  // float, summed in llama.cpp's order, so top-p cuts where it cuts
    if (use_top_k) {
        collect_top_k(logits, n_vocab, params_.top_k);
        max_logit = candidates_.front().logit;
        if (use_top_p) {
            for (const auto & c : candidates_) mass_total += std::exp(c.logit - max_logit);
        }
    } else if (!use_top_p) {
        if (use_min_p) {
            collect_min_p(logits, n_vocab, min_p_gap, max_logit);
        } else {
            full_distribution(logits, n_vocab, out);  // temperature only: nothing to truncate
            return;
        }
    } else {
        for (int32_t i = 0; i < n_vocab; ++i) max_logit = std::max(max_logit, logits[i]);
        // one pass for the normaliser and a histogram of the mass by distance below the max: the
        // nucleus ends in the first bin where the cumulative mass reaches top_p
        double bin_mass[kBins] = {};
        for (int32_t i = 0; i < n_vocab; ++i) {
            const float gap = max_logit - logits[i];
            const float e = std::exp(-gap);
            mass_total += e;
            bin_mass[gap < kBins * kBinWidth ? (int) (gap * (1.0f / kBinWidth)) : kBins - 1] += e;
        }
        float nucleus_floor = -INFINITY;
        const double goal = params_.top_p * (double) mass_total;
        double cum = 0.0;
        for (int b = 0; b < kBins - 1; ++b) {
            cum += bin_mass[b];
            if (cum >= goal) {
                nucleus_floor = max_logit - (b + 2) * kBinWidth;  // one bin of slack for rounding
                break;
            }
        }
        const float min_p_floor = max_logit + min_p_gap;
        collect_above(logits, n_vocab, std::max(min_p_floor, nucleus_floor));
        if (!finish(max_logit, mass_total, out) && nucleus_floor > min_p_floor) {
            collect_above(logits, n_vocab, min_p_floor);  // float drift past the slack: take all
            finish(max_logit, mass_total, out);
        }
        return;
    }
    finish(max_logit, mass_total, out);
}

bool FusedSampler::finish(float max_logit, float mass_total, TruncatedDist & out) {
    auto better = [](const Candidate & a, const Candidate & b) { return a.logit > b.logit; };
    size_t n_keep = candidates_.size();
    bool nucleus_closed = true;
    if (params_.top_p < 1.0f) {
        // the smallest most-probable prefix whose mass reaches top_p (the crossing token included),
        // in llama.cpp's float arithmetic
        if (!std::is_sorted(candidates_.begin(), candidates_.end(), better)) {
            std::sort(candidates_.begin(), candidates_.end(), better);
        }
        nucleus_closed = false;
        float cum = 0.0f;
        for (size_t i = 0; i < candidates_.size(); ++i) {
            cum += std::exp(candidates_[i].logit - max_logit) / mass_total;
            if (cum >= params_.top_p) {
                n_keep = i + 1;
                nucleus_closed = true;
                break;
            }
        }
    }
    if (params_.min_p > 0.0f) {
        const float floor = max_logit + std::log(params_.min_p);
        size_t w = 0;
        for (size_t i = 0; i < n_keep; ++i) {
            if (candidates_[i].logit >= floor) candidates_[w++] = candidates_[i];
        }
        n_keep = std::max<size_t>(w, 1);
    }

    out.ids.resize(n_keep);
    out.weights.resize(n_keep);
    const float inv_temp = 1.0f / params_.temperature;
    double sum = 0.0;
    for (size_t i = 0; i < n_keep; ++i) {
        const float w = std::exp((candidates_[i].logit - max_logit) * inv_temp);
        out.ids[i] = candidates_[i].id;
        out.weights[i] = w;
        sum += w;
    }
    out.total = sum;
    return nucleus_closed;
}

void FusedSampler::full_distribution(const float * logits, int32_t n_vocab, TruncatedDist & out) {
    // Temperature only: every token stays, so this is a softmax over the vocabulary. ggml's
    // vectorised exp-and-sum does it in one SIMD pass (a scalar exp per token was slower than
    // llama.cpp's chain on 150k-260k vocabularies).
    if ((int32_t) out.ids.size() != n_vocab || out.ids.back() != n_vocab - 1) {
        out.ids.resize(n_vocab);
        for (int32_t i = 0; i < n_vocab; ++i) out.ids[i] = i;
    }
    out.weights.resize(n_vocab);
    float * w = out.weights.data();
    const float inv_temp = 1.0f / params_.temperature;
    float max_scaled = -INFINITY;
    for (int32_t i = 0; i < n_vocab; ++i) {
        w[i] = logits[i] * inv_temp;
        max_scaled = w[i] > max_scaled ? w[i] : max_scaled;
    }
    out.total = ggml_vec_soft_max_f32(n_vocab, w, w, max_scaled);
}

int32_t verify_draft(const std::function<const float *(int32_t)> & row, int32_t n_vocab,
                     const std::vector<llama_token> & draft, FusedSampler * sampler, std::mt19937_64 & rng,
                     TruncatedDist & dist, bool accept_all, std::vector<llama_token> & out) {
    const size_t n_draft = draft.size();
    int32_t n_accepted = 0;
    out.clear();
    for (size_t i = 0; i <= n_draft; ++i) {
        const float * logits = row((int32_t) i);
        llama_token choice;
        bool accepted;
        if (sampler == nullptr) {
            choice = greedy_token(logits, n_vocab);
            accepted = i < n_draft && choice == draft[i];
        } else {
            sampler->truncate(logits, n_vocab, dist);
            if (i < n_draft) {
                choice = accept_or_resample(dist, draft[i], rng, accepted);
            } else {
                choice = dist.draw(uniform01(rng));
                accepted = false;
            }
        }
        if (accept_all && i < n_draft) {
            choice = draft[i];
            accepted = true;
        }
        out.push_back(choice);
        if (!accepted) {
            break;
        }
        ++n_accepted;
    }
    return n_accepted;
}

double uniform01(std::mt19937_64 & rng) { return (rng() >> 11) * (1.0 / 9007199254740992.0); }

llama_token accept_or_resample(const TruncatedDist & target, llama_token drafted, std::mt19937_64 & rng,
                               bool & accepted) {
    const double p = target.prob_of(drafted);  // q(drafted) = 1
    accepted = uniform01(rng) < p;
    if (accepted) {
        return drafted;
    }
    return target.draw(uniform01(rng), drafted);
}

}  // namespace llamaspec
