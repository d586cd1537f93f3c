// llama.cpp's RPC backend: offloading a model's layers to rpc-server processes, and serving one.
#pragma once

#include "ggml-backend.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace llamaspec {

// An RPC server that cannot be used: unreachable, not an RPC server, busy or of another protocol version.
// Python sees ConnectionError.
class RpcError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Connects to "host:port" and makes the RPC handshake, all within timeout_s seconds, then disconnects.
// Throws RpcError naming the endpoint and the cause, std::invalid_argument for a malformed endpoint.
// llama.cpp itself aborts the process when a server it connects to is down or answers wrongly, and waits
// forever for one that serves another client: this check runs first so that a bad address is an exception.
void rpc_probe(const std::string & endpoint, double timeout_s);

// The RPC servers a model offloads to, in order, as ggml devices (one or more per server), for
// llama_model_params.devices. Probes every server no live RpcServers of this process uses (rpc-server serves
// one client at a time; a connection this process holds is reused by llama.cpp, a new probe would wait
// behind it). Not registered with ggml globally: models loaded without rpc stay local.
class RpcServers {
public:
    RpcServers(const std::vector<std::string> & endpoints, double timeout_s);
    ~RpcServers();
    RpcServers(const RpcServers &) = delete;
    RpcServers & operator=(const RpcServers &) = delete;

    const std::vector<ggml_backend_dev_t> & devices() const { return devices_; }

private:
    std::vector<std::string> endpoints_;  // those counted as in use by this object
    std::vector<ggml_backend_dev_t> devices_;
};

// Serves this machine's devices (accelerators, else the CPU with n_threads threads) to RPC clients on
// "host:port", one client at a time, until the process ends. cache_dir: where large tensors sent by hash
// are kept between runs ("" = no cache). Returns only when it could not start (throws RpcError).
void rpc_serve(const std::string & endpoint, const std::string & cache_dir, int n_threads);

// the ggml devices rpc_serve would serve, as "NAME: description"
std::vector<std::string> rpc_serve_devices();

}  // namespace llamaspec
