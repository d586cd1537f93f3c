"""The package's shape: no import circles, small modules, and the test-model writer off the runtime path."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "llamaspec"
MAX_LINES = 500


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Every llamaspec module ``path`` imports, at module level or inside a function."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("llamaspec"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if not module.startswith("llamaspec"):
                continue
            # `from . import x` imports module x when there is one, else a name of the package
            found.update(f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py") if "_vendor" not in p.parts}
    names = set(modules) | {"llamaspec._core"}  # the compiled extension imports nothing of ours
    graph = {"llamaspec._core": set()}
    for name, path in modules.items():
        graph[name] = {m for m in _imports(path, names) if m in names and m != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _package_graph_is_read() -> None:
    graph = _graph()
    # the checker sees real edges: the generator builds its batches on batch.py
    assert "llamaspec.batch" in graph["llamaspec.generator"]
    assert "llamaspec.testing.common" in graph["llamaspec.testing.qwen3"]


def test_no_import_circles_in_the_python_package():
    _package_graph_is_read()
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _cpp_dependencies() -> dict[str, set[str]]:
    """src/*.cpp -> the .cpp files whose functions it reaches through the headers it includes.

    A header belongs to its namesake .cpp and to every .cpp that defines a free function it declares."""
    src = ROOT / "src"
    declared = {h.name: set(re.findall(r"^[A-Za-z][^\n;(]*\b(\w+)\([^;]*\);", h.read_text(), re.M))
                for h in src.glob("*.h")}
    sources = {c.name: c.read_text() for c in src.glob("*.cpp")}
    defined = {c: set(re.findall(r"^[A-Za-z][^\n;(]*\b(\w+)\([^;]*?\)\s*\{", s, re.M)) for c, s in sources.items()}
    owners = {h: {c for c in sources if c == h[:-2] + ".cpp" or names & defined[c]} for h, names in declared.items()}
    includes = {c: set(re.findall(r'#include "(\w+\.h)"', s)) & set(declared) for c, s in sources.items()}
    return {c: {o for h in hs for o in owners[h] if o != c} for c, hs in includes.items()}


def test_no_circles_between_the_cpp_files():
    graph = _cpp_dependencies()
    assert {"bindings_batch.cpp", "kernel_probe.cpp", "engine.cpp"} <= graph["bindings.cpp"]  # real edges are seen
    assert _cycles(graph) == []


def test_modules_are_small():
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py") if "_vendor" not in p.parts
            and (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_importing_llamaspec_leaves_the_test_model_writer_unloaded():
    code = "import sys, llamaspec; print(sorted(m for m in sys.modules if m.startswith('llamaspec.testing')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]"


def test_the_old_test_model_module_still_works_with_a_warning():
    code = "import llamaspec.tiny_models as tm; print(tm.write_target.__module__)"
    out = subprocess.run([sys.executable, "-W", "always::DeprecationWarning", "-c", code], capture_output=True,
                         text=True, check=True, cwd="/")
    assert out.stdout.strip() == "llamaspec.testing.qwen3"
    assert "DeprecationWarning: llamaspec.tiny_models is now llamaspec.testing" in out.stderr
