"""A DSpark draft head in PyTorch whose forward pass is the graph llama.cpp runs (src/models/dflash.cpp).

Step by step, for one sequence whose target features are known at positions 0..P-1 and a block of k
tokens [anchor, mask, ..., mask] at positions P..P+k-1 (slot i predicts the token at P+i+1):

1. context: g = rmsnorm(fc(f)) * enc_norm for every committed position's concatenated target
   features f (``target_layers`` order); each layer's context keys/values come from g
   (k = rope(rmsnorm_head(Wk g) * k_norm), v = Wv g), with no attention norm on g;
2. block: x = tok_embd[tokens] * embedding_scale; per layer, pre-norm attention with per-head
   q/k RMS norms and NEOX RoPE over [context ; block] (non-causal: the whole block sees itself),
   then a gated FFN (SiLU or GELU-tanh);
3. hn = rmsnorm(x) * output_norm, base = hn @ output^T (no softcap);
4. Markov head, greedy chain from the anchor: e = W1[prev], logit_i = base_i + W2 e,
   conf_i = sigmoid(conf_w . [hn_i ; e] + b), prev = argmax(logit_i).

With a reduced draft vocabulary (``draft_vocab``, written as the GGUF's ``d2t``) ``output`` and
``markov_w2`` have one row per draft token and the logits are scattered to the target's ids, -inf
elsewhere; ``markov_w1`` keeps one row per target token (prev is a target id).

Training teacher-forces ``prev`` (the true previous token) instead of the greedy chain
(``markov_prev``). RMSNorm is x / sqrt(mean(x^2) + eps) * w, as ggml computes it. Shapes are torch's
(out, in), which are the GGUF arrays as gguf-py writes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class DSparkConfig:
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    target_layers: Sequence[int]
    markov_rank: int
    block_size: int = 8
    mask_token_id: int = 0
    rms_eps: float = 1e-6
    rope_theta: float = 10000.0
    embedding_scale: float = 1.0
    activation: str = "silu"  # or "gelu_pytorch_tanh"
    has_confidence: bool = True
    causal: bool = False
    draft_vocab: Optional[Sequence[int]] = None  # d2t: the target ids of a reduced draft vocabulary
    extra: dict = field(default_factory=dict)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope_neox(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """x [..., n, heads, D] rotated by positions [..., n]: pairs (j, j + D/2), angle pos * theta^(-2j/D)."""
    d = x.shape[-1]
    half = d // 2
    freqs = theta ** (-torch.arange(0, half, dtype=torch.float64) * 2.0 / d)
    angles = pos.to(torch.float64)[..., None] * freqs
    cos = torch.cos(angles).to(x.dtype)[..., None, :]
    sin = torch.sin(angles).to(x.dtype)[..., None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class DSparkLayer(nn.Module):
    def __init__(self, c: DSparkConfig) -> None:
        super().__init__()
        e, d = c.n_embd, c.head_dim
        self.c = c
        self.attn_norm = nn.Parameter(torch.ones(e))
        self.attn_q = nn.Linear(e, c.n_head * d, bias=False)
        self.attn_k = nn.Linear(e, c.n_head_kv * d, bias=False)
        self.attn_v = nn.Linear(e, c.n_head_kv * d, bias=False)
        self.attn_output = nn.Linear(c.n_head * d, e, bias=False)
        self.attn_q_norm = nn.Parameter(torch.ones(d))
        self.attn_k_norm = nn.Parameter(torch.ones(d))
        self.ffn_norm = nn.Parameter(torch.ones(e))
        self.ffn_gate = nn.Linear(e, c.n_ff, bias=False)
        self.ffn_up = nn.Linear(e, c.n_ff, bias=False)
        self.ffn_down = nn.Linear(c.n_ff, e, bias=False)
        self.record_attention = False
        self.attention: Optional[torch.Tensor] = None

    def _heads(self, linear: nn.Linear, h: torch.Tensor, n_heads: int) -> torch.Tensor:
        return linear(h).view(*h.shape[:-1], n_heads, self.c.head_dim)

    def _keys(self, h: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        c = self.c
        return rope_neox(rms_norm(self._heads(self.attn_k, h, c.n_head_kv), self.attn_k_norm, c.rms_eps), pos,
                         c.rope_theta)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, g: torch.Tensor, ctx_pos: torch.Tensor,
                visible: torch.Tensor) -> torch.Tensor:
        """x [B, Q, E] block tokens at positions pos [B, Q]; g [B, P, E] encoded context at ctx_pos [B, P];
        visible [B, Q, P + Q]: which context rows and block rows each block token attends to. The context
        keys/values come from g directly."""
        c = self.c
        b, n, _ = x.shape
        a = rms_norm(x, self.attn_norm, c.rms_eps)
        q = rope_neox(rms_norm(self._heads(self.attn_q, a, c.n_head), self.attn_q_norm, c.rms_eps), pos, c.rope_theta)
        k = torch.cat([self._keys(g, ctx_pos), self._keys(a, pos)], dim=1)
        v = torch.cat([self._heads(self.attn_v, g, c.n_head_kv), self._heads(self.attn_v, a, c.n_head_kv)], dim=1)
        group = c.n_head // c.n_head_kv
        k = k.repeat_interleave(group, dim=2)  # [B, P + Q, H, D]
        v = v.repeat_interleave(group, dim=2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(c.head_dim)
        probs = scores.masked_fill(~visible[:, None], float("-inf")).softmax(-1)
        if self.record_attention:  # [B, H, Q, P + Q], for a training loss on where a head looks
            self.attention = probs
        o = torch.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, n, c.n_head * c.head_dim)
        x = x + self.attn_output(o)
        m = rms_norm(x, self.ffn_norm, c.rms_eps)
        gate = self.ffn_gate(m)
        act = F.silu(gate) if c.activation == "silu" else F.gelu(gate, approximate="tanh")
        return x + self.ffn_down(act * self.ffn_up(m))


class DSparkHead(nn.Module):
    """The head's weights and forward pass; ``token_embd``/``output`` may be frozen copies of the target's."""

    def __init__(self, c: DSparkConfig) -> None:
        super().__init__()
        self.c = c
        e, t = c.n_embd, len(c.target_layers)
        n_out = len(c.draft_vocab) if c.draft_vocab is not None else c.n_vocab
        self.token_embd = nn.Embedding(c.n_vocab, e)
        self.output = nn.Linear(e, n_out, bias=False)
        self.fc = nn.Linear(t * e, e, bias=False)
        self.enc_norm = nn.Parameter(torch.ones(e))
        self.output_norm = nn.Parameter(torch.ones(e))
        self.layers = nn.ModuleList(DSparkLayer(c) for _ in range(c.n_layer))
        self.markov_w1 = nn.Embedding(c.n_vocab, c.markov_rank)
        self.markov_w2 = nn.Linear(c.markov_rank, n_out, bias=False)
        self.conf_proj = nn.Linear(e + c.markov_rank, 1) if c.has_confidence else None
        if c.draft_vocab is not None:
            d2t = torch.as_tensor(np.asarray(c.draft_vocab, dtype=np.int64))
            t2d = torch.full((c.n_vocab,), -1, dtype=torch.long)
            t2d[d2t] = torch.arange(len(d2t))
            self.register_buffer("d2t", d2t, persistent=False)
            self.register_buffer("t2d", t2d, persistent=False)
        else:
            self.d2t = self.t2d = None

    def to_target_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits [..., Vd] scattered to the target's ids [..., V] (-inf elsewhere)."""
        if self.d2t is None:
            return logits
        full = torch.full((*logits.shape[:-1], self.c.n_vocab), float("-inf"), dtype=logits.dtype)
        full[..., self.d2t] = logits
        return full

    def draft_labels(self, labels: torch.Tensor) -> torch.Tensor:
        """Target token ids as draft-vocabulary rows (-1 where the draft vocabulary lacks the token)."""
        if self.t2d is None:
            return labels
        return torch.where(labels >= 0, self.t2d[labels.clamp(min=0)], labels)

    def encode_context(self, features: torch.Tensor) -> torch.Tensor:
        """g [P, E] from the concatenated target features [P, T * E]."""
        return rms_norm(self.fc(features), self.enc_norm, self.c.rms_eps)

    def hidden(self, features: torch.Tensor, tokens: torch.Tensor, pos0: torch.Tensor,
               ctx_len: Optional[torch.Tensor] = None) -> torch.Tensor:
        """hn [B, A, k, E] of A blocks per sequence, `tokens` [B, A, k], block a at positions pos0[b, a] + 0..k-1.
        All of a sequence's blocks share its context `features` [B, P, T * E]; block a sees the context rows
        below ctx_len[b, a] (default: all P rows) and the tokens of its own block, never another block's
        (the whole block, or the earlier slots when the head is causal). One sequence's context is encoded
        once for all its blocks, which is what makes several blocks per sequence cheap in training."""
        c = self.c
        b, p = features.shape[:2]
        n_blocks, k = tokens.shape[1:]
        n = n_blocks * k
        g = self.encode_context(features)
        ctx_pos = torch.arange(p).expand(b, p)
        limit = ctx_len if ctx_len is not None else torch.full((b, n_blocks), p)
        ctx_visible = (torch.arange(p) < limit[..., None, None]).expand(b, n_blocks, k, p).reshape(b, n, p)
        block_of = torch.arange(n) // k
        own_block = block_of[:, None] == block_of[None, :]
        if c.causal:
            own_block = own_block & torch.ones(n, n, dtype=torch.bool).tril()
        visible = torch.cat([ctx_visible, own_block.expand(b, n, n)], dim=-1)
        pos = (pos0[..., None] + torch.arange(k)).reshape(b, n)
        x = self.token_embd(tokens.reshape(b, n)) * c.embedding_scale
        for layer in self.layers:
            x = layer(x, pos, g, ctx_pos, visible)
        return rms_norm(x, self.output_norm, c.rms_eps).reshape(b, n_blocks, k, -1)

    def forward_batch(self, features: torch.Tensor, ctx_len: torch.Tensor, tokens: torch.Tensor,
                      markov_prev: torch.Tensor) -> tuple:
        """Training forward, teacher-forced: (logits over the draft vocabulary, confidence or None) of blocks
        whose anchors sit right after their contexts (pos0 = ctx_len). One block per sequence: ctx_len [B],
        tokens and markov_prev [B, k], results [B, k, Vd] and [B, k]; several: ctx_len [B, A] (each block's
        anchor position in its sequence's `features`), tokens and markov_prev [B, A, k], results [B, A, k, Vd]
        and [B, A, k]."""
        one_block = ctx_len.dim() == 1
        if one_block:
            ctx_len, tokens, markov_prev = ctx_len[:, None], tokens[:, None], markov_prev[:, None]
        hn = self.hidden(features, tokens, ctx_len, ctx_len)
        e = self.markov_w1(markov_prev)
        logits = self.output(hn) + self.markov_w2(e)
        conf = self.confidence(hn, e) if self.conf_proj else None
        if one_block:
            logits, conf = logits[:, 0], (conf[:, 0] if conf is not None else None)
        return logits, conf

    def confidence(self, hn: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """conf = sigmoid(conf_proj [hn ; e]), in float32 even under bfloat16 autocast: a bfloat16 sigmoid
        is exactly 1.0 past a logit of about 6, where the BCE of a confident miss explodes."""
        with torch.autocast("cpu", enabled=False):
            return torch.sigmoid(self.conf_proj(torch.cat([hn, e], dim=-1).float())).squeeze(-1)

    def forward(self, features: torch.Tensor, tokens: torch.Tensor, pos0: int,
                markov_prev: Optional[torch.Tensor] = None) -> tuple:
        """(logits [k, V], confidence [k] or None) of one block. ``markov_prev`` [k]: the previous token of
        every slot (teacher forcing); None runs llama.cpp's greedy chain from the anchor tokens[0]."""
        hn = self.hidden(features[None], tokens[None, None], torch.tensor([[pos0]]))[0, 0]
        base = self.to_target_vocab(self.output(hn))
        if markov_prev is not None:
            e = self.markov_w1(markov_prev)
            logits = base + self.to_target_vocab(self.markov_w2(e))
            conf = self.confidence(hn, e) if self.conf_proj else None
            return logits, conf
        rows, confs = [], []
        prev = tokens[0]
        for i in range(tokens.shape[0]):
            e = self.markov_w1(prev)
            logit = base[i] + self.to_target_vocab(self.markov_w2(e))
            if self.conf_proj is not None:
                confs.append(self.confidence(hn[i], e))
            rows.append(logit)
            prev = logit.argmax()
        return torch.stack(rows), (torch.stack(confs) if confs else None)

    # --- GGUF ------------------------------------------------------------------------------------
    @classmethod
    def new_for_target(cls, target_path: str, target_layers: Sequence[int], *, n_layer: int = 1,
                       n_ff: Optional[int] = None, n_head_kv: Optional[int] = None, markov_rank: int = 16,
                       block_size: int = 8, seed: int = 0,
                       rope_theta: float = 10000.0, mask_token_id: Optional[int] = None,
                       draft_vocab: Optional[Sequence[int]] = None) -> "DSparkHead":
        """A randomly initialised head for a target GGUF: the target's width, attention shape and vocabulary,
        its token embeddings and output (frozen by the trainer; with ``draft_vocab`` the output keeps only
        those tokens' rows), the target's mask token, and for a gemma3 target its sqrt(n_embd) embedding scale.
        ``n_head_kv`` (default: the target's) must divide the head count."""
        gguf_mod, reader = _reader(target_path)
        arch = reader.fields["general.architecture"].contents()

        def meta(key, default=None):
            f = reader.fields.get(f"{arch}.{key}")
            return default if f is None else f.contents()

        n_embd = int(meta("embedding_length"))
        n_head = int(meta("attention.head_count"))
        embd, out = _target_embeddings(gguf_mod, reader)
        mask_id = mask_token_id if mask_token_id is not None else _mask_token(reader)
        c = DSparkConfig(
            n_embd=n_embd, n_layer=n_layer, n_head=n_head,
            n_head_kv=n_head_kv or int(meta("attention.head_count_kv", n_head)),
            head_dim=int(meta("attention.key_length", n_embd // n_head)), n_ff=n_ff or int(meta("feed_forward_length")),
            n_vocab=embd.shape[0], target_layers=list(target_layers), markov_rank=markov_rank, block_size=block_size,
            mask_token_id=mask_id, rms_eps=float(meta("attention.layer_norm_rms_epsilon", 1e-6)), rope_theta=rope_theta,
            embedding_scale=math.sqrt(n_embd) if arch.startswith("gemma") else 1.0,
            draft_vocab=None if draft_vocab is None else [int(t) for t in draft_vocab])
        if n_head % c.n_head_kv:
            raise ValueError(f"n_head_kv {c.n_head_kv} does not divide the head count {n_head}")
        torch.manual_seed(seed)
        head = cls(c)
        with torch.no_grad():
            head.token_embd.weight.copy_(torch.from_numpy(embd))
            rows = torch.from_numpy(out)
            head.output.weight.copy_(rows if head.d2t is None else rows[head.d2t])
            head.markov_w2.weight.mul_(0.1)  # start close to the plain head's logits
        return head

    @classmethod
    def from_gguf(cls, path: str, target_path: Optional[str] = None) -> "DSparkHead":
        """Load a DSpark head GGUF; a head that shares the target's token_embd / output needs ``target_path``."""
        gguf, reader = _reader(path)

        def field_value(key, default=None):
            f = reader.fields.get(key)
            if f is None:
                return default
            vals = [f.parts[i] for i in f.data]
            if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
                return [int(v[0]) for v in vals]
            v = vals[0]
            return bytes(v).decode() if f.types[0] == gguf.GGUFValueType.STRING else v[0].item()

        tensors = {t.name: (np.array(t.data) if t.name == "d2t" else _tensor_f32(gguf, t)) for t in reader.tensors}
        if "token_embd.weight" not in tensors or "output.weight" not in tensors:
            if target_path is None:
                raise ValueError(f"{path} shares the target's embeddings: pass target_path")
            _, target_reader = _reader(target_path)
            embd, out = _target_embeddings(gguf, target_reader)
            tensors.setdefault("token_embd.weight", embd)
            tensors.setdefault("output.weight", out)
        n_head = int(field_value("dflash.attention.head_count"))
        n_embd = int(field_value("dflash.embedding_length"))
        c = DSparkConfig(
            n_embd=n_embd, n_layer=int(field_value("dflash.block_count")), n_head=n_head,
            n_head_kv=int(field_value("dflash.attention.head_count_kv")),
            head_dim=int(field_value("dflash.attention.key_length", n_embd // n_head)),
            n_ff=int(field_value("dflash.feed_forward_length")), n_vocab=tensors["token_embd.weight"].shape[0],
            draft_vocab=tensors["d2t"].astype(np.int64).tolist() if "d2t" in tensors else None,
            target_layers=field_value("dflash.target_layers"), markov_rank=tensors["markov_w1.weight"].shape[1],
            block_size=int(field_value("dflash.block_size", 16)),
            mask_token_id=int(field_value("tokenizer.ggml.mask_token_id", 0)),
            rms_eps=float(field_value("dflash.attention.layer_norm_rms_epsilon")),
            rope_theta=float(field_value("dflash.rope.freq_base", 10000.0)),
            embedding_scale=float(field_value("dflash.embedding_scale", 1.0)),
            activation=str(field_value("dflash.hidden_activation", "silu")),
            has_confidence="conf_proj.weight" in tensors,
            causal=bool(field_value("dflash.attention.causal", False)))
        head = cls(c)
        names = {"token_embd.weight": head.token_embd.weight, "output.weight": head.output.weight,
                 "fc.weight": head.fc.weight, "enc.output_norm.weight": head.enc_norm,
                 "output_norm.weight": head.output_norm, "markov_w1.weight": head.markov_w1.weight,
                 "markov_w2.weight": head.markov_w2.weight}
        if head.conf_proj is not None:
            names["conf_proj.weight"] = head.conf_proj.weight
            names["conf_proj.bias"] = head.conf_proj.bias
        for il, layer in enumerate(head.layers):
            for part in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
                names[f"blk.{il}.{part}.weight"] = getattr(layer, part).weight
            for part in ("attn_norm", "attn_q_norm", "attn_k_norm", "ffn_norm"):
                names[f"blk.{il}.{part}.weight"] = getattr(layer, part)
        with torch.no_grad():
            for name, param in names.items():
                value = torch.from_numpy(tensors[name].astype(np.float32)).reshape(param.shape)
                param.copy_(value)
        return head


def _reader(path: str) -> tuple:
    from .._gguf import import_gguf as _import_gguf

    gguf = _import_gguf()
    return gguf, gguf.GGUFReader(str(path))


def _tensor_f32(gguf, tensor) -> np.ndarray:
    """A GGUF tensor as float32 numpy in torch layout (dequantized when quantized)."""
    import importlib

    data = np.array(tensor.data)
    if tensor.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
        data = importlib.import_module(gguf.__name__ + ".quants").dequantize(data, tensor.tensor_type)
    shape = tuple(int(x) for x in reversed(tensor.shape))
    return data.astype(np.float32).reshape(shape)


def _target_embeddings(gguf, reader) -> tuple:
    """(token_embd, output) of a target GGUF as float32; a tied output is the embedding matrix."""
    tensors = {t.name: t for t in reader.tensors}
    embd = _tensor_f32(gguf, tensors["token_embd.weight"])
    out = _tensor_f32(gguf, tensors["output.weight"]) if "output.weight" in tensors else embd
    return embd, out


def _mask_token(reader) -> int:
    """The target's mask token: its tokenizer.ggml.mask_token_id, else a token spelled <mask> or <|mask|>."""
    field = reader.fields.get("tokenizer.ggml.mask_token_id")
    if field is not None:
        return int(field.contents())
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    for text in ("<mask>", "<|mask|>"):
        if text in tokens:
            return tokens.index(text)
    raise ValueError("the target's vocabulary has no mask token: pass mask_token_id")
