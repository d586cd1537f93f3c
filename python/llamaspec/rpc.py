"""llama.cpp's RPC backend: a model's layers held by ``rpc-server`` processes on other machines.

    python -m llamaspec rpc-server --host 10.0.0.2 --port 50052      # on the machine that holds the layers
    Generator("target.gguf", rpc=["10.0.0.2:50052"])                  # on the machine that generates

The server has no authentication or encryption: bind it to a trusted network only (the default is
127.0.0.1). It serves one client at a time. See docs/guide/rpc.md.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import List, Optional, Sequence

from . import _core

__all__ = ["RpcServerProcess", "check_rpc", "probe", "serve", "main"]


def check_rpc(rpc: Optional[Sequence[str]]) -> List[str]:
    """``rpc`` as a list of ``"host:port"`` strings (empty for None); ValueError naming a malformed one.

    A single string is taken as one server (``"h:p"``) or a comma-separated list (``"h1:p1,h2:p2"``).
    """
    if rpc is None:
        return []
    if isinstance(rpc, str):
        rpc = [s for s in rpc.split(",")] if rpc else []
    if not isinstance(rpc, Sequence) or not all(isinstance(e, str) for e in rpc):
        raise TypeError(f"rpc must be a list of 'host:port' strings, got {rpc!r}")
    out = []
    for endpoint in rpc:
        endpoint = endpoint.strip()
        host, sep, port = endpoint.partition(":")
        if not sep or not host or ":" in port or any(c.isspace() for c in host):
            raise ValueError(f"RPC server address {endpoint!r} is not 'host:port' (IPv4 address or host name, "
                             "then the port; IPv6 literals are not supported by llama.cpp's RPC client)")
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"RPC server address {endpoint!r}: the port must be a number in 1..65535")
        if endpoint in out:
            raise ValueError(f"RPC server {endpoint!r} is listed twice")
        out.append(endpoint)
    if len(out) > 16:
        raise ValueError(f"at most 16 RPC servers (llama.cpp's GGML_RPC_MAX_SERVERS), got {len(out)}")
    return out


def probe(endpoint: str, timeout: float = 5.0) -> None:
    """Connect to the RPC server at ``endpoint`` and make its handshake within ``timeout`` seconds.

    Raises ValueError for a malformed address and ConnectionError naming the cause when the server cannot
    be used: nothing listens, the host is unreachable, another service answers, another protocol version, or
    it is busy serving another client past the timeout.
    """
    (endpoint,) = check_rpc([endpoint])
    _core.rpc_probe(endpoint, float(timeout))


def serve(host: str = "127.0.0.1", port: int = 50052, n_threads: Optional[int] = None,
          cache_dir: Optional[str] = None) -> None:
    """Serve this machine's devices (its accelerators, else the CPU) to RPC clients until the process ends.

    Blocks; SIGINT/SIGTERM end the process. ConnectionError when it cannot listen on ``host:port``.
    ``host`` must be an IPv4 address of this machine (llama.cpp binds it as such).
    """
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise ValueError(f"--host must be an IPv4 address of this machine (e.g. 127.0.0.1 or 0.0.0.0), "
                         f"got {host!r}") from None
    if not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port must be in 1..65535, got {port!r}")
    n_threads = n_threads or os.cpu_count() or 1
    if cache_dir:
        os.makedirs(cache_dir, exist_ok=True)
    failure: List[BaseException] = []

    def run() -> None:
        try:
            _core.rpc_serve(f"{host}:{port}", cache_dir or "", int(n_threads))
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            failure.append(exc)

    # ggml's accept loop never returns while it serves and cannot be interrupted: it runs on a daemon thread
    # and the main thread stays free for SIGINT/SIGTERM, which end the process.
    thread = threading.Thread(target=run, name="llamaspec-rpc-server", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.25)
    if failure:
        raise failure[0]


class RpcServerProcess:
    """``python -m llamaspec rpc-server`` as a child process of this one, ready when made (it answered the RPC
    handshake): ``with RpcServerProcess() as server: load_model(path, rpc=[server.endpoint])``.

    ``port=0`` picks a free port. For tests, notebooks and trying RPC on one machine; on a real second
    machine run the command there. Free the models that use it before stopping it: llama.cpp ends a process
    whose RPC server went away while it held layers there.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, n_threads: Optional[int] = None,
                 start_timeout: float = 60.0) -> None:
        if port == 0:
            with socket.socket() as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
        self.endpoint = f"{host}:{port}"
        command = [sys.executable, "-m", "llamaspec", "rpc-server", "--host", host, "--port", str(port)]
        if n_threads:
            command += ["--threads", str(n_threads)]
        self._log = tempfile.TemporaryFile("w+")  # not a pipe: nobody reads it while the server runs
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=self._log, text=True)
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                probe(self.endpoint, timeout=2.0)
                return
            except ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    self._log.seek(0)
                    raise RuntimeError(f"rpc-server did not start on {self.endpoint}: "
                                       f"{self._log.read().strip()}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        """End the server (SIGTERM) and wait for it."""
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)

    def __enter__(self) -> "RpcServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m llamaspec rpc-server``: serve this machine to :func:`llamaspec.load_model` ``(rpc=...)``."""
    p = argparse.ArgumentParser(prog="python -m llamaspec rpc-server",
                                description="llama.cpp RPC server: holds the layers that clients loading a "
                                            "model with rpc=['HOST:PORT'] offload to it. No authentication.")
    p.add_argument("--host", default="127.0.0.1",
                   help="IPv4 address to listen on (default 127.0.0.1; 0.0.0.0 = every interface: trusted networks only)")
    p.add_argument("--port", type=int, default=50052)
    p.add_argument("-t", "--threads", type=int, default=None, help="CPU threads (default: all cores)")
    p.add_argument("--cache", default=None, metavar="DIR",
                   help="keep large tensors clients send here, so a reload sends only their hashes")
    args = p.parse_args(argv)
    if args.host != "127.0.0.1":
        print(f"WARNING: listening on {args.host}: llama.cpp's RPC server has no authentication or encryption; "
              "anyone who can reach this port can run computations and read or write its memory. "
              "Use it on a trusted network only.", file=sys.stderr)
    print("devices: " + "; ".join(_core.rpc_serve_devices()), file=sys.stderr, flush=True)
    try:
        serve(args.host, args.port, args.threads, args.cache)
    except KeyboardInterrupt:
        return 0
    except (ValueError, ConnectionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
