"""llamaspec.train.requantize: a GGUF copied with some tensors in another ggml type (how the shipped Gemma
head's output matrix became Q4_0). The copy must keep every other tensor and field as it was, load in the
real engine, and draft losslessly."""

from __future__ import annotations

import numpy as np
import pytest

import llamaspec
from llamaspec._gguf import import_gguf
from llamaspec.train.requantize import main, parse_tensor_types, requantize_gguf

from conftest import PROMPTS


def tensors(path) -> dict:
    gguf = import_gguf()
    return {t.name: t for t in gguf.GGUFReader(str(path)).tensors}


def fields(path) -> dict:
    gguf = import_gguf()
    out = {}
    for key, field in gguf.GGUFReader(str(path)).fields.items():
        if not key.startswith("GGUF."):
            value = field.contents()
            out[key] = value.tolist() if isinstance(value, np.ndarray) else value
    return out


def test_named_tensors_change_type_and_nothing_else_changes(models, tmp_path):
    src = models["dspark"]
    dst = tmp_path / "dspark-q.gguf"
    requantize_gguf(src, dst, {"fc.weight": "q4_0", "blk.0.ffn_gate.weight": "Q8_0"})
    before, after = tensors(src), tensors(dst)
    assert list(before) == list(after)
    assert after["fc.weight"].tensor_type.name == "Q4_0"
    assert after["blk.0.ffn_gate.weight"].tensor_type.name == "Q8_0"
    gguf = import_gguf()
    for name in ("fc.weight", "blk.0.ffn_gate.weight"):
        old = np.asarray(before[name].data, dtype=np.float32)
        new = gguf.quants.dequantize(after[name].data, after[name].tensor_type)
        assert new.shape == old.shape
        assert np.abs(new - old).max() <= 0.2 * np.abs(old).max()  # the type's usual error, not garbage
    for name, tensor in before.items():
        if name not in ("fc.weight", "blk.0.ffn_gate.weight"):
            assert after[name].tensor_type == tensor.tensor_type
            assert np.array_equal(np.asarray(after[name].data), np.asarray(tensor.data)), name
    assert fields(dst) == fields(src)


def test_a_requantized_head_drafts_losslessly(models, target_model, tmp_path):
    head = tmp_path / "dspark-q4.gguf"
    requantize_gguf(models["dspark"], head, {"fc.weight": "q4_0", "blk.0.attn_q.weight": "q4_0"})
    with llamaspec.Generator(target_model, spec_type="none", n_ctx=512) as plain:
        reference = [plain.generate(p, 24, ignore_eos=True).tokens for p in PROMPTS[:2]]
    with llamaspec.Generator(target_model, str(head), spec_type="draft-dspark", n_max=4, n_ctx=512) as gen:
        assert [gen.generate(p, 24, ignore_eos=True).tokens for p in PROMPTS[:2]] == reference


def test_bad_requests_raise_clear_errors(models, tmp_path):
    src = models["dspark"]
    with pytest.raises(ValueError, match="no tensor nope"):
        requantize_gguf(src, tmp_path / "a.gguf", {"nope": "q4_0"})
    with pytest.raises(ValueError, match="unknown ggml type 'q9'"):
        requantize_gguf(src, tmp_path / "a.gguf", {"fc.weight": "q9"})
    with pytest.raises(ValueError, match="not whole Q4_0 blocks"):
        requantize_gguf(src, tmp_path / "a.gguf", {"blk.0.attn_q_norm.weight": "q4_0"})
    with pytest.raises(ValueError, match="differ"):
        requantize_gguf(src, src, {"fc.weight": "q4_0"})
    with pytest.raises(ValueError, match="NAME=TYPE"):
        parse_tensor_types(["fc.weight"])
    with pytest.raises(SystemExit):
        main([src, str(tmp_path / "b.gguf"), "--tensor", "nope=q4_0"])
