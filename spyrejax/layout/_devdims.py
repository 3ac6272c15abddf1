"""Device-dim tags: which logical dims each device dim of a typed Spyre array walks.

A Spyre array is a device image (shape ``layout.device_size``) plus a *view*: a logical
shape and strides over the host offsets of the base tensor the layout was built for
(transpose, reshape, squeeze, expand_dims and broadcast_to only change the view). A
device dim's tag says which logical dims it walks and by how many logical elements one
step moves. Tags are the common language of the primitives' layout rules: operands are
compatible when their tags match up to order, broadcasting inserts missing dims, and
output layouts are built back from tags.

Pure Python: no JAX import.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import LayoutError
from ._dtypes import DataFormats
from ._host_mapping import HostMapping
from ._layout import SpyreTensorLayout
from ._segments import Segmentation, axis_coord, row_major_strides, segment_axes

__all__ = [
    "AlignPlan",
    "DevDim",
    "FoldIndex",
    "align",
    "device_dims",
    "fold_index",
    "layout_from_dims",
    "padded_base_dims",
    "same_image",
    "stick_dim",
]


@dataclass(frozen=True)
class DevDim:
    """One device dim of a typed array.

    Attributes:
        dims: logical dims it walks, outermost first (several when folded); empty for a
            synthetic, size-1 or broadcast device dim, which holds data at index 0 only.
        ratio: logical elements (in the folded dims' row-major units) per step.
        size: device size.
    """

    dims: tuple[int, ...]
    ratio: int
    size: int

    @property
    def is_data(self) -> bool:
        """Whether this dim walks logical data (else only index 0 matters)."""
        return bool(self.dims)

    def renumber(self, shift: int) -> DevDim:
        """The same dim with logical dims shifted (right-aligned broadcasting)."""
        return DevDim(tuple(d + shift for d in self.dims), self.ratio, self.size)


@functools.lru_cache(maxsize=8192)
def device_dims(
    layout: SpyreTensorLayout,
    base_shape: tuple[int, ...],
    shape: tuple[int, ...],
    strides: tuple[int, ...],
) -> tuple[DevDim, ...]:
    """Tags of every device dim for a view ``(shape, strides)`` over ``base_shape``.

    Logical dims of stride 0 (broadcast views) are walked by no device dim. For the
    base itself the tags are the layout's own index map (spec section 4). For a view,
    a device dim that runs past the end of a logical dim walks on into the next outer
    one (the two are folded), except over a padded base dim kept intact by the view,
    whose padded extent counts as its size.

    Raises:
        LayoutError: if the view cannot be expressed over the layout's device dims.
    """
    seg, _ = _view_segmentation(layout, base_shape, shape, strides)
    tags = [DevDim((), 1, n) for n in layout.device_size]
    for segment in seg.segments:
        for j, ratio in segment.axes:
            tags[j] = DevDim(segment.host_dims, ratio, layout.device_size[j])
    pair = layout.for_host(base_shape).pair if layout.is_arranged else None
    if pair is not None and not tags[pair].is_data and tags[-1].is_data:
        # A group's second stick beside lanes within one stick (a synthetic dim of 2 the
        # arrangement fills: ``_arrangements._lone_pair``) is their tile count.
        tags[pair] = DevDim(tags[-1].dims, layout.elems_per_stick, layout.device_size[pair])
    return tuple(tags)


@dataclass(frozen=True)
class FoldIndex:
    """How a device dim that folds several logical dims indexes them (the radix rule).

    Attributes:
        dims: the logical dims it walks, outermost first.
        sizes: their sizes in the mixed radix (a view's padded extents where
            :func:`device_dims` counts them): ``x = x * size + coord``.
        ratio: logical elements (in that radix) per step of the device dim.
        outer: the ratios of the device dims walking the same dims outside this one,
            largest first (``x %= r`` for each before ``x // ratio``).
    """

    dims: tuple[int, ...]
    sizes: tuple[int, ...]
    ratio: int
    outer: tuple[int, ...] = ()

    def coord(self, coords: Sequence[Any]) -> Any:
        """The device coordinate of the logical coordinates of :attr:`dims` (ints or arrays)."""
        return axis_coord(coords, self.sizes, self.ratio, self.outer)


@functools.lru_cache(maxsize=8192)
def fold_index(
    layout: SpyreTensorLayout,
    base_shape: tuple[int, ...],
    shape: tuple[int, ...],
    strides: tuple[int, ...],
) -> tuple[FoldIndex | None, ...]:
    """Per device dim of a view (as :func:`device_dims`), its :class:`FoldIndex` if it folds.

    A device dim walking one logical dim (or none) gets None.

    Raises:
        LayoutError: if the view cannot be expressed over the layout's device dims.
    """
    seg, live = _view_segmentation(layout, base_shape, shape, strides)
    out: list[FoldIndex | None] = [None] * layout.device_rank
    for segment in seg.segments:
        if len(segment.host_dims) < 2:
            continue
        sizes = tuple(live[d] for d in segment.host_dims)
        ratios = [r for _, r in segment.axes]
        for k, (j, ratio) in enumerate(segment.axes):
            out[j] = FoldIndex(segment.host_dims, sizes, ratio, tuple(ratios[:k]))
    return tuple(out)


@functools.lru_cache(maxsize=8192)
def _view_segmentation(
    layout: SpyreTensorLayout,
    base_shape: tuple[int, ...],
    shape: tuple[int, ...],
    strides: tuple[int, ...],
) -> tuple[Segmentation, tuple[int, ...]]:
    """The segmentation of a view over the layout's device dims, and each dim's radix size."""
    mapping = layout.for_host(base_shape)
    if shape == base_shape and is_contiguous(shape, strides):
        return mapping.segmentation, shape
    axes = tuple(zip(layout.device_size, layout.stride_map, strict=True))
    what = f"view {list(shape)} with strides {list(strides)} over {layout}"
    extents = _padded_extents(mapping)
    live = tuple(
        1 if s == 0 else extents.get((s, n), n) for n, s in zip(shape, strides, strict=True)
    )
    seg = segment_axes(live, tuple(max(s, 1) for s in strides), axes, what=what, fold_overflow=True)
    _check_radix(seg, layout, what)
    return seg, live


def _padded_extents(mapping: HostMapping) -> dict[tuple[int, int], int]:
    """``{(host stride, size): padded extent}`` of the base dims the layout pads."""
    out = {}
    for segment in mapping.segmentation.segments:
        top, ratio = segment.axes[0]
        extent = mapping.layout.device_size[top] * ratio
        if len(segment.host_dims) == 1 and extent > segment.size:
            out[(segment.stride, segment.size)] = extent
    return out


def padded_base_dims(layout: SpyreTensorLayout, base_shape: tuple[int, ...]) -> dict[int, int]:
    """``{base dim: host stride}`` of the base dims whose device dims hold padding."""
    mapping = layout.for_host(base_shape)
    extents = _padded_extents(mapping)
    return {
        seg.host_dims[0]: seg.stride
        for seg in mapping.segmentation.segments
        if (seg.stride, seg.size) in extents
    }


def _check_radix(seg: Segmentation, layout: SpyreTensorLayout, what: str) -> None:
    """Each view segment's device dims must form an exact mixed radix."""
    for segment in seg.segments:
        ratios = [r for _, r in segment.axes]
        ok = ratios[-1] == 1 and len(set(ratios)) == len(ratios)
        for (_, r_outer), (j, r) in zip(segment.axes, segment.axes[1:], strict=False):
            ok = ok and r_outer % r == 0 and r_outer // r <= layout.device_size[j]
        if not ok:
            raise LayoutError(f"{what}: logical dims {segment.host_dims} do not tile the sticks")


def stick_dim(dims: Sequence[DevDim]) -> int | None:
    """The logical dim along the sticks (innermost of a fold), or None if sparse."""
    last = dims[-1]
    return last.dims[-1] if last.is_data and last.ratio == 1 else None


@dataclass(frozen=True)
class AlignPlan:
    """How to bring an operand's image onto a target's device dims.

    Apply as: index ``take`` dims at 0, transpose the rest by ``perm``, reshape to
    ``shape`` (inserting size-1 axes), then broadcast to the target's device size.
    """

    take: tuple[int, ...]
    perm: tuple[int, ...]
    shape: tuple[int, ...]

    @property
    def is_identity(self) -> bool:
        """Whether the image already matches the target's device dims."""
        return not self.take and self.perm == tuple(range(len(self.perm)))


def align(
    src: Sequence[DevDim],
    target: Sequence[DevDim],
    broadcast_dims: frozenset[int],
) -> AlignPlan | None:
    """Match an operand's device dims to a target's, or None if they are incompatible.

    Args:
        src: the operand's tags, logical dims already renumbered to the target's.
        target: the target's tags.
        broadcast_dims: target logical dims along which the operand is broadcast (it
            has size 1 there, or walks them with no device dim).

    Every data device dim of the operand must equal a data device dim of the target;
    a target data dim with no partner is allowed only over broadcast logical dims
    (the operand gets a size-1 axis there). Synthetic operand dims are taken at 0.
    """
    take = tuple(k for k, d in enumerate(src) if not d.is_data)
    remaining = {d: k for k, d in enumerate(src) if d.is_data}
    if len(remaining) != len(src) - len(take):
        return None  # two operand dims with the same tag
    order, shape = [], []
    for t in target:
        k = remaining.pop(t, None) if t.is_data else None
        if k is not None:
            order.append(k)
            shape.append(t.size)
        elif not t.is_data or set(t.dims) <= broadcast_dims:
            shape.append(1)
        else:
            return None
    if remaining:
        return None
    kept = [k for k in range(len(src)) if k not in take]
    perm = tuple(kept.index(k) for k in order)
    return AlignPlan(take, perm, tuple(shape))


def layout_from_dims(
    shape: tuple[int, ...], dims: Sequence[DevDim], fmt: DataFormats
) -> SpyreTensorLayout:
    """The layout, for a contiguous host tensor of ``shape``, with these device dims.

    Raises:
        LayoutError: if folded logical dims are not adjacent, or the result does not
            reproduce the requested tags.
    """
    strides = row_major_strides(shape)
    smap = []
    for d in dims:
        if not d.is_data:
            smap.append(-1)
            continue
        if list(d.dims) != list(range(d.dims[0], d.dims[-1] + 1)):
            raise LayoutError(f"device dim over logical dims {d.dims} that are not adjacent")
        smap.append(d.ratio * strides[d.dims[-1]])
    layout = SpyreTensorLayout.from_stride_map([d.size for d in dims], smap, fmt)
    got = device_dims(layout, shape, shape, strides)
    if got != tuple(dims):
        raise LayoutError(f"device dims {list(dims)} do not form a layout for shape {shape}")
    return layout


def is_contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether a view is the row-major base itself (size-1 dims ignored)."""
    expected = row_major_strides(shape)
    return all(n == 1 or s == e for n, s, e in zip(shape, strides, expected, strict=True))


def view_strides_for_reshape(
    shape: tuple[int, ...], strides: tuple[int, ...], new_shape: tuple[int, ...]
) -> tuple[int, ...] | None:
    """Strides of a copy-free reshape of a strided view, or None if it needs a copy.

    NumPy's rule: each group of old dims that merges into (or splits into) a group of
    new dims must be contiguous within itself.
    """
    if math.prod(shape) != math.prod(new_shape):
        return None
    old = [(n, s) for n, s in zip(shape, strides, strict=True) if n != 1]
    new = [n for n in new_shape]
    out = [0] * len(new)
    oi = ni = 0
    while oi < len(old) and ni < len(new):
        oj, nj = oi + 1, ni + 1
        op, np_ = old[oi][0], new[ni]
        while op != np_:
            if np_ < op:
                np_ *= new[nj]
                nj += 1
            else:
                op *= old[oj][0]
                oj += 1
        for k in range(oi, oj - 1):
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        out[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new[k]
        oi, ni = oj, nj
    return tuple(out)


def _image_dims(
    dims: Sequence[DevDim], folds: Sequence[FoldIndex | None]
) -> list[tuple[DevDim, FoldIndex | None]]:
    """A typed array's device dims with their folds, as its image's offsets see them.

    Size-1 dims (which hold index 0 alone) are left out, and two adjacent dims walking
    one logical dim, the outer in steps of the inner's whole extent, are one (GQA's
    heads ``[K, G]`` reshaped to ``K * G``): two types with equal lists (over images of
    as many elements) put every element at the same offset.
    """
    out: list[tuple[DevDim, FoldIndex | None]] = []
    for d, f in zip(dims, folds, strict=True):
        if d.size == 1:
            continue
        if out and f is None and out[-1][1] is None:
            outer = out[-1][0]
            one = len(d.dims) == 1 and outer.dims == d.dims
            if one and outer.ratio == d.ratio * d.size:
                d = DevDim(d.dims, d.ratio, out.pop()[0].size * d.size)
        out.append((d, f))
    return out


def same_image(a: Any, b: Any) -> bool:
    """Whether two typed arrays (``SpyreType``) put every element at the same offset.

    Their :func:`_image_dims` are equal, over images of as many elements (no gaps: a
    window of a larger buffer is not a fresh array), and their layouts of one kind with
    one element arrangement: the dims say where a stick's group is, not which lanes of
    it (a lane view) nor in which order its elements sit (``DL16_TO_FP32``).
    """
    la, lb = a.layout, b.layout
    if (type(la), la.arrangement) != (type(lb), lb.arrangement):
        return False

    def data(t: Any) -> list[tuple[DevDim, FoldIndex | None]]:
        return _image_dims(t.dims, fold_index(t.layout, t.base_shape, t.shape, t.strides))

    sizes = math.prod(a.layout.device_size), math.prod(b.layout.device_size)
    return sizes[0] == sizes[1] and data(a) == data(b)
