// _core.rpc_serve / rpc_probe / rpc_serve_devices and the ConnectionError for RpcError (bindings_rpc.cpp),
// registered by bindings.cpp's NB_MODULE.
#pragma once

#include <nanobind/nanobind.h>

void bind_rpc(nanobind::module_ & m);
