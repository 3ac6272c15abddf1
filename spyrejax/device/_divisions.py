"""Ops divided over the cores once per geometry in a process, for every reader alike.

The matmul pass of a division (spyre-device spec section 2, pass 2) costs every
candidate split: about 17 ms for a product of three or four dims (the 4-layer GPT
training step's 24 products: 0.4 s of CPU). :func:`divide_alike` is the one owner of
divisions: an op's is searched the first time its geometry and hint are seen on a
machine in the process, then reused by every program's device plan
(:func:`~spyrejax.device.plan_program`: ``explain``, the export, ``emulate="cores"``; a
repeated layer's ops, a second ``explain`` of one program), and would be by the layout
planner's charge of a product at its predicted time (branch ``devtime2-charge``, not
landed: benchmarks/README item 66). Until 2026-11-29 each program divided afresh.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import replace

from .._counts import count
from ._cost import op_cost
from ._division import WorkDivision, divide
from ._machine import Machine
from ._space import OpSpace

__all__ = ["divide_alike", "divide_op", "divisions_apart"]

KEPT = 4096
"""The most divisions kept (past it the cache starts again; a GPT step has ~200 geometries)."""

_DIVISIONS: dict[Hashable, WorkDivision] = {}
"""Every division made, by :func:`_key` (geometry, hint, machine)."""


def divide_op(
    space: OpSpace, machine: Machine, hint: Mapping[str, int] | None = None
) -> WorkDivision:
    """An op's division as a program plan makes it (pass 2 scored by predicted time)."""
    count("device.divide")

    def score(div: WorkDivision) -> float:
        count("device.cost")
        return op_cost(div, machine).time_s

    return divide(space, machine, hint, score)


def _key(space: OpSpace, hint: Mapping[str, int] | None, machine: Machine) -> Hashable:
    """What a division depends on: the space's geometry, the hint, the machine."""
    return (space.geometry(), None if hint is None else tuple(sorted(hint.items())), machine)


def divide_alike(space: OpSpace, hint: Mapping[str, int] | None, machine: Machine) -> WorkDivision:
    """:func:`divide_op`, or the division of an op of the same geometry and hint.

    The division is made for this op's own space (its tensors' names), with the splits
    of the op it repeats, divided before in this process (a repeated layer, the
    planner's charge of the same product); the two share their per-core boxes,
    computed once.
    """
    key = _key(space, hint, machine)
    seen = _DIVISIONS.get(key)
    if seen is None:
        if len(_DIVISIONS) >= KEPT:
            _DIVISIONS.clear()
        _DIVISIONS[key] = seen = divide_op(space, machine, hint)
        return seen
    if seen.space is space:
        return seen
    return replace(seen, space=space, _cache=seen._cache)  # boxes: of the geometry


@contextlib.contextmanager
def divisions_apart() -> Iterator[None]:
    """Inside the block, :func:`divide_alike` starts from no kept division (tests).

    For tests that count how often one program divides: the divisions made inside are
    dropped at the end and the process's kept ones come back.
    """
    kept = dict(_DIVISIONS)
    _DIVISIONS.clear()
    try:
        yield
    finally:
        _DIVISIONS.clear()
        _DIVISIONS.update(kept)
