"""What generation returns: whole results and per-round stream chunks."""

from __future__ import annotations

from dataclasses import dataclass

from .stats import SpecStats


def _short_repr(result) -> str:
    text = result.text if len(result.text) <= 60 else result.text[:57] + "..."
    return (f"{type(result).__name__}({text!r}, {len(result.tokens)} tokens, stop_reason={result.stop_reason!r}, "
            f"{result.stats!r})")


@dataclass(frozen=True)
class GenerationResult:
    """The output of :meth:`Generator.generate`."""

    text: str
    tokens: list
    stop_reason: str  # "max_tokens", "eos", "context", "stop" (a stop string or token) or "cancelled"
    stats: SpecStats

    def __repr__(self) -> str:  # one line: the numbers that matter, no arrays
        return _short_repr(self)


@dataclass(frozen=True)
class ChatResult:
    """The output of :meth:`Generator.chat`: the assistant ``message`` ({"role", "content"}) and the rest."""

    message: dict
    text: str
    tokens: list
    stop_reason: str
    stats: SpecStats

    def __repr__(self) -> str:
        return _short_repr(self)


@dataclass(frozen=True)
class StreamChunk:
    """One speculative round of :meth:`Generator.stream`: the text it added and its counts."""

    text: str
    tokens: list
    drafted: int
    accepted: int
