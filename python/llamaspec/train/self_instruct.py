"""Prompts written by the target itself: a fifth prompt set, less templated than the others.

The head trained on the four written sets drafts well on prompts shaped like them (tau 2.27 on fresh
prompts of those families) and much worse on the suite (1.14-1.9 outside JSON): it learned the families'
templates. Here the wording of each request comes from the target. A short scene is set
(``A user asked an AI assistant a question about glaciers. The question was: "``), the target writes
the request at temperature 0.8 (one seed per request) and it is kept when it closes its quote, looks
like a request and is far from every suite prompt. Two kinds take a text first: the target writes a
short report (summaries) or a sentence (translations) and the prompt asks for something done to it.

Requests depend on the CPU's rounding as answers do (llamaspec.train.answers), so the written
prompts are kept in a JSON file next to the kept answers and reused when the target and the settings
are the same: the answers' key then finds the same prompts on any machine.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import random
import time
from pathlib import Path
from typing import List, Optional

from ..evaluate import builtin_prompts
from .prompts import LANGUAGES_CODE, NAMES, SUBJECTS

# category -> (what the user asked for, the words that open the quote); "{topic}" is a subject
SCENES = {
    "question": ("asked an AI assistant a question about {topic}", "The question was"),
    "code": ("asked an AI assistant to write a {language} function for a program about {topic}", "The request was"),
    "math": ("asked an AI assistant to solve a math word problem about {topic}", "The problem was"),
    "json": ("asked an AI assistant for JSON data about {topic}", "The request was"),
    "creative": ("asked an AI assistant for a {form} about {topic}", "The request was"),
    "explain": ("asked an AI assistant to explain something about {topic}", "The request was"),
    "list": ("asked an AI assistant for a list about {topic}", "The request was"),
    "howto": ("asked an AI assistant how to do something involving {topic}", "The question was"),
    "compare": ("asked an AI assistant to compare two things related to {topic}", "The request was"),
}
TEXT_KINDS = ("summarize", "translate")
FORMS = ["poem", "short story", "song", "riddle", "letter", "fairy tale", "joke", "speech"]
TARGET_LANGUAGES = ["French", "German", "Spanish", "Italian", "Portuguese", "Dutch", "Swedish", "Polish"]
SUMMARY_ASKS = ["Summarize the text below in a few sentences.\n\n{text}\n\n",
                "{text}\n\nWhat is the main point of this report?\n\n",
                "Write a headline for this news report:\n{text}\n\n",
                "{text}\n\nList the key facts of the text above.\n\n",
                "Rewrite this report in simpler words:\n\n{text}\n\n"]
TRANSLATE_ASKS = ["Translate into {language}: {text}\n", "How do you say this in {language}?\n\"{text}\"\n\n",
                  "{text}\n\nThe same sentence in {language}:\n",
                  "Please translate the sentence below to {language}.\n{text}\n\n"]
MAX_REQUEST_TOKENS = 64
MAX_TEXT_TOKENS = 96


def scenes(n: int, seed: int) -> List[dict]:
    """``n`` scenes for the target to complete, cycling through the categories; each with its own seed."""
    rng = random.Random(seed)
    categories = list(SCENES) + list(TEXT_KINDS)
    out = []
    for i in range(n):
        category = categories[i % len(categories)]
        topic = rng.choice(SUBJECTS)
        if category == "summarize":
            kind = rng.choice(["news report", "blog post", "school essay", "letter to the editor"])
            text = f"Here is a short {kind} about {topic}.\n\n"
        elif category == "translate":
            text = f"{rng.choice(NAMES)} wrote one sentence about {topic}: \""
        else:
            want, lead = SCENES[category]
            want = want.format(topic=topic, language=rng.choice(LANGUAGES_CODE)[0], form=rng.choice(FORMS))
            text = f"A user {want}. {lead}: \""
        out.append({"category": category, "scene": text, "seed": rng.randrange(1 << 30),
                    "ask": rng.randrange(1 << 30)})
    return out


def close_to_suite(text: str, suite: list, bound: float = 0.6) -> bool:
    """Whether ``text`` resembles a suite prompt (difflib ratio >= ``bound``, the bound of the other sets)."""
    for prompt in suite:
        match = difflib.SequenceMatcher(None, text, prompt, autojunk=False)
        if match.quick_ratio() >= bound and match.ratio() >= bound:
            return True
    return False


def _request(text: str) -> Optional[str]:
    """The request a scene's completion holds, or None when it does not read like one."""
    text = " ".join(text.split())
    words = text.split()
    if not 4 <= len(words) <= 60 or not 16 <= len(text) <= 400:
        return None
    lowered = text.lower()
    if "assistant" in lowered or "the user" in lowered or lowered.startswith(("write a short math", "i am an ai")):
        return None
    return text


