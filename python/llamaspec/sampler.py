"""Sampler: llamaspec's fused truncation sampler on numpy logits (the one the engine verifies with)."""

from __future__ import annotations

import numpy as np

from . import _core


class Sampler:
    """top_k -> top_p -> min_p -> temperature, exactly as llama.cpp's sampler chain (same defaults),
    without sorting the vocabulary; ``temperature <= 0`` is greedy. ``seed`` fixes the draws.

        >>> s = llamaspec.Sampler(temperature=0.8, seed=1)
        >>> ids, probs = s.distribution(logits)   # the truncated support and its probabilities
        >>> token = s.sample(logits)
    """

    def __init__(self, temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                 seed: int = 0) -> None:
        if temperature <= 0:
            temperature, top_k, top_p, min_p = 0.0, 0, 1.0, 0.0
        self._s = _core.Sampler(float(temperature), int(top_k), float(top_p), float(min_p), int(seed))

    @staticmethod
    def _row(logits) -> np.ndarray:
        row = np.ascontiguousarray(logits, dtype=np.float32)
        if row.ndim != 1:
            raise ValueError(f"expected one row of logits (1-D), got shape {row.shape}")
        return row

    def distribution(self, logits) -> tuple:
        """(token ids as int32 array, probabilities as float32 array) of the truncated distribution."""
        ids, probs = self._s.distribution(self._row(logits))
        return np.asarray(ids, dtype=np.int32), np.asarray(probs, dtype=np.float32)

    def sample(self, logits) -> int:
        return int(self._s.sample(self._row(logits)))

    def reseed(self, seed: int) -> None:
        self._s.reseed(int(seed))
