"""Slices along the stick read in place on their lanes: lane views (issue 26).

``x[..., offset::step]`` of an array whose sticks walk its last dim keeps its elements
where they are: on lanes ``offset, offset + step, ...`` of ``x``'s sticks; so does a
window ``x[..., a:b]`` of an ``x`` whose last dim lies in one stick a row (lanes ``a``
to ``b``). :class:`LaneView` is that slice as a view, typed in
:func:`~spyrejax.layout._lanes.laned` or :func:`~spyrejax.layout._lanes.lane_window`
(the buffer's device sizes, the piece's lanes); nothing moves. RoPE's interleaved pairs
read their halves ``x[..., ::2]`` and ``x[..., 1::2]`` so, and rotate-half at float16
head dim 64 its halves ``x[..., :32]`` and ``x[..., 32:]``.

The other way round, pieces each on some lanes of the destination's sticks (``a_0 ...
a_(s-1)`` of ``[..., n]`` interleaved into ``[..., s * n]``: RoPE's ``stack([...],
-1).reshape(..., D)``; or ``concatenate([a, b], -1)`` of halves of one stick) are
written in place: each piece's producer writes its result on its lanes of the
destination's sticks (:class:`LanePlace`, as a producer writes into a window of gaps),
and :class:`LaneAssemble` is the destination made of them; neither moves anything. Under
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
from ..layout._lanes import (
    LanedLayout,
    lane_positions,
    lane_text,
    lane_window,
    laned,
    parent_layout,
    parent_shape,
)
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
    """The layout a pointwise kernel reads a laned ``t`` in.

    Strided: the default layout of ``t``'s shape in its buffer's dim order (or the
    row-major layout, if the buffer's is). A window: its own stride map, on lanes from
    0 (for a default buffer, the default layout of ``t``'s shape in its order); a tile
    window's tiles one stick (the piece's one), walked as a stick tile. Values move
    from the lanes in that layout's order.

    Raises:
        LayoutError: if the buffer's layout is neither.
    """
    lay = t.layout
    assert isinstance(lay, LanedLayout)
    if lay.lanes[1] == 1:  # a window: its stride map read from lane 0 on
        size, smap = list(lay.device_size), list(lay.stride_map)
        if lay.tile is not None:
            size[lay.tile[0]], smap[lay.tile[0]] = 1, size[-1]
        return SpyreTensorLayout.from_stride_map(size, smap, lay.device_dtype)
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
    """``x[..., offset::step]`` (or, ``step`` 1, ``x[..., offset:offset + count]``) on its lanes.

    Seen on its lanes of ``x``'s sticks: nothing moves. The operand must be a plain
    array (no view, window, arrangement or lanes) whose sticks walk its last dim alone;
    strided, that dim a multiple of ``step``, and ``step`` must divide the stick; a
    window, that dim in one stick a row (``layout._lanes.window_refusal``).
    """

    role = "view"
    takes_lanes = True
    offset: int
    step: int
    count: int | None

    def __init__(
        self, aval: SpyreType, *, offset: int, step: int, count: int | None = None
    ) -> None:
        if aval.is_view:
            raise LayoutError(f"lane view: {aval.str_short()} is a view; its slices are copies")
        if not aval.shape or (step > 1 and aval.shape[-1] % step):
            raise LayoutError(
                f"lane view: the last dim of {aval.str_short()} is no multiple of {step}"
            )
        if step == 1 and not count:
            raise LayoutError(f"lane view: a window of {aval.str_short()} needs a lane count")
        if step == 1:
            assert count is not None
            layout = lane_window(aval.layout, aval.shape, offset, offset + count)
            piece = (*aval.shape[:-1], count)
        else:
            layout = laned(aval.layout, offset, step)
            piece = (*aval.shape[:-1], aval.shape[-1] // step)
        self.in_avals = (aval,)
        self.out_aval = SpyreType.contiguous(piece, aval.dtype, layout, aval.pad)
        self.params = {"offset": offset, "step": step, "count": count}
        super().__init__()

    def kernel(self, img: jax.Array) -> jax.Array:
        return img  # the lanes are the operand's buffer itself


def lane_view(x: SpyreArray, offset: int, step: int, count: int | None = None) -> SpyreArray:
    """``x[..., offset::step]`` (``step`` 1: ``x[..., offset:offset + count]``) on its lanes.

    A view on its lanes of ``x``'s sticks (see :class:`LaneView`).

    Raises:
        LayoutError: if ``x`` is a view, a window or arranged, its sticks do not walk
            its last dim alone, or ``step`` divides neither that dim nor the stick (a
            window: ``x``'s last dim is more than a stick, or the window all of it).
    """
    aval = jax.typeof(x)
    if not isinstance(aval, SpyreType):
        raise SpyreTypeError(f"lane_view: needs a SpyreArray, got {aval}")
    count = None if count is None else int(count)
    return LaneView(aval, offset=int(offset), step=int(step), count=count)(x)


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


def lane_window_params(
    shape: Sequence[int], start: Sequence[int], limit: Sequence[int], strides: Sequence[int] | None
) -> tuple[int, int] | None:
    """``(start, stop)`` if a ``lax.slice`` is ``x[..., start:stop]``, a part of the last dim.

    Unit strides, the other dims whole, the last dim neither whole nor one element
    (whether it lies in one stick is the layout's to say: ``layout._lanes.window_refusal``).
    """
    if (strides and any(s != 1 for s in strides)) or len(shape) < 1:
        return None
    if any(a != 0 or b != n for a, b, n in zip(start[:-1], limit[:-1], shape[:-1], strict=True)):
        return None
    a, b = start[-1], limit[-1]
    return (a, b) if b - a >= 2 and (a, b) != (0, shape[-1]) else None


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
    """Pieces, each on its lanes of the buffer, as the tensor they make together.

    Piece ``k`` must be in ``laned(layout, k, s)`` (``s`` pieces interleaved: element
    ``s * j + k`` of the result's last dim is piece ``k``'s element ``j``), or every
    piece in its ``lane_window`` of ``layout`` (a ``concatenate`` along a last dim of
    one stick a row: the windows follow one another). Nothing moves: every piece is
    already on its lanes. The owner of an element is the piece whose lanes hold it.
    """

    takes_lanes = True
    write_name = "lane_assemble"
    layout: SpyreTensorLayout
    shape: tuple[int, ...]

    def __init__(
        self, *avals: SpyreType, layout: SpyreTensorLayout, shape: tuple[int, ...]
    ) -> None:
        start, step = 0, len(avals)
        first = avals[0].layout
        windowed = isinstance(first, LanedLayout) and first.lanes[1] == 1  # all, or none
        for k, a in enumerate(avals):
            n = a.shape[-1] if a.shape else 0
            if windowed:
                want, end = lane_window(layout, shape, start, start + n), shape[-1]
            else:
                want, end = laned(layout, k, step), step * n
            ok = a.dtype == avals[0].dtype and not a.is_view and shape[-1] == end
            if not ok or a.layout != want:
                lanes = lane_text(want)
                raise LayoutError(
                    f"lane assemble: {a.str_short()} is not lanes {lanes} of {layout}"
                )
            start += n
        if windowed and start != shape[-1]:
            raise LayoutError(f"lane assemble: the windows do not fill {list(shape)}")
        self.in_avals = tuple(avals)
        self.out_aval = SpyreType.contiguous(shape, avals[0].dtype, layout)
        self.params = {"layout": layout, "shape": shape}
        super().__init__()

    def _owners(self, size: int, lane: bool) -> np.ndarray:
        """Per result element (or device lane) of the last dim, the piece holding it."""
        out = np.zeros(size, np.int32)
        for k, a in enumerate(self.in_avals):
            lay = a.layout
            assert isinstance(lay, LanedLayout)
            n = lay.lane_count if lane else a.shape[-1]
            out[lane_positions(lay, n)] = k
        return out

    def _join(self, parts: tuple[jax.Array, ...]) -> jax.Array:
        """Each device element from the piece whose lanes hold it.

        Tile windows' owners are by position in the row: the tile (of the pieces'
        tiles' dim) times the stick, plus the lane.
        """
        axis, shape = parts[0].ndim - 1, parts[0].shape
        lane = jax.lax.broadcasted_iota(np.int32, shape, axis)
        tile = next((a.layout.tile for a in self.in_avals if a.layout.tile is not None), None)
        if tile is None:
            which = jax.numpy.asarray(self._owners(shape[axis], lane=True))[lane]
        else:
            row = shape[axis] * shape[tile[0]]
            at = jax.lax.broadcasted_iota(np.int32, shape, tile[0]) * shape[axis] + lane
            which = jax.numpy.asarray(self._owners(row, lane=False))[at]
        out = parts[0]
        for k, part in enumerate(parts[1:], 1):
            out = jax.numpy.where(which == k, part, out)
        return out

    def _owner(self, at: list[np.ndarray]) -> np.ndarray:
        """Element ``i`` of the last dim from the piece whose lanes hold it.

        Positions past the last dim (a core's box over the stick's padding lanes, never
        stored) take the last element's owner.
        """
        n = self.shape[-1]
        return self._owners(n, lane=False)[np.minimum(at[-1], n - 1)]


def lane_assemble(
    pieces: Sequence[SpyreArray], layout: SpyreTensorLayout, shape: Sequence[int]
) -> SpyreArray:
    """The pieces (each on its lanes of ``layout``) interleaved into ``shape``."""
    prim = LaneAssemble(
        *[jax.typeof(p) for p in pieces], layout=layout, shape=tuple(int(n) for n in shape)
    )
    return prim(*pieces)
