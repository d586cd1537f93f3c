// Shared pieces of the nanobind module (bindings.cpp: module, Model, Engine, Context, Sampler;
// bindings_batch.cpp: BatchEngine).
#pragma once

#include "context.h"
#include "drafter.h"

#include <nanobind/nanobind.h>

// {"target": {...}, "draft": {...} or None}: how each context rolls a sequence back and what it cost
nanobind::dict memory_info(const llamaspec::Context & target, const llamaspec::Drafter & drafter);

// _core.BatchEngine
void bind_batch(nanobind::module_ & m);
