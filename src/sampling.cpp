#include "sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

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

float TruncatedDist::prob_of(llama_token token) const {
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] == token) {
            return probs[i];
        }
    }
    return 0.0f;
}

llama_token TruncatedDist::draw(double u, llama_token excluded) const {
    double total = 0.0;
    for (size_t i = 0; i < ids.size(); ++i) {
        total += ids[i] == excluded ? 0.0 : probs[i];
    }
    const double goal = u * total;
    double run = 0.0;
    llama_token last = LLAMA_TOKEN_NULL;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] == excluded) {
            continue;
        }
        run += probs[i];
        last = ids[i];
        if (run > goal) {
            return ids[i];
        }
    }
    return last;  // rounding at the very end of the CDF
}

FusedSampler::FusedSampler(const SamplingParams & params) : params_(params) { validate(params); }

void FusedSampler::collect_top_k(const float * logits, int32_t n_vocab, int32_t k) {
    // a min-heap of the k best: one pass, O(V log k), no full sort
    auto worse = [](const Candidate & a, const Candidate & b) { return a.logit > b.logit; };
    candidates_.clear();
    for (int32_t i = 0; i < n_vocab; ++i) {
        if ((int32_t) candidates_.size() < k) {
            candidates_.push_back({logits[i], i});
            std::push_heap(candidates_.begin(), candidates_.end(), worse);
        } else if (logits[i] > candidates_.front().logit) {
            std::pop_heap(candidates_.begin(), candidates_.end(), worse);
            candidates_.back() = {logits[i], i};
            std::push_heap(candidates_.begin(), candidates_.end(), worse);
        }
    }
}

void FusedSampler::collect_above(const float * logits, int32_t n_vocab, float floor) {
    candidates_.clear();
    for (int32_t i = 0; i < n_vocab; ++i) {
        if (logits[i] >= floor) {
            candidates_.push_back({logits[i], i});
        }
    }
}

void FusedSampler::truncate(const float * logits, int32_t n_vocab, TruncatedDist & out) {
    const bool use_top_k = params_.top_k > 0 && params_.top_k < n_vocab;
    const bool use_top_p = params_.top_p < 1.0f;
    const float min_p_gap = params_.min_p > 0.0f ? std::log(params_.min_p) : -INFINITY;

    float max_logit = -INFINITY;
    double mass_total = 0.0;  // softmax normaliser of the set top-p sees (the top-k set or everything)
    if (use_top_k) {
        collect_top_k(logits, n_vocab, params_.top_k);
        for (const auto & c : candidates_) max_logit = std::max(max_logit, c.logit);
        for (const auto & c : candidates_) mass_total += std::exp(c.logit - max_logit);
        finish(max_logit, mass_total, out);
        return;
    }

    for (int32_t i = 0; i < n_vocab; ++i) max_logit = std::max(max_logit, logits[i]);
    const float min_p_floor = max_logit + min_p_gap;  // min-p removes everything under it anyway
    float nucleus_floor = -INFINITY;
    if (use_top_p) {
        // one pass: the normaliser and a histogram of the mass by distance below the max; the
        // nucleus ends in the first bin where the cumulative mass reaches top_p
        double bin_mass[kBins] = {};
        for (int32_t i = 0; i < n_vocab; ++i) {
            const float gap = max_logit - logits[i];
            const float e = std::exp(-gap);
            mass_total += e;
            bin_mass[gap < kBins * kBinWidth ? (int) (gap * (1.0f / kBinWidth)) : kBins - 1] += e;
        }
        const double goal = params_.top_p * mass_total;
        double cum = 0.0;
        for (int b = 0; b < kBins - 1; ++b) {
            cum += bin_mass[b];
            if (cum >= goal) {
                nucleus_floor = max_logit - (b + 1) * kBinWidth;
                break;
            }
        }
    }
    collect_above(logits, n_vocab, std::max(min_p_floor, nucleus_floor));
    if (!finish(max_logit, mass_total, out) && nucleus_floor > min_p_floor) {
        // rounding put the crossing token just below the histogram's floor: take everything
        collect_above(logits, n_vocab, min_p_floor);
        finish(max_logit, mass_total, out);
    }
}

bool FusedSampler::finish(float max_logit, double mass_total, TruncatedDist & out) {
    size_t n_keep = candidates_.size();
    bool nucleus_closed = true;
    if (params_.top_p < 1.0f) {
        nucleus_closed = false;
        // the smallest most-probable prefix whose mass reaches top_p (the crossing token included)
        std::sort(candidates_.begin(), candidates_.end(),
                  [](const Candidate & a, const Candidate & b) { return a.logit > b.logit; });
        double cum = 0.0;
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
    out.probs.resize(n_keep);
    const float inv_temp = 1.0f / params_.temperature;
    float sum = 0.0f;
    for (size_t i = 0; i < n_keep; ++i) {
        const float w = std::exp((candidates_[i].logit - max_logit) * inv_temp);
        out.ids[i] = candidates_[i].id;
        out.probs[i] = w;
        sum += w;
    }
    const float inv_sum = 1.0f / sum;
    for (auto & p : out.probs) p *= inv_sum;
    return nucleus_closed;
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
