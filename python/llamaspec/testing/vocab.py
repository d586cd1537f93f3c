"""The tiny byte-level BPE vocabulary (GPT-2 bytes + merges trained on a built-in corpus + control tokens)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from .common import gguf


#: Control tokens appended after the BPE merges, in this order.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",  # eos, pad
    "<|im_start|>",
    "<|im_end|>",     # end of turn (EOG by text)
    "<|bos|>",        # bos (only prepended when add_bos=True)
    "<|mask|>",       # DFlash/DSpark mask token (tokenizer.ggml.mask_token_id in draft files)
)

VOCAB_VARIANTS: tuple[str, ...] = ("base", "permuted", "larger", "alt")

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Small deterministic corpus for training the BPE merges (ASCII only).
_CORPUS = """\
Hello world! Hello there, how are you today? The quick brown fox jumps over the lazy dog.
Speculative decoding uses a small draft model to propose tokens and a large target model to
verify them in a single batch. When the draft is right, several tokens are accepted at once.
The target model always has the final word, so the output is the same as greedy decoding.
In the beginning there was the word, and the word was with the model, and the model was good.
Once upon a time, in a land far away, there lived a little robot that loved to read books.
It read every book in the library, from the first page to the last, and then it wrote its own.
def main(argv):
    for i in range(10):
        print("hello", i)
    return 0
if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv))
The numbers one, two, three, four, five, six, seven, eight, nine and ten are small numbers.
A token is a piece of text. Tokens are turned into embeddings, and embeddings into logits.
The cat sat on the mat. The dog sat on the log. The bird sat in the tree and sang a song.
We think that this is the best way to test the engine: tiny models, random weights, real code.
"""

# ASCII approximation of the llama.cpp "qwen2" pre-tokenizer regex (only used for training).
_PRETOKENIZE_RE = re.compile(
    r"'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])"
    r"|[^\r\nA-Za-z0-9]?[A-Za-z]+"
    r"|[0-9]"
    r"| ?[^\sA-Za-z0-9]+[\r\n]*"
    r"|\s*[\r\n]+"
    r"|\s+(?!\S)"
    r"|\s+"
)


# --------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """The GPT-2 byte -> printable unicode character mapping used by byte-level BPE."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


@lru_cache(maxsize=8)
def _train_merges(n_merges: int) -> tuple[str, ...]:
    """Greedy, deterministic byte-level BPE training on :data:`_CORPUS`."""
    b2u = bytes_to_unicode()
    words = Counter(
        tuple(b2u[b] for b in piece.encode("utf-8"))
        for piece in _PRETOKENIZE_RE.findall(_CORPUS)
    )
    merges: list[str] = []
    while len(merges) < n_merges:
        pairs: Counter[tuple[str, str]] = Counter()
        for word, freq in words.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] += freq
        if not pairs:
            break
        # most frequent pair; ties broken lexicographically so the result is deterministic
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(f"{best[0]} {best[1]}")
        joined = best[0] + best[1]
        new_words: Counter[tuple[str, ...]] = Counter()
        for word, freq in words.items():
            out: list[str] = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == best[0] and word[i + 1] == best[1]:
                    out.append(joined)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            new_words[tuple(out)] += freq
        words = new_words
    return tuple(merges)


