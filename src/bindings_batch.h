// _core.BatchEngine (bindings_batch.cpp), registered by bindings.cpp's NB_MODULE.
#pragma once

#include <nanobind/nanobind.h>

void bind_batch(nanobind::module_ & m);
