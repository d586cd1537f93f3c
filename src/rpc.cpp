#include "rpc.h"

#include "ggml-rpc.h"

#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace llamaspec {

namespace {

using Clock = std::chrono::steady_clock;

// The first bytes of llama.cpp's RPC protocol (ggml-rpc.cpp): a command byte, a uint64 payload size and the
// payload; HELLO (command 14, fixed in the protocol) carries the client's transport capabilities (24 zero
// bytes: plain TCP) and is answered with a uint64 size and {major, minor, patch, pad, 24 capability bytes}.
constexpr uint8_t kHelloCommand = 14;
constexpr size_t kCapsSize = 24;
constexpr uint64_t kHelloReplySize = 4 + kCapsSize;

struct Socket {
    int fd = -1;
    ~Socket() {
        if (fd >= 0) {
            ::close(fd);
        }
    }
};

std::pair<std::string, int> split_endpoint(const std::string & endpoint) {
    const size_t colon = endpoint.find(':');  // llama.cpp splits at the first colon: no IPv6 literals
    if (colon == std::string::npos || colon == 0 || colon + 1 == endpoint.size() ||
        endpoint.find(':', colon + 1) != std::string::npos) {
        throw std::invalid_argument("RPC server address '" + endpoint + "' is not host:port");
    }
    const std::string port_text = endpoint.substr(colon + 1);
    if (port_text.find_first_not_of("0123456789") != std::string::npos || port_text.size() > 5 ||
        std::stoi(port_text) < 1 || std::stoi(port_text) > 65535) {
        throw std::invalid_argument("RPC server address '" + endpoint + "': the port must be 1..65535");
    }
    return {endpoint.substr(0, colon), std::stoi(port_text)};
}

int millis_left(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left > 0 ? (int) left : 0;
}

// waits for `events` on fd until the deadline; false on timeout
bool wait_for(int fd, short events, Clock::time_point deadline) {
    pollfd p{fd, events, 0};
    for (;;) {
        const int n = ::poll(&p, 1, millis_left(deadline));
        if (n > 0) {
            return true;
        }
        if (n == 0 || errno != EINTR) {
            return false;
        }
    }
}

bool send_all(int fd, const uint8_t * data, size_t size, Clock::time_point deadline) {
    while (size > 0) {
        if (!wait_for(fd, POLLOUT, deadline)) {
            return false;
        }
        const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            continue;
        }
        if (n <= 0) {
            return false;
        }
        data += n;
        size -= (size_t) n;
    }
    return true;
}

// 1: all bytes, 0: the peer closed or failed, -1: timeout
int recv_all(int fd, uint8_t * data, size_t size, Clock::time_point deadline) {
    while (size > 0) {
        if (!wait_for(fd, POLLIN, deadline)) {
            return -1;
        }
        const ssize_t n = ::recv(fd, data, size, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            continue;
        }
        if (n <= 0) {
            return 0;
        }
        data += n;
        size -= (size_t) n;
    }
    return 1;
}

// how many live RpcServers use each endpoint (guarded by rpc_mutex)
std::mutex rpc_mutex;
std::map<std::string, int> endpoints_in_use;

}  // namespace

