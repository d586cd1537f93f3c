"""Prompts derived from the standard library installed with the interpreter (source, docstrings, enums, module names)."""

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
