// Pieces the binding files share (declared in bindings_common.h): dicts of engine state for Python.
#include "bindings_common.h"

// the casters of the values these dicts hold (without them nanobind throws std::bad_cast at run time)
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

namespace nb = nanobind;
using namespace llamaspec;

nb::dict round_log_dict(const RoundLog & log) {
    nb::dict d;
    d["proposed"] = log.proposed;
    d["drafted"] = log.drafted;
    d["confidence"] = log.confidence;
    d["accepted"] = log.accepted;
    d["emitted"] = log.emitted;
    d["draft_seconds"] = log.draft_seconds;
    d["verify_seconds"] = log.verify_seconds;
    return d;
}

nb::dict memory_info(const Context & target, const Drafter & drafter) {
    auto describe = [](const Context & c) {
        nb::dict d;
        d["role"] = c.role();
        d["rollback"] = rollback_mode_name(c.rollback_mode());
        d["checkpoints_saved"] = c.checkpoints_saved();
        d["replay_tokens"] = c.replay_tokens();
        d["replay_seconds"] = c.replay_seconds();
        return d;
    };
    nb::dict d;
    d["target"] = describe(target);
    const Context * dft = drafter.draft_context();
    d["draft"] = dft ? nb::object(describe(*dft)) : nb::none();
    return d;
}

nb::dict scheduler_state_dict(const llamaspec::Scheduler * sched) {
    nb::dict d;
    if (sched == nullptr) {
        return d;
    }
    d["verify_seconds"] = sched->costs().verify_seconds();
    nb::list passes;
    for (const auto & [n_tokens, seconds] : sched->costs().passes()) {
        passes.append(nb::make_tuple(n_tokens, seconds));
    }
    d["pass_seconds"] = passes;
    d["draft_step_seconds"] = sched->costs().draft_step();
    d["block_draft_seconds"] = sched->costs().block_draft_seconds();
    d["catch_up_seconds_per_token"] = sched->costs().catch_up_per_token();
    d["bin_accepted"] = sched->calibration().bin_hits();
    d["bin_seen"] = sched->calibration().bin_seen();
    d["position_accepted"] = sched->calibration().position_hits();
    d["position_seen"] = sched->calibration().position_seen();
    d["drafting_on"] = sched->drafting_on();
    d["expected_gain"] = sched->expected_gain();
    d["confidence_level"] = sched->calibration().level();
    return d;
}
