// Confidence-scheduled drafting: how many draft tokens are worth verifying each round (0: do not
// draft at all), from a cost model measured at start-up and acceptance calibrated online.
//
// The rule: time is priced at the plain-decoding rate rho0 = 1 / V(1) (tokens a one-token
// target pass yields per second). Verifying d draft tokens with survival probabilities
// S_i = a_1 * ... * a_i (a_i: calibrated chance that token i is accepted once 1..i-1 were)
// is worth  sum_{i<=d} S_i - rho0 * (V(d+1) - V(1))  tokens more than plain decoding, and a
// sequential drafter drafts token i+1 only while its expected yield pays for its own draft
// step; a block drafter is asked for the block length that pays most net of the block's own
// measured cost. Drafting is on while drafted rounds are worth their time on average: each round's
// worth is the calibrated acceptance of what it verified (given the drafter's confidences) minus
// the tokens plain decoding would have made in its measured time; not its outcome, which is one
// token or several and, averaged over a few rounds, switched off drafters that paid on average.
// While off, probes are backed off exponentially and spaced so that their extra work costs at most
// 1% of the time (and the drafter's reading of the skipped tokens at most 5%), unless the text's running
// acceptance at each position says a round pays: then every other round probes.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace llamaspec {

// Seconds of one target pass over n tokens (n = 1..n_max+1) and of one sequential draft step,
// measured at start-up and kept current with every round's timings.
class CostModel {
public:
    explicit CostModel(int32_t n_max);

    void set_verify(int32_t n_tokens, double seconds);
    void observe_verify(int32_t n_tokens, double seconds);
    void set_draft_step(double seconds) { draft_step_ = seconds; }
    void observe_draft_step(double seconds);
    // the draft model read n_tokens deferred target tokens in one batch
    void observe_catch_up(int32_t n_tokens, double seconds);
    // a block drafter (DFlash/DSpark head, n-gram lookup) drafted a block of n positions
    void observe_block_draft(int32_t n, double seconds);

    // Seconds a sequence's share of a round costs when it verifies n_tokens: one sequence's pass over them; in a
    // batch of B sequences (set_batch) that all verify as many, 1/B of a pass over B * n_tokens; where each
    // sequence picks its own depth, 1/B of a pass over B tokens, plus one sequence's pass over the n_tokens - 1
    // beyond its first: llama.cpp keeps one cache stream per sequence and puts only as many tokens of every
    // sequence into one ubatch, so a sequence verifying more than the others gets a pass of its own for the rest
    // (a round of 8 sequences, one of them verifying 3 tokens: 16 ms + 11 ms on the Xeon with Gemma).
    double verify(int32_t n_tokens) const {
        if (batch_ == 1) {
            return verify_.at(n_tokens);
        }
        if (own_depth_) {
            return pass(batch_) / batch_ + (n_tokens > 1 ? verify_.at(n_tokens - 1) : 0.0);
        }
        return pass(batch_ * n_tokens) / batch_;
    }

    // --- batched rounds (several sequences verified in one target pass) ---
    // seconds of one pass over total_tokens > n_max + 1 tokens (measured at a few lengths, interpolated between)
    void set_pass(int32_t total_tokens, double seconds);
    // seconds of a pass over total_tokens, from the measured lengths (linear between and past them)
    double pass(int32_t total_tokens) const;
    // a round's pass over total_tokens took `seconds`: corrects the nearest measured length, keeping the shape
    void observe_pass(int32_t total_tokens, double seconds);
    // the sequences that share this round's pass (1: a lone sequence); own_depth: each picks its own depth
    void set_batch(int32_t n_sequences, bool own_depth = false) {
        batch_ = n_sequences < 1 ? 1 : n_sequences;
        own_depth_ = own_depth;
    }
    bool own_depth() const { return own_depth_; }
    const std::vector<std::pair<int32_t, double>> & passes() const { return wide_passes_; }
    // forget the longer passes (then extrapolated from one sequence's longest two)
    void clear_passes() { wide_passes_.clear(); }
    int32_t batch() const { return batch_; }
    double draft_step() const { return draft_step_; }
    double catch_up_per_token() const { return catch_up_per_token_; }
    // Estimated seconds of drafting a block of n positions: measured where a block of that length
    // ran; for an untried length, the cost of the longest shorter block measured, else the shortest
    // longer one scaled by length (0 while nothing is measured). These estimates are optimistic, so
    // the planner tries a length once when it looks best, and then knows.
    double block_draft(int32_t n) const;
    const std::vector<double> & block_draft_seconds() const { return block_draft_; }  // index = length, 0 = unknown
    int32_t n_max() const { return (int32_t) verify_.size() - 2; }
    const std::vector<double> & verify_seconds() const { return verify_; }  // index = batch length

private:
    std::vector<double> verify_;
    std::vector<std::pair<int32_t, double>> wide_passes_;  // (total tokens > n_max + 1, seconds), ascending
    int32_t batch_ = 1;
    bool own_depth_ = false;
    std::vector<double> block_draft_;
    double draft_step_ = 0.0;
    double catch_up_per_token_ = 0.0;
};

// P(draft token accepted | the tokens before it were), from running (decayed) counts: per
// confidence bin where the drafter reports a confidence, per draft position otherwise.
class AcceptanceCalibration {
public:
    static constexpr int32_t kBins = 10;

    explicit AcceptanceCalibration(int32_t n_max);