def _passage(text: str) -> Optional[str]:
    """A written text cut after its last full sentence, or None when shorter than two sentences."""
    text = text.strip()
    end = max(text.rfind(". "), text.rfind(".\n"), text.rfind(".") if text.endswith(".") else -1)
    text = text[:end + 1].strip() if end > 0 else ""
    if text.count(".") < 2 or len(text) < 60 or "\n\n\n" in text:
        return None
    return text


def prompt_for(item: dict, written: str) -> Optional[str]:
    """The training prompt made of a scene and what the target wrote for it (None: not usable)."""
    rng = random.Random(item["ask"])
    if item["category"] == "summarize":
        text = _passage(written)
        return rng.choice(SUMMARY_ASKS).format(text=text) if text else None
    if item["category"] == "translate":
        text = _request(written)
        return rng.choice(TRANSLATE_ASKS).format(text=text, language=rng.choice(TARGET_LANGUAGES)) if text else None
    text = _request(written)
    return f"{text}\n\n" if text else None


def write_prompts(model, n: int, seed: int = 0, n_seq: int = 16, n_ctx: int = 256,
                  n_threads: Optional[int] = None, progress: bool = True) -> List[dict]:
    """``n`` prompts ({"category", "prompt"}) written by ``model``: scenes are completed in batches
    until ``n`` usable, distinct prompts far from the suite are found (at most 8 n scenes)."""
    from ..batch import Batch

    t0 = time.perf_counter()
    suite = [t["prompt"] for t in builtin_prompts()]
    pool = scenes(8 * n, seed)
    prompts: List[dict] = []
    seen = set()
    batch = Batch(model, n_seq=n_seq, spec_type="none", n_ctx=n_ctx, n_threads=n_threads)
    try:
        start = 0
        while len(prompts) < n and start < len(pool):
            chunk = pool[start:start + max(n_seq, int(1.5 * (n - len(prompts))))]
            start += len(chunk)
            text_first = [c["category"] == "summarize" for c in chunk]  # a report: no quote to close
            requests = [batch.submit(c["scene"], MAX_TEXT_TOKENS if report else MAX_REQUEST_TOKENS, seed=c["seed"],
                                     temperature=0.8, top_p=0.95, stop=None if report else "\"")
                        for c, report in zip(chunk, text_first)]
            done = 0
            while batch.step():
                finished = sum(r.done for r in requests)
                if progress and finished // 250 > done // 250:
                    print(f"self-instruct scenes: {start - len(chunk) + finished}/{start} written "
                          f"({time.perf_counter() - t0:.0f} s)", flush=True)
                done = finished
            results = [r.result() for r in requests]
            for item, result in zip(chunk, results):
                if item["category"] != "summarize" and result.stop_reason != "stop":
                    continue  # the quote never closed
                prompt = prompt_for(item, result.text)
                if prompt is None or prompt.lower() in seen or close_to_suite(prompt, suite):
                    continue
                seen.add(prompt.lower())
                prompts.append({"category": item["category"], "prompt": prompt})
                if len(prompts) == n:
                    break
            if progress:
                print(f"self-instruct prompts: {len(prompts)}/{n} from {start} scenes "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
    finally:
        batch.close()
    return prompts


def prompts_key(target_sha256: str, n: int, seed: int) -> str:
    """What a written prompt set depends on, hashed: the target, the count, the seed and this module's scenes."""
    what = {"target": target_sha256, "n": n, "seed": seed, "scenes": SCENES, "text_kinds": TEXT_KINDS,
            "forms": FORMS, "languages": TARGET_LANGUAGES, "summary_asks": SUMMARY_ASKS,
            "translate_asks": TRANSLATE_ASKS, "subjects": SUBJECTS, "names": NAMES,
            "code_languages": [name for name, _ in LANGUAGES_CODE],
            "tokens": [MAX_REQUEST_TOKENS, MAX_TEXT_TOKENS]}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def save_prompts(path, prompts: List[dict], key: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"key": key, "prompts": prompts}, indent=0, ensure_ascii=False) + "\n",
                          encoding="utf-8")


def load_prompts(path, key: str) -> Optional[List[dict]]:
    """The prompts kept in ``path``, or None when the file is missing or was written for another key."""
    path = Path(path)
    if not path.exists():
        return None
    kept = json.loads(path.read_text(encoding="utf-8"))
    return kept["prompts"] if kept.get("key") == key else None


def kept_or_written(model, path, key: str, n: int, seed: int = 0, n_threads: Optional[int] = None) -> List[dict]:
    """The prompt set kept in ``path`` for ``key``; else written by ``model`` now and kept there
    (``path`` None: written, not kept)."""
    prompts = load_prompts(path, key) if path else None
    if prompts is None:
        prompts = write_prompts(model, n, seed, n_threads=n_threads)
        if path:
            save_prompts(path, prompts, key)
    return prompts
