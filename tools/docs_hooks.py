"""mkdocs hooks of `make docs`: the notebooks rendered into the site as markdown pages.

Each ``notebooks/NN_name.ipynb`` becomes the page ``notebooks/NN_name.md`` with its committed
outputs (figures as PNG files beside it), converted by nbconvert when the site is built, so
the site shows exactly what the committed notebooks show and nothing generated is committed.
"""

from __future__ import annotations

import pathlib
from typing import Any

import nbformat
from mkdocs.structure.files import File, Files
from nbconvert import MarkdownExporter

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


def notebook_pages() -> dict[str, str | bytes]:
    """Site path -> content of every notebook's page and of the figures it shows."""
    exporter = MarkdownExporter()
    pages: dict[str, str | bytes] = {}
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        files_dir = f"{path.stem}_files"
        body, resources = exporter.from_notebook_node(
            nb, resources={"output_files_dir": files_dir, "unique_key": path.stem}
        )
        source = (
            f"*`notebooks/{path.name}`, shown with its committed outputs; `make lab` opens it.*\n\n"
        )
        pages[f"notebooks/{path.stem}.md"] = source + body
        for name, data in resources.get("outputs", {}).items():
            pages[f"notebooks/{name}"] = data
    return pages


def on_files(files: Files, config: Any) -> Files:
    """Add the notebooks' pages and figures to the site's files."""
    for src_uri, content in notebook_pages().items():
        files.append(File.generated(config, src_uri, content=content))
    return files
