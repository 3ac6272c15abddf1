"""Laned layouts: a tensor on some lanes of its sticks, strided or a window (issue 26).

RoPE's interleaved pairs read ``x[..., ::2]`` and ``x[..., 1::2]``: the even and the odd
elements of every stick of ``x``; rotate-half at float16 head dim 64 reads
``x[..., :32]`` and ``x[..., 32:]``: lanes 0-31 and 32-63 of ``x``'s one stick a row.
Seen in place, such a slice sits on some lanes of ``x``'s buffer. :class:`LanedLayout`
is its layout: the buffer's device sizes, a stride map over the piece (its stick walks
the piece's last dim by one), ``lanes = (offset, step)`` and ``lane_count``. The index
map is the gap-free one over the valid range (``lane_count`` lanes a stick,
:attr:`LanedLayout.valid_size`) with the lane spread out: device lane ``offset + step *
lane``. Two kinds, printed ``lanes=k::s`` and ``lanes=a:b``:

- *strided* (``x[..., k::s]``): ``step`` >= 2 divides the stick, ``offset < step``, and
  every stick gives the piece ``eps / step`` lanes (:func:`laned`);
- a *window* (``x[..., a:b]`` of an ``x`` whose last dim lies in one stick a row, the
  slice not the whole stick): ``step`` 1, lanes ``a`` to ``b`` (:func:`lane_window`);
- a *tile window* (``x[..., a:b]`` of a last dim longer than a stick, the slice inside
  one of its sticks: rotate-half's quarters at 16-bit head dim 80): a window with
  ``tile = (dim, t)``, the device dim of the stick tiles and the tile holding the
  slice: element ``j`` is on lane ``a - t * eps + j`` of tile ``t``. The valid range's
  tile coordinate (always 0: the piece lies in one stick) is shifted by ``t``.

The other lanes hold no data (they are padding of this layout, and data of the buffer's
other pieces). Equivalently, and that is how the DMA engines move it and how the tests
check it, the map is that of the *parent* layout (:func:`parent_layout`, over
:func:`parent_shape`) at host index ``[..., offset + step * j]`` (:func:`lane_positions`).
That needs the stick to walk the piece's last host dim alone, by one, in a row-major
host tensor: a laned layout bound otherwise is refused by name. A laned layout has no
gaps and the standard element arrangement; its DMA descriptors (DCI) are the valid
range's with the lane loop stepping ``step`` lanes from lane ``offset``.

Pure Python/NumPy: no JAX import.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import LayoutError
from ._checks import check_index
from ._host_mapping import HostMapping
from ._layout import SpyreTensorLayout
from ._segments import row_major_strides

__all__ = [
    "LaneMapping",
    "LanedLayout",
    "in_one_stick",
    "lane_positions",
    "lane_refusal",
    "lane_text",
    "lane_window",
    "laned",
    "parent_layout",
    "parent_shape",
    "window_refusal",
]


class LanedLayout(SpyreTensorLayout):
    """A layout whose tensor sits on lanes ``offset + step * lane`` of each stick.

    ``lane < lane_count``. Build it with :func:`laned` or :func:`lane_window` (from the
    buffer's layout) or :meth:`make`. Compared, hashed and printed with its lanes
    (``..., lanes=1::2)``, ``..., lanes=32:64)``).
    """

    __slots__ = ("lane_count", "lanes", "tile")

    lanes: tuple[int, int]
    lane_count: int
    tile: tuple[int, int] | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("build a LanedLayout with spyrejax.layout._lanes.laned or .make")

    @classmethod
    def make(
        cls,
        device_size: Any,
        stride_map: Any,
        device_dtype: Any,
        offset: int,
        step: int,
        count: int | None = None,
        tile: tuple[int, int] | None = None,
    ) -> LanedLayout:
        """A laned layout from its fields (``stride_map`` over the piece).

        ``count``: lanes a stick (``eps / step`` if None; a window's width for step 1).
        ``tile``: a tile window's ``(device dim, tile)`` (see the module's docstring).

        Raises:
            LayoutError: if the lanes do not fit the stick (see :func:`_lanes_refusal`)
                or the stick does not walk a host dim by one.
        """
        layout = cls.__new__(cls)
        layout._init(device_size, stride_map, device_dtype)
        eps = layout.device_size[-1]
        if count is None and isinstance(step, int) and step > 0:
            count = eps // step
        refusal = _stick_refusal(layout, step, window=step == 1)
        if refusal is None:
            refusal = _lanes_refusal(eps, offset, step, count)
        if refusal is None and tile is not None:
            refusal = _tile_refusal(layout, step, tile)
        if refusal is not None:
            raise LayoutError(refusal)
        object.__setattr__(layout, "lanes", (offset, step))
        object.__setattr__(layout, "lane_count", count)
        object.__setattr__(layout, "tile", None if tile is None else tuple(tile))
        return layout

    @property
    def valid_size(self) -> tuple[int, ...]:
        """The range the index map iterates: ``lane_count`` lanes a stick."""
        return (*self.device_size[:-1], self.lane_count)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SpyreTensorLayout):
            return NotImplemented
        if not isinstance(other, LanedLayout):
            return False
        return super().__eq__(other) and (self.lanes, self.lane_count, self.tile) == (
            other.lanes,
            other.lane_count,
            other.tile,
        )

    def __hash__(self) -> int:
        return hash((super().__hash__(), self.lanes, self.lane_count, self.tile))

    def __reduce__(self) -> tuple[Any, ...]:
        args = (self.device_size, self.stride_map, self.device_dtype, *self.lanes, self.lane_count)
        return (LanedLayout.make, (*args, self.tile))

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, lanes={lane_text(self)})"

    __str__ = __repr__

    def with_gap(self, dim: int, front: int = 0, back: int = 0) -> SpyreTensorLayout:
        """Refused: a laned layout has no gaps."""
        raise LayoutError(f"{self} is laned; it takes no gap")

    def with_arrangement(self, arrangement: Any) -> SpyreTensorLayout:
        """Refused: a laned layout keeps the standard arrangement."""
        raise LayoutError(f"{self} is laned; it takes no element arrangement")

    def for_host(self, shape: Any, host_strides: Any = None) -> HostMapping:
        """This layout bound to a host tensor (a :class:`LaneMapping`).

        Raises:
            LayoutError: if the layout cannot hold the tensor, or its stick does not
                walk the tensor's last dim alone in a row-major tensor (for a window:
                a last dim of its width).
        """
        return _bind(super().for_host(shape, host_strides))


def lane_text(layout: LanedLayout) -> str:
    """The lanes as printed: ``k::s`` (strided) or ``a:b`` (a window).

    A tile window's ``a`` and ``b`` are positions in the parent's last dim, over all
    its sticks.
    """
    offset, step = layout.lanes
    if step == 1:
        start = _first(layout)
        return f"{start}:{start + layout.lane_count}"
    return f"{offset}::{step}"


def _first(layout: LanedLayout) -> int:
    """The parent's last-dim position of the piece's first element (its tile's lanes before)."""
    offset, tile = layout.lanes[0], layout.tile
    return offset if tile is None else tile[1] * layout.device_size[-1] + offset


def lane_positions(layout: LanedLayout, n: int) -> slice:
    """Where a piece with a last dim of ``n`` lies in its parent's: ``offset + step * j``.

    A tile window's ``offset`` counts from its tile: the parent's position adds the
    sticks before it.
    """
    step, first = layout.lanes[1], _first(layout)
    return slice(first, first + step * (n - 1) + 1, step)


def _tile_refusal(layout: SpyreTensorLayout, step: int, tile: Any) -> str | None:
    """Why ``tile`` is no tile window's ``(device dim, tile)`` in ``layout``, or None.

    A window (``step`` 1) on a device dim other than the stick's, synthetic in the
    piece's stride map (``-1``: its coordinate 0 only, shifted by the tile), at a tile
    inside its size.
    """
    rank = layout.device_rank
    ok = step == 1 and len(tile) == 2 and all(isinstance(v, int) for v in tile)
    if not ok or not 0 <= tile[0] < rank - 1 or layout.stride_map[tile[0]] != -1:
        return f"lanes: {tile!r} is no device dim of stick tiles synthetic to the window"
    if not 0 <= tile[1] < layout.device_size[tile[0]]:
        return f"lanes: tile {tile[1]} lies outside device dim {tile[0]} of {layout.device_size}"
    return None


def _lanes_refusal(eps: int, offset: Any, step: Any, count: Any) -> str | None:
    """Why lanes ``offset + step * lane`` (``lane < count``) are no laned layout's, or None.

    Strided: ``offset`` below ``step``, every stick's ``eps / step`` lanes. A window
    (``step`` 1): ``count`` lanes from ``offset`` inside the stick, not all of it.
    """
    if not all(isinstance(v, int) for v in (offset, step, count)):
        return f"lanes: offset, step and count must be ints, got {offset!r}, {step!r}, {count!r}"
    if step > 1 and not (0 <= offset < step and count == eps // step):
        return f"lanes: offset {offset} must lie in [0, {step}), {eps // step} lanes a stick"
    if step == 1 and not (offset >= 0 and count >= 1 and offset + count <= eps):
        return f"lanes: a window of {count} lanes from lane {offset} is not inside a stick of {eps}"
    if step == 1 and count == eps:
        return "lanes: a window of the whole stick is the buffer itself"
    return None


def laned(buffer: SpyreTensorLayout, offset: int, step: int) -> LanedLayout:
    """The layout of ``x[..., offset::step]`` in place in ``buffer`` (``x``'s layout).

    Every positive stride of ``buffer`` (but the stick's 1) is divided by ``step``: the
    piece's host strides are the buffer's over ``step``.

    Raises:
        LayoutError: if ``buffer`` has gaps, an element arrangement or lanes, or a
            stride ``step`` does not divide (see :func:`lane_refusal`).
    """
    refusal = lane_refusal(buffer, step)
    if refusal is not None:
        raise LayoutError(refusal)
    smap = list(buffer.stride_map)
    smap[:-1] = [m // step if m > 0 else m for m in smap[:-1]]
    return LanedLayout.make(buffer.device_size, smap, buffer.device_dtype, offset, step)


def lane_refusal(
    buffer: SpyreTensorLayout, step: int, piece: tuple[int, ...] | None = None
) -> str | None:
    """Why pieces ``x[..., k::step]`` cannot sit on their lanes of ``buffer``, or None.

    The rule :func:`laned` enforces (a plain buffer, every stride a multiple of
    ``step``, ``step`` dividing the stick, which walks a host dim by one); the
    predicate the planner asks before it places pieces in lanes. With ``piece`` (the
    pieces' host shape, one ``buffer`` holds with its last dim cut ``step`` times),
    also the rule binding a laned layout to the piece enforces (:func:`_bind_refusal`).
    """
    if buffer.has_gaps or buffer.is_arranged or isinstance(buffer, LanedLayout):
        return f"lanes: {buffer} is a window, arranged or laned already"
    if any(m > 0 and m % step for m in buffer.stride_map[:-1]):
        return f"lanes: the strides of {buffer} are not multiples of {step}"
    refusal = _stick_refusal(buffer, step)
    if refusal is None and piece is not None:
        refusal = _host_refusal(piece, row_major_strides(piece))
        if refusal is None:
            refusal = _bind_refusal(SpyreTensorLayout.for_host(laned(buffer, 0, step), piece))
    return refusal


def lane_window(
    buffer: SpyreTensorLayout, shape: tuple[int, ...], start: int, stop: int
) -> LanedLayout:
    """The layout of ``x[..., start:stop]`` in place in ``buffer`` (``x``'s, of ``shape``).

    ``x``'s last dim lies in one stick a row, and the piece's element ``j`` is on lane
    ``start + j`` of its row's stick; or the slice lies inside one stick ``t`` of a
    longer last dim (a tile window), its element ``j`` on lane ``start - t * eps + j``
    of stick ``t``. Its stride map is the buffer's with every stride of an outer host
    dim (a multiple of ``x``'s last dim ``n``) times ``(stop - start) / n``: the piece's
    host strides; the dims walking the last dim, and those of size 1, keep theirs.

    Raises:
        LayoutError: see :func:`window_refusal`.
    """
    found = _window_strides(buffer, shape, start, stop)
    if isinstance(found, str):
        raise LayoutError(found)
    smap, tile = found
    eps = buffer.device_size[-1]
    lane = start if tile is None else start - tile[1] * eps
    return LanedLayout.make(
        buffer.device_size, smap, buffer.device_dtype, lane, 1, stop - start, tile
    )


def in_one_stick(start: int, stop: int, eps: int) -> bool:
    """Whether elements ``[start, stop)`` of a last dim (``eps`` a stick) lie in one stick.

    What makes ``x[..., start:stop]`` a (tile) window (:func:`lane_window`), and where
    rewrites cut pieces so each is one (``lowering._distribute``).
    """
    return start // eps == (stop - 1) // eps


def window_refusal(
    buffer: SpyreTensorLayout, shape: tuple[int, ...], start: int, stop: int
) -> str | None:
    """Why ``x[..., start:stop]`` (``x`` of ``shape`` in ``buffer``) is no lane window, or None.

    The predicate of :func:`lane_window`: a plain buffer (no gaps, arrangement or
    lanes) whose stick walks ``x``'s last dim alone, that dim in one stick a row (or
    the slice inside one stick of it, with the stick tiles one device dim of stride
    ``eps``), and a window of 2 or more lanes that is not the whole stick.
    """
    found = _window_strides(buffer, shape, start, stop)
    return found if isinstance(found, str) else None


def _window_strides(
    buffer: SpyreTensorLayout, shape: tuple[int, ...], start: int, stop: int
) -> tuple[list[int], tuple[int, int] | None] | str:
    """The stride map and tile of :func:`lane_window`'s layout, or why there is none."""
    if buffer.has_gaps or buffer.is_arranged or isinstance(buffer, LanedLayout):
        return f"lanes: {buffer} is a window, arranged or laned already"
    eps = buffer.device_size[-1]
    if not shape or not 0 <= start < stop <= shape[-1] or not in_one_stick(start, stop, eps):
        return f"lanes: [{start}:{stop}] of a last dim of {shape[-1:]} is no window of one stick"
    if stop - start < 2:
        return "lanes: a window of one lane walks no host dim"
    refusal = _lanes_refusal(eps, start % eps, 1, stop - start) or _stick_refusal(buffer, 1, True)
    if refusal is not None:
        return refusal
    try:
        seg = buffer.for_host(shape).segmentation
    except LayoutError as e:
        return f"lanes: {e}"
    found = seg.segment_of(buffer.device_rank - 1)
    if found is None or seg.segments[found[0]].host_dims != (len(shape) - 1,):
        return f"lanes: the stick of {buffer} does not walk the last dim of {list(shape)} alone"
    stick = {j for j, _ in seg.segments[found[0]].axes}
    tile = _tile_of(buffer, stick, shape[-1], start)
    if isinstance(tile, str):
        return tile
    n, smap = shape[-1], list(buffer.stride_map)
    for j, m in enumerate(smap):
        if j in stick or m <= 0 or buffer.device_size[j] == 1:
            continue
        if m % n:
            return f"lanes: stride {m} of {buffer} is no multiple of the last dim {n}"
        smap[j] = m // n * (stop - start)
    if tile is not None:  # the piece lies in one tile: the dim is synthetic to it
        smap[tile[0]] = -1
    return smap, tile


def _tile_of(
    buffer: SpyreTensorLayout, stick: set[Any], n: int, start: int
) -> tuple[int, int] | str | None:
    """A tile window's ``(device dim, tile)`` (None: a last dim of one stick), or a refusal.

    A last dim ``n`` longer than a stick must be walked by the stick and one device dim
    of stride ``eps`` (the stick tiles) alone.
    """
    eps = buffer.device_size[-1]
    if n <= eps:
        return None
    tiles = [j for j in stick if isinstance(j, int) and j != buffer.device_rank - 1]
    if len(stick) != 2 or len(tiles) != 1 or buffer.stride_map[tiles[0]] != eps:
        return f"lanes: the last dim of {buffer} is not walked by whole sticks of one device dim"
    return tiles[0], start // eps


def _stick_refusal(layout: SpyreTensorLayout, step: Any, window: bool = False) -> str | None:
    """Why ``layout``'s sticks cannot be cut in lanes ``k::step`` (or a window), or None."""
    eps = layout.device_size[-1]
    if not window and (not isinstance(step, int) or step < 2 or eps % step):
        return f"lanes: a step of {step!r} does not divide a stick of {eps}"
    if layout.stride_map[-1] != 1:
        return f"lanes: the stick of {layout} does not walk a host dim by one"
    return None


def parent_layout(layout: LanedLayout) -> SpyreTensorLayout:
    """The buffer's own layout over :func:`parent_shape`: the piece's strides scaled.

    Strided: every positive stride but the stick's times ``step``. A window: over a
    whole stick a row (a tile window: over all the tiles' sticks, :func:`parent_shape`),
    every positive stride of a device dim longer than 1 (a multiple of the piece's last
    dim, ``lane_count``) times that row over ``lane_count``; the tiles' dim walks it by
    ``eps``.
    """
    step = layout.lanes[1]
    count, sizes, tile = layout.lane_count, layout.device_size, layout.tile
    row = _parent_row(layout)
    smap = list(layout.stride_map)
    for j, m in enumerate(smap[:-1]):
        if m > 0 and step > 1:
            smap[j] = m * step
        elif tile is not None and j == tile[0]:
            smap[j] = layout.device_size[-1]  # the tiles walk the parent's row by sticks
        elif m > 0 and sizes[j] > 1:
            smap[j] = m // count * row
    return SpyreTensorLayout.from_stride_map(layout.device_size, smap, layout.device_dtype)


def _parent_row(layout: LanedLayout) -> int:
    """A window's parent's last dim: a stick, or every stick of the tiles' dim."""
    eps, tile = layout.device_size[-1], layout.tile
    return eps if tile is None else eps * layout.device_size[tile[0]]


def parent_shape(layout: LanedLayout, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The host shape the parent layout holds.

    The last dim ``step`` times longer, or a window's whole row of sticks.
    """
    step = layout.lanes[1]
    return (*shape[:-1], shape[-1] * step if step > 1 else _parent_row(layout))


def _host_refusal(shape: tuple[int, ...], strides: tuple[int, ...]) -> str | None:
    """Why no laned layout binds a host tensor of this shape and strides, or None."""
    if not shape or shape[-1] < 2 or strides != row_major_strides(shape):
        return f"lanes: host shape {list(shape)} is no row-major tensor with a last dim >= 2"
    return None


def _bind_refusal(valid: HostMapping) -> str | None:
    """Why a laned layout cannot be bound as ``valid`` binds its valid range, or None.

    The host tensor must be row-major with a last dim a lane walks (2 or more:
    :func:`_host_refusal`), and the stick must walk that dim alone.
    """
    refusal = _host_refusal(valid.shape, valid.strides)
    if refusal is not None:
        return refusal
    layout, shape = valid.layout, valid.shape
    what = f"layout {layout} for host shape {list(shape)}"
    count = getattr(layout, "lane_count", None)
    if layout.lanes[1] == 1 and shape[-1] != count:  # type: ignore[attr-defined]
        return f"{what}: a window of {count} lanes holds a last dim of as many"
    found = valid.segmentation.segment_of(layout.device_rank - 1)
    if found is None or valid.segmentation.segments[found[0]].host_dims != (len(shape) - 1,):
        return f"{what}: the stick must walk the last host dim alone"
    return None


@functools.lru_cache(maxsize=4096)
def _bind(valid: HostMapping) -> LaneMapping:
    refusal = _bind_refusal(valid)
    if refusal is not None:
        raise LayoutError(refusal)
    return LaneMapping(valid.layout, valid.shape, valid.strides, valid.segmentation, valid.pair)


@dataclass(frozen=True)
class LaneMapping(HostMapping):
    """A laned layout bound to a host tensor: the valid-range map with lanes spread out.

    Its ``segmentation`` is over the valid range (``eps / step`` lanes a stick); every
    method taking or giving device coordinates spreads or gathers the lane, and shifts
    a tile window's tile coordinate (0 in the valid range) by its tile.
    """

    @functools.cached_property
    def _valid(self) -> HostMapping:
        """The map over the valid range (lane ``k`` meaning device lane ``offset + step * k``)."""
        return HostMapping(self.layout, self.shape, self.strides, self.segmentation, self.pair)

    def _spread(self, lane: Any) -> Any:
        offset, step = self.layout.lanes  # type: ignore[attr-defined]
        return offset + step * lane

    def _on_lanes(self, lane: Any) -> tuple[Any, Any]:
        """Whether device lanes hold this layout's lanes, and their valid-range lane.

        Array-agnostic (ints, NumPy grids, the masks' JAX coordinates) by ordered
        comparisons only: from ``offset`` on, a remainder ``< 1`` is a multiple of
        ``step`` (no coordinate type needs an ``==`` other than Python's), below
        ``offset + step * lane_count`` (a window's end; a strided layout's is the stick's).
        """
        offset, step = self.layout.lanes  # type: ignore[attr-defined]
        end = offset + step * self.layout.lane_count  # type: ignore[attr-defined]
        rest = (lane - offset) % step
        return (rest < 1) & (lane >= offset) & (lane < end), (lane - offset) // step

    @property
    def _tile(self) -> tuple[int, int]:
        """A tile window's ``(device dim, tile)``; ``(0, 0)`` (no shift) otherwise."""
        tile = self.layout.tile
        return (0, 0) if tile is None else tile

    def device_coord(self, index: Any) -> tuple[int, ...]:
        """Device coordinate of one host element (the lane spread out, the tile shifted)."""
        c = list(self._valid.device_coord(index))
        c[-1] = int(self._spread(c[-1]))
        dim, t = self._tile
        c[dim] += t
        return tuple(c)

    def _coords_at(self, index: Any, shape: Sequence[int]) -> np.ndarray:
        """Device coordinates of host elements (the lanes spread out): the vectorised path."""
        out = self._valid._coords_at(index, shape)
        out[..., -1] = self._spread(out[..., -1])
        dim, t = self._tile
        if t:  # a tile window's tile (a plain laned layout's is 0: no pass)
            out[..., dim] += t
        return out

    def host_index(self, coord: Any) -> tuple[int, ...] | None:
        """Host index held at a device coordinate, or None (padding or another lane)."""
        c = list(check_index(coord, self.layout.device_size, what="device coordinate"))
        on, lane = self._on_lanes(c[-1])
        dim, t = self._tile
        if not on or c[dim] < t:
            return None
        c[dim] -= t
        return self._valid.host_index((*c[:-1], lane))

    def host_offsets_of(self, coords: np.ndarray) -> np.ndarray:
        """Host offsets held at device coordinates, vectorised; -1 on padding and other lanes."""
        c = np.array(coords, dtype=np.int64)
        on, lane = self._on_lanes(c[..., -1])
        dim, t = self._tile
        if t:  # a tile window: the tiles before its own hold none of it
            on = on & (c[..., dim] >= t)
            c[..., dim] = np.where(on, c[..., dim] - t, 0)
        c[..., -1] = np.where(on, lane, 0)
        return np.where(on, self._valid.host_offsets_of(c), -1)

    def data_positions(self, c: Any) -> Any:
        """Whether device coordinates hold host data (this layout's lanes only).

        Array-agnostic as :meth:`_on_lanes`: a tile window's tile by ``>=`` and a product.
        """
        c = list(c)
        on, lane = self._on_lanes(c[-1])
        dim, t = self._tile
        if t:
            on = on & (c[dim] >= t)
            c[dim] = (c[dim] - t) * on
        return on & self._valid.data_positions([*c[:-1], lane * on])

    def padding_slabs(self) -> tuple[tuple[int, int, int], ...]:
        """Every stick holds other lanes: the one slab is the whole image."""
        return ((self.layout.device_rank - 1, 0, self.layout.device_size[-1]),)

    def data_box(self, runs: Any) -> None:
        """None: a laned layout's data is no box."""
        return None

    def dim_order(self) -> None:
        """None: a laned layout is no default layout."""
        return None
