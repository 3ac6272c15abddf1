"""Strided slices along the stick read in place: lane-strided views (issue 26).

``x[..., offset::step]`` of an array whose sticks walk its last dim keeps its elements
where they are: on lanes ``offset, offset + step, ...`` of ``x``'s sticks. :class:`LaneView`
is that slice as a view, typed in :func:`~spyrejax.layout._lanes.laned` (the buffer's
device sizes, the piece's lanes); nothing moves. RoPE's interleaved pairs read their
halves ``x[..., ::2]`` and ``x[..., 1::2]`` so.

The other way round, pieces ``a_0 ... a_(s-1)`` of ``[..., n]`` interleaved into
``[..., s * n]`` (RoPE's ``stack([...], -1).reshape(..., D)``) are written in place:
each piece's producer writes its result on lanes ``k::s`` of the destination's sticks
(:class:`LanePlace`, as a producer writes into a window of gaps), and
:class:`LaneAssemble` is the destination made of them; neither moves anything. Under
``emulate="cores"`` both run per core (``written_space``, :mod:`~spyrejax.primitives._writes`):
each core writes the box its producer's division gave it on its lanes of the
destination's sticks.

A pointwise kernel reads a lane-strided operand lane by lane (:func:`read_lanes`): each
of its sticks gives the kernel ``eps / step`` values, in the order the default layout of
the piece's shape in the buffer's dim order (:func:`read_layout`) holds them, so it
computes as on that layout. Every other primitive refuses a lane-strided operand by name
(``SpyrePrim.takes_lanes``): the planner moves it.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np

from .._errors import LayoutError, SpyreTypeError
from ..dma._dma import d2h_bits, d2h_values, h2d_bits, h2d_values
from ..layout._lanes import LanedLayout, laned, parent_layout, parent_shape
from ..layout._layout import SpyreTensorLayout
from ._array import SpyreArray, SpyreType
from ._base import SpyrePrim
from ._writes import JoinedBits, ProducerWrite

__all__ = [
    "LaneAssemble",
    "LanePlace",
    "LaneView",
    "is_laned",
    "lane_assemble",
    "lane_place",
    "lane_view",
    "read_lanes",
    "read_layout",
    "read_type",
]


def is_laned(t: SpyreType) -> bool:
    """Whether ``t`` is a lane-strided view (its layout a :class:`LanedLayout`)."""
    return isinstance(t.layout, LanedLayout)


def read_layout(t: SpyreType) -> SpyreTensorLayout:
    """The layout a pointwise kernel reads a lane-strided ``t`` in.

    The default layout of ``t``'s shape in its buffer's dim order (or the row-major
    layout, if the buffer's is). Values move from the lanes in that layout's order.

    Raises:
        LayoutError: if the buffer's layout is neither.
    """
    lay = t.layout
    assert isinstance(lay, LanedLayout)
    parent, shape = parent_layout(lay), parent_shape(lay, t.shape)
    order = parent.for_host(shape).dim_order()
    if order is not None:
        return SpyreTensorLayout(t.shape, t.dtype, list(order) or None)
    if parent == SpyreTensorLayout.row_major(shape, t.dtype):
        return SpyreTensorLayout.row_major(t.shape, t.dtype)
    raise LayoutError(f"lanes: {parent} is no default or row-major layout of {list(shape)}")


def read_type(t: SpyreType) -> SpyreType:
    """``t`` as a pointwise kernel reads it: itself, or a laned view in :func:`read_layout`."""
    if not is_laned(t):
        return t
    return SpyreType.contiguous(t.shape, t.dtype, read_layout(t), t.pad)


def read_lanes(img: jax.Array, t: SpyreType) -> jax.Array:
    """The image of a lane-strided ``t`` read lane by lane into :func:`read_layout`."""
    bits = d2h_bits(img, t.shape, t.layout)
    return h2d_bits(bits, t.dtype, read_layout(t))


class LaneView(SpyrePrim):
    """``x[..., offset::step]`` seen on its lanes of ``x``'s sticks: nothing moves.

    The operand must be a plain array (no view, window, arrangement or lanes) whose
    sticks walk its last dim alone, that dim a multiple of ``step``, and ``step`` must
    divide the stick.
    """

    role = "view"
    takes_lanes = True
    offset: int
    step: int

    def __init__(self, aval: SpyreType, *, offset: int, step: int) -> None:
        if aval.is_view:
            raise LayoutError(f"lane view: {aval.str_short()} is a view; its slices are copies")
        if not aval.shape or aval.shape[-1] % step:
            raise LayoutError(
                f"lane view: the last dim of {aval.str_short()} is no multiple of {step}"
            )
        layout = laned(aval.layout, offset, step)
        piece = (*aval.shape[:-1], aval.shape[-1] // step)
        self.in_avals = (aval,)
        self.out_aval = SpyreType.contiguous(piece, aval.dtype, layout, aval.pad)
        self.params = {"offset": offset, "step": step}
        super().__init__()

    def kernel(self, img: jax.Array) -> jax.Array:
        return img  # the lanes are the operand's buffer itself


def lane_view(x: SpyreArray, offset: int, step: int) -> SpyreArray:
    """``x[..., offset::step]`` as a view on its lanes of ``x``'s sticks (see :class:`LaneView`).

    Raises:
        LayoutError: if ``x`` is a view, a window or arranged, its sticks do not walk
            its last dim alone, or ``step`` divides neither that dim nor the stick.
    """
    aval = jax.typeof(x)
    if not isinstance(aval, SpyreType):
        raise SpyreTypeError(f"lane_view: needs a SpyreArray, got {aval}")
    return LaneView(aval, offset=int(offset), step=int(step))(x)


def lane_slice_params(
    shape: Sequence[int], start: Sequence[int], limit: Sequence[int], strides: Sequence[int] | None
) -> tuple[int, int] | None:
    """``(offset, step)`` if a ``lax.slice`` is ``x[..., offset::step]`` (step > 1), else None."""
    if not strides or len(shape) < 1:
        return None
    *outer, step = strides
    if step < 2 or any(s != 1 for s in outer):
        return None
    if any(a != 0 or b != n for a, b, n in zip(start[:-1], limit[:-1], shape[:-1], strict=True)):
        return None
    offset, n = start[-1], shape[-1]
    if offset >= step or n % step or limit[-1] < n - step + offset + 1:
        return None
    return offset, step


class LanePlace(ProducerWrite):
    """A fresh result written on its lanes of a larger buffer (its producer wrote it there).

    The operand is in the :func:`read_layout` of the laned ``layout``: the producer
    computed it in that order and wrote each value on its lane.
    """

    role = "view"
    takes_lanes = True
    write_name = "lane_place"
    layout: SpyreTensorLayout

    def __init__(self, aval: SpyreType, *, layout: SpyreTensorLayout) -> None:
        if not isinstance(layout, LanedLayout) or aval.is_view or is_laned(aval):
            raise LayoutError(f"lane place: {aval.str_short()} cannot be placed in {layout}")
        out = SpyreType.contiguous(aval.shape, aval.dtype, layout, aval.pad)
        if read_layout(out) != aval.layout:
            raise LayoutError(f"lane place: {aval.str_short()} is not {layout} read in order")
        self.in_avals = (aval,)
        self.out_aval = out
        self.params = {"layout": layout}
        super().__init__()

    def kernel(self, img: jax.Array) -> jax.Array:
        a = self.in_avals[0]
        return h2d_bits(d2h_bits(img, a.shape, a.layout), a.dtype, self.layout)

    def tangent_kernel(self, img: jax.Array) -> jax.Array:
        a = self.in_avals[0]
        return h2d_values(d2h_values(img, a.shape, a.layout), self.layout)


def lane_place(x: SpyreArray, layout: SpyreTensorLayout) -> SpyreArray:
    """``x`` (a fresh array) written on the lanes of ``layout`` (see :class:`LanePlace`)."""
    return LanePlace(jax.typeof(x), layout=layout)(x)


class LaneAssemble(JoinedBits):
    """``s`` pieces, each on lanes ``k::s`` of the buffer, as the interleaved tensor.

    Piece ``k`` must be in ``laned(layout, k, s)``; the result is ``[..., s * n]`` in
    ``layout``, element ``s * j + k`` of its last dim piece ``k``'s element ``j``.
    Nothing moves: every piece is already on its lanes.
    """

    takes_lanes = True
    write_name = "lane_assemble"
    layout: SpyreTensorLayout
    shape: tuple[int, ...]

    def __init__(
        self, *avals: SpyreType, layout: SpyreTensorLayout, shape: tuple[int, ...]
    ) -> None:
        step = len(avals)
        for k, a in enumerate(avals):
            ok = a.dtype == avals[0].dtype and not a.is_view
            if not ok or a.layout != laned(layout, k, step) or shape[-1] != step * a.shape[-1]:
                raise LayoutError(f"lane assemble: {a.str_short()} is not lanes {k}::{step}")
        self.in_avals = tuple(avals)
        self.out_aval = SpyreType.contiguous(shape, avals[0].dtype, layout)
        self.params = {"layout": layout, "shape": shape}
        super().__init__()

    def _join(self, parts: tuple[jax.Array, ...]) -> jax.Array:
        return _by_lane(parts, parts[0].ndim - 1)

    def _owner(self, at: list[np.ndarray]) -> np.ndarray:
        """Element ``i`` of the last dim from piece ``i % s``."""
        return at[-1] % len(self.in_avals)


def _by_lane(parts: tuple[jax.Array, ...], axis: int) -> jax.Array:
    """Element ``i`` along ``axis`` from ``parts[i % len(parts)]``."""
    lane = jax.lax.broadcasted_iota(np.int32, parts[0].shape, axis) % len(parts)
    out = parts[0]
    for k, part in enumerate(parts[1:], 1):
        out = jax.numpy.where(lane == k, part, out)
    return out


def lane_assemble(
    pieces: Sequence[SpyreArray], layout: SpyreTensorLayout, shape: Sequence[int]
) -> SpyreArray:
    """The pieces (each on its lanes of ``layout``) interleaved into ``shape``."""
    prim = LaneAssemble(
        *[jax.typeof(p) for p in pieces], layout=layout, shape=tuple(int(n) for n in shape)
    )
    return prim(*pieces)
