// Statistics: one record per speculative round. Positional acceptance follows from it:
// position i (1-based) was drafted when drafted >= i, and accepted when accepted >= i.
#pragma once

#include <cstdint>
#include <vector>

namespace llamaspec {

struct RoundLog {
    std::vector<int32_t> drafted;   // draft tokens proposed this round
    std::vector<int32_t> accepted;  // longest prefix the target agreed with
    std::vector<int32_t> emitted;   // tokens appended to the output (accepted + bonus, fewer at a stop)
    std::vector<double> draft_seconds;
    std::vector<double> verify_seconds;

    void clear() {
        drafted.clear();
        accepted.clear();
        emitted.clear();
        draft_seconds.clear();
        verify_seconds.clear();
    }

    void add(int32_t n_drafted, int32_t n_accepted, int32_t n_emitted, double t_draft, double t_verify) {
        drafted.push_back(n_drafted);
        accepted.push_back(n_accepted);
        emitted.push_back(n_emitted);
        draft_seconds.push_back(t_draft);
        verify_seconds.push_back(t_verify);
    }

    size_t size() const { return drafted.size(); }
};

}  // namespace llamaspec
