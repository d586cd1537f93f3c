"""One engine thread drives the Batch's rounds; the event loop submits work and reads results through queues.

The HTTP side never touches the Batch: it posts a :class:`Job` (already tokenized and checked) and gets
events back on the job's asyncio queue: ``("chunk", StreamChunk)`` per round, then ``("done", Request)`` or
``("error", message)``. Cancels are posted too and take effect between two rounds, so a slow or vanished
client never stalls a round and never waits on the batch's lock.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ..batch import Batch, Request
from ..results import StreamChunk
from .metrics import ServerMetrics


def cached_prompt_tokens(n_prompt: int, stats) -> int:
    """Prompt tokens a request's sequence already held in its cache (prefix reuse): the prompt less the tokens
    its prefill decoded."""
    return max(0, n_prompt - stats.prefill_tokens)


@dataclass
class Job:
    """A generation the HTTP side hands to the engine thread."""

    tokens: List[int]
    max_tokens: int
    sampling: dict  # temperature, top_k, top_p, min_p, seed
    stop: List[str]
    ignore_eos: bool
    events: "asyncio.Queue[tuple]"
    loop: asyncio.AbstractEventLoop
    id: int = field(default_factory=itertools.count().__next__)
    submitted_at: float = field(default_factory=time.perf_counter)
    first_token_at: Optional[float] = None


class EngineThread:
    """Owns the :class:`Batch` and runs its rounds on a thread of its own.

    ``max_waiting`` bounds the requests waiting for a free sequence (the HTTP side answers 429 beyond it).
    """

    def __init__(self, batch: Batch, metrics: ServerMetrics, max_waiting: int) -> None:
        self.batch = batch
        self.metrics = metrics
        self.max_waiting = max_waiting
        self._control: "queue.SimpleQueue[tuple]" = queue.SimpleQueue()
        self._active: Dict[int, tuple] = {}  # job id -> (job, request); touched by the engine thread only
        self._in_flight = 0  # jobs accepted and not finished; changed under _count_lock
        self._count_lock = threading.Lock()
        self._stopping = threading.Event()
        self._deadline: Optional[float] = None  # set by begin_shutdown: end every job by then
        self._thread = threading.Thread(target=self._run, name="llamaspec-engine", daemon=True)

    # --- called from the event loop ------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def try_submit(self, job: Job) -> bool:
        """Queue ``job``; False when the engine is stopping or the waiting line is full."""
        with self._count_lock:
            if self._stopping.is_set() or self._in_flight - self.batch.n_seq >= self.max_waiting:
                return False
            self._in_flight += 1
        self._control.put(("submit", job))
        return True

    def cancel(self, job: Job) -> None:
        """Stop ``job`` at the next round boundary (its sequence and cache are freed there)."""
        self._control.put(("cancel", job.id))

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def begin_shutdown(self, grace_seconds: float) -> None:
        """Refuse new jobs; the running and waiting ones may finish within ``grace_seconds``, then they are
        ended (their stop reason "cancelled"), so that every response completes before the server closes."""
        with self._count_lock:
            self._stopping.set()
        self._control.put(("deadline", time.monotonic() + grace_seconds))

    def stop(self, timeout: float) -> None:
        """Refuse new jobs, let running ones finish for up to ``timeout`` seconds, cancel the rest, stop."""
        with self._count_lock:
            self._stopping.set()
        deadline = time.monotonic() + timeout
        while self._in_flight and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.02)
        self._control.put(("stop", None))
        self._thread.join(timeout=max(1.0, timeout))

    # --- the engine thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                idle = not self._active
                try:  # block only when there is no round to run
                    command, arg = self._control.get(timeout=0.5) if idle else self._control.get_nowait()
                except queue.Empty:
                    command = None
                if command == "stop":
                    break
                if self._deadline is not None and time.monotonic() >= self._deadline:
                    self._end_all()
                if command is not None:
                    self._handle(command, arg)
                    continue  # take every queued command before the next round
                if self._active:
                    self._round()
        finally:
            self._end_all()
            self.batch.close()

    def _handle(self, command: str, arg) -> None:
        if command == "submit":
            job: Job = arg
            try:
                request = self.batch.submit(job.tokens, job.max_tokens, stop=job.stop or None, add_special=False,
                                            ignore_eos=job.ignore_eos,
                                            on_chunk=lambda _request, chunk, job=job: self._on_chunk(job, chunk),
                                            **job.sampling)
            except (ValueError, TypeError, RuntimeError) as exc:
                self._post(job, ("error", str(exc)))
                self._release()
                return
            self._active[job.id] = (job, request)
        elif command == "cancel":
            entry = self._active.get(arg)
            if entry is not None:
                entry[1].cancel()
                self.metrics.cancelled.inc()
                self._finish(*entry)
        elif command == "deadline":
            self._deadline = arg

    def _end_all(self) -> None:
        for job, request in list(self._active.values()):
            request.cancel()
            self._finish(job, request)

    def _round(self) -> None:
        start = time.perf_counter()
        self.batch.step()
        self.metrics.round_seconds.observe(time.perf_counter() - start)
        for job, request in list(self._active.values()):
            if request.done:
                self._finish(job, request)
        self._update_gauges()

    def _on_chunk(self, job: Job, chunk: StreamChunk) -> None:
        if job.first_token_at is None and chunk.tokens:
            job.first_token_at = time.perf_counter()
            self.metrics.time_to_first_token.observe(job.first_token_at - job.submitted_at)
        self.metrics.observe_round(chunk.drafted, chunk.accepted)
        self._post(job, ("chunk", chunk))

    def _finish(self, job: Job, request: Request) -> None:
        if self._active.pop(job.id, None) is None:
            return
        self.metrics.prompt_tokens.inc(len(job.tokens))
        self.metrics.cached_prompt_tokens.inc(cached_prompt_tokens(len(job.tokens), request.stats))
        self.metrics.generation_tokens.inc(len(request.tokens))
        self.metrics.rounds.inc(request.stats.rounds)
        self._post(job, ("done", request))
        self._release()
        self._update_gauges()

    def _release(self) -> None:
        with self._count_lock:
            self._in_flight -= 1

    def _update_gauges(self) -> None:
        running = min(len(self._active), self.batch.n_seq)
        self.metrics.running.set(running)
        self.metrics.waiting.set(max(0, self._in_flight - running))

    @staticmethod
    def _post(job: Job, event: tuple) -> None:
        try:
            job.loop.call_soon_threadsafe(job.events.put_nowait, event)
        except RuntimeError:  # the event loop has closed (shutdown): nobody is listening
            pass
