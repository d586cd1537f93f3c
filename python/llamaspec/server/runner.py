"""Run the server: in the foreground with uvicorn (the CLI), or on a background thread (notebooks, tests)."""

from __future__ import annotations

import signal
import socket
import threading
import time
from typing import Optional

import uvicorn

from ..batch import Batch
from .app import create_app
from .config import ServerConfig


def serve(config: ServerConfig) -> None:
    """Serve until SIGINT/SIGTERM: then stop accepting, let running requests end (at most
    ``config.shutdown_seconds``), free the models and return (a second signal stops at once).

    uvicorn runs on a thread and the signals are handled here: uvicorn's own handlers re-raise the signal
    after a graceful shutdown, which would end the process with it instead of status 0.
    """
    app = create_app(config, make_batch(config))  # bad models or settings raise here, before anything listens
    server = uvicorn.Server(_uvicorn_config(app, config))

    def stop(_signal, _frame) -> None:
        if server.should_exit:
            server.force_exit = True
        app.state.server.begin_shutdown()
        server.should_exit = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        thread = threading.Thread(target=server.run, name="llamaspec-server")
        thread.start()
        while thread.is_alive():
            thread.join(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not server.started:
        raise RuntimeError(f"the server could not listen on {config.host}:{config.port}")


class BackgroundServer:
    """A server on a thread of this process: ``with BackgroundServer(config) as server: ... server.url``.

    ``port=0`` in the config picks a free port. ``batch``: serve an existing :class:`~llamaspec.Batch`.
    """

    def __init__(self, config: ServerConfig, batch: Optional[Batch] = None, start_timeout: float = 60.0) -> None:
        if config.port == 0:
            config.port = _free_port(config.host)
        self.config = config
        self.app = create_app(config, batch if batch is not None else make_batch(config))
        self._server = uvicorn.Server(_uvicorn_config(self.app, config))
        self._thread = threading.Thread(target=self._server.run, name="llamaspec-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + start_timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start on {config.host}:{config.port}")
            time.sleep(0.01)

    @property
    def url(self) -> str:
        """``http://host:port`` (an OpenAI client's base_url is this + ``/v1``)."""
        return f"http://{self.config.host}:{self.config.port}"

    def stop(self) -> None:
        """Stop as SIGTERM would, and wait for it."""
        self.app.state.server.begin_shutdown()
        self._server.should_exit = True
        self._thread.join()

    def __enter__(self) -> "BackgroundServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _uvicorn_config(app, config: ServerConfig) -> uvicorn.Config:
    # uvicorn waits for open responses a little longer than the engine lets requests run, so that every
    # response ends properly (its last tokens, or an error) before connections close
    return uvicorn.Config(app, host=config.host, port=config.port, log_level="warning", lifespan="on",
                          timeout_graceful_shutdown=config.shutdown_seconds + 2)


def make_batch(config: ServerConfig) -> Batch:
    """The :class:`~llamaspec.Batch` a config describes."""
    return Batch(config.target, config.draft, n_seq=config.n_seq, n_max=config.n_max, spec_type=config.spec_type,
                 n_ctx=config.n_ctx, n_threads=config.n_threads, reuse_prefix=config.reuse_prefix,
                 schedule=config.schedule, rpc=config.rpc)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
