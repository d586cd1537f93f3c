"""Request bodies of the OpenAI endpoints (pydantic), and the fields the server refuses rather than ignores.

Sampling defaults follow OpenAI's API (temperature 1, top_p 1, no top-k or min-p cut), so a client that
sends only ``temperature`` gets what it would get elsewhere; ``top_k`` and ``min_p`` are accepted as
llama-server accepts them. ``temperature: 0`` is greedy decoding, whose output equals the target alone.
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field


class BadRequest(ValueError):
    """A request the server cannot honour: answered 400 with ``param`` named."""

    def __init__(self, message: str, param: Optional[str] = None) -> None:
        super().__init__(message)
        self.param = param


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="ignore")  # fields of newer API versions (user, metadata, ...) are harmless

    model: Optional[str] = None
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    seed: Optional[int] = Field(None, ge=0, lt=2**64)
    stop: Union[str, List[str], None] = None
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    ignore_eos: bool = False  # llama-server's extension: generate max_tokens whatever the model says (benchmarks)
    # known fields that change the answer in ways this server does not implement: refused, never ignored
    n: int = 1
    logprobs: Union[bool, int, None] = None
    logit_bias: Optional[Dict[str, float]] = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0

    def sampling(self) -> dict:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "min_p": self.min_p,
                "seed": self.seed if self.seed is not None else 0}

    def stop_strings(self) -> List[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > 16:
            raise BadRequest("at most 16 stop strings", "stop")
        if any(not s for s in stops):
            raise BadRequest("stop strings must not be empty", "stop")
        return stops

    def refuse_unsupported(self) -> None:
        if self.n != 1:
            raise BadRequest("n > 1 is not supported: send one request per choice", "n")
        if self.logprobs not in (None, False, 0):
            raise BadRequest("logprobs are not supported", "logprobs")
        if self.logit_bias:
            raise BadRequest("logit_bias is not supported", "logit_bias")
        if self.presence_penalty or self.frequency_penalty:
            raise BadRequest("presence and frequency penalties are not supported",
                             "presence_penalty" if self.presence_penalty else "frequency_penalty")
        if self.stream_options is not None and not self.stream:
            raise BadRequest("stream_options needs stream: true", "stream_options")


class CompletionRequest(_Sampling):
    """``POST /v1/completions``."""

    prompt: Union[str, List[int], List[str], List[List[int]]]
    max_tokens: Optional[int] = 16
    echo: bool = False
    best_of: Optional[int] = None
    suffix: Optional[str] = None

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.echo:
            raise BadRequest("echo is not supported", "echo")
        if self.best_of not in (None, 1):
            raise BadRequest("best_of > 1 is not supported", "best_of")
        if self.suffix:
            raise BadRequest("suffix (insertion) is not supported", "suffix")

    def single_prompt(self) -> Union[str, List[int]]:
        """The one prompt: text or token ids (a list of several prompts is refused: one request each)."""
        p = self.prompt
        if isinstance(p, str) or (isinstance(p, list) and all(isinstance(t, int) for t in p) and p):
            return p
        if isinstance(p, list) and len(p) == 1:
            return p[0]
        raise BadRequest("send one prompt per request (a list of prompts is not supported)", "prompt")


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: Optional[str] = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, List[ContentPart], None] = None

    def text(self, index: int) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        parts = []
        for part in self.content:
            if part.type != "text" or part.text is None:
                raise BadRequest(f"messages[{index}]: only text content parts are supported, got {part.type!r}",
                                 "messages")
            parts.append(part.text)
        return "".join(parts)


class ChatCompletionRequest(_Sampling):
    """``POST /v1/chat/completions``."""

    messages: List[ChatMessage] = Field(min_length=1)
    max_tokens: Optional[int] = None
    max_completion_tokens: Optional[int] = None
    tools: Optional[List[Any]] = None
    tool_choice: Any = None
    functions: Optional[List[Any]] = None
    function_call: Any = None
    response_format: Optional[Dict[str, Any]] = None
    top_logprobs: Optional[int] = None

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.tools or self.functions or self.tool_choice not in (None, "none") or self.function_call is not None:
            raise BadRequest("tools and function calling are not supported", "tools")
        if self.response_format and self.response_format.get("type", "text") != "text":
            raise BadRequest("only response_format {\"type\": \"text\"} is supported", "response_format")
        if self.top_logprobs:
            raise BadRequest("top_logprobs are not supported", "top_logprobs")

    def token_limit(self) -> Optional[int]:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def conversation(self) -> List[dict]:
        return [{"role": "system" if m.role == "developer" else m.role, "content": m.text(i)}
                for i, m in enumerate(self.messages)]
