"""Statistics of a speculative generation: per-round arrays and positional acceptance P1..Pk."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import numpy as np


def _none_if_nan(value: float) -> Optional[float]:
    return None if np.isnan(value) else float(value)


@dataclass(frozen=True, repr=False)
class SpecStats:
    """Per-round record of one generation.

    Round r drafted ``drafted[r]`` tokens, the target accepted the first ``accepted[r]`` of
    them, and ``emitted[r]`` tokens were appended to the output (``accepted[r] + 1``: the
    accepted drafts plus the target's own bonus token; fewer only at an end-of-generation token).
    Position i (1-based) of round r was *drafted* when ``drafted[r] >= i`` and *accepted* when
    ``accepted[r] >= i``; acceptance is a prefix, so ``P[i] = accepted at i / drafted at i``.

    ``proposed[r]`` is how many tokens the drafter produced; ``drafted[r]`` (also
    ``chosen_depth``) how many of them were verified: equal under the fixed schedule, fewer (0 when
    the round skipped drafting) where the confidence scheduler cut the draft. ``confidence`` holds
    the drafter's confidence of every proposed token (rounds concatenated; NaN for n-gram drafts):
    the DSpark confidence head where the draft has one, else the draft's top-token probability.
    """

    n_max: int
    spec_type: str
    drafted: np.ndarray
    accepted: np.ndarray
    emitted: np.ndarray
    draft_seconds: np.ndarray
    verify_seconds: np.ndarray
    prefill_seconds: float = 0.0
    prefill_tokens: int = 0  # prompt tokens decoded (fewer than the prompt when a cached prefix was reused)
    proposed: Optional[np.ndarray] = None
    confidence: Optional[np.ndarray] = None
    _positions: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_positions", np.arange(1, max(self.n_max, 1) + 1))
        if self.proposed is None:
            object.__setattr__(self, "proposed", self.drafted.copy())
        if self.confidence is None:
            object.__setattr__(self, "confidence", np.full(int(self.proposed.sum()), np.nan, dtype=np.float32))

    @classmethod
    def from_log(cls, log: Mapping[str, Sequence[float]], n_max: int, spec_type: str,
                 prefill_seconds: float = 0.0, prefill_tokens: int = 0) -> "SpecStats":
        return cls(
            n_max=n_max,
            spec_type=spec_type,
            drafted=np.asarray(log["drafted"], dtype=np.int32),
            accepted=np.asarray(log["accepted"], dtype=np.int32),
            emitted=np.asarray(log["emitted"], dtype=np.int32),
            draft_seconds=np.asarray(log["draft_seconds"], dtype=np.float64),
            verify_seconds=np.asarray(log["verify_seconds"], dtype=np.float64),
            prefill_seconds=prefill_seconds,
            prefill_tokens=prefill_tokens,
            proposed=np.asarray(log["proposed"], dtype=np.int32) if "proposed" in log else None,
            confidence=np.asarray(log["confidence"], dtype=np.float32) if "confidence" in log else None,
        )

    # --- counts ---------------------------------------------------------------------------
    @property
    def rounds(self) -> int:
        """Number of target verification passes."""
        return int(self.drafted.size)

    @property
    def n_generated(self) -> int:
        return int(self.emitted.sum())

    @property
    def n_drafted(self) -> int:
        return int(self.drafted.sum())

    @property
    def n_accepted(self) -> int:
        return int(self.accepted.sum())

    @property
    def chosen_depth(self) -> np.ndarray:
        """Draft tokens verified per round: the depth the schedule chose (0: drafting skipped)."""
        return self.drafted

    @property
    def round_confidence(self) -> list:
        """The drafter's confidences, one array per round (its proposed tokens, in order)."""
        return np.split(self.confidence, np.cumsum(self.proposed)[:-1]) if self.rounds else []

    @property
    def drafted_at(self) -> np.ndarray:
        """How many rounds drafted position i, for i = 1..n_max."""
        return (self.drafted[:, None] >= self._positions[None, :]).sum(axis=0)

    @property
    def accepted_at(self) -> np.ndarray:
        """How many rounds had position i accepted, for i = 1..n_max."""
        return (self.accepted[:, None] >= self._positions[None, :]).sum(axis=0)

    # --- rates ----------------------------------------------------------------------------
    @property
    def positional_acceptance(self) -> np.ndarray:
        """P[i-1] = accepted at position i / drafted at position i (NaN where never drafted)."""
        drafted = self.drafted_at
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(drafted > 0, self.accepted_at / np.maximum(drafted, 1), np.nan)

    P = positional_acceptance

    @property
    def conditional_acceptance(self) -> np.ndarray:
        """a[i-1] = P(position i accepted | positions 1..i-1 accepted), over rounds that drafted position i
        (sglang's per-position definition; a[0] = P[0]). NaN where no round reached position i."""
        reached = ((self.drafted[:, None] >= self._positions[None, :]) &
                   (self.accepted[:, None] >= self._positions[None, :] - 1)).sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(reached > 0, self.accepted_at / np.maximum(reached, 1), np.nan)

    @property
    def acceptance_per_step(self) -> np.ndarray:
        """accepted at position i / verification steps that drafted anything (vLLM's and llama-server's
        per-position rate: the share of all drafts whose i-th token was accepted). NaN without drafts."""
        steps = int((self.drafted > 0).sum())
        return self.accepted_at / steps if steps else np.full(self._positions.size, np.nan)

    # --- aggregation ------------------------------------------------------------------------
    def __add__(self, other: "SpecStats") -> "SpecStats":
        """The statistics of both generations as one: rounds concatenated, so every rate is the rate of
        the union (totals divided, never an average of ratios)."""
        if not isinstance(other, SpecStats):
            return NotImplemented
        cat = np.concatenate
        return SpecStats(
            n_max=max(self.n_max, other.n_max),
            spec_type=self.spec_type if self.spec_type == other.spec_type else f"{self.spec_type}+{other.spec_type}",
            drafted=cat([self.drafted, other.drafted]), accepted=cat([self.accepted, other.accepted]),
            emitted=cat([self.emitted, other.emitted]),
            draft_seconds=cat([self.draft_seconds, other.draft_seconds]),
            verify_seconds=cat([self.verify_seconds, other.verify_seconds]),
            prefill_seconds=self.prefill_seconds + other.prefill_seconds,
            prefill_tokens=self.prefill_tokens + other.prefill_tokens,
            proposed=cat([self.proposed, other.proposed]), confidence=cat([self.confidence, other.confidence]))

    def __radd__(self, other) -> "SpecStats":
        if other == 0:  # sum(stats_list)
            return self
        return NotImplemented

    @classmethod
    def combine(cls, stats: Sequence["SpecStats"]) -> "SpecStats":
        """One SpecStats for several generations (see ``__add__``)."""
        stats = list(stats)
        if not stats:
            raise ValueError("nothing to combine")
        return sum(stats[1:], stats[0])

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens / drafted tokens (NaN when nothing was drafted)."""
        return self.n_accepted / self.n_drafted if self.n_drafted else float("nan")

    @property
    def mean_accepted(self) -> float:
        """Mean accepted draft tokens per round."""
        return float(self.accepted.mean()) if self.rounds else float("nan")

    @property
    def mean_accepted_length(self) -> float:
        """Mean tokens produced per target pass (accepted drafts + bonus), often called tau."""
        return float(self.emitted.mean()) if self.rounds else float("nan")

    @property
    def decode_seconds(self) -> float:
        return float(self.draft_seconds.sum() + self.verify_seconds.sum())

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens / decoding time (drafting + verification, prompt excluded)."""
        seconds = self.decode_seconds
        return self.n_generated / seconds if seconds > 0 else float("nan")

    def summary(self) -> dict:
        """JSON-ready digest: a rate with nothing to count (NaN) is None, so strict JSON parsers read it."""
        return {
            "spec_type": self.spec_type,
            "n_max": self.n_max,
            "rounds": self.rounds,
            "generated": self.n_generated,
            "drafted": self.n_drafted,
            "accepted": self.n_accepted,
            "proposed": int(self.proposed.sum()),
            "rounds_without_draft": int((self.drafted == 0).sum()),
            "acceptance_rate": _none_if_nan(self.acceptance_rate),
            "mean_accepted_length": _none_if_nan(self.mean_accepted_length),
            "tokens_per_second": _none_if_nan(self.tokens_per_second),
            "P": [_none_if_nan(p) for p in self.positional_acceptance],
            "conditional_acceptance": [_none_if_nan(a) for a in self.conditional_acceptance],
        }

    def __repr__(self) -> str:
        P = " ".join("-" if np.isnan(p) else f"{p:.2f}" for p in self.positional_acceptance)
        return (f"SpecStats({self.spec_type}, n_max={self.n_max}, rounds={self.rounds}, "
                f"generated={self.n_generated}, drafted={self.n_drafted}, accepted={self.n_accepted}, "
                f"tau={self.mean_accepted_length:.2f}, {self.tokens_per_second:.1f} tok/s, P=[{P}])")

    def table(self) -> str:
        """P1..Pk as a small text table."""
        lines = ["pos   drafted  accepted      P"]
        for i, (d, a, p) in enumerate(zip(self.drafted_at, self.accepted_at, self.positional_acceptance), 1):
            shown = "   -  " if np.isnan(p) else f"{p:6.3f}"
            lines.append(f"P{i:<3d} {d:8d} {a:9d} {shown}")
        rate = "nothing drafted" if self.n_drafted == 0 else f"{self.acceptance_rate:.1%}"
        lines.append(
            f"rounds {self.rounds}, generated {self.n_generated}, drafted {self.n_drafted}, "
            f"accepted {self.n_accepted} ({rate}), "
            f"tokens/round {self.mean_accepted_length:.2f}, {self.tokens_per_second:.1f} tok/s"
        )
        return "\n".join(lines)
