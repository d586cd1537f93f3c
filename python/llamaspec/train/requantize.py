"""Copy a GGUF with some of its tensors stored in another ggml type (a head's output matrix in Q4_0).

    python -m llamaspec.train.requantize SRC.gguf DST.gguf --tensor output.weight=q4_0 [--tensor NAME=TYPE ...]

Every other tensor and every metadata field is copied as it is. A drafter's matrices are read from memory
once per round, after the target's pass has evicted them from the caches: fewer bytes are a cheaper draft.
The shipped Gemma head's output matrix (24,576 x 640) in Q4_0 instead of Q8_0 drafted the same tokens as often
(bench/results/dspark_heads/dspark_gemma_head_q4_0_output.md) in less time.
"""

from __future__ import annotations

import argparse
import os
from typing import Mapping

import numpy as np

from .._gguf import copy_field, import_gguf


def requantize_gguf(src, dst, types: Mapping[str, str]) -> None:
    """Write ``dst``: ``src`` with each tensor named in ``types`` dequantized and stored as its ggml type
    (a name such as ``"q4_0"``). Raises ValueError for a tensor ``src`` lacks, an unknown type, or a
    tensor whose rows the type's blocks do not divide."""
    gguf = import_gguf()
    if os.path.abspath(os.fspath(src)) == os.path.abspath(os.fspath(dst)):
        raise ValueError("dst must differ from src")
    wanted = {}
    for name, type_name in types.items():
        try:
            wanted[name] = gguf.GGMLQuantizationType[str(type_name).upper()]
        except KeyError:
            raise ValueError(f"unknown ggml type {type_name!r} for {name}") from None
    reader = gguf.GGUFReader(os.fspath(src))
    row_length = {t.name: int(t.shape[0]) for t in reader.tensors}  # ne[0]: the elements of a row
    missing = set(wanted) - set(row_length)
    if missing:
        raise ValueError(f"{os.fspath(src)} has no tensor {', '.join(sorted(missing))}")
    for name, qtype in wanted.items():
        block = gguf.GGML_QUANT_SIZES[qtype][0]
        if row_length[name] % block:
            raise ValueError(f"{name}: rows of {row_length[name]} are not whole {qtype.name} blocks of {block}")
    writer = gguf.GGUFWriter(os.fspath(dst), reader.fields["general.architecture"].contents())
    try:
        for key, field in reader.fields.items():
            if not key.startswith("GGUF.") and key != "general.architecture":  # the writer writes those itself
                copy_field(writer, key, field)
        for tensor in reader.tensors:
            qtype = wanted.get(tensor.name)
            if qtype is None:
                writer.add_tensor(tensor.name, np.asarray(tensor.data), raw_dtype=tensor.tensor_type)
            else:
                values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
                writer.add_tensor(tensor.name, gguf.quants.quantize(values, qtype), raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()


def parse_tensor_types(words) -> dict:
    """["output.weight=q4_0", ...] -> {"output.weight": "q4_0", ...}"""
    out = {}
    for word in words:
        name, sep, type_name = word.partition("=")
        if not sep or not name or not type_name:
            raise ValueError(f"expected NAME=TYPE, got {word!r}")
        out[name] = type_name
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--tensor", action="append", required=True, help="NAME=TYPE, e.g. output.weight=q4_0")
    args = ap.parse_args(argv)
    try:
        requantize_gguf(args.src, args.dst, parse_tensor_types(args.tensor))
    except ValueError as e:
        ap.error(str(e))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
