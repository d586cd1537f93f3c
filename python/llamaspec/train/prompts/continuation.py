"""Continuation prompts: longer windows of real text (stdlib source, documentation, records)."""

from __future__ import annotations

import functools
import inspect
import json
import random
import textwrap
from typing import List


from .general import _draw_distinct, _passages
from .stdlib import _doc, _first_sentence, _functions, _modules, _parameters


# --- continuation prompts: longer windows of real text -------------------------------------------------
# The two sets above are mostly short instructions; the suite's harder tasks carry long contexts (a page
# of code, a paragraph to summarise, a puzzle). This set gives the target longer real contexts to carry
# on from: windows of the standard library's own source files and module docstrings, chained paragraphs
# of Python's documentation, tables and records of stdlib facts, and whole stdlib functions to rewrite,
# test or explain. Same rule as above: no suite wording, scaffold or subject.


@functools.lru_cache(maxsize=1)
def _module_sources() -> tuple:
    """(module name, source text, module docstring) of MODULES, read once."""
    out = []
    for name, module in _modules():
        try:
            source = inspect.getsource(module)
        except (OSError, TypeError):
            continue
        out.append((name, source, inspect.getdoc(module) or ""))
    return tuple(out)


def _code_window(rng: random.Random, source: str, max_chars: int = 1100) -> str:
    """Up to 60 lines of a source file, starting at a top-level or method definition, cut at a line end."""
    lines = source.splitlines()
    starts = [i for i, line in enumerate(lines) if line.lstrip().startswith(("def ", "class ", "@"))] or [0]
    start = rng.choice(starts)
    window = lines[start:start + rng.randint(12, 60)]
    text = "\n".join(window)
    if len(text) > max_chars:
        text = text[:text.rfind("\n", 0, max_chars)]
    return text + "\n"


def build_continuation_prompts(n: int = 2000, seed: int = 0) -> List[dict]:
    """``n`` distinct prompts with long real contexts (windows of stdlib source, documentation cut mid-way,
    tables and records of stdlib facts, whole functions to rewrite, test or explain, passages to turn into
    quiz questions, glossaries or notes), drawn evenly from the categories and shuffled with ``seed``."""
    rng = random.Random(seed + 104729)
    sources = _module_sources()
    documented_modules = [(name, doc) for name, _, doc in sources if len(doc) >= 300]
    passages = _passages(rng)
    # whole functions that leave room for the instruction and the answer in the 512-token context
    functions = [f for f in _functions(rng) if 8 <= len(f[3].splitlines()) <= 45 and len(f[3]) <= 1000]
    pick = rng.choice

    def code_window(i):
        name, source, _ = sources[i % len(sources)]
        window = _code_window(rng, source)
        return pick([window, f"# {name.replace('.', '/')}.py\n{window}", f"```python\n{window}"])

    def docs_window(i):
        if i % 2 and documented_modules:
            name, doc = documented_modules[i % len(documented_modules)]
            text = f"{name}\n{'=' * len(name)}\n\n{doc}"
        else:
            k = i % len(passages)
            text = "\n\n".join(passages[k:k + rng.randint(2, 3)])
        cut = rng.randint(min(250, len(text) - 1), min(900, len(text) - 1))
        return text[:cut]

    def function_task(i):
        module, attr, obj, source = functions[i % len(functions)]
        body = textwrap.dedent(source).rstrip()
        return pick([f"```python\n{body}\n```\n\nRewrite `{attr}` with type hints and a docstring.\n\n```python\n",
                     f"```python\n{body}\n```\n\nunittest tests for `{attr}`:\n\n```python\nimport unittest\n",
                     f"```python\n{body}\n```\n\nWhich arguments make `{attr}` raise an exception, and why?\n\n",
                     f"Here is `{module}.{attr}` from Python's standard library:\n\n```python\n{body}\n```\n\n"
                     f"In plain words, line by line:\n\n1."])

    def records(i):
        rows = []
        for m, attr, obj, _ in rng.sample(functions, min(len(functions), rng.randint(3, 6))):
            rows.append((m, attr, len([p for p in _parameters(obj) if p not in ("self", "cls")]),
                         _first_sentence(_doc(obj)).replace('"', "'")[:70]))
        style = i % 3
        if style == 0:
            body = "\n".join(f"{m},{a},{k},\"{d}\"" for m, a, k, d in rows)
            return f"module,name,parameters,summary\n{body}\n"
        if style == 1:
            return "\n".join(json.dumps({"module": m, "name": a, "parameters": k, "summary": d})
                             for m, a, k, d in rows) + "\n"
        body = "\n".join(f"| {m} | `{a}` | {k} | {d} |" for m, a, k, d in rows)
        return f"| module | name | parameters | summary |\n|---|---|---|---|\n{body}\n"

    def passage_task(i):
        k = (i * 7) % len(passages)
        text = "\n\n".join(passages[k:k + rng.randint(1, 2)])
        return pick([f"{text}\n\nThree quiz questions on the passage above, each with its answer:\n\n1.",
                     f"{text}\n\nGlossary of the technical terms used above:\n\n-",
                     f"{text}\n\nThe same text, rewritten for a reader who does not program:\n\n",
                     f"{text}\n\nNotes (bullet points):\n\n*"])

    makers = {"code_window": code_window, "docs_window": docs_window, "function_task": function_task,
              "records": records, "passage_task": passage_task}
    return _draw_distinct(makers, n, "continue_", rng, step=7919)



def fresh_prompts(builder, seed: int, first_seed: int, first_count: int):
    """``builder`` with another seed, less every prompt its first set (``first_seed``, ``first_count``)
    already has: a second set adds only new prompts, and none of them is a held-out prompt of the first."""
    def build(n: int, _seed: int) -> list:
        seen = {item["prompt"] for item in builder(first_count, first_seed)}
        return [item for item in builder(n, seed) if item["prompt"] not in seen]

    build.__name__ = f"{builder.__name__}(seed={seed}, new prompts only)"
    return build
