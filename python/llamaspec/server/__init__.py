"""``llamaspec serve``: an OpenAI-compatible HTTP server on the batch engine (the ``server`` extra).

    python -m llamaspec serve target.gguf --draft head.gguf --n-seq 8 --port 8080

One engine thread runs :class:`llamaspec.Batch` rounds for every request; the ASGI app (FastAPI on uvicorn)
submits requests and streams chunks back through queues. ``/metrics`` exports drafted and accepted tokens
per draft position (P_i = accepted / drafted) with prometheus_client.
"""

from .config import ServerConfig

__all__ = ["ServerConfig", "create_app", "BackgroundServer", "serve"]


def __getattr__(name: str):
    # the ASGI stack is imported only when a server is made
    if name == "create_app":
        from .app import create_app

        return create_app
    if name in ("BackgroundServer", "serve"):
        from . import runner

        return getattr(runner, name)
    raise AttributeError(name)
