"""The vendored gguf-py (the reader/writer of the llama.cpp tree llamaspec was built against)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _vendored_gguf_py() -> Path:
    """The folder holding the gguf-py package of the llama.cpp tree llamaspec was built against.

    The wheel ships it as ``llamaspec/_vendor/gguf``; ``$LLAMASPEC_GGUF_PY`` (a folder containing
    ``gguf/``) overrides it, and an unbuilt source checkout falls back to ``vendor/llama.cpp/gguf-py``.
    """
    env = os.environ.get("LLAMASPEC_GGUF_PY")
    candidates = [Path(env)] if env else []
    candidates += [Path(__file__).resolve().parent / "_vendor",
                   Path(__file__).resolve().parents[2] / "vendor" / "llama.cpp" / "gguf-py"]
    for path in candidates:
        if (path / "gguf" / "__init__.py").is_file():
            return path
    raise ImportError("llamaspec's copy of gguf-py is missing (looked in " + ", ".join(map(str, candidates)) +
                      "): reinstall llamaspec (pip install .) or set LLAMASPEC_GGUF_PY")


def import_gguf():
    """Import the vendored gguf-py as the top-level ``gguf`` (it imports itself by that name)."""
    folder = str(_vendored_gguf_py())
    loaded = sys.modules.get("gguf")
    if loaded is not None:
        if not hasattr(getattr(loaded, "MODEL_ARCH", None), "DFLASH"):
            raise ImportError(f"another 'gguf' package ({getattr(loaded, '__file__', '?')}) was imported first and "
                              "lacks the DFlash/DSpark keys: import llamaspec.testing before it")
        return loaded
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import gguf as module

    return module


def copy_field(writer, key: str, field) -> None:
    """Add a field read by a GGUFReader to a GGUFWriter, with its value type (and an array's element type)."""
    gguf = import_gguf()
    value_type = field.types[0]
    sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
    writer.add_key_value(key, field.contents(), value_type, sub_type)
