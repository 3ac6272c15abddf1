"""Which host dims a set of strided axes walks: the shared index math of layouts and DMA.

A Spyre device dim (or a loop of a DMA descriptor) is an axis ``(size, stride)`` over a
strided host buffer. Spec section 4 assigns each axis to the host dim with the largest
host stride ``<=`` the axis stride. When that stride does not divide the axis stride,
or a host dim is walked by no axis, the host dim is *folded* into the next inner one
(the two must be contiguous): the pair then behaves as one dim, a **segment**. Host
dims of size 1 never matter and are dropped.

A segment's coordinate ``x`` is spread over its axes from the largest ratio down by
quotients and remainders (``c = x // ratio; x %= ratio``). When two axes step a segment
by the same ratio, the first (outer) one takes the whole quotient and the later ones
always get 0, as in torch-spyre: they walk nothing, like synthetic dims.

This module is pure Python: it runs at trace time on Python ints.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import LayoutError

__all__ = ["Segment", "Segmentation", "axis_coord", "row_major_strides", "segment_axes"]


def row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major (C order) element strides of ``shape`` (size-0 dims count as 1)."""
    strides = []
    acc = 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)  # as PyTorch: a size-0 dim does not zero the outer strides
    return tuple(reversed(strides))


def axis_coord(
    coords: Sequence[Any], sizes: Sequence[int], ratio: int, outer: Sequence[int] = ()
) -> Any:
    """The coordinate along one axis of a segment, from the coordinates of its host dims.

    The segment's position is the mixed-radix number of its host dims' coordinates
    (``x = x * size + coord``, outermost first; the outermost size never matters), and
    the axes take it from the largest ratio down by quotients and remainders: an axis
    stepping ``ratio`` gets ``x // ratio`` after ``x %= r`` for every outer axis ratio
    ``r`` (largest first).

    Args:
        coords: the coordinate of each host dim of the segment, outermost first: ints
            or integer arrays of any array library (only ``*``, ``+``, ``//`` and ``%``
            are used; arrays broadcast).
        sizes: the sizes of those dims (a view's padded extents where it counts them).
        ratio: the axis's step in segment elements.
        outer: the ratios of the segment's axes outside this one, largest first.

    Returns:
        The axis coordinate (an int, or an array like ``coords``).
    """
    x: Any = 0
    for c, n in zip(coords, sizes, strict=True):
        x = x * n + c
    for r in outer:
        x = x % r
    return x // ratio


@dataclass(frozen=True)
class Segment:
    """Host dims that behave as one: ``size`` elements ``stride`` apart.

    Attributes:
        host_dims: the host dims, outermost first (more than one when folded).
        stride: host stride of the innermost of them.
        size: product of their sizes.
        axes: ``(axis, ratio)`` for every axis that walks this segment, ratio
            strictly descending; an axis steps ``ratio`` segment elements.
    """

    host_dims: tuple[int, ...]
    stride: int
    size: int
    axes: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Segmentation:
    """The assignment of axes to host segments.

    Attributes:
        segments: host segments, outermost (largest stride) first.
        ignored: axes that walk no host dim: size 1, stride ``-1`` (synthetic) or
            ``0`` (broadcast), or tied with an outer axis of the same ratio.
    """

    segments: tuple[Segment, ...]
    ignored: tuple[int, ...]

    def segment_of(self, axis: int) -> tuple[int, int] | None:
        """``(segment index, ratio)`` of an axis, or None if it walks no host dim."""
        for g, seg in enumerate(self.segments):
            for a, ratio in seg.axes:
                if a == axis:
                    return g, ratio
        return None


def segment_axes(
    host_shape: Sequence[int],
    host_strides: Sequence[int],
    axes: Sequence[tuple[int, int]],
    *,
    what: str,
    fold_unwalked: bool = True,
    fold_overflow: bool = False,
) -> Segmentation:
    """Assign strided axes to (possibly folded) host dims.

    Args:
        host_shape: host sizes.
        host_strides: host strides in elements (positive, non-overlapping).
        axes: ``(size, stride)`` per axis.
        what: how to name the axes' owner in error messages.
        fold_unwalked: fold a host dim that no axis walks, or that axes walk only in
            steps > 1, into the next inner one (a layout must reach every element: a
            stick over ``2*d3 + d4`` walks ``d3`` in steps of 32 and ``d4`` by 1). When
            False such a dim stays a segment of its own (a box may take one index of it).
        fold_overflow: fold a host dim into the next outer one when an axis walking it
            runs past its end (a loop over merged dims). For a layout such an overrun
            is padding, so layouts leave this off.

    Returns:
        The segmentation. Every host dim of size > 1 lies in exactly one segment; with
        ``fold_unwalked`` every segment is walked by at least one axis.

    Raises:
        LayoutError: if some host dim cannot be reached (an uncovered inner dim, or a
            fold across non-contiguous host dims).
    """
    live = sorted((d for d, n in enumerate(host_shape) if n > 1), key=lambda d: -host_strides[d])
    groups: list[list[int]] = [[d] for d in live]
    walking = [a for a, (size, stride) in enumerate(axes) if size > 1 and stride > 0]
    while True:
        strides = [host_strides[g[-1]] for g in groups]
        sizes = [math.prod(host_shape[d] for d in g) for g in groups]
        assigned, fold = _assign(strides, sizes, axes, walking, what, fold_unwalked, fold_overflow)
        if fold is None:
            return _segmentation(groups, assigned, len(axes), host_shape, host_strides)
        _fold(groups, fold, host_shape, host_strides, what)


