"""Writing a trained DSpark head as the GGUF llama.cpp loads (architecture ``dflash`` with the Markov and
confidence heads: the layout of conversion/qwen.py's DSparkModel, see ../shared/notes/dspark-head-graph.md).

The tokenizer is the target's, copied key by key from its GGUF, plus the mask token. With
``shared_embeddings`` (the default) the head carries no ``token_embd``/``output``: llama.cpp's drafter
then uses the target's (ctx_other), which is what keeps a head for a 262k-vocabulary target small.
"""

from __future__ import annotations

import os
from typing import Optional

import numpy as np
import torch

from .._gguf import copy_field, import_gguf as _import_gguf
from .dspark import DSparkHead


def write_head_gguf(head: DSparkHead, path, target_path, *, shared_embeddings: bool = True,
                    weight_type: str = "f32", quantize: Optional[dict] = None, name: str = "llamaspec-dspark") -> None:
    """Write ``head`` to ``path`` for the target GGUF ``target_path``. ``weight_type`` "f16" stores the
    matrices in half precision (norms and biases stay f32); ``quantize`` maps tensor names to a ggml
    type name ("q8_0") for the big tables (e.g. ``output.weight``, ``markov_w1.weight``).

    A head with a reduced draft vocabulary writes its own ``output`` (the draft rows) and ``d2t``
    (their absolute target ids, int64), as llama.cpp's DSpark graph requires."""
    gguf = _import_gguf()
    quantize = {k: v.upper() for k, v in (quantize or {}).items()}
    c = head.c
    reader = gguf.GGUFReader(os.fspath(target_path))
    w = gguf.GGUFWriter(os.fspath(path), "dflash")
    arch = reader.fields["general.architecture"].contents()
    w.add_name(name)
    n_ctx_train = reader.fields.get(f"{arch}.context_length")
    w.add_context_length(int(n_ctx_train.contents()) if n_ctx_train is not None else 4096)
    w.add_embedding_length(c.n_embd)
    w.add_block_count(c.n_layer)
    w.add_feed_forward_length(c.n_ff)
    w.add_head_count(c.n_head)
    w.add_head_count_kv(c.n_head_kv)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_rope_dimension_count(c.head_dim)
    w.add_rope_freq_base(c.rope_theta)
    w.add_layer_norm_rms_eps(c.rms_eps)
    w.add_block_size(c.block_size)
    w.add_target_layers([int(x) for x in c.target_layers])
    w.add_sample_from_anchor(True)
    w.add_has_confidence_head(head.conf_proj is not None)
    if c.causal:
        w.add_causal_attention(True)
    if c.embedding_scale != 1.0:
        w.add_embedding_scale(float(c.embedding_scale))
    if c.activation != "silu":
        w.add_hidden_act(c.activation)

    # the target's tokenizer, and the mask token that fills the block
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer.") or key == "tokenizer.ggml.mask_token_id":
            continue
        copy_field(w, key, field)
    w.add_mask_token_id(int(c.mask_token_id))

    def put(tensor_name: str, value: torch.Tensor, matrix: bool = True) -> None:
        array = value.detach().cpu().numpy().astype(np.float32)
        if tensor_name in quantize:
            qtype = gguf.GGMLQuantizationType[quantize[tensor_name]]
            w.add_tensor(tensor_name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
            return
        if matrix and weight_type == "f16" and array.ndim == 2:
            array = array.astype(np.float16)
        w.add_tensor(tensor_name, array)

    if not shared_embeddings:
        put("token_embd.weight", head.token_embd.weight)
    if not shared_embeddings or head.d2t is not None:
        put("output.weight", head.output.weight)
    if head.d2t is not None:
        w.add_tensor("d2t", head.d2t.cpu().numpy().astype(np.int64))
    put("fc.weight", head.fc.weight)
    put("enc.output_norm.weight", head.enc_norm, matrix=False)
    put("output_norm.weight", head.output_norm, matrix=False)
    for il, layer in enumerate(head.layers):
        for part in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
            put(f"blk.{il}.{part}.weight", getattr(layer, part).weight)
        for part in ("attn_norm", "attn_q_norm", "attn_k_norm", "ffn_norm"):
            put(f"blk.{il}.{part}.weight", getattr(layer, part), matrix=False)
    put("markov_w1.weight", head.markov_w1.weight)
    put("markov_w2.weight", head.markov_w2.weight)
    if head.conf_proj is not None:
        put("conf_proj.weight", head.conf_proj.weight, matrix=False)
        put("conf_proj.bias", head.conf_proj.bias, matrix=False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
