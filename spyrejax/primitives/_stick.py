"""The stick of a Spyre value: which logical dim runs along the 128-byte sticks.

One owner for the concept the planner reasons in. A *stick* is a logical dim index, or
:data:`SPARSE` for a synthetic stick (one element per stick, spec section 2.5; also any
value stuck on a dim of size 1). This module gives the stick of a type, the default
layout and type of a stick, whether a type serves a consumer that needs a stick, and
what moving a value into a new layout costs (spec section 7).
"""

from __future__ import annotations

import math
from typing import Any

from .._errors import LayoutError
from ..layout._dtypes import format_for_dtype
from ..layout._layout import SpyreTensorLayout
from ._array import SpyreType

__all__ = [
    "SPARSE",
    "canon",
    "default_layout",
    "default_type",
    "dim_order_for",
    "grouped_layout",
    "restickify_cost",
    "serves",
    "stick_name",
    "stick_of",
    "stick_options",
]

SPARSE = -1
"""The stick of a sparse value (and of any value stuck on a size-1 dim)."""


def canon(shape: tuple[int, ...], d: int) -> int:
    """``d`` as a stick: SPARSE for a size-1 dim."""
    return SPARSE if d == SPARSE or shape[d] == 1 else d


def stick_options(shape: tuple[int, ...]) -> list[int]:
    """The sticks a value of ``shape`` can have: its dims of size > 1, and SPARSE."""
    return [d for d, n in enumerate(shape) if n > 1] + [SPARSE]


def stick_of(t: SpyreType) -> int:
    """The stick of a Spyre type."""
    s = t.stick_dim
    return SPARSE if s is None else canon(t.shape, s)


def stick_name(s: int | None) -> str:
    """``"sparse"`` or ``"dim d"``, for messages."""
    return "sparse" if s == SPARSE else f"dim {s}"


def dim_order_for(shape: tuple[int, ...], stick: int) -> list[int] | None:
    """The dim order of the default layout stuck on ``stick``."""
    if not shape:
        return None
    if stick == SPARSE:
        return [*range(len(shape)), -1]
    return [d for d in range(len(shape)) if d != stick] + [stick]


def default_layout(shape: tuple[int, ...], dtype: Any, stick: int) -> SpyreTensorLayout:
    """The default layout of ``shape`` stuck on ``stick`` (spec section 2)."""
    return SpyreTensorLayout(shape, dtype, dim_order_for(shape, stick))


def default_type(shape: tuple[int, ...], dtype: Any, stick: int) -> SpyreType:
    """The type of a fresh array in :func:`default_layout`: what a restickify makes."""
    return SpyreType.contiguous(shape, dtype, default_layout(shape, dtype, stick))


def serves(t: SpyreType, required: int | None) -> bool:
    """Whether a value of type ``t`` can be read by a consumer that needs ``required``.

    ``None`` needs nothing. A sparse broadcast (stride 0) serves any stick along which
    it is broadcast: every lane of such a stick holds the same element.
    """
    if required is None:
        return True
    have = stick_of(t)
    if have == required:
        return True
    return have == SPARSE and t.shape[required] > 1 and t.strides[required] == 0


def restickify_cost(t: SpyreType) -> int:
    """Elements a restickify (or copy) of ``t`` moves: ``prod(device_size)`` (spec 7).

    A window of a larger buffer (a layout with gaps) moves its valid range only.
    """
    return math.prod(t.layout.valid_size)


def grouped_layout(shape: tuple[int, ...], dtype: Any) -> SpyreTensorLayout | None:
    """The layout whose stick walks the trailing dims of ``shape`` together, or None.

    A last dim shorter than a stick (RoPE's pairs, ``[..., D/2, 2]``) stuck alone is
    padded to a whole stick: ``eps / n`` times its data. Merged with the dims before it
    until they fill whole sticks exactly (the stick ``2*d2 + d3``), it takes no
    padding: the default layout of the merged shape, which holds ``shape`` as it is
    (the reshape back to ``[..., D]`` is a view). None when the last dim is 1 or fills
    a stick, or the trailing dims fill no whole number of sticks.
    """
    eps = format_for_dtype(dtype).elems_per_stick()
    if len(shape) < 2 or not 1 < shape[-1] < eps:
        return None
    merged, k = 1, len(shape)
    while k > 0 and merged < eps:
        k -= 1
        merged *= shape[k]
    if merged < eps or merged % eps:
        return None
    layout = SpyreTensorLayout((*shape[:k], merged), dtype)
    try:
        layout.for_host(shape)
    except LayoutError:
        return None
    return layout