void rpc_probe(const std::string & endpoint, double timeout_s) {
    const auto [host, port] = split_endpoint(endpoint);
    const auto deadline = Clock::now() + std::chrono::milliseconds((int64_t) (timeout_s * 1000));
    const std::string who = "RPC server " + endpoint + ": ";

    addrinfo hints{};
    hints.ai_family = AF_INET;  // llama.cpp's RPC client speaks IPv4 only
    hints.ai_socktype = SOCK_STREAM;
    addrinfo * found = nullptr;
    if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) {
        throw RpcError(who + "cannot resolve host '" + host + "' (an IPv4 address or host name)");
    }
    sockaddr_in addr{};
    std::memcpy(&addr, found->ai_addr, sizeof(addr));
    ::freeaddrinfo(found);
    addr.sin_port = htons((uint16_t) port);

    Socket sock;
    sock.fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (sock.fd < 0) {
        throw RpcError(who + "cannot create a socket: " + std::strerror(errno));
    }
    ::fcntl(sock.fd, F_SETFL, ::fcntl(sock.fd, F_GETFL, 0) | O_NONBLOCK);
    if (::connect(sock.fd, (const sockaddr *) &addr, sizeof(addr)) != 0) {
        if (errno != EINPROGRESS) {
            throw RpcError(who + "cannot connect: " + std::strerror(errno));
        }
        if (!wait_for(sock.fd, POLLOUT, deadline)) {
            throw RpcError(who + "no connection within " + std::to_string(timeout_s) +
                           " s (host down, unreachable or filtered by a firewall?)");
        }
        int error = 0;
        socklen_t len = sizeof(error);
        ::getsockopt(sock.fd, SOL_SOCKET, SO_ERROR, &error, &len);
        if (error != 0) {
            throw RpcError(who + "cannot connect: " + std::strerror(error) +
                           (error == ECONNREFUSED ? " (nothing listens there: start one with `python -m llamaspec "
                                                    "rpc-server --host HOST --port PORT` on that machine)" : ""));
        }
    }

    uint8_t hello[1 + sizeof(uint64_t) + kCapsSize] = {};
    hello[0] = kHelloCommand;
    const uint64_t hello_size = kCapsSize;
    std::memcpy(hello + 1, &hello_size, sizeof(hello_size));
    if (!send_all(sock.fd, hello, sizeof(hello), deadline)) {
        throw RpcError(who + "the connection failed while sending the RPC handshake");
    }
    uint64_t reply_size = 0;
    uint8_t reply[kHelloReplySize] = {};
    int got = recv_all(sock.fd, (uint8_t *) &reply_size, sizeof(reply_size), deadline);
    if (got == 1 && reply_size == kHelloReplySize) {
        got = recv_all(sock.fd, reply, sizeof(reply), deadline);
    }
    if (got < 0) {
        throw RpcError(who + "accepted the connection but did not answer the RPC handshake within " +
                       std::to_string(timeout_s) + " s (an rpc-server serves one client at a time: is another "
                       "process using it?)");
    }
    if (got == 0 || reply_size != kHelloReplySize) {
        throw RpcError(who + "did not answer as a llama.cpp RPC server (another service on that port, or an "
                       "incompatible rpc-server version)");
    }
    if (reply[0] != RPC_PROTO_MAJOR_VERSION || reply[1] > RPC_PROTO_MINOR_VERSION) {
        throw RpcError(who + "speaks RPC protocol " + std::to_string(reply[0]) + "." + std::to_string(reply[1]) +
                       "." + std::to_string(reply[2]) + ", this build " + std::to_string(RPC_PROTO_MAJOR_VERSION) +
                       "." + std::to_string(RPC_PROTO_MINOR_VERSION) + ".x: run the same llamaspec (or llama.cpp) "
                       "version on both machines");
    }
}

RpcServers::RpcServers(const std::vector<std::string> & endpoints, double timeout_s) {
    std::lock_guard<std::mutex> lock(rpc_mutex);
    for (const std::string & endpoint : endpoints) {
        split_endpoint(endpoint);
    }
    try {
        for (const std::string & endpoint : endpoints) {
            if (endpoints_in_use[endpoint] == 0) {
                rpc_probe(endpoint, timeout_s);
            }
            ggml_backend_reg_t reg = ggml_backend_rpc_add_server(endpoint.c_str());
            if (reg == nullptr) {
                throw RpcError("RPC server " + endpoint + ": it serves no devices");
            }
            endpoints_in_use[endpoint]++;
            endpoints_.push_back(endpoint);
            for (size_t i = 0; i < ggml_backend_reg_dev_count(reg); ++i) {
                devices_.push_back(ggml_backend_reg_dev_get(reg, i));
            }
        }
    } catch (...) {
        for (const std::string & endpoint : endpoints_) {
            endpoints_in_use[endpoint]--;
        }
        throw;
    }
}

RpcServers::~RpcServers() {
    std::lock_guard<std::mutex> lock(rpc_mutex);
    for (const std::string & endpoint : endpoints_) {
        endpoints_in_use[endpoint]--;
    }
}

namespace {

// as llama.cpp's rpc-server: the accelerators, else the CPU
std::vector<ggml_backend_dev_t> serve_devices() {
    std::vector<ggml_backend_dev_t> devices;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        const auto type = ggml_backend_dev_type(dev);
        if (type != GGML_BACKEND_DEVICE_TYPE_CPU && type != GGML_BACKEND_DEVICE_TYPE_ACCEL) {
            devices.push_back(dev);
        }
    }
    if (devices.empty()) {
        if (ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU)) {
            devices.push_back(cpu);
        }
    }
    return devices;
}

}  // namespace

std::vector<std::string> rpc_serve_devices() {
    std::vector<std::string> names;
    for (ggml_backend_dev_t dev : serve_devices()) {
        names.push_back(std::string(ggml_backend_dev_name(dev)) + ": " + ggml_backend_dev_description(dev));
    }
    return names;
}

void rpc_serve(const std::string & endpoint, const std::string & cache_dir, int n_threads) {
    split_endpoint(endpoint);
    std::vector<ggml_backend_dev_t> devices = serve_devices();
    if (devices.empty()) {
        throw RpcError("no device to serve");
    }
    ggml_backend_rpc_start_server(endpoint.c_str(), cache_dir.empty() ? nullptr : cache_dir.c_str(),
                                  (size_t) (n_threads > 0 ? n_threads : 1), devices.size(), devices.data());
    // it returns only when it could not start: its reason went to stderr
    throw RpcError("could not serve RPC on " + endpoint +
                   " (see the message above: the address must be a local IPv4 address and the port free)");
}

}  // namespace llamaspec
