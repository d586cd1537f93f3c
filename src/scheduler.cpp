#include "scheduler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace llamaspec {

namespace {

constexpr double kCostSmoothing = 0.1;      // weight of a new timing in the running cost
constexpr double kFastCostSmoothing = 0.5;  // ... of a block draft faster than the running cost
constexpr double kCountDecay = 0.98;        // forgetting of old acceptance observations
constexpr double kLevelDecay = 0.95;        // ... in a text's level (the last ~20 judged tokens)
constexpr double kPriorWeight = 2.0;        // pseudo-observations behind each prior
constexpr double kPositionPrior = 0.5;      // acceptance assumed at a position never seen
constexpr double kGainSmoothing = 0.2;       // weight of a drafted round in the running gain
constexpr double kProbeGainSmoothing = 0.5;  // a probe weighs more: the gain may have changed since
constexpr int32_t kMaxBackoff = 64;
// what earlier generations taught about a position's acceptance weighs as this many tokens in a new one: the
// rate depends on the text (a head accepted 75% of first tokens on JSON and under 30% on translation), and
// at full weight (~50 tokens) a prompt the drafter knows well was over before drafting came back on
constexpr double kCarriedPositionWeight = 4.0;
// a probe's extra drafting and verification may cost at most this share of the time spent since the last
// probe, and the drafter's catching up on what it skipped this share: reading a skipped token costs a head
// about 1-2% of a plain step (Gemma's DSpark head), so with one share for both, the catch-up outgrew it and
// no probe came again
constexpr double kProbeShare = 0.01;
constexpr double kCatchUpShare = 0.05;
// ... and the first of a generation this share of the generation's plain-decoding time
constexpr double kFirstProbeShare = 0.02;

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

void CostModel::set_pass(int32_t total_tokens, double seconds) {
    if (total_tokens <= n_max() + 1) {
        set_verify(total_tokens, seconds);
        return;
    }
    auto it = std::lower_bound(wide_passes_.begin(), wide_passes_.end(), std::make_pair(total_tokens, -(double) INFINITY));
    if (it != wide_passes_.end() && it->first == total_tokens) {
        it->second = seconds;
    } else {
        wide_passes_.insert(it, {total_tokens, seconds});
    }
}

double CostModel::pass(int32_t total_tokens) const {
    const int32_t last_one = n_max() + 1;
    if (total_tokens >= 1 && total_tokens <= last_one) {
        return verify_[total_tokens];
    }
    // the measured lengths: one sequence's 1..n_max+1, then the wide ones
    int32_t x0 = last_one - 1, x1 = last_one;
    double y0 = verify_[std::max(1, x0)], y1 = verify_[x1];
    for (const auto & [x, y] : wide_passes_) {
        x0 = x1;
        y0 = y1;
        x1 = x;
        y1 = y;
        if (x >= total_tokens) {
            break;
        }
    }
    if (x1 == x0) {
        return y1;
    }
    return std::max(0.0, y0 + (y1 - y0) * (double) (total_tokens - x0) / (double) (x1 - x0));
}

void CostModel::observe_pass(int32_t total_tokens, double seconds) {
    if (seconds <= 0 || total_tokens < 1) {
        return;
    }
    if (total_tokens <= n_max() + 1) {
        observe_verify(total_tokens, seconds);
        return;
    }
    if (wide_passes_.empty()) {
        return;
    }
    // the measured length nearest to this pass takes its time, scaled along the curve's shape
    auto nearest = wide_passes_.begin();
    for (auto it = wide_passes_.begin(); it != wide_passes_.end(); ++it) {
        if (std::abs(it->first - total_tokens) < std::abs(nearest->first - total_tokens)) {
            nearest = it;
        }
    }
    const double here = pass(total_tokens);
    if (here > 0) {
        blend(nearest->second, seconds * nearest->second / here, kCostSmoothing);
    }
}

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

double AcceptanceCalibration::predict_bin(float confidence) const {
    // before any evidence, a confidence is taken at its word (the bin's centre)
    const int32_t b = bin_of(confidence);
    const double centre = (b + 0.5) / kBins;
    return (bin_hits_[b] + centre * kPriorWeight) / (bin_seen_[b] + kPriorWeight);
}

double AcceptanceCalibration::level() const {
    return (level_hits_ + kPriorWeight) / (level_predicted_ + kPriorWeight);
}

double AcceptanceCalibration::predict(int32_t position, float confidence) const {
    if (std::isnan(confidence)) {
        const size_t p = std::min<size_t>(position, pos_seen_.size() - 1);
        return (pos_hits_[p] + kPositionPrior * kPriorWeight) / (pos_seen_[p] + kPriorWeight);
    }
    return std::min(1.0, predict_bin(confidence) * level());
}

void AcceptanceCalibration::observe(int32_t position, float confidence, bool accepted) {
    auto count = [accepted](double & hits, double & seen, double decay, double weight) {
        hits = decay * hits + (accepted ? 1.0 : 0.0);
        seen = decay * seen + weight;
    };
    const size_t p = std::min<size_t>(position, pos_seen_.size() - 1);
    count(pos_hits_[p], pos_seen_[p], kCountDecay, 1.0);
    if (!std::isnan(confidence)) {
        count(level_hits_, level_predicted_, kLevelDecay, predict_bin(confidence));
        const int32_t b = bin_of(confidence);
        count(bin_hits_[b], bin_seen_[b], kCountDecay, 1.0);
    }
}

void AcceptanceCalibration::begin_text(double weight) {
    for (size_t p = 0; p < pos_seen_.size(); ++p) {
        if (pos_seen_[p] > weight) {
            pos_hits_[p] *= weight / pos_seen_[p];
            pos_seen_[p] = weight;
        }
    }
    level_hits_ = level_predicted_ = 0.0;
}

// --- Scheduler ------------------------------------------------------------------------------

void Scheduler::begin_generation(int32_t max_tokens) {
    // a generation the drafter knows well (code, JSON) gains many times its first probe; one where it does not
    // loses that probe, and the reading of the prompt it asks for (0.14 ms per token for the Gemma DSpark head)
    backoff_ = 1;
    skipped_ = 0;
    gain_ = 0.0;  // the last text's running worth says little about this one (JSON after code review)
    first_probe_budget_ = kFirstProbeShare * std::max(0, max_tokens) * costs_.verify(1);
    calibration_.begin_text(kCarriedPositionWeight);
    // ... but what the last texts accepted at each position (at the few tokens' weight a new text gives it) is
    // a prior for its worth: when by it the best round pays, the text starts drafting, and rounds the drafter
    // doubts switch it off after a few (each weighs kGainSmoothing). From 0, the first probe alone decided,
    // and one that lost (two tokens verified at 0.13 and 0.43 on code) left a third of a 96-token generation
    // undrafted where a fixed depth 2 gained 15%.
    starting_ = true;  // plan() weighs that prior in the first round
}
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
    const int32_t limit = std::min(n_max, costs_.n_max());
    const double catch_up = n_pending * costs_.catch_up_per_token();
    // by each position's running rate (a sequential drafter that drafts needs neither the length nor the net)
    const bool first_round = starting_;
    starting_ = false;
    const auto [length, expected] = sequential_ && drafting_on() && !first_round ? std::pair<int32_t, double>{limit, 0.0}
                                                                                 : best_round(limit);
    // the prior holds when there is one (an earlier text) and the drafter's first reading of the prompt is as
    // cheap as a first probe's may be
    if (first_round && calibration_.position_seen()[0] > 0 && expected > 0.0 && catch_up <= first_probe_budget_) {
        gain_ = expected;
        first_probe_budget_ = 0.0;
    }
    if (!drafting_on() && !always_draft_) {
        ++skipped_;
        const bool catch_up_affordable = catch_up <= kCatchUpShare * skipped_seconds_;
        // The rounds' worth by the drafter's confidences fell below zero, but by the text's running acceptance
        // at each position (about its last 50 judged tokens) a round still pays: the drafter doubts a stretch
        // it often gets right anyway (the Gemma head's 0.2-0.3 confidences are accepted 20-36% of the time,
        // where a round breaks even at 18%). Waiting out the 1% share after such a stretch left the rest of a
        // 96-token code generation undrafted, where depth 1 then accepted 14 of 22 first tokens: probe every
        // other round instead, until the running rates themselves say drafting does not pay.
        // (an untried block length's cost is a guess, and an optimistic one: no probe on it)
        const bool measured = sequential_ || costs_.block_draft_seconds()[length] > 0.0;
        const bool expected_to_pay = expected > 0.0 && measured && catch_up_affordable && skipped_seconds_ > 0.0;
        const bool affordable = probe_overhead_ + catch_up <= first_probe_budget_ ||
                                (probe_overhead_ <= kProbeShare * skipped_seconds_ && catch_up_affordable);
        if (tried_ && !expected_to_pay && (skipped_ < backoff_ || !affordable)) {
            return 0;
        }
        first_probe_budget_ = 0.0;
        tried_ = true;
        skipped_ = 0;
        skipped_seconds_ = 0.0;
        probing_ = true;
    }
    round_limit_ = sequential_ ? limit : length;
    return round_limit_;
}

