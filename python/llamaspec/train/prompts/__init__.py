"""Training prompts for self-distillation, derived from text that ships with Python itself.

Never the benchmark suite (llamaspec/prompts.json), the tests or the README: the head is judged on
those. Every prompt comes from the standard library installed with the interpreter (its source
code, docstrings, enums and module names), so the set is reproducible on any machine without a
download, and it covers the workload categories of the reference reports: code, code completion,
explanations, Q&A, JSON, SQL, lists, translation, step-by-step arithmetic, repetition and prose.

    >>> prompts = build_prompts(n=2000, seed=0)   # [{"category": "code", "prompt": "..."}, ...]

:func:`build_general_prompts` adds a second set on everyday subjects and formats (word lists and
templates written here, paragraphs of Python's documentation), kept apart from the suite's wording;
:func:`build_continuation_prompts` a third with long real contexts (windows of stdlib source and
documentation, records of stdlib facts, whole functions to rewrite, test or explain).
"""

from .continuation import build_continuation_prompts, fresh_prompts
from .copying import build_copy_prompts
from .general import LANGUAGES_CODE, NAMES, SUBJECTS, build_general_prompts
from .stdlib import build_prompts

__all__ = ["LANGUAGES_CODE", "NAMES", "SUBJECTS", "build_continuation_prompts", "build_copy_prompts", "build_general_prompts",
           "build_prompts", "fresh_prompts"]
