"""Counts of the library's costly steps, for tests and tools that pin how often each runs.

The planner's searches, the device model's divisions and costs, explain's rows, the C
kernel's transposes: a step calls :func:`count` with its name, and :func:`counting`
collects the counts of the steps run inside a block. Outside any block a count is one
context-variable read. The names counted:

- ``plan.search``: the planner ranks the types a value can be read in (``_candidates``).
- ``device.divide``: the device model divides an op (``divide_op``).
- ``device.cost``: it costs a division (``op_cost``, from a plan).
- ``device.streams``: it finds the operands a division streams through LX (``_streams``).
- ``device.same_slices``: it compares a producer's and a consumer's slices.
- ``space.elementwise``: an elementwise primitive makes its iteration space.
- ``program.plan``: a lowering's device program is planned into its jaxpr's types.
- ``explain.row``: ``explain`` makes one node's report row.
- ``dma.kernel_transpose``: the host engine runs one descriptor on the C transpose.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["count", "counting"]

_COUNTS: ContextVar[tuple[Counter[str], ...]] = ContextVar("spyrejax_counts", default=())


@contextlib.contextmanager
def counting() -> Iterator[Counter[str]]:
    """Count the steps run inside the block, by name (``counts["plan.search"]``).

    Use as ``with counting() as counts: ...``. Blocks nest; each counts every step run
    inside it.
    """
    counts: Counter[str] = Counter()
    token = _COUNTS.set((*_COUNTS.get(), counts))
    try:
        yield counts
    finally:
        _COUNTS.reset(token)


def count(name: str) -> None:
    """One more run of the step ``name`` for every :func:`counting` block open."""
    for counts in _COUNTS.get():
        counts[name] += 1
