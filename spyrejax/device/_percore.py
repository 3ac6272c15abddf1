"""Per-core DMA: the DDR <-> LX descriptors of each core's box of a device image.

The existing DCI machinery (:func:`spyrejax.generate_dci`) applied to a sub-box: the
DDR image plays the host tensor (its strides are the image's device strides) and the LX
buffer the device side (the box, row-major). The descriptors are then offset to the
box's start in the image. Pure Python.
"""

from __future__ import annotations

from dataclasses import replace

from ..dma._dci import DCI, generate_dci
from ..layout._layout import SpyreTensorLayout
from ..layout._segments import row_major_strides
from ._division import WorkDivision

__all__ = ["box_dci", "box_start", "core_dci"]


def core_dci(division: WorkDivision, operand: int, core: int, *, load: bool = True) -> DCI:
    """The descriptors moving core ``core``'s box of an operand between DDR and LX.

    Args:
        division: the op's work division.
        operand: the operand's index (inputs, then the output).
        core: the core.
        load: True for DDR -> LX (source: the DDR image), False for LX -> DDR.

    Returns:
        A :class:`DCI` whose "host" side is the DDR image (``offset`` in elements from
        the tensor's base) and whose "device" side is the core's LX buffer.
    """
    box = division.box(operand, core)
    dci = box_dci(division, operand, tuple(b - a for a, b in box), load=load, core=core)
    start = box_start(division, operand, box)
    if load:
        descs = tuple(replace(d, offset_src=d.offset_src + start) for d in dci)
    else:
        descs = tuple(replace(d, offset_dst=d.offset_dst + start) for d in dci)
    return replace(dci, descriptors=descs)


def box_dci(
    division: WorkDivision,
    operand: int,
    shape: tuple[int, ...],
    *,
    load: bool = True,
    core: int | None = None,
) -> DCI:
    """The descriptors of a box of ``shape`` starting at the image's first element.

    Every core's box of one shape moves by these, offset by :func:`box_start`.
    """
    t = division.space.operands[operand].tensor
    strides = t.layout.device_strides
    lx = SpyreTensorLayout.from_stride_map(shape, strides, t.layout.device_dtype)
    name = f"{t.name or f'operand{operand}'}" + ("" if core is None else f".core{core}")
    dci = generate_dci(shape, lx, host_strides=strides, host_to_device=load, name=name)
    return replace(dci, host_shape=t.layout.device_size)


def box_start(division: WorkDivision, operand: int, box: tuple[tuple[int, int], ...]) -> int:
    """The DDR element (from the tensor's base) where a box of the operand starts.

    A window of a larger buffer (a layout with gaps) counts boxes from its valid range,
    which starts at the front gaps; a tile window (``layout._lanes``) from its tile.
    """
    lay = division.space.operands[operand].tensor.layout
    front = list(lay.gap_offsets if lay.has_gaps else (0,) * len(lay.device_strides))
    if lay.tile is not None:
        front[lay.tile[0]] += lay.tile[1]
    return sum((a + f) * s for (a, _), f, s in zip(box, front, lay.device_strides, strict=True))


def lx_strides(division: WorkDivision, operand: int, core: int) -> tuple[int, ...]:
    """Row-major strides of core ``core``'s LX buffer of an operand."""
    return row_major_strides(division.box_shape(operand, core))
