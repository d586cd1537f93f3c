"""Deprecated alias of :mod:`llamaspec.testing` (the tiny test-model writer moved there)."""

import warnings

from .testing import *  # noqa: F401,F403
from .testing import __all__, _read_tensor, main  # noqa: F401

warnings.warn("llamaspec.tiny_models is now llamaspec.testing", DeprecationWarning, stacklevel=2)
