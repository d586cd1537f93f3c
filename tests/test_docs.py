"""The documentation cannot drift from the API: every Python example in README.md and docs/ runs here, against
tiny models written under the file names the examples use, and the site builds with ``mkdocs build --strict``.

Each page's ``python`` blocks run in order in one namespace, in a folder holding:

- ``target.gguf``: a tiny qwen3 target; ``draft.gguf``: a 2-layer draft that shares its first layers;
- ``dspark-head.gguf`` / ``dflash-head.gguf`` / ``eagle3-head.gguf``: random-weight heads for that target;
- ``qwen35.gguf``: a tiny hybrid qwen35 target with an MTP layer; ``qwen35-draft.gguf``: its 2-layer draft.

Blocks fenced as anything else (``bash``, ``text``) are not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)


def python_blocks(page: Path) -> list[str]:
    return FENCE.findall(page.read_text())


@pytest.fixture(scope="module")
def example_dir(tmp_path_factory):
    from llamaspec import testing

    out = tmp_path_factory.mktemp("doc-examples")
    long = {"n_ctx_train": 32768}  # the examples use the default n_ctx (4096) without a warning
    target = testing.write_target(out / "target.gguf", 0, **long)
    testing.write_draft_simple(out / "draft.gguf", 0, n_layer=2, **long)
    testing.write_dspark(out / "dspark-head.gguf", target, block_size=8, seed=2)
    testing.write_dflash(out / "dflash-head.gguf", target, block_size=8, seed=1)
    testing.write_eagle3(out / "eagle3-head.gguf", target, seed=4)
    testing.write_qwen35_target(out / "qwen35.gguf", seed=0, n_nextn=1, **long)
    testing.write_qwen35_draft(out / "qwen35-draft.gguf", seed=0, n_layer=2, **long)
    return out


def test_every_page_with_examples_is_found():
    pages = {p.relative_to(ROOT).as_posix() for p in PAGES if python_blocks(p)}
    assert "README.md" in pages and any(p.startswith("docs/") for p in pages)


def run_examples(page: Path, label: str) -> None:
    """Run the page's python blocks in order in one namespace (the current folder holds the models)."""
    namespace: dict = {"__name__": "__doc_example__"}
    try:
        for i, block in enumerate(python_blocks(page)):
            try:
                exec(compile(block, f"{label} (python block {i + 1})", "exec"), namespace)
            except Exception as exc:  # name the block: the traceback's file is the page
                raise AssertionError(f"{label}, python block {i + 1} failed: {exc!r}\n{block}") from exc
    finally:
        for value in namespace.values():  # close what the examples opened, so the next page starts clean
            close = getattr(value, "close", None)
            if callable(close) and type(value).__module__.startswith("llamaspec"):
                close()


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_examples_run(page, example_dir, monkeypatch):
    monkeypatch.chdir(example_dir)
    run_examples(page, page.relative_to(ROOT).as_posix())


def test_a_broken_example_is_caught(tmp_path, example_dir, monkeypatch):
    page = tmp_path / "broken.md"
    page.write_text("text\n\n```python\nimport llamaspec\ngen = llamaspec.Generator('target.gguf')\n```\n\n"
                    "```python\ngen.no_such_method()\n```\n")
    monkeypatch.chdir(example_dir)
    with pytest.raises(AssertionError, match="python block 2 failed"):
        run_examples(page, "broken.md")


def test_site_builds_strictly(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "index.html").is_file()
