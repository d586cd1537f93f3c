"""RPC offload over loopback: a second process (``python -m llamaspec rpc-server``) on 127.0.0.1 holds the
target's layers, and greedy output equals the local run token for token, plain, speculative and batched.
Addresses that cannot be used are exceptions, quickly: malformed (ValueError), nothing listening, another
service, a server that never answers (ConnectionError)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

import llamaspec
from llamaspec import rpc as llrpc

PROMPTS = ["the cat the cat the cat the cat", "def fib(n):\n    return n if n < 2 else fib(n - 1)", "Once upon a time"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def rpc_server():
    """``host:port`` of a ``python -m llamaspec rpc-server`` child process, ready (it answered the handshake)."""
    with llrpc.RpcServerProcess(n_threads=1) as server:
        yield server.endpoint


def test_the_layers_live_on_the_server_and_greedy_output_equals_local(models, rpc_server):
    local = llamaspec.Generator(models["target"], spec_type="none", n_ctx=256)
    remote = llamaspec.Generator(models["target"], spec_type="none", n_ctx=256, rpc=[rpc_server])
    assert remote.target.rpc == [rpc_server] and local.target.rpc == []
    assert remote.target.devices[0].startswith("RPC") and remote.target.devices[0].endswith(f": {rpc_server}")
    assert rpc_server not in " ".join(local.target.devices)
    for prompt in PROMPTS:
        assert remote.generate(prompt, 24).tokens == local.generate(prompt, 24).tokens
    remote.close()
    local.close()


@pytest.mark.parametrize("spec_type,draft", [("draft-simple", "draft_simple"), ("ngram-simple", None)])
def test_speculative_greedy_over_rpc_equals_local(models, rpc_server, spec_type, draft):
    draft_path = models[draft] if draft else None
    local = llamaspec.Generator(models["target"], draft_path, n_max=4, spec_type=spec_type, n_ctx=256)
    remote = llamaspec.Generator(models["target"], draft_path, n_max=4, spec_type=spec_type, n_ctx=256,
                                 rpc=[rpc_server])
    for prompt in PROMPTS:
        a, b = local.generate(prompt, 32), remote.generate(prompt, 32)
        assert b.tokens == a.tokens
        assert b.stats.n_drafted == a.stats.n_drafted  # the same rounds, not only the same text
    remote.close()
    local.close()


@pytest.mark.parametrize("n_gpu_layers,head_local", [(2, False), (-1, True), (3, True)])
def test_layers_split_between_this_process_and_the_server(models, rpc_server, n_gpu_layers, head_local):
    """Some layers here, some there (llama.cpp offloads the head and then the last layers), or the head kept
    here: activations cross the split both ways every round."""
    split = llamaspec.load_model(models["target"], n_gpu_layers=n_gpu_layers, rpc=[rpc_server],
                                 rpc_head_local=head_local)
    local = llamaspec.Generator(models["target"], spec_type="none", n_ctx=256)
    remote = llamaspec.Generator(split, n_max=4, spec_type="ngram-simple", n_ctx=256)
    for prompt in PROMPTS:
        assert remote.generate(prompt, 24).tokens == local.generate(prompt, 24).tokens


def test_batch_over_rpc_equals_local(models, rpc_server):
    from llamaspec.server.config import ServerConfig
    from llamaspec.server.runner import make_batch

    local = llamaspec.Batch(models["target"], models["draft_simple"], n_seq=3, n_max=4, spec_type="draft-simple",
                            n_ctx=256)
    expected = [r.tokens for r in local.generate(PROMPTS, 20)]
    local.close()
    # as `python -m llamaspec serve --rpc HOST:PORT` builds it
    remote = make_batch(ServerConfig(target=models["target"], draft=models["draft_simple"], n_seq=3, n_max=4,
                                     spec_type="draft-simple", n_ctx=256, rpc=[rpc_server]))
    assert remote.target.rpc == [rpc_server]
    assert [r.tokens for r in remote.generate(PROMPTS, 20)] == expected
    remote.close()


@pytest.mark.parametrize("bad", ["127.0.0.1", "127.0.0.1:", ":50052", "127.0.0.1:port", "127.0.0.1:70000",
                                 "::1:50052", "host name:1"])
def test_a_malformed_address_is_a_value_error(models, bad):
    with pytest.raises(ValueError, match="RPC server address"):
        llamaspec.load_model(models["target"], rpc=[bad])


def test_a_server_listed_twice_is_a_value_error(models):
    with pytest.raises(ValueError, match="listed twice"):
        llamaspec.load_model(models["target"], rpc=["127.0.0.1:1", "127.0.0.1:1"])


def test_nothing_listening_is_a_connection_error_at_once(models):
    endpoint = f"127.0.0.1:{_free_port()}"  # bound and released: closed
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=f"RPC server {endpoint}: cannot connect.*refused.*rpc-server"):
        llamaspec.Generator(models["target"], rpc=[endpoint])
    assert time.monotonic() - start < 2


def test_another_service_is_a_connection_error(models):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def answer_http() -> None:  # a web server, say: it answers something else and hangs up
            conn, _ = listener.accept()
            with conn:
                conn.recv(64)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        thread = threading.Thread(target=answer_http, daemon=True)
        thread.start()
        endpoint = "127.0.0.1:%d" % listener.getsockname()[1]
        with pytest.raises(ConnectionError, match="did not answer as a llama.cpp RPC server"):
            llamaspec.load_model(models["target"], rpc=[endpoint])
        thread.join(5)


def test_a_server_that_never_answers_times_out(models):
    with socket.socket() as listener:  # listens, never accepts: as an rpc-server busy with another client
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        endpoint = "127.0.0.1:%d" % listener.getsockname()[1]
        start = time.monotonic()
        with pytest.raises(ConnectionError, match="did not answer the RPC handshake within"):
            llamaspec.load_model(models["target"], rpc=[endpoint], rpc_timeout=0.5)
        assert time.monotonic() - start < 3


def test_rpc_server_cli_refuses_a_host_name():
    run = subprocess.run([sys.executable, "-m", "llamaspec", "rpc-server", "--host", "localhost"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "IPv4 address" in run.stderr


def test_rpc_server_cli_warns_beyond_loopback_and_fails_on_a_taken_port():
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        run = subprocess.run([sys.executable, "-m", "llamaspec", "rpc-server", "--host", "0.0.0.0", "--port",
                              str(port)], capture_output=True, text=True, timeout=60)
    assert "no authentication" in run.stderr
    assert run.returncode == 2 and f"could not serve RPC on 0.0.0.0:{port}" in run.stderr


def test_ctrl_c_ends_the_rpc_server():
    server = llrpc.RpcServerProcess(n_threads=1)
    try:
        server.process.send_signal(signal.SIGINT)
        assert server.process.wait(10) == 0
    finally:
        server.stop()
