"""Exact tilings: host mappings whose device dims cut each host segment as a mixed radix.

A transfer of such a mapping is one transpose, reshape and slice (``dma._dma``), and a
relayout between two of them may be one transpose of the image (``dma._permute``): the
one description both read.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from ..layout._host_mapping import HostMapping
from ..layout._segments import row_major_strides

__all__ = ["Tiling", "tiling"]


@dataclass(frozen=True)
class Tiling:
    """A mapping whose device dims cut each host segment as an exact mixed radix.

    Then the image with its device dims put in segment order is the host tensor with
    each segment padded at its end to whole device dims (a partial last tile or stick):
    a transfer is one transpose, reshape and slice (or pad and reshape and transpose),
    which XLA fuses into one loop, where the descriptors' boxes (a full-tile one and a
    last-tile one per padded dim) are assembled by concatenations or written by box
    updates. The same elements move either way; the padding is left, or filled, alike.

    Attributes:
        order: device dims in segment order (each segment's outermost first), then
            the ``unwalked`` ones: size 1, or a synthetic stick holding index 0 only.
        unwalked: how many dims at the end of ``order`` walk no host dim.
        sizes: segment sizes (host elements).
        extents: segment sizes padded to whole device dims.
        shape: the host shape.
        device_size: the image's shape.
    """

    order: tuple[int, ...]
    unwalked: int
    sizes: tuple[int, ...]
    extents: tuple[int, ...]
    shape: tuple[int, ...]
    device_size: tuple[int, ...]


@functools.lru_cache(maxsize=4096)
def tiling(mapping: HostMapping) -> Tiling | None:
    """The mapping as a :class:`Tiling`; None if some dim has gaps, ties or broadcasts."""
    layout, seg = mapping.layout, mapping.segmentation
    size = layout.device_size
    if mapping.size == 0 or layout.has_gaps or mapping.strides != row_major_strides(mapping.shape):
        return None  # (with gaps, the descriptors place the valid range inside the buffer)
    for j in seg.ignored:
        if size[j] != 1 and layout.stride_map[j] != -1:
            return None  # a broadcast or tied dim: the descriptors say how it is walked
    order, extents = [], []
    for segment in seg.segments:
        axes = segment.axes
        if not axes or axes[-1][1] != 1:
            return None
        for (_, r_outer), (j, r) in itertools.pairwise(axes):
            if r_outer != r * size[j]:
                return None  # a gap (or an overlap) between a dim's steps
        order += [j for j, _ in axes]
        extents.append(size[axes[0][0]] * axes[0][1])
    order += seg.ignored
    return Tiling(
        tuple(order),
        len(seg.ignored),
        tuple(s.size for s in seg.segments),
        tuple(extents),
        mapping.shape,
        size,
    )