std::pair<int32_t, double> Scheduler::best_round(int32_t limit) const {
    // before drafting no confidence is known: the acceptance expected at each position. A block drafter pays
    // for the block it drafts (and verifies its best prefix); a sequential one for each token it drafts.
    const double rho = rho0();
    double survival = 1.0, yield = 0.0, best_verified = 0.0;
    double best = -INFINITY;
    int32_t best_length = limit;
    for (int32_t n = 1; n <= limit; ++n) {
        survival *= calibration_.predict(n - 1, NAN);
        yield += survival;
        const double verified = yield - rho * (costs_.verify(n + 1) - costs_.verify(1));
        double net;
        if (sequential_) {
            net = verified - rho * n * costs_.draft_step();
        } else {
            best_verified = std::max(best_verified, verified);
            net = best_verified - rho * costs_.block_draft(n);
        }
        if (net > best - 1e-3) {  // near-ties go to the longer block
            best = std::max(best, net);
            best_length = n;
        }
    }
    return {best_length, best};
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
        costs_.clear_passes();
    }
    for (size_t n = 0; n < verify_seconds.size() && (int32_t) n < costs_.n_max() + 1; ++n) {
        costs_.set_verify((int32_t) n + 1, verify_seconds[n]);
    }
}

void Scheduler::observe(const std::vector<float> & confidence, int32_t n_verified, int32_t n_accepted,
                        int32_t n_emitted, double draft_seconds, double verify_seconds) {
    if (costs_frozen_) {
        draft_seconds = verify_seconds = 0.0;  // decisions from the given costs only
    } else if (costs_.batch() == 1) {  // a batch's pass is observed once per round (observe_pass)
        costs_.observe_verify(n_verified + 1, verify_seconds);
    } else if (costs_.own_depth()) {
        // tokens verified beyond the other sequences' took a pass of their own, which the round's share (the
        // round's time over its sequences) spreads over all of them: the sequence pays what its depth cost
        verify_seconds = costs_.verify(n_verified + 1);
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
    // What the round was worth by the calibrated acceptance of what it verified (given the drafter's confidences)
    // net of its time, before its outcome is learnt: the outcome itself (one token or several) is too noisy to
    // average over a few rounds, and a running average of outcomes switched off drafters that paid on average.
    // A round that drafted and verified nothing (the drafter doubted every token) is worth minus its draft.
    double worth = 0.0;
    if (!confidence.empty()) {
        double survival = 1.0;
        for (int32_t i = 0; i < n_verified; ++i) {
            survival *= calibration_.predict(i, confidence[i]);
            worth += survival;
        }
        worth -= rho0() * (costs_.verify(n_verified + 1) - costs_.verify(1) + drafting_seconds);
    }
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
    blend(gain_, worth, probe ? kProbeGainSmoothing : kGainSmoothing);
    if (probe) {
        // a probe that paid for its time may be the first sign that the text changed (a new prompt, a
        // passage the drafter knows): probe again soon, while the evidence gathers
        const double outcome = n_emitted - rho0() * (drafting_seconds + verify_seconds);
        backoff_ = drafting_on() || outcome > 0.0 ? 2 : std::min(2 * backoff_, kMaxBackoff);
        // what the probe lost against plain decoding (nothing when its tokens paid for its time)
        probe_overhead_ = std::max(0.0, -outcome) / rho0();
    }
}

void Scheduler::observe_pass(int32_t total_tokens, double seconds) {
    if (!costs_frozen_) {
        costs_.observe_pass(total_tokens, seconds);
    }
}

void Scheduler::observe_catch_up(int32_t n_tokens, double seconds) {
    costs_.observe_catch_up(n_tokens, seconds);
    catch_up_seconds_ = seconds / costs_.batch();  // observe() takes a sequence's share of the round's seconds
}

}  // namespace llamaspec
