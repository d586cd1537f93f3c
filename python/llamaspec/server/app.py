"""The ASGI app: OpenAI's completions and chat completions over one :class:`~llamaspec.Batch`, plus health and
Prometheus metrics. Made by :func:`create_app`; run by ``python -m llamaspec serve`` (uvicorn).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from contextlib import asynccontextmanager
from typing import AsyncIterator, List, Optional, Union

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import _core
from ..batch import Batch
from ..chat import chat_prompt
from ..model import prompt_tokens
from .config import ServerConfig
from .engine import EngineThread, Job, cached_prompt_tokens
from .metrics import ServerMetrics
from .schemas import BadRequest, ChatCompletionRequest, CompletionRequest

FINISH_REASONS = {"eos": "stop", "stop": "stop", "max_tokens": "length", "context": "length"}
DISCONNECT_POLL_SECONDS = 0.2


class ApiError(Exception):
    """An error answered as OpenAI does: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: Optional[str] = None,
                 code: Optional[str] = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def response(self) -> JSONResponse:
        return JSONResponse({"error": {"message": self.message, "type": self.type, "param": self.param,
                                       "code": self.code}}, status_code=self.status)


class _CountRequests:
    """Counts answered requests by endpoint and status. A plain ASGI middleware: Starlette's ``@app.middleware``
    (BaseHTTPMiddleware) relays every chunk of a streamed body through a stream and a task of its own, work the
    event loop would do per round while the engine's threads want the same cores."""

    def __init__(self, app, metrics: ServerMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_counting(message) -> None:
            if message["type"] == "http.response.start":
                endpoint = getattr(scope.get("route"), "path", "other")  # the router has matched by now
                self.metrics.requests.labels(endpoint=endpoint, status=str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, send_counting)


def create_app(config: ServerConfig, batch: Batch) -> FastAPI:
    """The server as an ASGI app over ``batch`` (made from ``config`` by :func:`llamaspec.server.runner.make_batch`,
    or any Batch); the app closes it when it shuts down."""
    state = _ServerState(config, batch)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        state.start()
        try:
            yield
        finally:
            await asyncio.get_running_loop().run_in_executor(None, state.stop)

    app = FastAPI(title="llamaspec", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.server = state

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        if first.get("type") == "json_invalid":
            return ApiError(400, "the body is not valid JSON").response()
        loc = []
        for part in first.get("loc", ())[1:]:  # after "body": field names and list indices, up to a union branch
            if isinstance(part, str) and ("[" in part or part in ("str", "int", "float", "bool", "list")):
                break
            loc.append(str(part))
        if not loc:
            return ApiError(400, "the body must be a JSON object of the endpoint's fields").response()
        param = ".".join(loc)
        return ApiError(400, f"{param}: {first.get('msg', 'invalid value')}", param=param).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return ApiError(exc.status_code, str(exc.detail), type=kind).response()

    app.add_middleware(_CountRequests, metrics=state.metrics)

    def authorize(request: Request) -> None:
        key = config.api_key
        if key and request.headers.get("authorization", "") != f"Bearer {key}":
            raise ApiError(401, "a valid API key is required (Authorization: Bearer KEY)",
                           type="authentication_error", code="invalid_api_key")

    @app.get("/health")
    async def health() -> dict:
        return {"status": "stopping" if state.stopping else "ok", "model": config.model_name,
                "running": state.engine.in_flight if state.engine else 0}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models", dependencies=[Depends(authorize)])
    async def models() -> dict:
        return {"object": "list", "data": [{"id": config.model_name, "object": "model", "created": state.created,
                                            "owned_by": "llamaspec"}]}

    @app.post("/v1/completions", dependencies=[Depends(authorize)])
    async def completions(body: CompletionRequest, request: Request):
        _refuse_bad(body.refuse_unsupported)
        prompt = _refuse_bad(body.single_prompt)
        tokens = await _in_thread(lambda: _prompt_tokens(state.batch, prompt))
        job = state.submit(tokens, body.max_tokens, body)
        return await _respond(state, job, request, body, chat=False)

    @app.post("/v1/chat/completions", dependencies=[Depends(authorize)])
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        _refuse_bad(body.refuse_unsupported)
        messages = _refuse_bad(body.conversation)
        tokens, template_stops = await _in_thread(lambda: chat_prompt(state.batch.target, messages))
        job = state.submit(tokens, body.token_limit(), body, extra_stops=template_stops, prompt_param="messages")
        return await _respond(state, job, request, body, chat=True)

    return app


class _ServerState:
    """The batch, its engine thread and the metrics, made when the app starts."""

    def __init__(self, config: ServerConfig, batch: Batch) -> None:
        self.config = config
        self.batch = batch
        self.metrics = ServerMetrics(batch.n_max)
        self.engine: Optional[EngineThread] = None
        self.created = int(time.time())
        self.stopping = False

    def start(self) -> None:
        self.engine = EngineThread(self.batch, self.metrics, self.config.max_waiting)
        self.engine.start()

    def begin_shutdown(self) -> None:
        """SIGINT/SIGTERM: refuse new requests (503); running ones get ``shutdown_seconds`` to finish."""
        self.stopping = True
        if self.engine is not None:
            self.engine.begin_shutdown(self.config.shutdown_seconds)

    def stop(self) -> None:
        self.stopping = True
        if self.engine is not None:
            self.engine.stop(self.config.shutdown_seconds)

    def submit(self, tokens: List[int], max_tokens: Optional[int], body, extra_stops=(),
               prompt_param: str = "prompt") -> Job:
        n_ctx = self.batch.n_ctx
        if len(tokens) >= n_ctx:
            raise ApiError(400, f"the prompt has {len(tokens)} tokens; the context holds {n_ctx} per sequence "
                           "(leave room for one generated token)", param=prompt_param,
                           code="context_length_exceeded")
        if max_tokens is None:
            max_tokens = n_ctx - len(tokens)
        if max_tokens < 1:
            raise ApiError(400, f"max_tokens must be at least 1, got {max_tokens}", param="max_tokens")
        sampling = body.sampling()
        try:
            _core.Sampler(sampling["temperature"], sampling["top_k"], sampling["top_p"], sampling["min_p"],
                          sampling["seed"])
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        job = Job(tokens=tokens, max_tokens=max_tokens, sampling=sampling,
                  stop=_refuse_bad(body.stop_strings) + list(extra_stops), ignore_eos=body.ignore_eos,
                  events=asyncio.Queue(),
                  loop=asyncio.get_running_loop())
        if self.stopping or self.engine is None:
            raise ApiError(503, "the server is shutting down", type="server_error")
        if not self.engine.try_submit(job):
            raise ApiError(429, f"too many requests waiting (at most {self.config.max_waiting} wait for one of "
                           f"{self.batch.n_seq} sequences)", type="rate_limit_error")
        return job


def _refuse_bad(call):
    try:
        return call()
    except BadRequest as exc:
        raise ApiError(400, str(exc), param=exc.param) from None


def _prompt_tokens(batch: Batch, prompt: Union[str, List[int]]) -> List[int]:
    """The prompt's token ids, checked as Batch.submit checks them, so that a stream never starts on a bad one."""
    try:
        return prompt_tokens(batch.target, prompt, add_special=True)
    except (ValueError, TypeError) as exc:
        raise ApiError(400, str(exc), param="prompt") from None


async def _in_thread(call):
    """Tokenizing and rendering templates take milliseconds for long prompts: off the event loop."""
    try:
        return await asyncio.get_running_loop().run_in_executor(None, call)
    except (ValueError, TypeError) as exc:
        raise ApiError(400, str(exc)) from None


async def _respond(state: _ServerState, job: Job, request: Request, body, chat: bool):
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    created = int(time.time())
    model = state.config.model_name
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(_stream(state, job, rid, created, model, chat, include_usage),
                                 media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    texts, done = [], None
    while done is None:
        try:
            kind, value = await asyncio.wait_for(job.events.get(), DISCONNECT_POLL_SECONDS)
        except asyncio.TimeoutError:
            if await request.is_disconnected():
                state.engine.cancel(job)
                return Response(status_code=499)
            continue
        if kind == "chunk":
            texts.append(value.text)
        elif kind == "error":
            raise ApiError(400, value)
        else:
            done = value
    if done.stop_reason == "cancelled":
        raise ApiError(503, "the server shut down before the answer was complete", type="server_error")
    text = "".join(texts)
    finish = FINISH_REASONS.get(done.stop_reason, "stop")
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish,
                  "logprobs": None}
    else:
        choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
    return {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": created,
            "model": model, "choices": [choice], "usage": _usage(job, done)}


async def _stream(state: _ServerState, job: Job, rid: str, created: int, model: str, chat: bool,
                  include_usage: bool) -> AsyncIterator[str]:
    kind_name = "chat.completion.chunk" if chat else "text_completion"

    def event(choices: list, usage: Optional[dict] = None) -> str:
        payload = {"id": rid, "object": kind_name, "created": created, "model": model, "choices": choices}
        if include_usage:
            payload["usage"] = usage
        return f"data: {json.dumps(payload)}\n\n"

    def choice(text: Optional[str], finish: Optional[str], role: bool = False) -> dict:
        if chat:
            delta = {"role": "assistant", "content": ""} if role else ({"content": text} if text is not None else {})
            return {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}

    finished = False
    try:
        if chat:
            yield event([choice(None, None, role=True)])
        while True:
            kind, value = await job.events.get()
            if kind == "chunk":
                if value.text:
                    yield event([choice(value.text, None)])
            elif kind == "error":
                finished = True
                yield _sse_error(value, "invalid_request_error")
                return
            elif value.stop_reason == "cancelled":  # the server is shutting down
                finished = True
                yield _sse_error("the server shut down before the answer was complete", "server_error")
                return
            else:
                finished = True
                # the finish reason, the usage and [DONE] in one write: the client reads the end at once
                tail = [event([choice(None if chat else "", FINISH_REASONS.get(value.stop_reason, "stop"))])]
                if include_usage:
                    tail.append(event([], _usage(job, value)))
                tail.append("data: [DONE]\n\n")
                yield "".join(tail)
                return
    finally:
        if not finished:  # the client went away: free its sequence at the next round
            state.engine.cancel(job)


def _sse_error(message: str, kind: str) -> str:
    """An error inside a stream, as OpenAI sends one (the openai client raises it)."""
    return f"data: {json.dumps({'error': {'message': message, 'type': kind}})}\n\n"


def _usage(job: Job, request) -> dict:
    stats = request.stats
    speculative = stats.summary()
    speculative["drafted_at"] = [int(x) for x in stats.drafted_at]
    speculative["accepted_at"] = [int(x) for x in stats.accepted_at]
    completion = len(request.tokens)
    return {"prompt_tokens": len(job.tokens), "completion_tokens": completion,
            "total_tokens": len(job.tokens) + completion,
            "prompt_tokens_details": {"cached_tokens": cached_prompt_tokens(len(job.tokens), stats)},
            "speculative": speculative}
