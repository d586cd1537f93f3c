#include "scheduler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace llamaspec {

namespace {

constexpr double kCostSmoothing = 0.1;      // weight of a new timing in the running cost
constexpr double kFastCostSmoothing = 0.5;  // ... of a block draft faster than the running cost
constexpr double kCountDecay = 0.98;        // forgetting of old acceptance observations
constexpr double kPriorWeight = 2.0;        // pseudo-observations behind each prior
constexpr double kPositionPrior = 0.5;      // acceptance assumed at a position never seen
constexpr double kGainSmoothing = 0.2;      // weight of a drafted round in the running gain
constexpr double kProbeGainSmoothing = 0.5; // a probe weighs more: the gain may have changed since
constexpr int32_t kMaxBackoff = 64;
// a probe (its extra drafting and verification, and the drafter catching up on what it skipped)
// may cost at most this share of the time spent since the last probe
constexpr double kProbeShare = 0.01;

void blend(double & running, double value, double weight) { running += weight * (value - running); }

}  // namespace

// --- CostModel ------------------------------------------------------------------------------

CostModel::CostModel(int32_t n_max) : verify_((size_t) n_max + 2, 0.0), block_draft_((size_t) n_max + 1, 0.0) {}

void CostModel::observe_block_draft(int32_t n, double seconds) {
    if (n >= 1 && n < (int32_t) block_draft_.size() && seconds > 0) {
        double & cost = block_draft_[n];
        // timing noise only ever adds time (and a length's first block may pay a graph build):
        // faster observations count more, so one slow block does not price a length out for good
        cost = cost == 0.0 ? seconds : cost + (seconds < cost ? kFastCostSmoothing : kCostSmoothing) * (seconds - cost);
    }
}

double CostModel::block_draft(int32_t n) const {
    if (n < 1 || n >= (int32_t) block_draft_.size()) {
        return 0.0;
    }
    if (block_draft_[n] > 0) {
        return block_draft_[n];
    }
    // untried: assume it costs no more than the longest shorter block measured, or scale the
    // shortest longer one down; both are optimistic, so the planner tries it when it looks best
    for (int32_t lo = n - 1; lo >= 1; --lo) {
        if (block_draft_[lo] > 0) {
            return block_draft_[lo];
        }
    }
    for (int32_t hi = n + 1; hi < (int32_t) block_draft_.size(); ++hi) {
        if (block_draft_[hi] > 0) {
            return block_draft_[hi] * n / (double) hi;
        }
    }
    return 0.0;
}

void CostModel::set_verify(int32_t n_tokens, double seconds) { verify_.at(n_tokens) = seconds; }

void CostModel::observe_verify(int32_t n_tokens, double seconds) {
    if (n_tokens >= 1 && n_tokens < (int32_t) verify_.size() && seconds > 0) {
        blend(verify_[n_tokens], seconds, kCostSmoothing);
    }
}

void CostModel::observe_draft_step(double seconds) {
    if (seconds > 0) {
        blend(draft_step_, seconds, kCostSmoothing);
    }
}

void CostModel::observe_catch_up(int32_t n_tokens, double seconds) {
    if (n_tokens > 0 && seconds > 0) {
        const double per_token = seconds / n_tokens;
        if (catch_up_per_token_ == 0.0) {
            catch_up_per_token_ = per_token;
        } else {
            blend(catch_up_per_token_, per_token, kCostSmoothing);
        }
    }
}

// --- AcceptanceCalibration ------------------------------------------------------------------

AcceptanceCalibration::AcceptanceCalibration(int32_t n_max)
    : bin_hits_(kBins, 0.0), bin_seen_(kBins, 0.0), pos_hits_(std::max(n_max, 1), 0.0),
      pos_seen_(std::max(n_max, 1), 0.0) {}

namespace {

int32_t bin_of(float confidence) {
    return std::clamp((int32_t) (confidence * AcceptanceCalibration::kBins), 0, AcceptanceCalibration::kBins - 1);
}

}  // namespace

double AcceptanceCalibration::predict(int32_t position, float confidence) const {
    if (std::isnan(confidence)) {
        const size_t p = std::min<size_t>(position, pos_seen_.size() - 1);
        return (pos_hits_[p] + kPositionPrior * kPriorWeight) / (pos_seen_[p] + kPriorWeight);
    }
    // before any evidence, a confidence is taken at its word (the bin's centre)
    const int32_t b = bin_of(confidence);
    const double centre = (b + 0.5) / kBins;
    return (bin_hits_[b] + centre * kPriorWeight) / (bin_seen_[b] + kPriorWeight);
}

void AcceptanceCalibration::observe(int32_t position, float confidence, bool accepted) {
    auto count = [accepted](double & hits, double & seen) {
        hits = kCountDecay * hits + (accepted ? 1.0 : 0.0);
        seen = kCountDecay * seen + 1.0;
    };
    const size_t p = std::min<size_t>(position, pos_seen_.size() - 1);
    count(pos_hits_[p], pos_seen_[p]);
    if (!std::isnan(confidence)) {
        const int32_t b = bin_of(confidence);
        count(bin_hits_[b], bin_seen_[b]);
    }
}

// --- Scheduler ------------------------------------------------------------------------------

Scheduler::Scheduler(CostModel costs, bool sequential)
    : costs_(std::move(costs)), calibration_(costs_.n_max()), sequential_(sequential) {
    if (costs_.verify(1) <= 0) {
        throw std::logic_error("the cost model has no one-token target pass time");
    }
}

