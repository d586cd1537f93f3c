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

from __future__ import annotations

import enum
import functools
import importlib
import inspect
import json
import random
import textwrap
from typing import List

# modules with plenty of plain Python source and docstrings, available on every CPython
MODULES = ["argparse", "ast", "base64", "bisect", "calendar", "collections", "colorsys", "configparser",
           "contextlib", "csv", "dataclasses", "datetime", "decimal", "difflib", "email.utils", "enum",
           "fnmatch", "fractions", "ftplib", "functools", "getopt", "gettext", "glob", "gzip", "heapq", "hmac",
           "html", "http.client", "http.cookies", "imaplib", "inspect", "ipaddress", "json.decoder",
           "json.encoder", "logging", "mailbox", "mimetypes", "netrc", "numbers", "operator", "optparse",
           "os", "pathlib", "pickle", "pprint", "queue", "quopri", "random", "re", "sched", "secrets",
           "shlex", "shutil", "smtplib", "socketserver", "statistics", "string", "subprocess", "tarfile",
           "tempfile", "textwrap", "threading", "timeit", "tokenize", "traceback", "typing", "urllib.parse",
           "uuid", "wave", "weakref", "zipfile"]

LANGUAGES = ["French", "German", "Spanish", "Italian", "Portuguese", "Dutch"]


def _functions(rng: random.Random) -> list:
    out = list(_stdlib_objects())
    rng.shuffle(out)
    return out


@functools.lru_cache(maxsize=1)
def _modules() -> tuple:
    """(name, module) of the MODULES that import on this platform."""
    out = []
    for name in MODULES:
        try:
            out.append((name, importlib.import_module(name)))
        except Exception:  # noqa: BLE001 - a module missing on this platform is skipped
            continue
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _stdlib_objects() -> tuple:
    """(module, name, object, source) of the public functions and classes of MODULES (read once)."""
    out = []
    for name, module in _modules():
        for attr, obj in vars(module).items():
            if attr.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            if getattr(obj, "__module__", None) != module.__name__:
                continue
            try:
                source = inspect.getsource(obj)
            except (OSError, TypeError):
                continue
            out.append((name, attr, obj, source))
    return tuple(out)


def _doc(obj) -> str:
    """The object's own docstring (not one inherited from a base class)."""
    doc = obj.__dict__.get("__doc__") if isinstance(obj, type) else obj.__doc__
    return inspect.cleandoc(doc) if isinstance(doc, str) else ""


def _first_sentence(doc: str) -> str:
    doc = " ".join(doc.strip().split())
    end = doc.find(". ")
    return doc if end < 0 else doc[:end + 1]


def _enums() -> list:
    found = []
    for name in ("http", "signal", "socket", "ssl", "inspect", "uuid", "re", "enum", "plistlib", "tkinter.constants"):
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001
            continue
        for attr, obj in vars(module).items():
            if isinstance(obj, type) and issubclass(obj, enum.Enum) and len(obj) >= 3 and not attr.startswith("_"):
                found.append((f"{name}.{attr}", obj))
    return found


