"""HostMapping: a layout bound to one host tensor, its index map validated once.

Spec section 4. :meth:`SpyreTensorLayout.for_host` binds a layout to a host shape and
strides through :func:`for_host` here, which validates the index map once and caches the
mapping; every per-shape question (device coordinates, host indices, padding, masks,
``dim_map``, DCI) is a method of the mapping.

This module sits below ``_layout``: it never builds a layout by naming its class (the
default layout :meth:`HostMapping.dim_order` compares with is built by the bound layout's
own class), and names ``SpyreTensorLayout`` in annotations only.

Pure Python/NumPy: no JAX import.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .._errors import LayoutError
from ._arrangements import arranged_coords, pair_axis
from ._checks import check_index
from ._gaps import gap_slabs, in_valid_range
from ._segments import Segmentation, axis_coord, segment_axes
from ._sticks import expression

if TYPE_CHECKING:  # annotations only: the layout module imports this one
    from ._layout import SpyreTensorLayout

__all__ = ["HostMapping", "for_host"]

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
        pair: the tile count whose tiles ``2k, 2k + 1`` form an arrangement group
            (a 32-bit arranged layout; see ``_arrangements``), else None.
    """

    layout: SpyreTensorLayout
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    segmentation: Segmentation = field(compare=False, repr=False)
    pair: int | None = field(default=None, compare=False, repr=False)

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
        try:  # the layout's own class: this module does not import ``_layout``
            default = type(layout)(
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
        return tuple(arranged_coords(out, self.pair, self.layout.arrangement))

    def device_coords(self) -> np.ndarray:
        """Device coordinate of every host element.

        Returns:
            An int64 array of shape ``(*shape, device_rank)``. Broadcast device dims
            report coordinate 0 (the element sits at every coordinate along them).
        """
        # Each host dim's index as a broadcastable 1-D range (not the dense grid of every
        # index): the coordinates broadcast to the shape only where they are stored.
        return self._coords_at(np.indices(self.shape, dtype=np.int64, sparse=True), self.shape)

    def device_coords_of(self, indices: np.ndarray) -> np.ndarray:
        """Device coordinates of some host elements, vectorised.

        Args:
            indices: integer array of shape ``(..., rank)``: host indices.

        Returns:
            An int64 array of shape ``(..., device_rank)``.
        """
        idx = np.asarray(indices, dtype=np.int64)
        index = np.moveaxis(idx, -1, 0) if idx.ndim else idx
        return self._coords_at(index, idx.shape[:-1])

    def _coords_at(self, index: Any, shape: Sequence[int]) -> np.ndarray:
        """Device coordinates of the host elements whose index along dim ``d`` is ``index[d]``.

        ``index[d]`` are integer arrays that broadcast to ``shape``.
        """
        out = np.zeros((*shape, self.layout.device_rank), dtype=np.int64)
        for segment in self.segmentation.segments:
            for j, c in self._segment_coords(segment, index):
                out[..., j] = c
        if self.layout.is_arranged:
            cols = arranged_coords(
                list(np.moveaxis(out, -1, 0)), self.pair, self.layout.arrangement
            )
            out = np.stack(cols, axis=-1)
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
        c = tuple(arranged_coords(list(c), self.pair, self.layout.arrangement, inverse=True))
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
        if self.layout.is_arranged:  # the pair and the lanes have no gap: absolute is fine
            cols = arranged_coords(cols, self.pair, self.layout.arrangement, inverse=True)
            c = np.stack(np.broadcast_arrays(*cols), axis=-1)
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
        c = arranged_coords(c, self.pair, layout.arrangement, inverse=True)
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
        if self.layout.is_arranged:  # a group spreads padding over its stick (pair)
            last = len(size) - 1
            slabs = [
                (j, 0 if j == last else start - start % 2 if j == self.pair else start, stop)
                for j, start, stop in slabs
            ]
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
        if self.layout.has_gaps or self.layout.is_arranged:
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
def for_host(
    layout: SpyreTensorLayout, shape: tuple[int, ...], strides: tuple[int, ...]
) -> HostMapping:
    """The validated mapping of canonical ``(shape, strides)``: the one place it is built.

    :meth:`SpyreTensorLayout.for_host` checks and canonicalises its arguments, then asks
    here; equal arguments give the same mapping.
    """
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
    arr, valid, gaps = layout.arrangement, layout.valid_size, layout.device_gaps
    pair = pair_axis(arr, valid, gaps, seg.segments, what, layout.stride_map)
    return HostMapping(layout, shape, strides, seg, pair)


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
