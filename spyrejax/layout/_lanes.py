"""Lane-strided layouts: a tensor on every ``step``-th lane of its sticks (issue 26).

RoPE's interleaved pairs read ``x[..., ::2]`` and ``x[..., 1::2]``: the even and the odd
elements of every stick of ``x``. Seen in place, such a slice is a lane-strided window of
``x``'s buffer. :class:`LanedLayout` is its layout: the buffer's device sizes, a stride
map over the piece (its stick walks the piece's last dim by one), and ``lanes =
(offset, step)``. The index map is the gap-free one over the valid range (``eps / step``
lanes a stick, :attr:`LanedLayout.valid_size`) with the lane spread out: device lane
``offset + step * lane``. The other lanes hold no data (they are padding of this
layout, and data of the buffer's other pieces).

Equivalently, and that is how the DMA engines move it and how the tests check it, the
map is that of the *parent* layout (:func:`parent_layout`: the buffer's own layout over
``[..., step * n]``) at host index ``[..., step * j + offset]``. That needs the stick to
walk the piece's last host dim alone, by one, in a row-major host tensor: a laned
layout bound otherwise is refused by name. A laned layout has no gaps and the standard
element arrangement; its DMA descriptors (DCI) are the valid range's with the lane loop
stepping ``step`` lanes from lane ``offset``.

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
    "lane_refusal",
    "laned",
    "parent_layout",
    "parent_shape",
]


class LanedLayout(SpyreTensorLayout):
    """A layout whose tensor sits on lanes ``offset, offset + step, ...`` of each stick.

    Build it with :func:`laned` (from the buffer's layout) or :meth:`make`. Compared,
    hashed and printed with its lanes (``..., lanes=1::2)``).
    """

    __slots__ = ("lanes",)

    lanes: tuple[int, int]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("build a LanedLayout with spyrejax.layout._lanes.laned or .make")

    @classmethod
    def make(
        cls, device_size: Any, stride_map: Any, device_dtype: Any, offset: int, step: int
    ) -> LanedLayout:
        """A laned layout from its fields (``stride_map`` over the piece).

        Raises:
            LayoutError: if ``step`` does not divide the stick, ``offset`` is not below
                ``step``, or the stick does not walk a host dim by one.
        """
        layout = cls.__new__(cls)
        layout._init(device_size, stride_map, device_dtype)
        refusal = _stick_refusal(layout, step)
        if refusal is None and not (isinstance(offset, int) and 0 <= offset < step):
            refusal = f"lanes: offset {offset!r} must lie in [0, {step})"
        if refusal is not None:
            raise LayoutError(refusal)
        object.__setattr__(layout, "lanes", (offset, step))
        return layout

    @property
    def valid_size(self) -> tuple[int, ...]:
        """The range the index map iterates: ``eps / step`` lanes a stick."""
        return (*self.device_size[:-1], self.device_size[-1] // self.lanes[1])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SpyreTensorLayout):
            return NotImplemented
        return super().__eq__(other) and self.lanes == getattr(other, "lanes", (0, 1))

    def __hash__(self) -> int:
        return hash((super().__hash__(), self.lanes))

    def __reduce__(self) -> tuple[Any, ...]:
        args = (self.device_size, self.stride_map, self.device_dtype, *self.lanes)
        return (LanedLayout.make, args)

    def __repr__(self) -> str:
        offset, step = self.lanes
        return f"{super().__repr__()[:-1]}, lanes={offset}::{step})"

    __str__ = __repr__

    def with_gap(self, dim: int, front: int = 0, back: int = 0) -> SpyreTensorLayout:
        """Refused: a laned layout has no gaps."""
        raise LayoutError(f"{self} is lane-strided; it takes no gap")

    def with_arrangement(self, arrangement: Any) -> SpyreTensorLayout:
        """Refused: a laned layout keeps the standard arrangement."""
        raise LayoutError(f"{self} is lane-strided; it takes no element arrangement")

    def for_host(self, shape: Any, host_strides: Any = None) -> HostMapping:
        """This layout bound to a host tensor (a :class:`LaneMapping`).

        Raises:
            LayoutError: if the layout cannot hold the tensor, or its stick does not
                walk the tensor's last dim alone in a row-major tensor.
        """
        return _bind(super().for_host(shape, host_strides))


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


def _stick_refusal(layout: SpyreTensorLayout, step: Any) -> str | None:
    """Why ``layout``'s sticks cannot be cut in lanes ``k::step``, or None."""
    eps = layout.device_size[-1]
    if not isinstance(step, int) or step < 2 or eps % step:
        return f"lanes: a step of {step!r} does not divide a stick of {eps}"
    if layout.stride_map[-1] != 1:
        return f"lanes: the stick of {layout} does not walk a host dim by one"
    return None


def parent_layout(layout: LanedLayout) -> SpyreTensorLayout:
    """The buffer's own layout: every positive stride but the stick's times ``step``."""
    step = layout.lanes[1]
    smap = [m * step if m > 0 else m for m in layout.stride_map[:-1]] + [1]
    return SpyreTensorLayout.from_stride_map(layout.device_size, smap, layout.device_dtype)


def parent_shape(layout: LanedLayout, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The host shape the parent layout holds: the last dim ``step`` times longer."""
    return (*shape[:-1], shape[-1] * layout.lanes[1])


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
    method taking or giving device coordinates spreads or gathers the lane.
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
        ``step`` (no coordinate type needs an ``==`` other than Python's).
        """
        offset, step = self.layout.lanes  # type: ignore[attr-defined]
        rest = (lane - offset) % step
        return (rest < 1) & (lane >= offset), (lane - offset) // step

    def device_coord(self, index: Any) -> tuple[int, ...]:
        """Device coordinate of one host element (the lane spread out)."""
        c = self._valid.device_coord(index)
        return (*c[:-1], int(self._spread(c[-1])))

    def _coords_at(self, index: Any, shape: Sequence[int]) -> np.ndarray:
        """Device coordinates of host elements (the lanes spread out): the vectorised path."""
        out = self._valid._coords_at(index, shape)
        out[..., -1] = self._spread(out[..., -1])
        return out

    def host_index(self, coord: Any) -> tuple[int, ...] | None:
        """Host index held at a device coordinate, or None (padding or another lane)."""
        c = check_index(coord, self.layout.device_size, what="device coordinate")
        on, lane = self._on_lanes(c[-1])
        return self._valid.host_index((*c[:-1], lane)) if on else None

    def host_offsets_of(self, coords: np.ndarray) -> np.ndarray:
        """Host offsets held at device coordinates, vectorised; -1 on padding and other lanes."""
        c = np.array(coords, dtype=np.int64)
        on, lane = self._on_lanes(c[..., -1])
        c[..., -1] = np.where(on, lane, 0)
        return np.where(on, self._valid.host_offsets_of(c), -1)

    def data_positions(self, c: Any) -> Any:
        """Whether device coordinates hold host data (this layout's lanes only)."""
        c = list(c)
        on, lane = self._on_lanes(c[-1])
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
