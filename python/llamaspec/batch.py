"""Batched speculative decoding: many requests share one target context, one target decode per round.

    >>> batch = llamaspec.Batch("target.gguf", "draft.gguf", n_seq=8)
    >>> a = batch.submit("def fib(n):", max_tokens=64)
    >>> b = batch.submit("Once upon a time", max_tokens=64, temperature=0.8, seed=1)
    >>> for chunk in a:          # pulling a's tokens runs rounds for a and b together
    ...     print(chunk.text, end="")
    >>> b.result().stats.positional_acceptance

Each round drafts for every running request and verifies all drafts in ONE target decode
(src/batch_engine.h); rejected tails roll back per sequence. Requests may be submitted while others
run (more than ``n_seq`` wait for a free sequence), cancelled alone, streamed, or given a callback.
Whoever needs tokens drives the rounds (``Request.__iter__``, ``Request.result()``, ``Batch.run()``
or ``Batch.step()``), from one thread or several: a lock serialises the rounds.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Callable, Deque, Dict, Iterator, List, Optional, Sequence, Union

from . import _core
from .model import ModelLike, check_max_tokens, load_model, prompt_tokens, sampling_args, warn_if_ngram_cannot_draft
from .results import GenerationResult, StreamChunk
from .stats import SpecStats
from .stops import StopMatcher, TextStream

Prompt = Union[str, bytes, Sequence[int]]


class Request:
    """One generation inside a :class:`Batch` (made by :meth:`Batch.submit`).

    Iterate it for one :class:`StreamChunk` per round, call :meth:`result` to wait for the whole
    :class:`GenerationResult`, or :meth:`cancel` it; ``stats`` holds its own round log.
    """

    def __init__(self, batch: "Batch", tokens: List[int], max_tokens: int, sampling: tuple, ignore_eos: bool,
                 matcher: StopMatcher, on_chunk: Optional[Callable[["Request", StreamChunk], None]]) -> None:
        self.prompt_tokens = tokens
        self.max_tokens = max_tokens
        self._batch = batch
        self._sampling = sampling
        self._ignore_eos = ignore_eos
        self._matcher = matcher
        self._stream = TextStream(batch.target.detokenize, matcher)
        self._on_chunk = on_chunk
        self._id: Optional[int] = None  # the core's request id once it has a sequence
        self._chunks: Deque[StreamChunk] = deque()
        self._raw: Deque[tuple] = deque()  # rounds not yet turned into chunks
        self._streaming = False  # someone iterates: make chunks as rounds come
        self._stream_closed = False
        self._tokens: List[int] = []
        self._stats: Optional[SpecStats] = None
        self._stop_reason = ""

    # --- state ---------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return bool(self._stop_reason)

    @property
    def stop_reason(self) -> str:
        """"" while running; then "max_tokens", "eos", "context", "stop" or "cancelled"."""
        return self._stop_reason

    @property
    def tokens(self) -> List[int]:
        """Tokens generated so far (up to a stop string or token, once matched)."""
        return list(self._matcher.tokens_out if self._matcher.active else self._tokens)

    @property
    def text(self) -> str:
        if self._matcher.active:
            return self._matcher.text
        return self._batch.target.detokenize(self._tokens).decode("utf-8", errors="replace")

    @property
    def stats(self) -> SpecStats:
        """This request's statistics (its own rounds; a round's seconds are the whole batch's)."""
        if self._stats is not None:
            return self._stats
        with self._batch._lock:
            if self._id is None:
                return self._batch._spec_stats({"drafted": [], "accepted": [], "emitted": [], "draft_seconds": [],
                                                "verify_seconds": []})
            return self._batch._spec_stats(self._batch._engine.stats(self._id))

    # --- consuming ---------------------------------------------------------------------------
    def __iter__(self) -> Iterator[StreamChunk]:
        """One chunk per round (plus held-back text at the end); pulling runs the batch's rounds."""
        self._streaming = True
        while True:
            with self._batch._lock:
                self._make_chunks()
                chunk = self._chunks.popleft() if self._chunks else None
            if chunk is not None:
                yield chunk
                continue
            if self.done:
                return
            self._batch._step_for(self, want_chunk=True)

    def result(self) -> GenerationResult:
        """Run the batch until this request is done; its text, tokens, stop reason and statistics."""
        while not self.done:
            self._batch._step_for(self, want_chunk=False)
        return GenerationResult(text=self.text, tokens=self.tokens, stop_reason=self.stop_reason, stats=self.stats)

    def cancel(self) -> None:
        """Stop this request now (its cache is freed); the others go on. Waits for a running round."""
        self._batch._cancel(self)

    def __repr__(self) -> str:
        state = self._stop_reason or ("running" if self._id is not None else "waiting")
        return f"Request({len(self._tokens)} tokens, {state})"

    # --- called by the Batch, under its lock -------------------------------------------------
    # Rounds are kept raw and turned into text chunks only when someone reads them (an iterator, a
    # callback, or stop strings that must be matched now): a batch run for its results alone spends
    # nothing per round on text.
    def _round(self, tokens: List[int], drafted: int, accepted: int) -> None:
        self._tokens.extend(tokens)
        self._raw.append((tokens, drafted, accepted))
        if self._eager:
            self._make_chunks()

    def _finish(self, stop_reason: str, log: Optional[dict]) -> None:
        if self.done:
            return
        self._stop_reason = stop_reason
        self._stats = self._batch._spec_stats(log) if log is not None else self.stats
        if self._eager:
            self._make_chunks()

    def _make_chunks(self) -> None:
        while self._raw:
            tokens, drafted, accepted = self._raw.popleft()
            text, shown = self._stream.feed(tokens)
            self._emit(StreamChunk(text=text, tokens=shown, drafted=drafted, accepted=accepted))
        if self.done and not self._stream_closed:
            self._stream_closed = True
            tail, tail_tokens = self._stream.finish()
            if tail or tail_tokens:
                self._emit(StreamChunk(text=tail, tokens=tail_tokens, drafted=0, accepted=0))

    @property
    def _eager(self) -> bool:
        return self._streaming or self._on_chunk is not None or self._matcher.active

    def _emit(self, chunk: StreamChunk) -> None:
        self._chunks.append(chunk)
        if self._on_chunk is not None:
            self._on_chunk(self, chunk)


