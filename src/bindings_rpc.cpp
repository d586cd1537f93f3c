#include "bindings_rpc.h"

#include "rpc.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

namespace nb = nanobind;
using namespace nb::literals;

void bind_rpc(nb::module_ & m) {
    nb::register_exception_translator([](const std::exception_ptr & p, void *) {
        try {
            std::rethrow_exception(p);
        } catch (const llamaspec::RpcError & e) {
            PyErr_SetString(PyExc_ConnectionError, e.what());
        }
    });

    m.def("rpc_probe", [](const std::string & endpoint, double timeout) {
        nb::gil_scoped_release release;
        llamaspec::rpc_probe(endpoint, timeout);
    }, "endpoint"_a, "timeout"_a = 5.0,
       "Connect to the RPC server at 'host:port' and make its handshake within `timeout` seconds; "
       "ConnectionError naming the cause when it cannot be used. The server is busy with this client meanwhile.");

    m.def("rpc_serve", [](const std::string & endpoint, const std::string & cache_dir, int n_threads) {
        nb::gil_scoped_release release;
        llamaspec::rpc_serve(endpoint, cache_dir, n_threads);
    }, "endpoint"_a, "cache_dir"_a = "", "n_threads"_a = 1,
       "Serve this machine's devices (accelerators, else the CPU) to llama.cpp RPC clients on 'host:port', one "
       "client at a time. Blocks until the process ends; returns only by raising ConnectionError when it "
       "cannot listen. No authentication: bind to a trusted network only.");

    m.def("rpc_serve_devices", &llamaspec::rpc_serve_devices,
          "The devices rpc_serve would serve, as 'NAME: description'.");
}
