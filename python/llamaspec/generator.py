"""The Python API: a Generator owns a target (and optionally a draft) and runs speculative decoding."""

from __future__ import annotations

import warnings
from typing import Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from . import _core
from .batch import Batch
from .chat import chat_prompt
from .model import (Model, ModelLike, check_max_tokens, load_model, prompt_tokens, sampling_args, tokenize,
                    warn_if_ngram_cannot_draft)
from .results import ChatResult, GenerationResult, StreamChunk
from .stats import SpecStats
from .stops import StopMatcher, TextStream

__all__ = ["ChatResult", "GenerationResult", "Generator", "Model", "ModelLike", "StreamChunk", "load_model", "tokenize"]


class Generator:
    """Speculative decoding with llama.cpp, reporting positional acceptance for every round.

    Args:
        target: GGUF path or :class:`llamaspec.Model` of the target model.
        draft: GGUF path or model of the drafter: a DSpark/DFlash head or a small draft model
            with the target's vocabulary. ``None`` for n-gram self-speculation or plain decoding.
        n_max: draft depth k (tokens proposed per round), 1..block size of a DSpark/DFlash head.
        spec_type: ``"auto"`` (from the draft's GGUF: DSpark/DFlash head, EAGLE3 head or a draft model;
            without a draft: ``"draft-mtp"`` when the target carries MTP layers and is a qwen35/qwen35moe,
            else plain decoding), ``"none"``, ``"draft-simple"``, ``"draft-eagle3"``, ``"draft-mtp"``,
            ``"draft-dflash"``, ``"draft-dspark"``, ``"ngram"`` (= ``"ngram-simple"``), ``"ngram-map-k"``,
            ``"ngram-map-k4v"``, ``"ngram-mod"``, ``"ngram-cache"``, or a comma-separated chain of n-gram
            drafters and at most one model drafter (``"ngram-mod,draft-dspark"``): llama.cpp asks the
            n-gram drafters first and the model drafter when they find nothing.
        n_ctx: context size in tokens (prompt + generated).
        rollback: how rejected draft tokens leave a recurrent / hybrid target's state (Qwen3.5/3.6
            Gated DeltaNet layers): ``"auto"`` uses per-token snapshots of the verification batch where
            the architecture has them, else state checkpoints; ``"checkpoint"`` forces checkpoints
            (save the sequence state before each verification, restore it and decode the accepted
            tokens again). Attention-only models simply drop the rejected positions. See
            :attr:`memory_info`.
        n_threads: CPU threads (``None``: llama.cpp's default).
        ngram_size_n: key length of the n-gram drafters.
        schedule: ``"fixed"`` drafts n_max tokens every round; ``"confidence"`` chooses the depth
            per round (0..n_max, 0 = no drafting) to maximise expected tokens per second, from
            target/draft costs measured when the Generator is made and the drafter's confidence
            (DSpark confidence head, else the draft's top-token probability) calibrated online
            against observed acceptance. Output is unchanged; see ``stats.chosen_depth``.
        verbose: show llama.cpp's informational logs.
        rpc: ``"host:port"`` of RPC servers that hold the target's layers (see :func:`llamaspec.load_model`);
            the draft stays on this machine.

    Greedy decoding is lossless: the output equals the target decoding alone, token for token.
    A Generator serves one thread at a time (a concurrent call raises RuntimeError); use one per thread.
    """

    def __init__(self, target: ModelLike, draft: Optional[ModelLike] = None, n_max: int = 8,
                 spec_type: str = "auto", n_ctx: int = 4096, n_threads: Optional[int] = None,
                 ngram_size_n: int = 3, schedule: str = "fixed", verbose: bool = False,
                 rollback: str = "auto", reuse_prefix: bool = True, rpc: Optional[Sequence[str]] = None) -> None:
        for name, value in (("n_max", n_max), ("n_ctx", n_ctx), ("ngram_size_n", ngram_size_n)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if n_max < 1:
            raise ValueError(f"n_max must be >= 1, got {n_max}")
        if n_threads is not None and (not isinstance(n_threads, int) or n_threads < 1):
            raise ValueError(f"n_threads must be a positive int or None, got {n_threads!r}")
        if not isinstance(spec_type, str):
            raise TypeError("spec_type must be a string")
        if schedule not in ("fixed", "confidence"):
            raise ValueError(f"schedule must be 'fixed' or 'confidence', got {schedule!r}")
        if rollback not in ("auto", "checkpoint"):
            raise ValueError(f"rollback must be 'auto' or 'checkpoint', got {rollback!r}")
        _core.set_verbose(verbose)
        self.target = load_model(target, rpc=rpc)
        self.draft = None if draft is None else load_model(draft)
        if 0 < self.target.n_ctx_train < n_ctx:
            warnings.warn(f"n_ctx {n_ctx} exceeds the {self.target.n_ctx_train} tokens '{self.target.path}' was "
                          "trained on: output past that length may degrade", stacklevel=2)
        self._engine = _core.Engine(self.target, self.draft, spec_type, n_max, n_ctx, n_threads or 0, ngram_size_n,
                                    schedule, rollback, bool(reuse_prefix))
        warn_if_ngram_cannot_draft(self._engine.spec_type, self._engine.n_max, ngram_size_n)
        # what generate_batch() builds its Batch from (one kept, rebuilt when n_seq changes)
        self._batch_config = dict(spec_type=spec_type, n_max=n_max, n_ctx=n_ctx, n_threads=n_threads,
                                  ngram_size_n=ngram_size_n, rollback=rollback, reuse_prefix=bool(reuse_prefix),
                                  schedule=schedule)
        self._batch = None
        self._stop_reason_override: Optional[str] = None  # "stop" when a stop string/token ended it
        self._generation = 0  # bumped by every generate()/stream(): older stream iterators go stale

    # --- properties --------------------------------------------------------------------------
    @property
    def spec_type(self) -> str:
        """The drafter in use, after resolving ``"auto"``."""
        return self._engine.spec_type

    @property
    def n_max(self) -> int:
        return self._engine.n_max

    @property
    def n_ctx(self) -> int:
        return self._engine.n_ctx

    @property
    def schedule(self) -> str:
        """``"fixed"`` or ``"confidence"``."""
        return self._engine.schedule

    @property
    def scheduler_state(self) -> dict:
        """The confidence scheduler's view (empty dict for the fixed schedule).

        ``verify_seconds[n]``: running cost of a target pass over n tokens (index 0 unused);
        ``draft_step_seconds``: one draft-model step (draft-simple); ``block_draft_seconds[n]``: a
        block drafter's (DFlash/DSpark head, n-gram) cost of a block of n positions, 0 where no block
        of that length ran yet; ``bin_accepted``/``bin_seen``:
        decayed acceptance counts per confidence decile; ``position_accepted``/``position_seen``: per
        draft position; ``confidence_level``: this text's accepted tokens over what the bins predicted
        (recent, decayed; the bins' predictions are scaled by it); ``expected_gain``: running average of
        what drafted rounds were worth, in tokens over plain decoding in their time; ``drafting_on``:
        whether that is positive (else rounds are plain, with a probe now and then).
        """
        state = self._engine.scheduler_state()
        return {k: np.asarray(v) if isinstance(v, list) else v for k, v in state.items()}

    @property
    def memory_info(self) -> dict:
        """How the target's and the draft's contexts take rejected tokens back.

        ``{"target": {...}, "draft": {...} or None}``, each with ``rollback`` (``"remove"``: attention
        KV cache; ``"snapshots"``: recurrent state stepped back within the verification batch;
        ``"checkpoint"``: recurrent state restored from a saved checkpoint), ``checkpoints_saved``,
        ``replay_tokens`` and ``replay_seconds`` (tokens decoded again after restores, and their time).
        """
        return self._engine.memory_info()

    def cancel(self) -> None:
        """Stop the running generate()/stream() after its current round; callable from any thread.

        The call returns with ``stop_reason == "cancelled"`` and the tokens made so far; the Generator
        stays usable. (Ctrl-C raises KeyboardInterrupt from the running call within one round.)
        """
        self._engine.cancel()

    # --- text <-> tokens -----------------------------------------------------------------------
    def tokenize(self, text: Union[str, bytes], add_special: bool = True) -> list:
        """Token ids of ``text`` (str, or raw bytes passed to the tokenizer as they are)."""
        return tokenize(self.target, text, add_special)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.target.detokenize(list(tokens)).decode("utf-8", errors="replace")

    def _stats(self) -> SpecStats:
        return SpecStats.from_log(self._engine.round_log(), self.n_max, self.spec_type,
                                  self._engine.prefill_seconds, self._engine.prefill_tokens)

    # --- generation ----------------------------------------------------------------------------
    def _start(self, prompt: Union[str, bytes, Sequence[int]], max_tokens: int, add_special: bool,
               sampling: dict, ignore_eos: bool) -> None:
        check_max_tokens(max_tokens)
        args = sampling_args(**sampling)
        self._generation += 1
        self._stop_reason_override = None
        self._engine.start(prompt_tokens(self.target, prompt, add_special), *args, min(max_tokens, 2**31 - 1),
                           ignore_eos)

    def generate(self, prompt: Union[str, bytes, Sequence[int]], max_tokens: int = 128, *,
                 temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                 seed: int = 0, ignore_eos: bool = False, add_special: bool = True,
                 stop: Union[str, Sequence[str], None] = None,
                 stop_tokens: Optional[Sequence[int]] = None) -> GenerationResult:
        """Generate up to ``max_tokens`` tokens after ``prompt`` (text or token ids).

        ``temperature <= 0`` (the default) is greedy decoding: the output equals the target's own
        greedy decoding. With ``temperature > 0`` the target's distribution is truncated as llama.cpp's
        chain top_k -> top_p -> min_p -> temperature does (same defaults; 0 / 1.0 / 0.0 switch a
        stage off), and drafts are accepted with probability min(1, p/q) with residual resampling,
        so the output follows the target's sampling distribution exactly; ``seed`` makes it repeatable.
        Stops at an end-of-generation token (kept as the last token, not in ``text``) unless
        ``ignore_eos`` (which, as llama.cpp's --ignore-eos, forbids those tokens), or when the
        context is full. ``stop``: strings that end the generation (the match and what follows are
        not returned; a match may span tokens); ``stop_tokens``: token ids that end it as an
        end-of-generation token does. Either gives ``stop_reason == "stop"``.
        """
        matcher = StopMatcher(stop, stop_tokens, self._piece)
        self._start(prompt, max_tokens, add_special, dict(temperature=temperature, top_k=top_k, top_p=top_p,
                                                          min_p=min_p, seed=seed), ignore_eos)
        if matcher.active:
            for _ in self._rounds(max_tokens, ignore_eos, self._generation, matcher):
                pass
            return GenerationResult(text=matcher.text, tokens=matcher.tokens_out, stop_reason=self.last_stop_reason,
                                    stats=self._stats())
        cancelled_in_prefill = self._engine.stop_reason == "cancelled"
        tokens = [] if cancelled_in_prefill else self._engine.run(max_tokens, 0, ignore_eos)
        return GenerationResult(text=self.detokenize(tokens), tokens=tokens,
                                stop_reason=self._engine.stop_reason, stats=self._stats())

    def stream(self, prompt: Union[str, bytes, Sequence[int]], max_tokens: int = 128, *,
               temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
               seed: int = 0, ignore_eos: bool = False, add_special: bool = True,
               stop: Union[str, Sequence[str], None] = None,
               stop_tokens: Optional[Sequence[int]] = None) -> Iterator[StreamChunk]:
        """Like :meth:`generate`, yielding one :class:`StreamChunk` per speculative round.

        The prompt is read when this is called; the rounds run as the iterator is consumed. With stop
        strings, text that could begin one is held back until it cannot (so a stop string is never
        shown). After the iterator is exhausted, :attr:`last_stats` holds the generation's statistics.
        """
        matcher = StopMatcher(stop, stop_tokens, self._piece)
        self._start(prompt, max_tokens, add_special, dict(temperature=temperature, top_k=top_k, top_p=top_p,
                                                          min_p=min_p, seed=seed), ignore_eos)
        return self._rounds(max_tokens, ignore_eos, self._generation, matcher)

    def _piece(self, token: int) -> str:
        return self.target.detokenize([token]).decode("utf-8", errors="replace")

    def _rounds(self, max_tokens: int, ignore_eos: bool, generation: int,
                matcher: StopMatcher) -> Iterator[StreamChunk]:
        """The round loop of stream() (and of generate() with stops): one chunk per round."""
        stream = TextStream(self.target.detokenize, matcher)
        n_rounds = 0
        while True:
            if generation != self._generation:
                raise RuntimeError("this stream was superseded: a later generate(), stream() or chat() call on the "
                                   "same Generator started another generation")
            if self._engine.stop_reason:  # cancelled while its prompt was read
                break
            tokens = self._engine.run(max_tokens, 1, ignore_eos)
            log = self._engine.round_log()
            if len(log["drafted"]) > n_rounds:
                n_rounds = len(log["drafted"])
                text, tokens = stream.feed(tokens)
                if matcher.stopped:
                    self._stop_reason_override = "stop"
                yield StreamChunk(text=text, tokens=tokens, drafted=log["drafted"][-1], accepted=log["accepted"][-1])
            if self._engine.stop_reason or matcher.stopped:
                break
        tail, tail_tokens = stream.finish()
        if tail or tail_tokens:
            yield StreamChunk(text=tail, tokens=tail_tokens, drafted=0, accepted=0)

    # --- batches -------------------------------------------------------------------------------
    def generate_batch(self, prompts: Sequence[Union[str, bytes, Sequence[int]]],
                       max_tokens: Union[int, Sequence[int]] = 128, *, n_seq: Optional[int] = None,
                       seed: Union[int, Sequence[int]] = 0, **kwargs) -> list:
        """Generate for several prompts at once: each round verifies every sequence's draft in one target decode.

        Returns one :class:`GenerationResult` per prompt, in order, each with its own statistics; greedy
        output equals :meth:`generate` of each prompt alone, token for token. ``n_seq`` sequences run
        together (default: all prompts, at most 16); the rest wait for a free one. ``max_tokens`` and
        ``seed`` may be one value or one per prompt; other keywords as :meth:`generate`. Uses this
        Generator's drafter and settings (its schedule too); see :class:`llamaspec.Batch` for submitting
        requests while others run.
        """
        prompts = list(prompts)
        if not prompts:
            return []
        if n_seq is None:
            n_seq = min(len(prompts), 16)
        if not isinstance(n_seq, int) or isinstance(n_seq, bool) or n_seq < 1:
            raise ValueError(f"n_seq must be a positive int, got {n_seq!r}")
        if self._batch is None or self._batch.closed or self._batch.n_seq != n_seq:
            if self._batch is not None:
                self._batch.close()
            self._batch = None  # free the old context before the new one is allocated
            self._batch = Batch(self.target, self.draft, n_seq=n_seq, **self._batch_config)
        return self._batch.generate(prompts, max_tokens, seed=seed, **kwargs)

    # --- chat ----------------------------------------------------------------------------------
    def chat_prompt(self, messages: Sequence[Mapping[str, str]], *, template: Optional[str] = None,
                    add_generation_prompt: bool = True) -> tuple:
        """(prompt token ids, extra stop strings) of ``messages`` rendered with the model's chat template
        (the GGUF's ``tokenizer.chat_template``, or ``template``), with jinja as llama-server does;
        llama.cpp falls back to ChatML when the GGUF has no template."""
        return chat_prompt(self.target, messages, template=template, add_generation_prompt=add_generation_prompt)

    def chat(self, messages: Sequence[Mapping[str, str]], max_tokens: int = 256, *,
             template: Optional[str] = None, stop: Union[str, Sequence[str], None] = None,
             **sampling) -> "ChatResult":
        """Answer a conversation: ``messages`` = [{"role": "user", "content": "..."}, ...].

        Returns a :class:`ChatResult` whose ``message`` is the assistant's reply. Append it and the
        next user message and call again: the cached prefix is reused (``stats.prefill_tokens``).
        Sampling keywords as in :meth:`generate`.
        """
        tokens, extra = self.chat_prompt(messages, template=template)
        stops = ([stop] if isinstance(stop, str) else list(stop or [])) + extra
        result = self.generate(tokens, max_tokens, stop=stops or None, **sampling)
        return ChatResult(message={"role": "assistant", "content": result.text}, text=result.text,
                          tokens=result.tokens, stop_reason=result.stop_reason, stats=result.stats)

    def chat_stream(self, messages: Sequence[Mapping[str, str]], max_tokens: int = 256, *,
                    template: Optional[str] = None, stop: Union[str, Sequence[str], None] = None,
                    **sampling) -> Iterator[StreamChunk]:
        """:meth:`chat`, one :class:`StreamChunk` per round."""
        tokens, extra = self.chat_prompt(messages, template=template)
        stops = ([stop] if isinstance(stop, str) else list(stop or [])) + extra
        return self.stream(tokens, max_tokens, stop=stops or None, **sampling)

    @property
    def last_stats(self) -> SpecStats:
        """Statistics of the latest generation (also while streaming)."""
        return self._stats()

    @property
    def last_stop_reason(self) -> str:
        return self._stop_reason_override or self._engine.stop_reason

    # --- lifetime ------------------------------------------------------------------------------
    def close(self) -> None:
        """Free the contexts now (the models are freed when no Generator uses them)."""
        if self._batch is not None:
            self._batch.close()
        if not self._engine.closed:
            self._engine.close()

    @property
    def closed(self) -> bool:
        return self._engine.closed

    def __enter__(self) -> "Generator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else (f"spec_type={self.spec_type!r}, n_max={self.n_max}, "
                                              f"schedule={self.schedule!r}, n_ctx={self.n_ctx}")
        return f"Generator(target={self.target.path!r}, {state})"