@dataclass(frozen=True)
class TinyVocab:
    """A byte-level BPE vocabulary as stored in GGUF ``tokenizer.ggml.*`` keys."""

    tokens: tuple[str, ...]
    token_types: tuple[int, ...]
    merges: tuple[str, ...]
    bos_id: int
    eos_id: int
    pad_id: int
    mask_id: int
    add_bos: bool = False
    pre: str = "qwen2"

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    @property
    def special_ids(self) -> list[int]:
        """Ids of all non-normal tokens (control / unused)."""
        return [i for i, t in enumerate(self.token_types) if t != gguf.TokenType.NORMAL]

    def unprintable_ids(self) -> list[int]:
        """Special tokens plus the byte tokens that are not printable ASCII / newline.

        These get all-zero output-head rows, so greedy decoding only ever produces printable
        ASCII text (valid UTF-8) and never stops early on EOS.
        """
        u2b = {u: b for b, u in bytes_to_unicode().items()}
        bad = set(self.special_ids)
        for i, tok in enumerate(self.tokens):
            if i not in bad and any(c not in u2b or not (32 <= u2b[c] < 127 or u2b[c] == 10)
                                    for c in tok):
                bad.add(i)
        return sorted(bad)

    def token_id(self, text: str) -> int:
        return self.tokens.index(text)

    def write(self, w: gguf.GGUFWriter, *, with_mask: bool = False) -> None:
        """Write the tokenizer keys. ``with_mask`` also writes ``tokenizer.ggml.mask_token_id``."""
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(self.pre)
        w.add_token_list(list(self.tokens))
        w.add_token_types(list(self.token_types))
        w.add_token_merges(list(self.merges))
        w.add_bos_token_id(self.bos_id)
        w.add_eos_token_id(self.eos_id)
        w.add_pad_token_id(self.pad_id)
        w.add_add_bos_token(self.add_bos)
        w.add_add_eos_token(False)
        if with_mask:
            w.add_mask_token_id(self.mask_id)
        w.add_chat_template(CHATML_TEMPLATE)


def build_vocab(vocab_size: int = 384, variant: str = "base", add_bos: bool = False) -> TinyVocab:
    """Build the tiny byte-level BPE vocabulary.

    ``vocab_size`` is the total number of tokens: 256 byte tokens + BPE merges + the control
    tokens of :data:`SPECIAL_TOKENS`. If the corpus runs out of merges the gap is filled with
    ``<|reserved_N|>`` tokens of type UNUSED (never produced by the tokenizer).

    ``variant`` builds a vocabulary that is *incompatible* with ``"base"`` (for mismatch tests,
    cf. ``common_speculative_are_compatible`` in common/speculative.cpp):

    * ``"permuted"``: same size, byte tokens in reverse id order -> token texts differ.
    * ``"larger"``:   ``vocab_size + 160`` tokens (extra merges) -> size differs by > 128 and the
      control tokens move to other ids.
    * ``"alt"``:      both of the above.
    """
    if variant not in VOCAB_VARIANTS:
        raise ValueError(f"unknown vocab variant {variant!r}, expected one of {VOCAB_VARIANTS}")
    if variant in ("larger", "alt"):
        vocab_size += 160
    n_fill = vocab_size - 256 - len(SPECIAL_TOKENS)
    if n_fill < 0:
        raise ValueError(f"vocab_size must be >= {256 + len(SPECIAL_TOKENS)}")

    b2u = bytes_to_unicode()
    byte_tokens = [b2u[b] for b in range(256)]
    if variant in ("permuted", "alt"):
        byte_tokens.reverse()

    merges = _train_merges(n_fill)
    merged = [m.replace(" ", "") for m in merges]
    reserved = [f"<|reserved_{i}|>" for i in range(n_fill - len(merges))]

    tokens = byte_tokens + merged + reserved + list(SPECIAL_TOKENS)
    types = ([gguf.TokenType.NORMAL] * (256 + len(merged))
             + [gguf.TokenType.UNUSED] * len(reserved)
             + [gguf.TokenType.CONTROL] * len(SPECIAL_TOKENS))
    assert len(tokens) == vocab_size and len(set(tokens)) == vocab_size

    ids = {t: i for i, t in enumerate(tokens)}
    return TinyVocab(
        tokens=tuple(tokens),
        token_types=tuple(int(t) for t in types),
        merges=merges,
        bos_id=ids["<|bos|>"],
        eos_id=ids["<|endoftext|>"],
        pad_id=ids["<|endoftext|>"],
        mask_id=ids["<|mask|>"],
        add_bos=add_bos,
    )


