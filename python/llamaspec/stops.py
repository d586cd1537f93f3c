"""Stop strings and stop tokens, applied between speculative rounds.

A stop string may straddle token (and round) boundaries, so text is matched, not tokens: the
matched string and everything after it are never returned (as llama-cpp-python does), and while
streaming the last ``len(longest stop) - 1`` characters are held back until they cannot start one.
"""

from __future__ import annotations

import codecs
from typing import Callable, Iterable, List, Optional, Sequence, Tuple


class StopMatcher:
    """Feeds one round at a time; says where the generation must end.

    ``piece_of(token)`` gives a token's text (used only to find the token where a stop string begins).
    """

    def __init__(self, stop: Optional[Iterable[str]], stop_tokens: Optional[Iterable[int]],
                 piece_of: Callable[[int], str]) -> None:
        if isinstance(stop, str):
            stop = [stop]
        self.strings: List[str] = [s for s in (stop or [])]
        for s in self.strings:
            if not isinstance(s, str) or not s:
                raise ValueError(f"stop strings must be non-empty str, got {s!r}")
        self.tokens = set()
        for t in stop_tokens or []:
            if not isinstance(t, int) or isinstance(t, bool):
                raise TypeError(f"stop tokens must be int token ids, got {t!r}")
            self.tokens.add(t)
        self.hold = max((len(s) for s in self.strings), default=1) - 1
        self.piece_of = piece_of
        self.text = ""           # all text so far (up to a stop, once found)
        self.tokens_out: List[int] = []
        self.ends: List[int] = []  # end offset in text of each token of tokens_out
        self.emitted = 0         # characters already handed out by safe_text()
        self.given = 0           # tokens already handed out by take_tokens()
        self.stopped = False

    @property
    def active(self) -> bool:
        return bool(self.strings or self.tokens)

    def feed(self, tokens: Sequence[int], text: str) -> None:
        """One round's tokens and their text; sets ``stopped`` when a stop token or string appears."""
        if self.stopped:
            return
        tokens = list(tokens)
        for i, t in enumerate(tokens):
            if t in self.tokens:  # kept as the last token (as an end-of-generation token is), not in the text
                text = "".join(self.piece_of(u) for u in tokens[:i])
                tokens = tokens[:i + 1]
                self.stopped = True
                break
        before = len(self.text)
        self.text += text
        pos = before
        for t in tokens:  # where each token's text ends (pieces; the round's last token realigns)
            pos += len(self.piece_of(t))
            self.ends.append(min(pos, len(self.text)))
        if tokens:
            self.ends[-1] = len(self.text)
        self.tokens_out.extend(tokens)
        match = self._find(max(0, before - self.hold))
        if match is not None:
            self.text = self.text[:match]
            # keep the tokens up to the one that holds the stop string's first character
            keep = next((i + 1 for i, end in enumerate(self.ends) if end > match), len(self.ends))
            del self.tokens_out[keep:], self.ends[keep:]
            self.stopped = True

    def _find(self, start: int) -> Optional[int]:
        found = [i for i in (self.text.find(s, start) for s in self.strings) if i >= 0]
        return min(found) if found else None

    def take_tokens(self) -> List[int]:
        """Tokens not handed out yet whose text has been handed out by safe_text() (all once stopped)."""
        if self.stopped:
            n = len(self.tokens_out)
        else:
            n = self.given
            while n < len(self.ends) and self.ends[n] <= self.emitted:
                n += 1
        out = self.tokens_out[self.given:n]
        self.given = max(self.given, n)
        return out

    def safe_text(self, final: bool = False) -> str:
        """Text not handed out yet that can no longer be the start of a stop string."""
        end = len(self.text) if (final or self.stopped) else max(self.emitted, len(self.text) - self.hold)
        out = self.text[self.emitted:end]
        self.emitted = max(self.emitted, end)
        return out


class TextStream:
    """Rounds of tokens -> text chunks: incremental UTF-8 decoding (a character split across rounds
    waits for its last byte) and the stop strings / tokens of a StopMatcher."""

    def __init__(self, detokenize: Callable[[List[int]], bytes], matcher: StopMatcher) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._detokenize = detokenize
        self.matcher = matcher

    @property
    def stopped(self) -> bool:
        return self.matcher.stopped

    def feed(self, tokens: Sequence[int]) -> Tuple[str, List[int]]:
        """One round's tokens: (text that can be shown, the tokens it belongs to)."""
        tokens = list(tokens)
        text = self._decoder.decode(self._detokenize(tokens))
        if self.matcher.active:
            self.matcher.feed(tokens, text)
            return self.matcher.safe_text(), self.matcher.take_tokens()
        return text, tokens

    def finish(self) -> Tuple[str, List[int]]:
        """What was held back, at the end of the generation."""
        tail = self._decoder.decode(b"", final=True)
        if not self.matcher.active:
            return tail, []
        if not self.matcher.stopped:
            self.matcher.feed([], tail)
        tail = self.matcher.safe_text(final=True)
        self.matcher.stopped = True  # hand out every kept token
        return tail, self.matcher.take_tokens()
