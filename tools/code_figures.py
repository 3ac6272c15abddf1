"""Complexity and size figures of spyrejax's modules, and the bars they must meet.

``make figures`` (or ``python tools/code_figures.py``) prints the modules over
:data:`MAX_LINES` lines and the functions at cyclomatic complexity (radon's) of
:data:`REPORTED` or more; ``--check`` exits 1 when a module or a function is over its bar
and not on an allow-list below, or over the ceiling its entry records (tests/project/test_tools.py
runs the check). The bars are issue 27's: modules under 600 lines unless one concept needs
more, no function above complexity 25.

Each allow-list entry is a debt to pay, recorded at today's figure so that nothing on
it gets worse: split the module or the function, then delete its entry (``make figures``
names the entries whose code has come under the bar as paid; the check does not fail on
them, so that paying a debt in one branch never breaks another's run).
"""

from __future__ import annotations

import pathlib
import sys

from radon.visitors import ComplexityVisitor

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "spyrejax"
MAX_LINES = 600
MAX_COMPLEXITY = 25
REPORTED = 15

# Modules over MAX_LINES today, each with its ceiling (its size when listed, rounded up to
# 25 lines so that small fixes elsewhere in a listed module do not trip the check).
LONG_MODULES: dict[str, int] = {}

# Functions above MAX_COMPLEXITY today ("module: qualified name"), each with its figure then.
COMPLEX_FUNCTIONS: dict[str, int] = {}


def modules() -> list[pathlib.Path]:
    """Every Python module of the package."""
    return sorted(PACKAGE.rglob("*.py"))


def sizes() -> dict[str, int]:
    """Lines per module, by path inside the package."""
    return {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in modules()}


def complexities() -> dict[str, int]:
    """Cyclomatic complexity of every function and method, by "module: qualified name"."""
    figures: dict[str, int] = {}
    for path in modules():
        visitor = ComplexityVisitor.from_code(path.read_text())
        blocks = [*visitor.functions, *(m for c in visitor.classes for m in c.methods)]
        for block in blocks:
            key = f"{path.relative_to(PACKAGE)}: {block.fullname}"
            figures[key] = max(figures.get(key, 0), block.complexity)
    return figures


def problems() -> list[str]:
    """What is over its bar and not allowed, or over the ceiling its entry records."""
    found = []
    for name, n in sizes().items():
        bar = LONG_MODULES.get(name, MAX_LINES)
        if n > bar:
            found.append(f"{name}: {n} lines, over {bar}")
    for name, c in complexities().items():
        bar = COMPLEX_FUNCTIONS.get(name, MAX_COMPLEXITY)
        if c > bar:
            found.append(f"{name}: complexity {c}, over {bar}")
    return found


def paid() -> list[str]:
    """Allow-list entries whose code is under the bar now: delete them."""
    lines, cc = sizes(), complexities()
    return [
        *(m for m in LONG_MODULES if lines.get(m, 0) <= MAX_LINES),
        *(f for f in COMPLEX_FUNCTIONS if cc.get(f, 0) <= MAX_COMPLEXITY),
    ]


def report() -> str:
    """The figures: long modules, and functions at complexity REPORTED or more."""
    lines, cc = sizes(), complexities()
    long = sorted((n, name) for name, n in lines.items() if n > MAX_LINES)
    hard = sorted((c, name) for name, c in cc.items() if c >= REPORTED)
    out = [f"{len(lines)} modules, {sum(lines.values())} lines; {len(long)} over {MAX_LINES}:"]
    out += [f"  {n:5d}  {name}" for n, name in reversed(long)]
    over = sum(c > MAX_COMPLEXITY for c, _ in hard)
    out.append(
        f"{len(cc)} functions; {len(hard)} at complexity >= {REPORTED}, {over} above "
        f"{MAX_COMPLEXITY}:"
    )
    out += [f"  {c:5d}  {name}" for c, name in reversed(hard)]
    out += [f"paid, delete its allow-list entry: {name}" for name in paid()]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    """Print the figures, or with ``--check`` the problems (exit 1 if any)."""
    if "--check" in argv:
        found = problems()
        if found:
            print("\n".join(found))
        return 1 if found else 0
    print(report())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
