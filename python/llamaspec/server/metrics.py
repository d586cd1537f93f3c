"""The server's Prometheus metrics, in a registry of its own (two servers in one process do not collide).

Per draft position, as vLLM's ``spec_decode_num_accepted_tokens_per_pos``: a round that drafted d tokens
and had a accepted counts one draft at positions 1..d and one acceptance at positions 1..a, so
accepted{position=i} / drafted{position=i} is P_i over everything served.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_ROUND_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ServerMetrics:
    def __init__(self, n_max: int) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("llamaspec_requests", "HTTP requests by endpoint and status code",
                                ["endpoint", "status"], registry=r)
        self.cancelled = Counter("llamaspec_requests_cancelled", "Generations cancelled (client gone)", registry=r)
        self.prompt_tokens = Counter("llamaspec_prompt_tokens", "Prompt tokens of finished generations", registry=r)
        self.cached_prompt_tokens = Counter("llamaspec_prompt_tokens_cached",
                                            "Prompt tokens found in a sequence's cache (prefix reuse), not decoded",
                                            registry=r)
        self.generation_tokens = Counter("llamaspec_generation_tokens", "Tokens generated", registry=r)
        self.waiting = Gauge("llamaspec_waiting_requests", "Requests waiting for a free sequence", registry=r)
        self.running = Gauge("llamaspec_running_sequences", "Sequences decoding", registry=r)
        self.round_seconds = Histogram("llamaspec_round_seconds", "Seconds per engine round (draft + verify, "
                                       "all sequences)", buckets=_ROUND_BUCKETS, registry=r)
        self.time_to_first_token = Histogram("llamaspec_time_to_first_token_seconds", "From accepting a request "
                                             "to its first generated token", buckets=_LATENCY_BUCKETS, registry=r)
        self.rounds = Counter("llamaspec_spec_rounds", "Per-sequence rounds (target passes)", registry=r)
        self.drafted = Counter("llamaspec_spec_draft_tokens", "Draft tokens verified, per draft position",
                               ["position"], registry=r)
        self.accepted = Counter("llamaspec_spec_accepted_tokens", "Draft tokens accepted, per draft position",
                                ["position"], registry=r)
        # one child per position, on the page from the start at 0 and looked up once (not per round)
        positions = [str(i + 1) for i in range(max(1, n_max))]
        self._drafted_at = [self.drafted.labels(position=p) for p in positions]
        self._accepted_at = [self.accepted.labels(position=p) for p in positions]

    def observe_round(self, drafted: int, accepted: int) -> None:
        """One sequence's round: ``drafted`` tokens verified, the first ``accepted`` of them accepted."""
        for counter in self._drafted_at[:drafted]:
            counter.inc()
        for counter in self._accepted_at[:accepted]:
            counter.inc()
