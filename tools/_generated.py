"""What the generators of committed files share: rewrite the file, or check it is current."""

from __future__ import annotations

from pathlib import Path


def write_or_check(path: Path, text: str, argv: list[str], root: Path, target: str) -> int:
    """Rewrite ``path`` with ``text``, or with ``--check`` report whether it is current.

    Args:
        path: the generated file.
        text: what it should hold.
        argv: the command's arguments (``--check`` only checks).
        root: the repository root, for the message.
        target: the ``make`` target that regenerates it.

    Returns:
        The exit status: 1 when ``--check`` finds the file stale, else 0.
    """
    if "--check" in argv:
        if path.read_text() != text:
            print(f"{path.relative_to(root)} is not current: run `make {target}`")
            return 1
        return 0
    path.write_text(text)
    return 0