int32_t Scheduler::plan(int32_t n_max, int32_t n_pending) {
    survival_ = 1.0;
    probing_ = false;
    round_limit_ = 0;
    if (n_max <= 0) {
        return 0;
    }
    if (gain_ <= 0.0 && !always_draft_) {
        ++skipped_;
        const double probe_cost = probe_overhead_ + n_pending * costs_.catch_up_per_token();
        if (tried_ && (skipped_ < backoff_ || probe_cost > kProbeShare * skipped_seconds_)) {
            return 0;
        }
        tried_ = true;
        skipped_ = 0;
        skipped_seconds_ = 0.0;
        probing_ = true;
    }
    round_limit_ = std::min(n_max, costs_.n_max());
    if (!sequential_) {
        round_limit_ = block_length(round_limit_);
    }
    return round_limit_;
}

int32_t Scheduler::block_length(int32_t limit) const {
    // before drafting no confidence is known: the acceptance expected at each position
    const double rho = rho0();
    double survival = 1.0, yield = 0.0, best_verified = 0.0;
    double best = -INFINITY;
    int32_t best_length = limit;
    for (int32_t n = 1; n <= limit; ++n) {
        survival *= calibration_.predict(n - 1, NAN);
        yield += survival;
        best_verified = std::max(best_verified, yield - rho * (costs_.verify(n + 1) - costs_.verify(1)));
        const double net = best_verified - rho * costs_.block_draft(n);
        if (net > best - 1e-3) {  // near-ties go to the longer block
            best = std::max(best, net);
            best_length = n;
        }
    }
    return best_length;
}

bool Scheduler::keep_drafting(int32_t index, float confidence) {
    survival_ *= calibration_.predict(index, confidence);
    const int32_t next = index + 1;
    if (next >= round_limit_) {
        return false;
    }
    if (!sequential_) {
        return true;  // the rest of the block costs nothing more to draft
    }
    // draft token `next` only if its expected yield pays for its draft step and its verification
    const double expected = survival_ * calibration_.predict(next, NAN);
    const double seconds = costs_.draft_step() + costs_.verify(next + 2) - costs_.verify(next + 1);
    return expected >= rho0() * seconds;
}

int32_t Scheduler::verify_depth(const std::vector<float> & confidence) const {
    const int32_t n = std::min<int32_t>((int32_t) confidence.size(), costs_.n_max());
    const double rho = rho0();
    double survival = 1.0, yield = 0.0, best = 0.0;
    int32_t best_depth = 0;
    for (int32_t d = 1; d <= n; ++d) {
        survival *= calibration_.predict(d - 1, confidence[d - 1]);
        yield += survival;
        const double net = yield - rho * (costs_.verify(d + 1) - costs_.verify(1));
        if (net > best) {
            best = net;
            best_depth = d;
        }
    }
    // a probe verifies at least one token: the calibration only learns from tokens the target judged
    return probing_ ? std::max(best_depth, std::min<int32_t>(n, 1)) : best_depth;
}

void Scheduler::set_debug_schedule(bool always_draft, const std::vector<double> & verify_seconds) {
    always_draft_ = always_draft;
    costs_frozen_ = !verify_seconds.empty();
    if (costs_frozen_) {
        costs_.set_draft_step(0.0);
    }
    for (size_t n = 0; n < verify_seconds.size() && (int32_t) n < costs_.n_max() + 1; ++n) {
        costs_.set_verify((int32_t) n + 1, verify_seconds[n]);
    }
}

void Scheduler::observe(const std::vector<float> & confidence, int32_t n_verified, int32_t n_accepted,
                        int32_t n_emitted, double draft_seconds, double verify_seconds) {
    if (costs_frozen_) {
        draft_seconds = verify_seconds = 0.0;  // decisions from the given costs only
    } else {
        costs_.observe_verify(n_verified + 1, verify_seconds);
    }
    if (sequential_ && !confidence.empty() && !costs_frozen_) {
        costs_.observe_draft_step((draft_seconds - catch_up_seconds_) / (double) confidence.size());
    }
    if (!sequential_ && round_limit_ > 0 && !costs_frozen_) {
        costs_.observe_block_draft(round_limit_, draft_seconds - catch_up_seconds_);
    }
    // catching up on skipped rounds is the price of having skipped (plan() weighs it before a probe), not of
    // drafting: the gain of drafting leaves it out
    const double drafting_seconds = draft_seconds - catch_up_seconds_;
    catch_up_seconds_ = 0.0;
    // acceptance is a prefix: tokens past the first rejection were never judged
    for (int32_t i = 0; i < n_verified && i <= n_accepted; ++i) {
        calibration_.observe(i, confidence[i], i < n_accepted);
    }
    const bool probe = probing_;
    probing_ = false;
    if (round_limit_ == 0) {
        skipped_seconds_ += verify_seconds;
        return;  // a plain round: no evidence about drafting
    }
    if (confidence.empty()) {
        if (probe) {
            tried_ = false;  // the drafter found nothing to propose (n-gram): probe again next round
        }
        return;
    }
    const double gain = n_emitted - rho0() * (drafting_seconds + verify_seconds);
    blend(gain_, gain, probe ? kProbeGainSmoothing : kGainSmoothing);
    if (probe) {
        backoff_ = gain_ > 0.0 ? 2 : std::min(2 * backoff_, kMaxBackoff);
        // what the probe lost against plain decoding (nothing when its tokens paid for its time)
        probe_overhead_ = std::max(0.0, -gain) / rho0();
    }
}


void Scheduler::observe_catch_up(int32_t n_tokens, double seconds) {
    costs_.observe_catch_up(n_tokens, seconds);
    catch_up_seconds_ = seconds;
}

}  // namespace llamaspec