def build_prompts(n: int = 2000, seed: int = 0) -> List[dict]:
    """``n`` prompts ({"category", "prompt"}) drawn evenly from the categories, shuffled with ``seed``."""
    rng = random.Random(seed)
    functions = _functions(rng)
    enums = _enums()
    documented = [(m, a, o, s) for m, a, o, s in functions if _doc(o)]

    def code(i):  # the first lines of a real function: continue it
        module, attr, obj, source = functions[i % len(functions)]
        lines = textwrap.dedent(source).splitlines()
        keep = max(1, min(len(lines) - 1, rng.randint(2, 8)))
        return "\n".join(lines[:keep]) + "\n"

    def write_function(i):
        module, attr, obj, _ = documented[i % len(documented)]
        return (f"Write a Python function `{attr}` that does the following: "
                f"{_first_sentence(_doc(obj))}\n\n```python\n")

    def explain(i):
        module, attr, obj, _ = documented[i % len(documented)]
        return f"Explain what `{module}.{attr}` does in Python, in a short paragraph.\n\n"

    def qa(i):
        module, attr, obj, _ = documented[i % len(documented)]
        return f"Q: What is `{module}.{attr}` used for?\nA:"

    def json_prompt(i):
        name, members = enums[i % len(enums)]
        picked = list(members)[:rng.randint(3, 6)]
        items = ", ".join(f"{m.name}={m.value!r}" for m in picked)
        return f"Convert these members of {name} to a JSON array of objects with keys \"name\" and \"value\": {items}\n\n"

    def json_continue(i):
        name, members = enums[i % len(enums)]
        data = [{"name": m.name, "value": m.value if isinstance(m.value, (int, str)) else str(m.value)}
                for m in list(members)[:8]]
        text = json.dumps({"enum": name, "members": data}, indent=2)
        return text[:rng.randint(40, max(41, len(text) // 2))]

    def sql(i):
        module, attr, obj, _ = functions[i % len(functions)]
        table = attr.lower()
        params = [p for p in _parameters(obj) if p not in ("self", "cls")][:5]
        columns = ", ".join(["id INTEGER PRIMARY KEY"] + [f"{p} TEXT" for p in params])
        return (f"CREATE TABLE {table} ({columns});\n-- Write a SQL query that returns every row of {table} "
                f"ordered by id, then one that counts the rows.\n")

    def list_prompt(i):
        name, members = enums[i % len(enums)]
        return f"List the members of the Python enum {name}, one per line:\n1."

    def translate(i):
        module, attr, obj, _ = documented[i % len(documented)]
        return f"Translate to {rng.choice(LANGUAGES)}: {_first_sentence(_doc(obj))}\n"

    def math_prompt(i):
        a, b, c = rng.randint(12, 999), rng.randint(2, 99), rng.randint(3, 60)
        return f"Compute ({a} * {b}) + {c} step by step.\nStep 1:"

    def repeat(i):
        module, attr, obj, _ = functions[i % len(functions)]
        return "\n".join(f"{attr}_{k} = {module!r}" for k in range(rng.randint(3, 6))) + "\n"

    def prose(i):
        module, attr, obj, _ = documented[i % len(documented)]
        doc = " ".join(_doc(obj).split())
        return doc[:rng.randint(60, 200)]

    makers = {"code": code, "write_function": write_function, "explain": explain, "qa": qa, "json": json_prompt,
              "json_continue": json_continue, "sql": sql, "list": list_prompt, "translation": translate,
              "math": math_prompt, "repeat": repeat, "prose": prose}
    prompts = []
    names = list(makers)
    for i in range(n):
        category = names[i % len(names)]
        prompts.append({"category": category, "prompt": makers[category](i // len(names) + rng.randint(0, 10_000))})
    rng.shuffle(prompts)
    return prompts


def _parameters(obj) -> list:
    try:
        return list(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return []


# --- general prompts: everyday subjects and formats the stdlib-derived set lacks ---------------------
# Written for this project (word lists and templates); passages come from Python's own documentation
# (pydoc_data.topics). Kept apart from the benchmark suite (llamaspec/prompts.json) on purpose: no
# template reuses a suite prompt's wording or scaffold (its "Explanation:", "Question:/Answer:",
# "Summary in two sentences:", "Step 1:", "Poem:", "Output only the JSON" + fenced array, "Reasoning:" or
# "Review:" endings), nor its subjects (hash tables, planets, museums, lighthouses, shop change, pets,
# multiplication tables, stacks, interval merging, string splitting, code review of a user loader).

SUBJECTS = [
    "photosynthesis", "the water cycle", "volcanoes", "earthquakes", "the moon's phases", "tides", "rainbows",
    "the immune system", "vaccines", "the human heart", "digestion", "sleep", "muscles", "DNA", "evolution",
    "bees and pollination", "coral reefs", "rain forests", "deserts", "glaciers", "climate change",
    "renewable energy", "solar panels", "wind turbines", "batteries", "electric cars", "magnets", "electricity",
    "sound waves", "light and colour", "gravity", "friction", "the speed of light", "black holes",
    "comets", "the Roman Empire", "ancient Egypt", "the printing press", "the industrial revolution",
    "the first airplanes", "the invention of the telephone", "the Silk Road", "the Great Wall of China",
    "the Olympic Games", "democracy", "taxes", "inflation", "interest rates", "supply and demand", "money",
    "banks", "insurance", "recycling", "composting", "bread baking", "coffee", "tea", "chocolate",
    "cheese making", "vegetable gardens", "house plants", "dogs", "owls", "whales", "penguins", "ants",
    "bicycles", "trains", "bridges", "skyscrapers", "maps", "compasses", "clocks", "calendars", "libraries",
    "newspapers", "the internet", "email", "passwords", "encryption", "databases", "compilers",
    "operating systems", "computer memory", "recursion", "sorting algorithms", "binary numbers",
    "version control", "unit tests", "web browsers", "spreadsheets", "smartphones", "cameras",
    "music notation", "the piano", "the guitar", "watercolour painting", "chess", "football", "marathons",
    "swimming", "yoga", "first aid", "healthy breakfasts", "budgeting", "job interviews", "public speaking",
    "time management", "learning a language", "planning a trip", "camping", "hiking safety",
    "weather forecasts", "clouds", "snow", "thunderstorms", "rivers", "mountains", "islands", "forests",
    "farming", "fishing", "wool", "cotton", "glass", "paper", "steel", "plastic", "concrete", "wood", "salt",
    "sugar", "vitamins",
]
AUDIENCES = ["a ten-year-old", "a busy manager", "a new colleague", "a curious teenager", "a retired engineer",
             "a tourist", "someone who has never heard of it"]
CREATIVE_FORMS = ["haiku", "short story", "limerick", "diary entry", "dialogue between two friends",
                  "product description", "short speech", "fable", "song chorus", "postcard message"]
CHARACTERS = ["a baker", "an old sailor", "a young inventor", "a lost robot", "a village doctor", "a clever fox",
              "a lonely astronaut", "a retired teacher", "a street musician", "a tired detective", "a gardener",
              "a shy dragon", "a mail carrier", "a night-shift nurse", "a chess champion", "a fisherman's daughter"]
NAMES = ["Alice", "Omar", "Lena", "Kenji", "Sofia", "David", "Priya", "Tom", "Chen", "Fatima", "Lucas", "Nina",
         "Ravi", "Elena", "Jonas", "Amara"]
ENTITIES = {"books": ["title", "author", "year", "pages", "genres"], "cities": ["name", "country", "population", "landmarks"],
            "products": ["sku", "name", "price", "in_stock", "tags"], "students": ["student_id", "name", "grade", "courses", "graduated"],
            "cars": ["make", "model", "year", "electric", "features"], "recipes": ["name", "servings", "minutes", "ingredients"],
            "movies": ["title", "director", "year", "rating", "cast"], "servers": ["hostname", "ip", "cores", "online", "services"],
            "orders": ["order_id", "customer", "total", "paid", "items"], "songs": ["title", "artist", "seconds", "album"]}
LANGUAGES_CODE = [("Python", "python"), ("C", "c"), ("JavaScript", "javascript"), ("Java", "java"),
                  ("Rust", "rust"), ("Go", "go"), ("TypeScript", "typescript"), ("Bash", "bash"), ("C++", "cpp")]
CODE_TASKS = ["reverses a string", "counts the words in a text", "returns the n-th Fibonacci number",
              "checks whether a number is prime", "computes the greatest common divisor of two integers",
              "finds the largest element of an array", "removes duplicates from a list while keeping order",
              "performs binary search on a sorted array", "sorts an array with insertion sort",
              "converts a temperature from Celsius to Fahrenheit", "merges two sorted arrays into one sorted array",
              "counts how often each character occurs in a string", "computes the average of a list of numbers",
              "flattens a nested list", "transposes a matrix", "validates an email address with simple rules",
              "returns the factorial of n", "rotates an array by k positions", "finds the second smallest number",
              "capitalises the first letter of every word", "computes the sum of the digits of a number",
              "converts an integer to its binary representation", "reads a text file and prints the longest line",
              "computes the dot product of two vectors", "checks whether two strings are anagrams",
              "splits a list into chunks of size n", "returns the running total of a list of numbers",
              "counts the vowels in a string", "computes the median of a list", "generates all subsets of a set"]
PATTERNS = ["Count from {a} to {b} in steps of {c}, separated by commas.\n\n{a}, ",
            "The squares of 1 to {n}:\n1 -> 1\n2 -> 4\n",
            "Kilometres to miles, 1 to {n} km:\n1 km = 0.62 miles\n",
            "Powers of two up to 2^{n}:\n2^0 = 1\n2^1 = 2\n",
            "Days of the week in {lang}:\n1. ", "Months of the year and their days:\nJanuary - 31\n",
            "A countdown from {n} to 0:\n{n}\n", "The first {n} even numbers: 2, 4, 6,",
            "Repeat the phrase \"{s} matters\" {n} times, numbered:\n1. {s} matters\n",
            "Alphabet with one animal per letter:\nA - ant\nB - bear\n"]


def _passages(rng: random.Random) -> list:
    """Paragraphs of English prose from Python's own documentation (pydoc_data.topics)."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # pragma: no cover - stripped interpreters
        return ["Python is a programming language that lets you work quickly and integrate systems effectively."]
    out = []
    for text in topics.values():
        for para in text.split("\n\n"):
            para = " ".join(para.split())
            if 200 <= len(para) <= 700 and para[0].isalpha() and not para.startswith(("Changed", "New in", "Added")):
                out.append(para)
    rng.shuffle(out)
    return out


def build_general_prompts(n: int = 2000, seed: int = 0) -> List[dict]:
    """``n`` distinct prompts on everyday subjects and formats (explanations, questions, summaries,
    translation, creative writing, word problems, logic, JSON records, code in several languages, code
    reading, counting patterns), drawn evenly from the categories and shuffled with ``seed``."""
    rng = random.Random(seed + 7919)
    passages = _passages(rng)
    functions = _functions(rng)
    pick = rng.choice

    def explain(i):
        s = pick(SUBJECTS)
        return pick([f"How would you describe {s} to {pick(AUDIENCES)}?\n\n", f"Describe how {s} works.\n\n",
                     f"## {s[0].upper() + s[1:]}\n\n", f"Write a short encyclopedia entry about {s}.\n\n"])

    def question(i):
        s = pick(SUBJECTS)
        q = pick([f"What is {s}?", f"Why does {s} matter?", f"How does {s} work?", f"Tell me three facts about {s}.",
                  f"Who benefits from {s}, and how?", f"What is the history of {s}?", f"What can go wrong with {s}?"])
        return pick([f"Q: {q}\nA:", f"{q}\n\n", f"User: {q}\nAssistant:", f"FAQ\n\n{q}\n"])

    def summarize(i):
        text = passages[i % len(passages)]
        return pick([f"{text}\n\nTL;DR:", f"Paragraph: {text}\n\nIn short,", f"{text}\n\nThe key idea here is",
                     f"Condense this into a single sentence:\n{text}\n\n"])

    def translate(i):
        text = passages[i % len(passages)]
        sentence = text[:text.find(". ") + 1] if ". " in text else text
        return pick([f"Translate into {pick(LANGUAGES)}: {sentence}\n\n", f"{sentence}\n\nIn {pick(LANGUAGES)}:",
                     f"EN: {sentence}\n{pick(['FR', 'DE', 'ES', 'IT'])}:"])

    def creative(i):
        form = pick(CREATIVE_FORMS)
        who = pick(CHARACTERS)
        about = pick([f"{who} who finds something unexpected", f"{who} on a rainy day", f"{pick(SUBJECTS)}",
                      f"{who} and {pick(SUBJECTS)}"])
        return pick([f"Write a {form} about {about}.\n\n", f"A {form} about {about}:\n\n"])

    def word_problem(i):
        name = pick(NAMES)
        problem = pick([
            f"A train travels {rng.randint(40, 160)} km per hour for {rng.randint(2, 7)} hours and then "
            f"{rng.randint(30, 120)} km per hour for {rng.randint(1, 5)} hours. How far does it travel in total?",
            f"A rectangle is {rng.randint(3, 40)} cm long and {rng.randint(2, 30)} cm wide. What are its area and perimeter?",
            f"{name} reads {rng.randint(10, 60)} pages a day. The book has {rng.randint(200, 900)} pages. "
            "How many days does it take to finish it?",
            f"A class of {rng.randint(18, 35)} students is split into groups of {rng.randint(3, 6)}. "
            "How many full groups are there and how many students are left over?",
            f"A tank holds {rng.randint(100, 900)} litres and a pipe fills {rng.randint(5, 40)} litres per minute. "
            "How long does it take to fill the empty tank?"])
        return pick([f"{problem}\n\nSolution:", f"{problem} Show your working.\n\n", f"Exercise: {problem}\nAnswer with an explanation:"])

    def logic(i):
        people = rng.sample(NAMES, 3)
        things = rng.sample(["a bicycle", "a violin", "a telescope", "a kayak", "a camera", "a chessboard"], 3)
        return (f"{people[0]}, {people[1]} and {people[2]} each have one of {things[0]}, {things[1]} and "
                f"{things[2]}. {people[0]} does not have {things[1]}. {people[1]} has neither {things[0]} nor "
                f"{things[2]}. Who has which item?\n\n")

    def json_records(i):
        entity, keys = pick(list(ENTITIES.items()))
        keys = keys[:1] + rng.sample(keys[1:], rng.randint(2, len(keys) - 1))  # varied schemas
        count = rng.randint(2, 5)
        return pick([f"Create a JSON object describing one of the {entity}, with keys " + ", ".join(keys) + ".\n\n{",
                     f"# {count} sample {entity}\n{entity} = [\n    {{\"{keys[0]}\": ",
                     f"Fictional {entity} as JSON lines ({', '.join(keys)}):\n{{\"{keys[0]}\": "])

    def code_other(i):
        lang, fence = pick(LANGUAGES_CODE)
        task = CODE_TASKS[i % len(CODE_TASKS)]
        comment = "#" if fence in ("python", "bash") else "//"
        return pick([f"Write a {lang} function that {task}.\n\n```{fence}\n", f"{comment} {lang}: a function that {task}\n",
                     f"Implement a {lang} program that {task}, with comments.\n\n```{fence}\n"])

    def code_reading(i):
        module, attr, obj, source = functions[i % len(functions)]
        body = "\n".join(textwrap.dedent(source).splitlines()[:25])
        return pick([f"```python\n{body}\n```\n\nWhat does this code do?\n\n",
                     f"```python\n{body}\n```\n\nA step-by-step walk through this function:\n\n",
                     f"Add comments to this function.\n\n```python\n{body}\n```\n\n```python\n"])

    def pattern(i):
        return pick(PATTERNS).format(a=rng.randint(2, 19), b=rng.randint(40, 200), c=rng.randint(2, 9),
                                     n=rng.randint(8, 20), lang=pick(LANGUAGES), s=pick(SUBJECTS).capitalize())

    makers = {"explain": explain, "question": question, "summarize": summarize, "translate": translate,
              "creative": creative, "word_problem": word_problem, "logic": logic, "json_records": json_records,
              "code_other": code_other, "code_reading": code_reading, "pattern": pattern}
    return _draw_distinct(makers, n, "general_", rng, step=1)


def _draw_distinct(makers: dict, n: int, prefix: str, rng: random.Random, step: int) -> List[dict]:
    """``n`` distinct prompts, the categories in turn, shuffled with ``rng``: a maker that repeats an
    earlier prompt (small templates do) is called again with its index moved on by ``step``."""
    names = list(makers)
    prompts, seen = [], set()
    for i in range(n):
        category = names[i % len(names)]
        for attempt in range(50):
            prompt = makers[category](i + attempt * step)
            if prompt not in seen:
                seen.add(prompt)
                prompts.append({"category": prefix + category, "prompt": prompt})
                break
    rng.shuffle(prompts)
    return prompts


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

# --- copy prompts: answers that repeat their context ---------------------------------------------------
# Gemma 270M repeats a lot: 61% of the suite's greedy output tokens continue a trigram seen earlier in the
# text (the question echoed after the answer, loops of Q/A pairs, the prompt's words in a docstring), yet
# the head trained on the three sets above predicts those tokens worse than the rest (0.33 vs 0.41 slot-1
# accuracy, teacher-forced): it has not learnt to copy from its context. Its context features hold what
# copying needs (a linear probe reads a position's own token from them 99.9% of the time and the previous
# token 68%: bench/dspark_copy.py), so this set asks for answers that are mostly copies of high-entropy
# text (documentation, source code, random records), where nothing but copying predicts the next token.
# Training on it did not teach the head to copy (bench/results/dspark_gemma_copy_experiment.md).


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
