// _core.set_multidot / mul_mat / mul_mat_reference / MatMulTimer (kernel_probe.cpp), registered by bindings.cpp.
#pragma once

#include <nanobind/nanobind.h>

void bind_kernels(nanobind::module_ & m);
