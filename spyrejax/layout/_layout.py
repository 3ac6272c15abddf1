"""SpyreTensorLayout: how a host tensor is tiled and padded into device sticks.

Spec sections 2-5. A layout is a frozen, hashable value: ``device_size`` (the padded,
row-major device shape, stick dim last), ``stride_map`` (one host stride per device dim:
``-1`` synthetic, ``0`` broadcast) and ``device_dtype``. The ground truth of a layout is
its index map: host element -> device coordinate, with
``host_offset == dot(device_coord, stride_map)`` on every data position. The map exists
for a host shape: ``layout.for_host(shape)`` binds the layout to one, validated once, as
a :class:`~spyrejax.layout._host_mapping.HostMapping` (its own module) that owns every
per-shape question (coordinates, padding, DCI).

Pure Python/NumPy: no JAX import.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._errors import LayoutError
from ._arrangements import ElementArrangement, check_arrangement
from ._checks import check_dim_order, check_host_strides, check_shape, int_tuple
from ._dtypes import DataFormats, DTypeLike, format_for_dtype
from ._gaps import Gaps, check_gaps, valid_size, widen
from ._host_mapping import HostMapping, for_host
from ._segments import row_major_strides
from ._sticks import stick_groups, stick_tiled_dims

__all__ = ["SpyreTensorLayout"]


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
    __slots__ += ("arrangement", "stride_map")

    device_size: tuple[int, ...]
    stride_map: tuple[int, ...]
    device_dtype: DataFormats
    device_gaps: Gaps
    arrangement: ElementArrangement
    tile: tuple[int, int] | None = None
    """A tile window's ``(device dim, tile)``: its image starts at that tile of its buffer
    (``layout._lanes.LanedLayout`` sets it); None for every other layout."""

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
        self,
        device_size: Any,
        stride_map: Any,
        device_dtype: Any,
        device_gaps: Any = None,
        arrangement: Any = ElementArrangement.STANDARD,
    ) -> None:
        """The one canonicalising constructor: validates and freezes the five fields."""
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
        arr = check_arrangement(arrangement, eps)
        if arr is not ElementArrangement.STANDARD and smap[-1] <= 0:
            raise LayoutError(f"element arrangement {arr.value} needs lanes on a host dim")
        object.__setattr__(self, "arrangement", arr)
        object.__setattr__(self, "device_size", dsize)
        object.__setattr__(self, "stride_map", smap)
        object.__setattr__(self, "device_dtype", fmt)
        object.__setattr__(self, "device_gaps", gaps)
        object.__setattr__(self, "_hash", hash((dsize, smap, int(fmt), gaps, arr.value)))
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
        arrangement: ElementArrangement | str = ElementArrangement.STANDARD,
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
            arrangement: where elements sit inside their 64-element group (see
                :mod:`spyrejax.layout._arrangements`); defaults to ``STANDARD``.

        Raises:
            LayoutError: if the lengths differ, a size is < 0, the last size is not the
                stick size of the format, a stride is < -1, a gap is negative, on the
                stick dim, or longer than its dim, or the arrangement does not fit the
                format (or the lanes are synthetic).
        """
        layout = cls.__new__(cls)
        layout._init(device_size, stride_map, device_dtype, device_gaps, arrangement)
        return layout

    def with_arrangement(self, arrangement: ElementArrangement | str) -> SpyreTensorLayout:
        """This layout with its elements placed in ``arrangement`` inside each group.

        Example:
            >>> import numpy as np
            >>> SpyreTensorLayout.row_major((4, 64), np.float32).with_arrangement("DL16_TO_FP32")
            SpyreTensorLayout(device_size=[4, 2, 32], stride_map =[64, 32, 1], \
device_dtype=DataFormats.IEEE_FP32, arrangement=DL16_TO_FP32)

        Raises:
            LayoutError: if the arrangement does not fit the format.
        """
        return SpyreTensorLayout.from_stride_map(
            self.device_size,
            self.stride_map,
            self.device_dtype,
            device_gaps=self.device_gaps,
            arrangement=arrangement,
        )

    @property
    def is_arranged(self) -> bool:
        """Whether elements sit in a non-standard arrangement (:meth:`with_arrangement`)."""
        return self.arrangement is not ElementArrangement.STANDARD

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
            size, self.stride_map, self.device_dtype, device_gaps=gaps, arrangement=self.arrangement
        )

    @classmethod
    def row_major(
        cls,
        size: Sequence[int],
        dtype: DTypeLike,
        *,
        host_strides: Sequence[int] | None = None,
        order: Sequence[int] | None = None,
    ) -> SpyreTensorLayout:
        """The tiled row-major layout: host dims in host order, the last one stuck.

        Device dims ``[d0, ..., d(r-2), T(s), S(s)]``: every row of sticks is contiguous,
        the order a batched matmul computes its product in (the default layout puts the
        tile count before ``d0``). Stuck on the last dim, padded like the default layout
        (rank 0 and 1: it). ``order``: that of ``x.transpose(order)``, ``x`` of ``size``.

        Example:
            >>> import numpy as np
            >>> SpyreTensorLayout.row_major((5, 100, 150), np.float16)
            SpyreTensorLayout(device_size=[5, 100, 3, 64], stride_map =[15000, 150, 64, 1], \
device_dtype=DataFormats.SEN169_FP16)

        Raises:
            LayoutError: on a bad size, dtype, host strides or order.
        """
        shape = check_shape(size)
        if order is not None:
            perm, base = check_dim_order(order, len(shape)), row_major_strides(shape)
            if host_strides is not None or len(perm) != len(shape):
                raise LayoutError(f"row_major: order {order} with host strides, or sparse")
            shape, host_strides = [shape[k] for k in perm], [base[k] for k in perm]
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
        return self is other or (
            self.device_size == other.device_size
            and self.stride_map == other.stride_map
            and self.device_dtype == other.device_dtype
            and self.device_gaps == other.device_gaps
            and self.arrangement is other.arrangement
        )

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        build = functools.partial(
            SpyreTensorLayout.from_stride_map,
            device_gaps=self.device_gaps,
            arrangement=self.arrangement.value,
        )
        return (build, (self.device_size, self.stride_map, self.device_dtype))

    def __repr__(self) -> str:
        gaps = f", device_gaps={list(self.device_gaps)}" if self.has_gaps else ""
        if self.is_arranged:
            gaps += f", arrangement={self.arrangement.value}"
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
        stick, sizes = self.stride_map[-1], self.device_size[:-1]
        outer = zip(sizes, self.stride_map[:-1], strict=True)
        return stick == -1 or (stick > 0 and any(m == stick and n > 1 for n, m in outer))

    def permutation_to(self, other: SpyreTensorLayout) -> tuple[int, ...] | None:
        """The transpose of device dims that makes ``self``'s image ``other``'s, or None.

        ``other``'s image is then ``self``'s image with its device dims transposed by the
        result (``other.device_size[i] == self.device_size[perm[i]]``): the same
        ``(size, stride_map entry)`` pairs in another order, so every position holds the
        same host element (or padding: data positions are decided per pair, spec
        section 4). Only when the pairs say it unambiguously: no gaps, no element
        arrangement, the same format, and no two device dims of size > 1 with one stride
        (an outer dim and the one it repeats, a sparse stick spelled with real strides);
        else None.
        """
        if (
            self.device_dtype != other.device_dtype
            or self.device_rank != other.device_rank
            or self.has_gaps
            or other.has_gaps
            or self.is_arranged
            or other.is_arranged
        ):
            return None
        walked = [m for n, m in zip(self.device_size, self.stride_map, strict=True) if n > 1]
        if len(set(walked)) != len(walked):
            return None
        pairs = zip(self.device_size, self.stride_map, strict=True)
        where = {(n, m): j for j, (n, m) in enumerate(pairs)}
        ones = [j for j, n in enumerate(self.device_size) if n == 1]
        perm = []
        for n, m in zip(other.device_size, other.stride_map, strict=True):
            if n == 1 and ones:
                perm.append(ones.pop(0))
            elif n > 1 and (n, m) in where:
                perm.append(where[n, m])
            else:
                return None
        return tuple(perm) if len(set(perm)) == len(perm) else None

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
        return for_host(self, shape_t, check_host_strides(shape_t, host_strides))

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
