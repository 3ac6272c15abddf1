"""SpyreTensorLayout: how a host tensor is tiled and padded into device sticks.

Spec sections 2-5. A layout is a frozen, hashable value: ``device_size`` (the padded,
row-major device shape, stick dim last), ``stride_map`` (one host stride per device dim:
``-1`` synthetic, ``0`` broadcast) and ``device_dtype``. The ground truth of a layout is
its index map: host element -> device coordinate, with
``host_offset == dot(device_coord, stride_map)`` on every data position. The map exists
for a host shape: ``layout.for_host(shape)`` binds the layout to one, validated once, as
a :class:`HostMapping` that owns every per-shape question (coordinates, padding, DCI).

Pure Python/NumPy: no JAX import.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .._errors import LayoutError
from ._checks import check_dim_order, check_host_strides, check_index, check_shape, int_tuple
from ._dtypes import DataFormats, DTypeLike, format_for_dtype
from ._gaps import Gaps, check_gaps, gap_slabs, in_valid_range, valid_size, widen
from ._segments import Segmentation, axis_coord, row_major_strides, segment_axes
from ._sticks import expression, stick_groups, stick_tiled_dims

__all__ = ["HostMapping", "SpyreTensorLayout"]


def _default_dims(
    shape: tuple[int, ...], strides: tuple[int, ...], order: tuple[int, ...], eps: int
) -> list[tuple[int, int]]:
    """``(device size, stride_map entry)`` of the default layout, outermost first."""
    if not shape:
        return [(1, -1), (eps, -1)]
    stick = order[-1]

    def host(d: int) -> tuple[int, int]:
        return (1, -1) if shape[d] == 1 else (shape[d], strides[d])

    if stick == -1 or shape[stick] == 1:
        tile, within = (1, -1), (eps, -1)
    else:
        tile = (math.ceil(shape[stick] / eps), strides[stick] * eps)
        within = (eps, strides[stick])
    if len(order) == 1:
        return [tile, within]
    return [host(d) for d in order[1:-1]] + [tile, host(order[0]), within]


class SpyreTensorLayout:
    """The device layout of a Spyre tensor: ``device_size``, ``stride_map``, ``device_dtype``.

    ``SpyreTensorLayout(size, dtype, dim_order=None)`` builds the default layout of a
    host tensor (spec section 2); :meth:`from_stride_map` builds any explicit layout.
    Layouts compare and hash by value, and print exactly like torch-spyre's.

    Example:
        >>> import numpy as np
        >>> SpyreTensorLayout((5, 100, 150), np.float16)
        SpyreTensorLayout(device_size=[100, 3, 5, 64], stride_map =[150, 64, 15000, 1], \
device_dtype=DataFormats.SEN169_FP16)
    """

    # has_gaps and num_sticks (_gapped, _sticks), read very often, computed with the fields.
    __slots__ = ("_gapped", "_hash", "_sticks", "device_dtype", "device_gaps", "device_size")
    __slots__ += ("stride_map",)

    device_size: tuple[int, ...]
    stride_map: tuple[int, ...]
    device_dtype: DataFormats
    device_gaps: Gaps

    def __init__(
        self,
        size: Sequence[int],
        dtype: DTypeLike,
        dim_order: Sequence[int] | None = None,
        *,
        host_strides: Sequence[int] | None = None,
    ) -> None:
        """The default layout of a host tensor.

        Args:
            size: host shape (rank 0 to 8, every size >= 0; a size-0 dim makes an
                empty tensor, whose device dims may have size 0 too).
            dtype: host dtype (or a :class:`DataFormats` member).
            dim_order: host dims outermost first; the last is the stick dim. A trailing
                ``-1`` (one entry longer than the rank) asks for a sparse layout with a
                synthetic stick dim. Defaults to ``range(rank)``.
            host_strides: host strides in elements; defaults to row-major.

        Raises:
            LayoutError: on a bad size, dtype, dim order or host strides.
        """
        shape = check_shape(size)
        fmt = format_for_dtype(dtype)
        strides = check_host_strides(shape, host_strides)
        order = check_dim_order(dim_order, len(shape))
        dims = _default_dims(shape, strides, order, fmt.elems_per_stick())
        self._init([n for n, _ in dims], [s for _, s in dims], fmt)

    def _init(
        self, device_size: Any, stride_map: Any, device_dtype: Any, device_gaps: Any = None
    ) -> None:
        """The one canonicalising constructor: validates and freezes the four fields."""
        fmt = format_for_dtype(device_dtype)
        dsize = int_tuple(device_size, "device_size")
        smap = int_tuple(stride_map, "stride_map")
        if len(dsize) != len(smap):
            raise LayoutError(
                f"device_size {list(dsize)} and stride_map {list(smap)} must have the same length"
            )
        if not dsize:
            raise LayoutError("a layout needs at least one device dim (the stick dim)")
        if any(n < 0 for n in dsize):
            raise LayoutError(f"device sizes must be >= 0, got device_size {list(dsize)}")
        eps = fmt.elems_per_stick()
        if dsize[-1] != eps:
            raise LayoutError(
                f"the last device size must be the stick size {eps} for {fmt!r}, "
                f"got device_size {list(dsize)}"
            )
        if any(s < -1 for s in smap):
            raise LayoutError(
                f"stride_map entries must be >= -1 (-1 synthetic, 0 broadcast), got {list(smap)}"
            )
        gaps = check_gaps(device_gaps, dsize)
        object.__setattr__(self, "device_size", dsize)
        object.__setattr__(self, "stride_map", smap)
        object.__setattr__(self, "device_dtype", fmt)
        object.__setattr__(self, "device_gaps", gaps)
        object.__setattr__(self, "_hash", hash((dsize, smap, int(fmt), gaps)))
        object.__setattr__(self, "_gapped", any(f or b for f, b in gaps))
        object.__setattr__(self, "_sticks", math.prod(dsize[:-1]))

    @classmethod
    def from_stride_map(
        cls,
        device_size: Sequence[int],
        stride_map: Sequence[int],
        device_dtype: DTypeLike,
        *,
        device_gaps: Sequence[Sequence[int]] | None = None,
    ) -> SpyreTensorLayout:
        """An explicit layout.

        Any tiling is allowed: a host dim split over several device dims (their steps
        need not divide one another: padded sticks inside larger tiles), host dims
        folded into one device dim, padding beyond one stick, two device dims with one
        stride (the outer one iterates, the inner one only holds coordinate 0),
        broadcast (stride 0), synthetic (stride -1) and size-0 dims. Whether it fits a
        given host shape is checked when it is bound to one (:meth:`for_host`).

        Args:
            device_size: padded device shape, row-major, stick dim last.
            stride_map: host stride per device dim (``-1`` synthetic, ``0`` broadcast).
            device_dtype: a :class:`DataFormats` member or a host dtype.
            device_gaps: ``(front, back)`` per device dim: device positions before and
                after the range the index map iterates (see :meth:`with_gap`);
                ``device_size`` includes them. Defaults to no gaps.

        Raises:
            LayoutError: if the lengths differ, a size is < 0, the last size is not the
                stick size of the format, a stride is < -1, or a gap is negative, on
                the stick dim, or longer than its dim.
        """
        layout = cls.__new__(cls)
        layout._init(device_size, stride_map, device_dtype, device_gaps)
        return layout

    def with_gap(self, dim: int, front: int = 0, back: int = 0) -> SpyreTensorLayout:
        """This layout inside a larger buffer: ``front`` and ``back`` more gap on ``dim``.

        Gap positions hold no data (torch-spyre's ``backGap``, ``validGap_``): the index
        map shifts by ``front`` along device dim ``dim`` (a piece of a concatenate after
        ``front`` rows; a KV cache of capacity 4096 holding 100 tokens: ``back=3996``).

        Example:
            >>> import numpy as np
            >>> SpyreTensorLayout.row_major((100, 64), np.float16).with_gap(0, back=3996)
            SpyreTensorLayout(device_size=[4096, 1, 64], stride_map =[64, 64, 1], \
device_dtype=DataFormats.SEN169_FP16, device_gaps=[(0, 3996), (0, 0), (0, 0)])

        Raises:
            LayoutError: if ``dim`` is not a device dim or is the stick dim, or a gap < 0.
        """
        size, gaps = widen(self.device_size, self.device_gaps, dim, front, back)
        return SpyreTensorLayout.from_stride_map(
            size, self.stride_map, self.device_dtype, device_gaps=gaps
        )

    @classmethod
    def row_major(
        cls, size: Sequence[int], dtype: DTypeLike, *, host_strides: Sequence[int] | None = None
    ) -> SpyreTensorLayout:
        """The tiled row-major layout: host dims in host order, the last one stuck.

        Device dims ``[d0, ..., d(r-2), T(s), S(s)]``: every row of sticks is contiguous,
        the order a batched matmul computes its product in (the default layout puts the
        tile count before ``d0`` instead). Stuck on the last dim, padded like the default
        layout; rank 0 and 1 give the default layout.

        Example:
            >>> import numpy as np
            >>> SpyreTensorLayout.row_major((5, 100, 150), np.float16)
            SpyreTensorLayout(device_size=[5, 100, 3, 64], stride_map =[15000, 150, 64, 1], \
device_dtype=DataFormats.SEN169_FP16)

        Raises:
            LayoutError: on a bad size, dtype or host strides.
        """
        shape = check_shape(size)
        if len(shape) < 2:
            return cls(shape, dtype, host_strides=host_strides)
        fmt = format_for_dtype(dtype)
        strides = check_host_strides(shape, host_strides)
        tiled = _default_dims(shape[-1:], strides[-1:], (0,), fmt.elems_per_stick())
        outer = zip(shape[:-1], strides[:-1], strict=True)
        dims = [(1, -1) if n == 1 else (n, st) for n, st in outer] + tiled
        return cls.from_stride_map([n for n, _ in dims], [st for _, st in dims], fmt)

    @classmethod
    def stick_tiled(
        cls,
        size: Sequence[int],
        dtype: DTypeLike,
        stick_dims: Sequence[int | Sequence[int]],
        *,
        host_strides: Sequence[int] | None = None,
    ) -> SpyreTensorLayout:
        """A layout with several stick dims: the seeds' ``N + k`` loop nest.

        Each stick dim is padded to whole sticks and tiled: the other host dims come
        first in host order, then a tile count per stick dim, then a within-tile dim
        (``eps`` long) per stick dim, the last one being the stick. Two stick dims give
        stick x stick tiles. A stick dim may be a tuple of adjacent, contiguous host dims
        read as one index (``(3, 4)``: a stick over ``n4*d3 + d4``, so interleaved pairs
        share sticks).

        Example:
            >>> import numpy as np
            >>> SpyreTensorLayout.stick_tiled((100, 150), np.float16, [0, 1])
            SpyreTensorLayout(device_size=[2, 3, 64, 64], stride_map =[9600, 64, 150, 1], \
device_dtype=DataFormats.SEN169_FP16)

        Raises:
            LayoutError: on a bad size, dtype or host strides, stick dims that name a dim
                twice or outside the rank, or a group of host dims not contiguous.
        """
        shape = check_shape(size)
        fmt = format_for_dtype(dtype)
        strides = check_host_strides(shape, host_strides)
        groups = stick_groups(stick_dims, len(shape))
        dims = stick_tiled_dims(shape, strides, groups, fmt.elems_per_stick())
        return cls.from_stride_map([n for n, _ in dims], [st for _, st in dims], fmt)

    @classmethod
    def from_dim_map(
        cls,
        size: Sequence[int],
        dim_map: Sequence[int],
        device_size: Sequence[int],
        dtype: DTypeLike,
        *,
        host_strides: Sequence[int] | None = None,
    ) -> SpyreTensorLayout:
        """A layout from the legacy ``dim_map`` form (spec section 3, seed 000).

        ``dim_map[j]`` names the host dim of device dim ``j`` (``-1`` synthetic). The
        device dims of one host dim combine with strides growing right to left.

        Raises:
            LayoutError: if ``dim_map`` and ``device_size`` differ in length, name a dim
                out of range, or leave a host dim of size > 1 unmapped.
        """
        shape = check_shape(size)
        strides = check_host_strides(shape, host_strides)
        dmap = int_tuple(dim_map, "dim_map")
        dsize = int_tuple(device_size, "device_size")
        if len(dmap) != len(dsize):
            raise LayoutError(
                f"dim_map {list(dmap)} and device_size {list(dsize)} must have the same length"
            )
        if any(not -1 <= d < len(shape) for d in dmap):
            raise LayoutError(f"dim_map {list(dmap)} names a dim outside range(-1, {len(shape)})")
        missing = [d for d, n in enumerate(shape) if n > 1 and d not in dmap]
        if missing:
            raise LayoutError(f"dim_map {list(dmap)} leaves host dims {missing} unmapped")
        smap = [-1] * len(dsize)
        inner = [1] * len(shape)
        for j in reversed(range(len(dsize))):
            d = dmap[j]
            if d >= 0 and shape[d] > 1:
                smap[j] = strides[d] * inner[d]
                inner[d] *= dsize[j]
        return cls.from_stride_map(dsize, smap, dtype)

    # -- value semantics -------------------------------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"SpyreTensorLayout is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"SpyreTensorLayout is immutable; cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SpyreTensorLayout):
            return NotImplemented
        return (
            self.device_size == other.device_size
            and self.stride_map == other.stride_map
            and self.device_dtype == other.device_dtype
            and self.device_gaps == other.device_gaps
        )

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            functools.partial(SpyreTensorLayout.from_stride_map, device_gaps=self.device_gaps),
            (self.device_size, self.stride_map, self.device_dtype),
        )

    def __repr__(self) -> str:
        gaps = f", device_gaps={list(self.device_gaps)}" if self.has_gaps else ""
        return (
            f"SpyreTensorLayout(device_size={list(self.device_size)}, "
            f"stride_map ={list(self.stride_map)}, device_dtype={self.device_dtype!r}{gaps})"
        )

    __str__ = __repr__

    # -- derived quantities ----------------------------------------------------------

    @property
    def has_gaps(self) -> bool:
        """Whether some device dim has a gap (:meth:`with_gap`)."""
        return self._gapped

    @property
    def gap_offsets(self) -> tuple[int, ...]:
        """Front gap per device dim: where the index map's range starts."""
        return tuple(f for f, _ in self.device_gaps)

    @property
    def valid_size(self) -> tuple[int, ...]:
        """Per device dim, the range the index map iterates: ``device_size`` minus gaps."""
        return valid_size(self.device_size, self.device_gaps)

    @property
    def device_rank(self) -> int:
        """Number of device dims."""
        return len(self.device_size)

    @property
    def elems_per_stick(self) -> int:
        """Elements in one stick of this layout's format."""
        return self.device_size[-1]

    @property
    def device_strides(self) -> tuple[int, ...]:
        """Implicit row-major device strides in elements: ``prod(device_size[i+1:])``."""
        return row_major_strides(self.device_size)

    @property
    def num_sticks(self) -> int:
        """Sticks in the device image: ``prod(device_size[:-1])``."""
        return self._sticks

    @property
    def nbytes(self) -> int:
        """Device bytes: ``128 * prod(device_size[:-1])``."""
        return 128 * self.num_sticks

    @property
    def is_sparse(self) -> bool:
        """True when a stick holds one element (lane 0).

        The stick dim is synthetic (spec 2.5), or it steps the host by the same stride
        as an outer device dim, which then takes the whole quotient: a sparse layout
        spelled with real strides (``[1, 60, 64]`` / ``[64, 1, 1]``).
        """
        stick = self.stride_map[-1]
        return stick == -1 or (
            stick > 0
            and any(
                m == stick and n > 1
                for n, m in zip(self.device_size[:-1], self.stride_map[:-1], strict=True)
            )
        )

    # -- bound to a host shape ---------------------------------------------------------

    def for_host(
        self, shape: Sequence[int], host_strides: Sequence[int] | None = None
    ) -> HostMapping:
        """This layout bound to a host tensor: its index map, validated once and cached.

        Every question that needs a host shape (device coordinates, host indices,
        padding, ``dim_map``, DMA descriptors) is a method of the returned
        :class:`HostMapping`; ask it rather than passing the shape around. The methods
        of the layout that take ``(shape, host_strides=None)`` delegate to it.

        Args:
            shape: host sizes.
            host_strides: host strides in elements; defaults to row-major.

        Returns:
            The mapping; equal arguments give the same (frozen, hashable) object.

        Raises:
            LayoutError: if the layout cannot hold a host tensor of this shape (too
                small, a host dim it does not reach, or overlapping device positions),
                or the shape or strides are malformed.

        Example:
            >>> import numpy as np
            >>> mapping = SpyreTensorLayout((5, 100, 150), np.float16).for_host((5, 100, 150))
            >>> mapping.device_coord((4, 7, 69)), mapping.stick_dim()
            ((7, 1, 4, 5), 2)
        """
        shape_t = check_shape(shape)
        return _for_host(self, shape_t, check_host_strides(shape_t, host_strides))

    def stick_dim(
        self, shape: Sequence[int], host_strides: Sequence[int] | None = None
    ) -> int | None:
        """The host dim along the sticks, or None (see :meth:`HostMapping.stick_dim`)."""
        return self.for_host(shape, host_strides).stick_dim()

    def dim_map(
        self, shape: Sequence[int], host_strides: Sequence[int] | None = None
    ) -> tuple[int, ...]:
        """The legacy ``dim_map`` for a host shape (see :meth:`HostMapping.dim_map`)."""
        return self.for_host(shape, host_strides).dim_map()

    def dim_order(
        self, shape: Sequence[int], host_strides: Sequence[int] | None = None
    ) -> tuple[int, ...] | None:
        """The dim order whose default layout this is, or None (:meth:`HostMapping.dim_order`).

        Example:
            >>> import numpy as np
            >>> SpyreTensorLayout((5, 100, 150), np.float16, [2, 0, 1]).dim_order((5, 100, 150))
            (2, 0, 1)
        """
        return self.for_host(shape, host_strides).dim_order()

    def device_coords(
        self, shape: Sequence[int], host_strides: Sequence[int] | None = None
    ) -> np.ndarray:
        """Device coordinate of every host element (see :meth:`HostMapping.device_coords`)."""
        return self.for_host(shape, host_strides).device_coords()

    def device_coords_of(
        self,
        indices: np.ndarray,
        shape: Sequence[int],
        host_strides: Sequence[int] | None = None,
    ) -> np.ndarray:
        """Device coordinates of some host elements (:meth:`HostMapping.device_coords_of`)."""
        return self.for_host(shape, host_strides).device_coords_of(indices)

    def host_offsets_of(
        self,
        coords: np.ndarray,
        shape: Sequence[int],
        host_strides: Sequence[int] | None = None,
    ) -> np.ndarray:
        """Host offsets held at device coordinates (:meth:`HostMapping.host_offsets_of`)."""
        return self.for_host(shape, host_strides).host_offsets_of(coords)

    def device_coord(
        self,
        index: Sequence[int],
        shape: Sequence[int],
        host_strides: Sequence[int] | None = None,
    ) -> tuple[int, ...]:
        """Device coordinate of one host element (see :meth:`HostMapping.device_coord`)."""
        return self.for_host(shape, host_strides).device_coord(index)

    def host_index(
        self,
        coord: Sequence[int],
        shape: Sequence[int],
        host_strides: Sequence[int] | None = None,
    ) -> tuple[int, ...] | None:
        """Host index at a device coordinate, or None (see :meth:`HostMapping.host_index`)."""
        return self.for_host(shape, host_strides).host_index(coord)

    def padding_mask(
        self, shape: Sequence[int], host_strides: Sequence[int] | None = None
    ) -> np.ndarray:
        """True where the device image is padding (see :meth:`HostMapping.padding_mask`)."""
        return self.for_host(shape, host_strides).padding_mask()

    def data_mask(
        self, shape: Sequence[int], host_strides: Sequence[int] | None = None
    ) -> np.ndarray:
        """True where the image holds host data (see :meth:`HostMapping.data_mask`)."""
        return self.for_host(shape, host_strides).data_mask()


# A padding check: (device dim, bound, recombined sum or None); see _padding_checks.
_Check = tuple[int, int, tuple[tuple[tuple[int, int], ...], int] | None]


@dataclass(frozen=True)
class HostMapping:
    """A layout bound to one host tensor: its index map (spec section 4), validated once.

    Made by :meth:`SpyreTensorLayout.for_host`, which caches it: equal arguments give
    the same object. Everything that depends on the host shape is a method here,
    computed from the segmentation found when it was made: device coordinates, host
    indices, padding, ``dim_map`` and the DMA descriptors (``dci()``). Frozen and
    hashable; compares by ``(layout, shape, strides)``.

    ``dci(host_to_device=True, host_dtype=None, name="")`` returns the
    :class:`~spyrejax.DCI` that moves this host tensor to (or from) the layout; it is
    attached by :mod:`spyrejax.dma._dci`, the layer above, so that imports flow one way
    (see :func:`~spyrejax.generate_dci` for its arguments).

    Attributes:
        layout: the layout.
        shape: host sizes.
        strides: host strides in elements.
        segmentation: which device dims walk which host dims (see ``_segments``); no
            segments for an empty host tensor.
    """

    layout: SpyreTensorLayout
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    segmentation: Segmentation = field(compare=False, repr=False)

    dci: ClassVar[Callable[..., Any]]  # attached by spyrejax.dma._dci (see the docstring)

    @property
    def size(self) -> int:
        """Host elements (0 for an empty tensor)."""
        return math.prod(self.shape)

    # -- the legacy views of the map ---------------------------------------------------

    def stick_dim(self) -> int | None:
        """The host dim that runs along the sticks, or None when sparse or size 1.

        When host dims are folded into the stick, the innermost of them is returned.
        """
        seg = self.segmentation
        found = seg.segment_of(self.layout.device_rank - 1)
        return None if found is None else seg.segments[found[0]].host_dims[-1]

    def stick_dims(self) -> tuple[tuple[int, ...], ...]:
        """The host dims padded to whole sticks, as groups read as one index; the stick last.

        A group (a segment of the index map: one host dim, or several folded into one
        index) is a stick dim when a device dim ``eps`` long walks it by 1: a tile of
        sticks along it. The stick's own group (the last device dim's) comes last; a
        sparse or size-1 stick has none.
        """
        layout, seg = self.layout, self.segmentation
        eps, last = layout.elems_per_stick, layout.device_rank - 1
        found = []
        for j in range(last + 1):
            hit = seg.segment_of(j)
            if hit is not None and hit[1] == 1 and (layout.valid_size[j] == eps or j == last):
                found.append((j == last, j, seg.segments[hit[0]].host_dims))
        return tuple(dims for _, _, dims in sorted(found))

    def stick_expression(self) -> str | None:
        """The index the stick runs along, as torch-spyre prints it (``2*d3 + d4``), or None."""
        found = self.segmentation.segment_of(self.layout.device_rank - 1)
        if found is None:
            return None
        return expression(self.segmentation.segments[found[0]].host_dims, self.shape)

    def __str__(self) -> str:
        """torch-spyre's repr extended with the stick dims: ``..., stick_dims=[d0, 2*d3 + d4])``."""
        names = ", ".join(expression(g, self.shape) for g in self.stick_dims())
        return f"{str(self.layout)[:-1]}, stick_dims=[{names}])"

    def dim_map(self) -> tuple[int, ...]:
        """The legacy ``dim_map``: host dim per device dim, -1 synthetic.

        A device dim over folded host dims reports the innermost of them; a size-1 device
        dim with a host stride reports the host dim whose stride divides it; a device
        dim tied with an outer one of the same stride (which takes the whole quotient)
        holds coordinate 0 only and reports -1, like a synthetic dim.
        """
        layout, seg = self.layout, self.segmentation
        out = []
        for j, stride in enumerate(layout.stride_map):
            found = seg.segment_of(j)
            if found is not None:
                out.append(seg.segments[found[0]].host_dims[-1])
            elif stride > 0 and layout.valid_size[j] == 1:
                out.append(self._dividing_dim(stride))
            else:
                out.append(-1)
        return tuple(out)

    def dim_order(self) -> tuple[int, ...] | None:
        """The dim order whose default layout the layout is, for this host tensor; else None.

        The default layout places host dims as ``[o[1], ..., o[r-2], T, o[0], S]``
        (spec section 2), so the order is read off the device dims and checked by
        rebuilding the default layout. Size-1 host dims take no device memory, so
        several orders can give one layout; they fill their places in increasing order
        (the order closest to ``range(rank)``). An empty tensor places no element, so
        its order is found only when that fill gives it.
        """
        layout = self.layout
        rank, k = len(self.shape), layout.device_rank - 1  # k: entries of the order
        if rank and k not in (rank, rank + 1):
            return None
        # Device position of each entry: o[0], o[1..k-2], then the stick.
        positions = [k] if k == 1 else [k - 1, *range(k - 2), k]
        found: list[int | None] = [self._walked_dim(p) for p in positions] if rank else []
        if rank and k == rank + 1:  # a sparse order: a trailing synthetic stick
            found[-1] = -1
        left = iter(sorted(set(range(rank)) - set(found)))
        order = tuple(next(left, -1) if d is None else d for d in found)
        try:
            default = SpyreTensorLayout(
                self.shape, layout.device_dtype, order or None, host_strides=self.strides
            )
        except LayoutError:
            return None
        return order if default == layout else None

    # -- host element <-> device coordinate --------------------------------------------

    def device_coord(self, index: Sequence[int]) -> tuple[int, ...]:
        """Device coordinate of one host element.

        Broadcast device dims report coordinate 0.

        Raises:
            LayoutError: if ``index`` is not an index into the host shape.
        """
        idx = check_index(index, self.shape)
        out = list(self.layout.gap_offsets)
        for segment in self.segmentation.segments:
            for j, c in self._segment_coords(segment, idx):
                out[j] += int(c)
        return tuple(out)

    def device_coords(self) -> np.ndarray:
        """Device coordinate of every host element.

        Returns:
            An int64 array of shape ``(*shape, device_rank)``. Broadcast device dims
            report coordinate 0 (the element sits at every coordinate along them).
        """
        index = np.indices(self.shape, dtype=np.int64)
        return self.device_coords_of(np.moveaxis(index, 0, -1))

    def device_coords_of(self, indices: np.ndarray) -> np.ndarray:
        """Device coordinates of some host elements, vectorised.

        Args:
            indices: integer array of shape ``(..., rank)``: host indices.

        Returns:
            An int64 array of shape ``(..., device_rank)``.
        """
        idx = np.asarray(indices, dtype=np.int64)
        index = np.moveaxis(idx, -1, 0) if idx.ndim else idx
        out = np.zeros((*idx.shape[:-1], self.layout.device_rank), dtype=np.int64)
        for segment in self.segmentation.segments:
            for j, c in self._segment_coords(segment, index):
                out[..., j] = c
        if self.layout.has_gaps:
            out += np.array(self.layout.gap_offsets, dtype=np.int64)
        return out

    def host_index(self, coord: Sequence[int]) -> tuple[int, ...] | None:
        """Host index held at a device coordinate, or None if it is padding.

        Raises:
            LayoutError: if ``coord`` is not a coordinate of ``device_size``.
        """
        c = check_index(coord, self.layout.device_size, what="device coordinate")
        if not bool(self.data_positions(c)):
            return None
        index = [0] * len(self.shape)
        c = tuple(k - f for k, f in zip(c, self.layout.gap_offsets, strict=True))
        for segment in self.segmentation.segments:
            x = sum(c[j] * ratio for j, ratio in segment.axes)
            for d in reversed(segment.host_dims):
                x, index[d] = divmod(x, self.shape[d])
        return tuple(index)

    def host_offsets_of(self, coords: np.ndarray) -> np.ndarray:
        """Host offsets held at device coordinates, vectorised; -1 on padding.

        Args:
            coords: integer array of shape ``(..., device_rank)``.
        """
        c = np.asarray(coords, dtype=np.int64)
        cols = [c[..., j] for j in range(self.layout.device_rank)]
        valid = np.broadcast_to(self.data_positions(cols), c.shape[:-1])
        smap = np.array([max(m, 0) for m in self.layout.stride_map], dtype=np.int64)
        offsets = c @ smap - int(np.dot(self.layout.gap_offsets, smap))  # from the valid origin
        return np.where(valid, offsets, -1)

    # -- padding -------------------------------------------------------------------------

    def data_positions(self, c: Any) -> Any:
        """Whether device coordinates hold host data (spec section 4), array-agnostic.

        Args:
            c: one coordinate per device dim: ints, or broadcastable integer arrays of
                any array library (NumPy grids, JAX iotas); only ``*``, ``+``, ``<`` and
                ``&`` are used.

        Returns:
            True where the position holds data (a bool or a broadcast bool array).

        Only the checks a coordinate inside ``device_size`` can fail are emitted, so the
        masks kernels build stay small. Gap positions (outside a dim's valid range) are
        not data.
        """
        layout = self.layout
        ok, c = in_valid_range(c, layout.device_gaps, layout.valid_size)
        for j, bound, combined in self._padding_checks:
            if combined is None:
                ok = ok & (c[j] < bound)
                continue
            axes, limit = combined
            x: Any = 0
            for k, ratio in axes:
                x = x + c[k] * ratio
            ok = ok & (x < limit)
        return ok

    def padding_mask(self) -> np.ndarray:
        """Boolean array of shape ``device_size``: True where the device image is padding.

        Exact, including positions whose ``dot(coord, stride_map)`` aliases a real host
        offset (spec section 4): validity is decided per host dim.
        """
        size = self.layout.device_size
        grids = np.ogrid[tuple(slice(0, n) for n in size)]
        return ~np.broadcast_to(self.data_positions(grids), size)

    def data_mask(self) -> np.ndarray:
        """Boolean array of shape ``device_size``: True where the image holds host data."""
        return ~self.padding_mask()

    def padding_slabs(self) -> tuple[tuple[int, int, int], ...]:
        """Slabs ``(device dim, start, stop)`` whose union covers every padding position.

        A padding position fails some check :meth:`data_positions` emits, and the
        innermost check it fails holds only where one device coordinate is at or past a
        bound (the checks below it pass), so it lies in that dim's slab: filling the
        slabs and then writing the data fills all padding while touching little else
        (for a partial last stick, only the last tile).
        """
        size, gaps = self.layout.device_size, self.layout.device_gaps
        slabs = [(j, bound + gaps[j][0], size[j]) for j, bound, _ in self._padding_checks]
        return tuple(slabs + gap_slabs(size, gaps))

    def data_box(self, runs: Sequence[Sequence[int]]) -> tuple[tuple[int, bool], ...] | None:
        """A box of data at the image's origin, per run of merged dims: ``(bound, exact)``.

        ``runs`` partitions the device dims into runs of adjacent dims, in order, each
        merged into one axis row-major (a tile count and its stick: see the primitives'
        ``collapsed``). Every position whose merged coordinates are all below their
        bounds holds data. A run's bound is its size where it holds no padding, else
        where its padding starts: ``exact`` if all past it is padding (a merged partial
        stick: ``2000`` on an axis of ``63 * 32``; a padded count of rows), not if data
        lies past it too (a tile count cut apart from its lanes: the last tile holds
        the partial stick). None if a run's padding is not so, or the layout has gaps.
        """
        if self.layout.has_gaps:
            return None
        size = self.layout.device_size
        checks = {j: (bound, combined) for j, bound, combined in self._padding_checks}
        out = []
        for run in runs:
            run = tuple(run)
            inner = [math.prod(size[k] for k in run[i + 1 :]) for i in range(len(run))]
            found = [j for j in run if j in checks]
            if not found:
                out.append((math.prod(size[j] for j in run), True))
                continue
            top = run[0]
            if found != [top]:
                return None
            bound, combined = checks[top]
            if combined is None:  # past the bound, this check fails: all padding
                out.append((bound * inner[0], True))
                continue
            axes, limit = combined
            if len(run) == 1:  # the tile holding the partial stick lies past the bound
                out.append((bound, False))
                continue
            unit = axes[-1][1]
            if tuple(k for k, _ in axes) != run or limit % unit:
                return None
            if any(r != w * unit for (_, r), w in zip(axes, inner, strict=True)):
                return None
            out.append((limit // unit, True))
        return tuple(out)

    @functools.cached_property
    def _padding_checks(self) -> tuple[_Check, ...]:
        """The checks a coordinate inside ``device_size`` can fail, as ``(dim, bound, sum)``.

        A position is data iff it is the image of a host element (spec section 4): for
        each device dim of a segment, the coordinate recombined from it and the dims
        below it (``sum(c[j] * ratio)``) stays below the step of the dim above it (the
        segment size at the top). With ``sum`` None the check is ``c[dim] < bound`` (the
        step divides evenly, so given the checks below it that is the same); otherwise
        ``sum`` is ``(axes, limit)``: data only if the recombined coordinate over
        ``axes`` is below ``limit``. Either way it fails only where ``c[dim] >= bound``
        once the checks below it hold; a check that cannot fail is left out. Coordinates
        are counted from the front gap, within each dim's valid range.
        """
        layout = self.layout
        size = layout.valid_size
        if self.size == 0:
            return ((layout.device_rank - 1, 0, None),)  # an empty tensor: all is padding
        seg = self.segmentation
        checks: list[_Check] = []
        for j in seg.ignored:
            if layout.stride_map[j] != 0 and size[j] > 1:
                checks.append((j, 1, None))
        for segment in seg.segments:
            limit = segment.size
            for i, (j, ratio) in enumerate(segment.axes):
                if limit // ratio < size[j]:
                    combined = None if limit % ratio == 0 else (segment.axes[i:], limit)
                    checks.append((j, limit // ratio, combined))
                limit = ratio
        return tuple(checks)

    # -- helpers -------------------------------------------------------------------------

    def _walked_dim(self, j: int) -> int | None:
        """The host dim device dim ``j`` walks one element at a time, or None."""
        found = self.segmentation.segment_of(j)
        if found is None:
            return None
        segment = self.segmentation.segments[found[0]]
        return segment.host_dims[0] if len(segment.host_dims) == 1 and found[1] == 1 else None

    def _segment_coords(self, segment: Any, index: Any) -> list[tuple[int, Any]]:
        """``(device dim, coordinate)`` of each axis of a segment at host index ``index``."""
        coords = [index[d] for d in segment.host_dims]
        sizes = [self.shape[d] for d in segment.host_dims]
        ratios = [r for _, r in segment.axes]
        return [
            (j, axis_coord(coords, sizes, r, ratios[:k])) for k, (j, r) in enumerate(segment.axes)
        ]

    def _dividing_dim(self, stride: int) -> int:
        """Host dim (size > 1) with the largest stride that divides ``stride``, else -1."""
        best = -1
        for d, (n, s) in enumerate(zip(self.shape, self.strides, strict=True)):
            if n > 1 and s <= stride and stride % s == 0 and (best < 0 or s > self.strides[best]):
                best = d
        return best


@functools.lru_cache(maxsize=4096)
def _for_host(
    layout: SpyreTensorLayout, shape: tuple[int, ...], strides: tuple[int, ...]
) -> HostMapping:
    """The validated mapping of canonical ``(shape, strides)``: the one place it is built."""
    what = f"layout {layout} for host shape {list(shape)}"
    if math.prod(shape) == 0:  # an empty tensor: nothing to place, all is padding
        empty = Segmentation((), tuple(range(layout.device_rank)))
        return HostMapping(layout, shape, strides, empty)
    if 0 in layout.valid_size:
        raise LayoutError(
            f"{what}: too small; a size-0 device dim leaves no place for "
            f"{math.prod(shape)} host elements"
        )
    axes = tuple(zip(layout.valid_size, layout.stride_map, strict=True))
    seg = segment_axes(shape, strides, axes, what=what)
    for segment in seg.segments:
        _check_nesting(layout, segment, what)
    return HostMapping(layout, shape, strides, seg)


def _check_nesting(layout: SpyreTensorLayout, segment: Any, what: str) -> None:
    """The device dims of one host segment must give every element its own place.

    Spec section 4 spreads a segment coordinate ``x`` over the device dims from the
    largest step down: ``c = x // ratio; x %= ratio``. That places every element when
    the last step is 1 (nothing is left over) and each device dim is long enough for
    the quotients it gets: below the step of the device dim above it, ``x`` takes
    ``min(steps above)`` values (the segment size at the top). Steps need not divide
    one another: rows of 120 split into sticks of 64 take two sticks each, the second
    holding 56 values and 8 padding lanes.
    """
    dims = segment.host_dims
    if segment.axes[-1][1] != 1:
        raise LayoutError(
            f"{what}: host dims {dims} are only reached every {segment.axes[-1][1]} elements"
        )
    span, outer = segment.size, None
    for j, ratio in segment.axes:
        need = -(-span // ratio)
        if need > layout.valid_size[j]:
            where = (
                f"host dims {dims}"
                if outer is None
                else f"the {span} elements of a step of device dim {outer} (host dims {dims})"
            )
            raise LayoutError(
                f"{what}: too small; {where} need {need} along device dim {j} (step "
                f"{ratio}), which has {layout.valid_size[j]}"
            )
        span, outer = min(span, ratio), j
