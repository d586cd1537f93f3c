"""Chat prompts: a conversation rendered with the model's own chat template, as llama-server renders it."""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

from . import _core
from .model import Model, tokenize


def chat_prompt(model: Model, messages: Sequence[Mapping[str, str]], *, template: Optional[str] = None,
                add_generation_prompt: bool = True) -> tuple:
    """(prompt token ids, extra stop strings) of ``messages`` rendered with the model's chat template
    (the GGUF's ``tokenizer.chat_template``, or ``template``), with jinja as llama-server does;
    llama.cpp falls back to ChatML when the GGUF has no template."""
    pairs = []
    for m in messages:
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise TypeError("messages must be dicts with str 'role' and 'content'")
        pairs.append((m["role"], m["content"]))
    if not pairs:
        raise ValueError("no messages")
    text, stops = _core.chat_prompt(model, pairs, add_generation_prompt, template or "")
    tokens = tokenize(model, text, add_special=False)  # the template writes BOS itself where it wants one
    bos = model.bos
    if model.add_bos and bos >= 0 and (not tokens or tokens[0] != bos):
        tokens.insert(0, bos)
    return tokens, list(stops)