    // confidence NaN: the drafter gives none (n-gram), use the position's running rate
    double predict(int32_t position, float confidence) const;
    void observe(int32_t position, float confidence, bool accepted);
    // A new text: each position's rate is kept but weighs as at most `weight` observations, and the
    // confidence bins' level starts again from 1.
    void begin_text(double weight);
    // The confidence bins are learnt over every text, but a drafter's confidence means more on some
    // texts than on others (the Gemma head's 0.3 is accepted far more often in code than in
    // translation): the text's recent accepted tokens over what the bins predicted for them (decayed
    // counts, starting from 1), by which the bins' predictions are scaled.
    double level() const;

    // for inspection: per-bin and per-position (accepted, seen) decayed counts
    const std::vector<double> & bin_hits() const { return bin_hits_; }
    const std::vector<double> & bin_seen() const { return bin_seen_; }
    const std::vector<double> & position_hits() const { return pos_hits_; }
    const std::vector<double> & position_seen() const { return pos_seen_; }

private:
    double predict_bin(float confidence) const;

    std::vector<double> bin_hits_, bin_seen_, pos_hits_, pos_seen_;
    double level_hits_ = 0.0, level_predicted_ = 0.0;
};

class Scheduler {
public:
    // sequential: the drafter pays one draft-model step per drafted token (draft-simple), so
    // drafting stops early; block drafters (DSpark/DFlash) and n-gram lookups draft at no extra
    // cost per position and are only truncated before verification.
    Scheduler(CostModel costs, bool sequential);

    // A new prompt may draft differently: whether drafting pays is unknown again, and the first round
    // probes if what the drafter must first read (the prompt) costs at most 2% of the generation's
    // plain-decoding time (max_tokens; 0 = unknown: then as any probe). What the last prompts taught
    // about each position's acceptance counts as a few tokens' evidence only (costs and the confidence
    // bins' calibration are kept whole), and starts the new text drafting when by it a round pays (and
    // reading the prompt is as cheap as that first probe).
    void begin_generation(int32_t max_tokens = 0);
    // Before drafting: the most tokens to draft this round, 0 to skip drafting. n_pending: target
    // tokens the draft model must catch up on before it can draft (deferred draft-model input).
    // A block drafter gets the block length whose best verified depth, net of the block's own cost,
    // pays most (ties go to the longer block: verify_depth() can still cut it).
    int32_t plan(int32_t n_max, int32_t n_pending = 0);
    // While drafting (sequential drafters): draft another token after token `index` (0-based)?
    bool keep_drafting(int32_t index, float confidence);
    // After drafting: how many of the drafted tokens to verify.
    int32_t verify_depth(const std::vector<float> & confidence) const;
    // After verification: learn from what the round did.
    void observe(const std::vector<float> & confidence, int32_t n_verified, int32_t n_accepted, int32_t n_emitted,
                 double draft_seconds, double verify_seconds);
    // (before observe) the draft model caught up on n_tokens deferred tokens in `seconds` this round (in a batch:
    // every sequence's, the whole round's seconds)
    void observe_catch_up(int32_t n_tokens, double seconds);

    // Batched rounds: before plan(), the number of sequences that share this round's pass (costs become a
    // sequence's share, and observe() takes a sequence's share of the round's seconds); after the round, what
    // its pass over total_tokens cost (with one sequence observe() learns that itself).
    void set_batch(int32_t n_sequences, bool own_depth = false) { costs_.set_batch(n_sequences, own_depth); }
    void observe_pass(int32_t total_tokens, double seconds);

    // Test-only: never skip drafting (depths are still chosen per round) and, with verify_seconds
    // (index n-1: a pass over n tokens), use those costs and stop timing rounds, so that tests of
    // the sampled output exercise the truncation the same way whatever the machine's load.
    void set_debug_schedule(bool always_draft, const std::vector<double> & verify_seconds);

    const CostModel & costs() const { return costs_; }
    const AcceptanceCalibration & calibration() const { return calibration_; }
    // drafting pays (else rounds are plain, with probes)
    bool drafting_on() const { return gain_ > 0.0; }
    // running average of what drafted rounds were worth: tokens over plain decoding in their time, by the
    // calibrated acceptance of what they verified
    double expected_gain() const { return gain_; }

private:
    double rho0() const { return 1.0 / costs_.verify(1); }
    // the round length (up to limit) whose expected tokens over plain decoding, net of its costs, are most,
    // and that net, by each position's running acceptance rate
    std::pair<int32_t, double> best_round(int32_t limit) const;

    CostModel costs_;
    AcceptanceCalibration calibration_;
    bool sequential_;
    // running expected net gain of drafted rounds, in tokens over plain decoding; drafting is on while > 0.
    // At first unknown: the first round is a probe.
    double gain_ = 0.0;
    bool starting_ = false;  // the next plan() is a generation's first: its gain may start from a prior
    int32_t skipped_ = 0;   // rounds skipped since drafting was last tried
    double skipped_seconds_ = 0.0;
    int32_t backoff_ = 1;   // rounds to skip before the next probe
    bool probing_ = false;  // this round is a probe: drafting is tried although it did not pay
    double probe_overhead_ = 0.0;  // seconds the last probe lost against plain decoding
    bool tried_ = false;    // a probe ran (the first one waits for nothing)
    double first_probe_budget_ = 0.0;  // seconds the first probe of this generation may cost
    bool always_draft_ = false;
    bool costs_frozen_ = false;
    double survival_ = 1.0; // while drafting sequentially: P(all tokens so far accepted)
    int32_t round_limit_ = 0;
    double catch_up_seconds_ = 0.0; // this round's share of the draft time spent catching up
};

}  // namespace llamaspec
