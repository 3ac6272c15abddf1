"""Execute the notebooks in notebooks/; with --inplace, save them with fresh outputs.

Used by `make notebooks` (refresh the committed outputs) and by the test suite.
"""

from __future__ import annotations

import pathlib
import sys

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[1] / "notebooks"


def execute(path: pathlib.Path, timeout: int = 300) -> nbformat.NotebookNode:
    """Run a notebook top to bottom in a fresh kernel; raises on the first failing cell."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    return nb


def main(argv: list[str]) -> int:
    """Run every notebook; ``--inplace`` writes them back with their new outputs."""
    inplace = "--inplace" in argv
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = execute(path)
        if inplace:
            nbformat.write(nb, path)
        print(f"ran {path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