class Batch:
    """Continuous batched speculative decoding over ``n_seq`` sequences of ``n_ctx`` tokens each.

    Args as :class:`llamaspec.Generator` (``target``, ``draft``, ``n_max``, ``spec_type``, ``n_ctx``
    per sequence, ``n_threads``, ``ngram_size_n``, ``rollback``, ``rpc``), plus ``n_seq``: sequences decoded
    together. The cache holds ``n_seq * n_ctx`` cells (one stream per sequence); a batch that does
    not fit in memory raises ValueError before anything is allocated. ``schedule``: ``"fixed"`` drafts
    ``n_max`` tokens every round; ``"confidence"`` chooses each sequence's depth every round (0 = no draft)
    as a Generator's confidence schedule does, pricing its tokens at its share of the round's target pass
    (costs measured when the Batch is made, for one sequence and for batched rounds). Greedy output of each
    request equals its solo output token for token.

    ``reuse_prefix``: a finished request's sequence keeps its cache, and a new request goes to the free
    sequence whose cache shares the longest prefix with its prompt, so a chat's next turn decodes only
    what is new (the output is the same as from a cold start; ``request.stats.prefill_tokens`` says how
    many prompt tokens were decoded). A cancelled request's cache is freed.
    """

    def __init__(self, target: ModelLike, draft: Optional[ModelLike] = None, *, n_seq: int = 4, n_max: int = 8,
                 spec_type: str = "auto", n_ctx: int = 4096, n_threads: Optional[int] = None,
                 ngram_size_n: int = 3, rollback: str = "auto", reuse_prefix: bool = True,
                 schedule: str = "fixed", verbose: bool = False, rpc: Optional[Sequence[str]] = None) -> None:
        for name, value in (("n_seq", n_seq), ("n_max", n_max), ("n_ctx", n_ctx), ("ngram_size_n", ngram_size_n)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if n_threads is not None and (not isinstance(n_threads, int) or n_threads < 1):
            raise ValueError(f"n_threads must be a positive int or None, got {n_threads!r}")
        if rollback not in ("auto", "checkpoint"):
            raise ValueError(f"rollback must be 'auto' or 'checkpoint', got {rollback!r}")
        if schedule not in ("fixed", "confidence"):
            raise ValueError(f"schedule must be 'fixed' or 'confidence', got {schedule!r}")
        _core.set_verbose(verbose)
        self.target = load_model(target, rpc=rpc)
        self.draft = None if draft is None else load_model(draft)
        self._engine = _core.BatchEngine(self.target, self.draft, spec_type, n_max, n_ctx, n_threads or 0,
                                         ngram_size_n, rollback, n_seq, bool(reuse_prefix), schedule)
        warn_if_ngram_cannot_draft(self._engine.spec_type, self._engine.n_max, ngram_size_n)
        # fixed for the batch's life: read without the lock while another thread runs a round
        self._fixed = dict(spec_type=self._engine.spec_type, n_max=self._engine.n_max, n_seq=self._engine.n_seq,
                           n_ctx=self._engine.n_ctx, schedule=self._engine.schedule)
        self._lock = threading.RLock()
        self._waiting: Deque[Request] = deque()
        self._running: Dict[int, Request] = {}

    # --- properties ----------------------------------------------------------------------------
    @property
    def spec_type(self) -> str:
        return self._fixed["spec_type"]

    @property
    def schedule(self) -> str:
        """``"fixed"`` or ``"confidence"``."""
        return self._fixed["schedule"]

    @property
    def n_max(self) -> int:
        return self._fixed["n_max"]

    @property
    def n_seq(self) -> int:
        return self._fixed["n_seq"]

    @property
    def n_ctx(self) -> int:
        """Tokens per sequence."""
        return self._fixed["n_ctx"]

    @property
    def pending(self) -> int:
        """Requests running or waiting for a sequence."""
        with self._lock:
            return len(self._running) + len(self._waiting)

    @property
    def memory_info(self) -> dict:
        """As :attr:`Generator.memory_info`, for the batch's shared contexts."""
        with self._lock:
            return self._engine.memory_info()

    def scheduler_state(self, seq: int = 0) -> dict:
        """Sequence ``seq``'s confidence scheduler, as :attr:`Generator.scheduler_state` (an empty dict for the
        fixed schedule), with ``pass_seconds``: (tokens, seconds) of the longer passes batched rounds make."""
        with self._lock:
            return self._engine.scheduler_state(seq)

    # --- requests ------------------------------------------------------------------------------
    def submit(self, prompt: Prompt, max_tokens: int = 128, *, temperature: float = 0.0, top_k: int = 40,
               top_p: float = 0.95, min_p: float = 0.05, seed: int = 0, ignore_eos: bool = False,
               add_special: bool = True, stop: Union[str, Sequence[str], None] = None,
               stop_tokens: Optional[Sequence[int]] = None,
               on_chunk: Optional[Callable[[Request, StreamChunk], None]] = None) -> Request:
        """Queue a generation; it joins the rounds at the next step with a free sequence.

        Arguments as :meth:`Generator.generate` (sampling parameters and seed are this request's own).
        ``on_chunk(request, chunk)`` is called for each round's chunk, from the thread running the round.
        Bad input raises here, not later.
        """
        check_max_tokens(max_tokens)
        tokens = prompt_tokens(self.target, prompt, add_special)
        if len(tokens) >= self.n_ctx:
            raise ValueError(f"the prompt has {len(tokens)} tokens, which does not fit the context of {self.n_ctx} "
                             "tokens per sequence (leave room for at least one generated token)")
        sampling = sampling_args(temperature, top_k, top_p, min_p, seed)
        _core.Sampler(*sampling[:4], sampling[4])  # raises ValueError for out-of-range parameters now
        matcher = StopMatcher(stop, stop_tokens, self._piece)
        request = Request(self, tokens, max_tokens, sampling, bool(ignore_eos), matcher, on_chunk)
        with self._lock:
            if self._engine.closed:
                raise RuntimeError("this Batch is closed")
            self._waiting.append(request)
        return request

    def step(self) -> bool:
        """Admit waiting requests (their prompts are decoded and their first tokens sampled) if a sequence is
        free and the engine has any to take, else run one round for every running request.

        Returns whether any request is still running or waiting.
        """
        with self._lock:
            self._admit()
            if self._running:
                for rid, tokens, drafted, accepted, finished, stop_reason in self._engine.step():
                    request = self._running[rid]
                    request._round(tokens, drafted, accepted)
                    if finished:
                        self._close_request(rid, stop_reason)
                    elif request._matcher.stopped:  # a stop string or token: free its sequence now
                        self._engine.cancel(rid)
                        self._close_request(rid, "stop")
            return bool(self._running or self._waiting)

    def run(self) -> None:
        """Run rounds until every submitted request is done."""
        while self.step():
            pass

    def generate(self, prompts: Sequence[Prompt], max_tokens: Union[int, Sequence[int]] = 128, *,
                 seed: Union[int, Sequence[int]] = 0, **kwargs) -> List[GenerationResult]:
        """Submit every prompt, run until all are done, and return their results in order.

        ``max_tokens`` and ``seed`` may be one value or one per prompt; other keywords as :meth:`submit`.
        """
        prompts = list(prompts)
        max_list = _per_prompt(max_tokens, len(prompts), "max_tokens")
        seed_list = _per_prompt(seed, len(prompts), "seed")
        requests = [self.submit(p, m, seed=s, **kwargs) for p, m, s in zip(prompts, max_list, seed_list)]
        try:
            return [r.result() for r in requests]
        except BaseException:  # Ctrl-C or an error: leave nothing running
            for r in requests:
                r.cancel()
            raise

    # --- internals -----------------------------------------------------------------------------
    def _piece(self, token: int) -> str:
        return self.target.detokenize([token]).decode("utf-8", errors="replace")

    def _spec_stats(self, log: dict) -> SpecStats:
        return SpecStats.from_log(log, self.n_max, self.spec_type, log.get("prefill_seconds", 0.0),
                                  log.get("prefill_tokens", 0))

    def _admit(self) -> None:
        while self._waiting and len(self._running) < self.n_seq:
            request = self._waiting.popleft()
            rid = self._engine.submit(request.prompt_tokens, request.max_tokens, *request._sampling[:4],
                                      request._sampling[4], request._ignore_eos)
            request._id = rid
            self._running[rid] = request

    def _close_request(self, rid: int, stop_reason: str) -> None:
        request = self._running.pop(rid)
        log = self._engine.stats(rid)
        self._engine.release(rid)
        request._finish(stop_reason, log)

    def _step_for(self, request: Request, want_chunk: bool) -> None:
        """A round on behalf of a consumer of `request`, unless another thread's round already gave it
        what it waits for (a chunk, or the end)."""
        with self._lock:
            if not request.done and not (want_chunk and request._chunks):
                self.step()

    def _cancel(self, request: Request) -> None:
        with self._lock:
            if request.done:
                return
            if request._id is None:
                self._waiting.remove(request)
                request._finish("cancelled", None)
            else:
                self._engine.cancel(request._id)
                self._close_request(request._id, "cancelled")

    # --- lifetime ------------------------------------------------------------------------------
    def close(self) -> None:
        """Cancel every request and free the context."""
        with self._lock:
            if self._engine.closed:
                return
            for request in list(self._running.values()) + list(self._waiting):
                request.cancel()
            self._engine.close()

    @property
    def closed(self) -> bool:
        with self._lock:
            return self._engine.closed

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"Batch(target={self.target.path!r}, closed)"
        return (f"Batch(target={self.target.path!r}, spec_type={self.spec_type!r}, n_max={self.n_max}, "
                f"n_seq={self.n_seq}, n_ctx={self.n_ctx}, pending={self.pending})")


def _per_prompt(value, n: int, name: str) -> list:
    if isinstance(value, int) and not isinstance(value, bool):
        return [value] * n
    values = list(value)
    if len(values) != n:
        raise ValueError(f"{name} has {len(values)} values for {n} prompts")
    return values
