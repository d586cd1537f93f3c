// What the binding files share: engine state as dicts, one-caller-at-a-time access (bindings_common.cpp).
#pragma once

#include "context.h"
#include "drafter.h"
#include "scheduler.h"

#include "stats.h"

#include <nanobind/nanobind.h>

#include <atomic>
#include <stdexcept>

// {"target": {...}, "draft": {...} or None}: how each context rolls a sequence back and what it cost
nanobind::dict memory_info(const llamaspec::Context & target, const llamaspec::Drafter & drafter);

// the confidence scheduler's cost model, calibration and state (an empty dict for none)
nanobind::dict scheduler_state_dict(const llamaspec::Scheduler * scheduler);

// the per-round statistics as a dict of lists (the Python layer makes numpy arrays of them)
nanobind::dict round_log_dict(const llamaspec::RoundLog & log);

// Runs f(*object) for one caller at a time: a second thread gets an error instead of a data race.
template <typename T, typename F>
auto run_exclusive(std::atomic<bool> & busy, T * object, const char * closed_message, const char * busy_message,
                   F && f) {
    if (object == nullptr) {
        throw std::runtime_error(closed_message);
    }
    bool expected = false;
    if (!busy.compare_exchange_strong(expected, true)) {
        throw std::runtime_error(busy_message);
    }
    struct release {
        std::atomic<bool> & flag;
        ~release() { flag = false; }
    } guard{busy};
    return f(*object);
}
