"""What ``llamaspec serve`` is asked to serve, and how."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional


@dataclass
class ServerConfig:
    """Settings of one server: the models and the engine (as :class:`llamaspec.Batch` takes them), the bounds.

    ``n_seq`` sequences decode together; up to ``max_waiting`` more requests wait for a free one (beyond that:
    429). ``shutdown_seconds`` bounds how long SIGINT/SIGTERM lets running requests finish. ``reuse_prefix``:
    a chat's next turn goes to the sequence that holds its conversation and decodes only the new turn.
    """

    target: str
    draft: Optional[str] = None
    spec_type: str = "auto"
    n_max: int = 8
    n_seq: int = 8
    n_ctx: int = 4096
    n_threads: Optional[int] = None
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: Optional[str] = None
    max_waiting: int = 64
    shutdown_seconds: float = 10.0
    model_name: Optional[str] = None
    reuse_prefix: bool = True  # a finished request's sequence keeps its cache for the next prompt that shares it
    schedule: str = "fixed"  # "confidence": each request's draft depth chosen per round (see Batch)
    rpc: Optional[List[str]] = None  # "host:port" of RPC servers holding the target's layers

    def __post_init__(self) -> None:
        if self.model_name is None:
            self.model_name = os.path.splitext(os.path.basename(os.fspath(self.target)))[0]
        if self.max_waiting < 0:
            raise ValueError(f"max_waiting must be >= 0, got {self.max_waiting}")
