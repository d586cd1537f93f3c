// Statistics: one record per speculative round. Positional acceptance follows from it:
// position i (1-based) was drafted when drafted >= i, and accepted when accepted >= i.
#pragma once

#include <cstdint>
#include <vector>

namespace llamaspec {

struct RoundLog {
    std::vector<int32_t> proposed;  // draft tokens the drafter produced (the scheduler may verify fewer)
    std::vector<int32_t> drafted;   // draft tokens sent to the target for verification
    std::vector<int32_t> accepted;  // longest prefix the target agreed with
    std::vector<int32_t> emitted;   // tokens appended to the output (accepted + bonus, fewer at a stop)
    std::vector<double> draft_seconds;
    std::vector<double> verify_seconds;
    std::vector<float> confidence;  // the drafter's confidence of every proposed token, rounds concatenated

    void clear() {
        proposed.clear();
        drafted.clear();
        accepted.clear();
        emitted.clear();
        draft_seconds.clear();
        verify_seconds.clear();
        confidence.clear();
    }

    void add(const std::vector<float> & proposed_confidence, int32_t n_drafted, int32_t n_accepted,
             int32_t n_emitted, double t_draft, double t_verify) {
        proposed.push_back((int32_t) proposed_confidence.size());
        confidence.insert(confidence.end(), proposed_confidence.begin(), proposed_confidence.end());
        drafted.push_back(n_drafted);
        accepted.push_back(n_accepted);
        emitted.push_back(n_emitted);
        draft_seconds.push_back(t_draft);
        verify_seconds.push_back(t_verify);
    }

    size_t size() const { return drafted.size(); }
};

}  // namespace llamaspec
