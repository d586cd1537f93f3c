"""MkDocs hook: publish the figures of bench/results/ under img/ without keeping copies in docs/."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

FIGURES = Path(__file__).resolve().parents[1] / "bench" / "results"


def on_files(files, config):
    for figure in sorted(FIGURES.rglob("*.png")):
        uri = "img/" + figure.relative_to(FIGURES).as_posix()
        files.append(File.generated(config, uri, abs_src_path=str(figure)))
    return files
