"""The planner's objective: the device bytes a choice of layouts reads and writes.

One owner for what an option, a restickify and a host fallback cost the planner: bytes of
device images in their layouts, padding included (``layout.nbytes``), so a slice, a
reduction or a broadcast lands in the layout that costs least downstream.
"""

from __future__ import annotations

from typing import Any

from .. import primitives as sp
from ..primitives._array import SpyreType
from ..primitives._stick import restickify_cost

__all__ = ["move_bytes", "nbytes", "traffic"]


def nbytes(t: SpyreType) -> int:
    """The device bytes of ``t``'s image, padding included (a view: its base image)."""
    return t.layout.nbytes


def move_bytes(source: SpyreType, target: SpyreType) -> int:
    """Device bytes a restickify reads and writes: the source image and the target's."""
    return nbytes(source) + nbytes(target)


def _spyre_types(avals: Any) -> list[SpyreType]:
    """The Spyre types among (possibly nested) abstract values."""
    if isinstance(avals, tuple | list):
        return [t for a in avals for t in _spyre_types(a)]
    return [avals] if isinstance(avals, SpyreType) else []


def traffic(called: list[Any]) -> int:
    """The device bytes a lowering's primitives read and write: the planner's objective.

    Every primitive but a view reads its operands' images and writes its results', in
    their layouts' bytes (padding included); a collective also sends its elements
    between cards. A charge standing for a body's copies (``lowering._control``)
    reads and writes the elements it moves, as often as it runs; a host fallback in a
    body moves its DMA bytes.
    """
    total = 0
    for p in called:
        if p.role == "view":
            continue
        if isinstance(p, sp.SpyrePrim):
            total += sum(map(nbytes, _spyre_types(p.in_avals)))
            total += sum(map(nbytes, _spyre_types(p.out_avals)))
            if p.role == "collective":
                total += _elements_bytes(p.moves, _spyre_types(p.in_avals))
        elif p.role == "host":
            total += p.to_host_bytes + p.to_device_bytes
        else:
            total += 2 * _elements_bytes(p.moves, _spyre_types(p.in_avals))
    return total


def _elements_bytes(elements: int, avals: list[SpyreType]) -> int:
    """Bytes of ``elements`` device elements in the format of the first of ``avals``."""
    if not avals or not elements:
        return 0
    t = avals[0]
    return elements * nbytes(t) // restickify_cost(t)