def _fold(
    groups: list[list[int]],
    fold: int,
    host_shape: Sequence[int],
    host_strides: Sequence[int],
    what: str,
) -> None:
    """Merge group ``fold`` with the next inner one, in place, if they are contiguous."""
    if fold == len(groups) - 1:
        raise LayoutError(
            f"{what} does not reach every element of host dim(s) {tuple(groups[fold])} "
            f"(host shape {tuple(host_shape)}, strides {tuple(host_strides)})"
        )
    outer, inner = groups[fold], groups[fold + 1]
    inner_span = host_strides[inner[-1]] * math.prod(host_shape[d] for d in inner)
    if host_strides[outer[-1]] != inner_span:
        raise LayoutError(
            f"{what} folds host dims {tuple(outer)} and {tuple(inner)}, which are not "
            f"contiguous (host shape {tuple(host_shape)}, strides {tuple(host_strides)})"
        )
    groups[fold : fold + 2] = [outer + inner]


def _segmentation(
    groups: list[list[int]],
    assigned: dict[int, tuple[int, int]],
    n_axes: int,
    host_shape: Sequence[int],
    host_strides: Sequence[int],
) -> Segmentation:
    """The segments of the final groups; axes tied with another on a segment are ignored."""
    segments = []
    tied = []
    for g, dims in enumerate(groups):
        mine = sorted(
            ((a, r) for a, (gg, r) in assigned.items() if gg == g), key=lambda t: (-t[1], t[0])
        )
        tied.extend(a for (_, r_prev), (a, r) in itertools.pairwise(mine) if r == r_prev)
        mine = [(a, r) for a, r in mine if a not in tied]
        segments.append(
            Segment(
                host_dims=tuple(dims),
                stride=host_strides[dims[-1]],
                size=math.prod(host_shape[d] for d in dims),
                axes=tuple(mine),
            )
        )
    ignored = tuple(a for a in range(n_axes) if a not in assigned or a in tied)
    return Segmentation(tuple(segments), ignored)


def _assign(
    seg_strides: list[int],
    seg_sizes: list[int],
    axes: Sequence[tuple[int, int]],
    walking: list[int],
    what: str,
    fold_unwalked: bool,
    fold_overflow: bool,
) -> tuple[dict[int, tuple[int, int]], int | None]:
    """One assignment pass: ``{axis: (segment, ratio)}`` and the first segment to fold."""
    assigned: dict[int, tuple[int, int]] = {}
    for a in walking:
        stride = axes[a][1]
        g = next((g for g, s in enumerate(seg_strides) if s <= stride), None)
        if g is None:
            raise LayoutError(
                f"{what}: axis {a} has stride {stride}, smaller than every host stride "
                f"{tuple(seg_strides)}"
            )
        if stride % seg_strides[g]:
            return assigned, g
        ratio = stride // seg_strides[g]
        if fold_overflow and (axes[a][0] - 1) * ratio >= seg_sizes[g]:
            if g == 0:
                raise LayoutError(f"{what}: axis {a} runs past the end of the buffer")
            return assigned, g - 1
        assigned[a] = (g, ratio)
    if not fold_unwalked:
        return assigned, None
    used = {g for g, _ in assigned.values()}
    unused = next((g for g in range(len(seg_strides)) if g not in used), None)
    if unused is not None:
        return assigned, unused
    # A host dim walked only in steps > 1 shares its lowest steps with the next inner
    # dim: the two are one index (a stick over ``2*d3 + d4``), so they fold.
    lowest = {g: min(r for gg, r in assigned.values() if gg == g) for g in used}
    return assigned, next((g for g in sorted(lowest) if lowest[g] > 1), None)
