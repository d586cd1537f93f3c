"""Copy prompts: answers that repeat their context."""

from __future__ import annotations

import random
import textwrap
from typing import List


from .continuation import _code_window, _module_sources
from .general import _draw_distinct, _passages
from .stdlib import _functions


# --- copy prompts: answers that repeat their context ---------------------------------------------------
# Gemma 270M repeats a lot: 61% of the suite's greedy output tokens continue a trigram seen earlier in the
# text (the question echoed after the answer, loops of Q/A pairs, the prompt's words in a docstring), yet
# the head trained on the three sets above predicts those tokens worse than the rest (0.33 vs 0.41 slot-1
# accuracy, teacher-forced): it has not learnt to copy from its context. Its context features hold what
# copying needs (a linear probe reads a position's own token from them 99.9% of the time and the previous
# token 68%: bench/research/dspark_copy.py), so this set asks for answers that are mostly copies of high-entropy
# text (documentation, source code, random records), where nothing but copying predicts the next token.
# Training on it did not teach the head to copy (bench/research/results/dspark_gemma_copy_experiment.md).


def _random_record(rng: random.Random) -> str:
    """One line of made-up data (a pronounceable word, a hex id, numbers) in one of four formats."""
    word = "".join(rng.choice("bcdfghjklmnpqrstvwxz") + rng.choice("aeiou") for _ in range(rng.randint(2, 4)))
    code = "".join(rng.choice("0123456789abcdef") for _ in range(rng.randint(4, 8)))
    number, value = rng.randint(1, 9999), round(rng.uniform(0, 500), 2)
    return rng.choice([f"{word}: {code}, {number}, {value}", f"{word.capitalize()} #{number} ({code}) = {value}",
                       f'{{"name": "{word}", "id": "{code}", "count": {number}}}',
                       f"{number:>5} | {word:<10} | {code} | {value}"])


def build_copy_prompts(n: int = 1000, seed: int = 0) -> List[dict]:
    """``n`` distinct prompts whose answers repeat text of the prompt (passages of Python's documentation,
    windows of stdlib source, random records, whole stdlib functions), drawn evenly from the categories
    and shuffled with ``seed``."""
    rng = random.Random(seed + 15485863)
    sources = _module_sources()
    passages = _passages(rng)
    functions = [f for f in _functions(rng) if 6 <= len(f[3].splitlines()) <= 30 and len(f[3]) <= 800]
    pick = rng.choice

    def repeat_passage(i):
        k = (i * 13) % len(passages)
        text = passages[k]
        return pick([f"Text:\n{text}\n\nRepeat the text above word for word.\n\nText:\n",
                     f"{text}\n\nThe same paragraph again, unchanged:\n\n",
                     f"Copy exactly:\n\n{text}\n\nCopy:\n\n"])

    def repeat_records(i):
        rows = "\n".join(_random_record(rng) for _ in range(rng.randint(3, 8)))
        return pick([f"{rows}\n\nThe list again, in the same order:\n\n",
                     f"Records:\n{rows}\n\nCopy the records above exactly:\n",
                     f"Backup of the table below.\n\n{rows}\n\nBackup:\n"])

    def repeat_code(i):
        name, source, _ = sources[(i * 5) % len(sources)]
        window = _code_window(rng, source, max_chars=700)
        return pick([f"```python\n{window}```\n\nThe same code again:\n\n```python\n",
                     f"# {name}\n{window}\n# copy of the code above\n",
                     f"Original:\n```python\n{window}```\nCopy:\n```python\n"])

    def loop_continue(i):
        # a text that already repeats, cut inside its second copy: the target carries on copying
        if i % 2:
            text = passages[(i * 17) % len(passages)]
        else:
            text = "\n".join(_random_record(rng) for _ in range(rng.randint(2, 5)))
        cut = rng.randint(1, max(2, len(text) // 4))
        return f"{text}\n\n{text[:cut]}"

    def function_docstring(i):
        module, attr, obj, source = functions[i % len(functions)]
        body = textwrap.dedent(source).rstrip()
        return pick([f"```python\n{body}\n```\n\nThe same function with one comment added above its first line:\n\n```python\n",
                     f"```python\n{body}\n```\n\nThe function again, unchanged, then one sentence on what it does.\n\n```python\n"])

    makers = {"repeat_passage": repeat_passage, "repeat_records": repeat_records, "repeat_code": repeat_code,
              "loop_continue": loop_continue, "function_docstring": function_docstring}
    return _draw_distinct(makers, n, "copy_", rng, step=7919)
