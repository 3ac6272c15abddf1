"""Gaps: device positions around the range a layout's index map iterates (issue 26).

A layout may sit inside a larger device buffer: on each device dim, ``(front, back)``
positions before and after its *valid range* hold no data (torch-spyre's SuperDSC
``backGap``, the DMA descriptors' ``validGap_`` pairs). The index map is the gap-free
one shifted by the front gaps. The rules for gaps live here; ``_layout`` asks.

Pure Python/NumPy: no JAX import.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .._errors import LayoutError
from ._dtypes import BYTES_PER_STICK

if TYPE_CHECKING:  # _layout imports this module
    from ._layout import SpyreTensorLayout

__all__ = [
    "Gaps",
    "check_gaps",
    "gap_slabs",
    "in_valid_range",
    "valid_nbytes",
    "valid_size",
    "widen",
]

Gaps = tuple[tuple[int, int], ...]


def check_gaps(device_gaps: Any, size: tuple[int, ...]) -> Gaps:
    """``(front, back)`` per device dim, validated against device sizes ``size``.

    Raises:
        LayoutError: if the gaps are not one pair of ints >= 0 per dim, are longer than
            their dim, or lie on the stick dim (the last).
    """
    if device_gaps is None:
        return ((0, 0),) * len(size)
    try:
        gaps = tuple((int(f), int(b)) for f, b in device_gaps)
    except (TypeError, ValueError):
        gaps = None
    if gaps is None or len(gaps) != len(size):
        raise LayoutError(
            f"device_gaps {device_gaps!r} must be one (front, back) pair per device dim "
            f"of device_size {list(size)}"
        )
    if any(f < 0 or b < 0 for f, b in gaps):
        raise LayoutError(f"device_gaps must be >= 0, got {list(gaps)}")
    if any(f + b > n for (f, b), n in zip(gaps, size, strict=True)):
        raise LayoutError(f"device_gaps {list(gaps)} are longer than device_size {list(size)}")
    if gaps[-1] != (0, 0):
        raise LayoutError(f"the stick dim cannot have a gap, got device_gaps {list(gaps)}")
    return gaps


def valid_size(size: tuple[int, ...], gaps: Gaps) -> tuple[int, ...]:
    """Per device dim, the range the index map iterates: the size minus its gaps."""
    return tuple(n - f - b for n, (f, b) in zip(size, gaps, strict=True))


def widen(
    size: tuple[int, ...], gaps: Gaps, dim: Any, front: int, back: int
) -> tuple[list[int], list[tuple[int, int]]]:
    """Device sizes and gaps with ``front`` and ``back`` more gap on device dim ``dim``.

    Raises:
        LayoutError: if ``dim`` is not a device dim or is the stick dim, or a gap is < 0.
    """
    rank = len(size)
    if isinstance(dim, bool) or not isinstance(dim, int) or not -rank <= dim < rank:
        raise LayoutError(f"dim {dim!r} is not a device dim of device_size {list(size)}")
    dim %= rank
    if dim == rank - 1:
        raise LayoutError(f"the stick dim (device dim {dim}) cannot have a gap")
    if front < 0 or back < 0:
        raise LayoutError(f"gaps must be >= 0, got front {front} and back {back}")
    new_size, new_gaps = list(size), list(gaps)
    new_size[dim] += front + back
    new_gaps[dim] = (gaps[dim][0] + front, gaps[dim][1] + back)
    return new_size, new_gaps


def in_valid_range(c: Any, gaps: Gaps, valid: tuple[int, ...]) -> tuple[Any, list[Any]]:
    """Whether device coordinates lie in the valid range, and them counted from its origin.

    Array-agnostic like ``HostMapping.data_positions``: ``c`` holds one coordinate per
    device dim (ints or broadcastable arrays); only ``-``, ``<``, ``>=`` and ``&`` are
    used, and only for dims with a gap.
    """
    ok: Any = True
    out = list(c)
    for j, ((front, back), n) in enumerate(zip(gaps, valid, strict=True)):
        if front:
            ok = ok & (out[j] >= front)
            out[j] = out[j] - front
        if back:
            ok = ok & (out[j] < n)
    return ok, out


def gap_slabs(size: tuple[int, ...], gaps: Gaps) -> list[tuple[int, int, int]]:
    """Slabs ``(device dim, start, stop)`` covering the gap positions."""
    slabs = []
    for j, (front, back) in enumerate(gaps):
        slabs += [(j, 0, front)] if front else []
        slabs += [(j, size[j] - back, size[j])] if back else []
    return slabs


def valid_nbytes(layout: SpyreTensorLayout) -> int:
    """The device bytes an op reading or writing ``layout`` moves: its own data's.

    The whole image (``layout.nbytes``, padding included) or, for a window of a larger
    buffer (a layout with gaps), its valid range only: the gaps are the buffer's other
    slots, written by their own producers. The one rule the planner's objective
    (``lowering._traffic``) and the device model (``device._space.TensorSpec``) both read.
    A tile window (``layout._lanes``: a slice inside one stick of a longer last dim)
    moves the sticks of its tile only, a stick a row.
    """
    if layout.has_gaps:
        return BYTES_PER_STICK * math.prod(layout.valid_size[:-1])
    if layout.tile is not None:
        return layout.nbytes // layout.device_size[layout.tile[0]]
    return layout.nbytes
