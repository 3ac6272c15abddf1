"""Element arrangements inside a stick group (issue 26, item 4): torch-spyre's staggered orders.

torch-spyre converts between 16-bit and 32-bit formats on the device without moving
sticks: a 16-bit stick (64 elements) becomes two fp32 sticks (2 x 32) and back, and the
elements come out *staggered*. Its ``ElementArrangement`` names the orders; the issue
gives their exact maps as CuTe layouts over one group of 64 elements, logical index ->
position (a position ``p`` is lane ``p % 32`` of fp32 stick ``p // 32``, or lane ``p`` of
the 16-bit stick):

- ``DL16_TO_FP32``: ``(4,2,8):(1,32,4)``: runs of 4 elements alternate between the two
  fp32 sticks (elements 0-3 -> 0-3, 4-7 -> 32-35, 8-11 -> 4-7, ...).
- ``FP32_TO_DL16``: ``(4,8,2):(1,8,4)``, its inverse: ``DL16_TO_FP32 o FP32_TO_DL16`` and
  ``FP32_TO_DL16 o DL16_TO_FP32`` are both the identity ``64:1``.

An arrangement is a field of :class:`~spyrejax.layout.SpyreTensorLayout`: the index map
first places an element as the standard layout does, then moves it inside its group
(:func:`arranged_coords`). A group is one stick of a 16-bit layout (``FP32_TO_DL16``:
what converting fp32 sticks emits) or the two sticks of a 32-bit layout at tiles
``2k, 2k + 1`` of the stick dim (``DL16_TO_FP32``: what converting a 16-bit stick emits);
a 32-bit stick dim within one stick has no tile count, and its group's second stick is a
synthetic device dim of size 2 (:func:`_lone_pair`); the device image of an arranged
layout is the standard image with every group permuted
(:func:`arrange_image`), which is how both DMA engines move it.

Pure Python/NumPy: no JAX.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from .._errors import LayoutError
from ._algebra import CuteLayout

__all__ = [
    "GROUP",
    "ElementArrangement",
    "arrange_image",
    "arranged_coords",
    "check_arrangement",
    "pair_axis",
]

#: Elements in one arrangement group: a 16-bit stick, or a pair of fp32 sticks.
GROUP = 64

_MAPS = {
    "STANDARD": "64:1",
    "DL16_TO_FP32": "(4,2,8):(1,32,4)",
    "FP32_TO_DL16": "(4,8,2):(1,8,4)",
}
_FLAT = {  # the maps above as flat (shape, stride) pairs, for array arithmetic
    "STANDARD": ((64,), (1,)),
    "DL16_TO_FP32": ((4, 2, 8), (1, 32, 4)),
    "FP32_TO_DL16": ((4, 8, 2), (1, 8, 4)),
}
#: The elements per stick of the formats each arrangement can describe.
_STICK = {"DL16_TO_FP32": 32, "FP32_TO_DL16": 64}
_INVERSE = {
    "STANDARD": "STANDARD",
    "DL16_TO_FP32": "FP32_TO_DL16",
    "FP32_TO_DL16": "DL16_TO_FP32",
}


class ElementArrangement(enum.Enum):
    """How the elements of a 64-element group are placed (torch-spyre's names).

    Example:
        >>> ElementArrangement.DL16_TO_FP32.positions[:9]
        (0, 1, 2, 3, 32, 33, 34, 35, 4)
    """

    STANDARD = "STANDARD"
    DL16_TO_FP32 = "DL16_TO_FP32"
    FP32_TO_DL16 = "FP32_TO_DL16"

    @property
    def cute(self) -> CuteLayout:
        """The map logical index -> position, as a CuTe layout of size 64."""
        return CuteLayout.parse(_MAPS[self.value])

    @property
    def inverse(self) -> ElementArrangement:
        """The arrangement that undoes this one."""
        return ElementArrangement(_INVERSE[self.value])

    @property
    def digits(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The map as flat ``(shape, stride)`` pairs, digit by digit.

        Digit ``k`` of a logical index (first fastest, radix ``prod(shape[:k])``) moves
        its element ``stride[k]`` positions.
        """
        return _FLAT[self.value]

    @property
    def positions(self) -> tuple[int, ...]:
        """``positions[i]``: where logical element ``i`` of a group is placed."""
        layout = self.cute
        return tuple(layout(i) for i in range(GROUP))

    def apply(self, values: np.ndarray, axis: int = -1) -> np.ndarray:
        """Place ``values`` in this arrangement, group by group along ``axis``.

        ``out[..., g * 64 + positions[i]] = values[..., g * 64 + i]``.

        Raises:
            LayoutError: if the axis is not whole groups of 64.
        """
        x = np.moveaxis(np.asarray(values), axis, -1)
        n = x.shape[-1]
        if n % GROUP:
            raise LayoutError(f"an arrangement moves whole groups of {GROUP}, got {n} elements")
        out = np.empty_like(x)
        groups = x.reshape(*x.shape[:-1], n // GROUP, GROUP)
        out.reshape(groups.shape)[..., list(self.positions)] = groups
        return np.moveaxis(out, -1, axis)

    def place(self, index: Any) -> Any:
        """Position of logical index ``index`` (0 to 63) in a group, array-agnostic.

        ``index`` is an int or an integer array of any library (NumPy, JAX); only
        ``//``, ``%``, ``*`` and ``+`` are used.
        """
        shape, stride = _FLAT[self.value]
        out: Any = 0
        step = 1
        for n, s in zip(shape, stride, strict=True):
            out = out + (index // step) % n * s
            step *= n
        return out


def check_arrangement(arrangement: Any, elems_per_stick: int) -> ElementArrangement:
    """``arrangement`` as a member, checked against a format's stick size.

    ``DL16_TO_FP32`` arranges 32-bit sticks (32 elements), ``FP32_TO_DL16`` 16-bit
    sticks (64 elements): the orders the card's conversions emit.

    Raises:
        LayoutError: if ``arrangement`` is not a member's name, or does not fit the format.
    """
    try:
        arr = ElementArrangement(getattr(arrangement, "value", arrangement))
    except ValueError:
        names = [a.value for a in ElementArrangement]
        raise LayoutError(f"unknown element arrangement {arrangement!r}; one of {names}") from None
    want = _STICK.get(arr.value)
    if want is not None and elems_per_stick != want:
        raise LayoutError(
            f"element arrangement {arr.value} places {want}-element sticks; this format has "
            f"{elems_per_stick} per stick"
        )
    return arr


def pair_axis(
    arrangement: ElementArrangement,
    valid_size: tuple[int, ...],
    gaps: tuple[tuple[int, int], ...],
    segments: Any,
    what: str,
    stride_map: tuple[int, ...],
) -> int | None:
    """The device dim whose tiles pair into groups, for a layout bound to a host shape.

    None for a standard or 16-bit arrangement (a group is one stick). A 32-bit one pairs
    tiles ``2k, 2k + 1`` of the stick dim's tile count: the axis that walks the lanes'
    segment 32 elements at a time. It must have an even size and no gap. Lanes whose
    host dim fits one stick have no tile count: their group's second stick is a
    synthetic dim of size 2 (:func:`_lone_pair`).

    Args:
        arrangement: the layout's arrangement.
        valid_size: the layout's valid size per device dim.
        gaps: the layout's ``(front, back)`` gaps.
        segments: the host mapping's segments (``host_dims``, ``axes`` each).
        what: the layout and host shape, for errors.
        stride_map: the layout's stride map (a lone pair is a synthetic dim).

    Raises:
        LayoutError: if the lanes walk no host dim one element at a time, or the
            tile count is missing, odd or gapped.
    """
    need = _STICK.get(arrangement.value)
    if need is None:
        return None
    last = len(valid_size) - 1
    mine = [s for s in segments if (last, 1) in s.axes]
    if not mine:
        raise LayoutError(
            f"{what}: element arrangement {arrangement.value} needs lanes on a host dim"
        )
    if need == GROUP:
        return None
    pair = [j for j, ratio in mine[0].axes if ratio == need]
    if not pair:
        lone = _lone_pair(mine[0], valid_size, gaps, stride_map)
        if lone is not None:
            return lone
    if not pair or valid_size[pair[0]] % 2 or any(gaps[pair[0]]):
        raise LayoutError(
            f"{what}: element arrangement {arrangement.value} pairs the stick dim's tiles; it "
            "needs a tile count of even size without gaps"
        )
    return pair[0]


def _lone_pair(
    segment: Any,
    valid_size: tuple[int, ...],
    gaps: tuple[tuple[int, int], ...],
    stride_map: tuple[int, ...],
) -> int | None:
    """The pair of a 32-bit group whose lanes' host dim fits one stick, or None.

    A 16-bit stick holding ``n <= 32`` elements of its host dim converts to two fp32
    sticks, ``DL16_TO_FP32`` sending element ``i`` to position ``(4,2,8):(1,32,4)(i)``:
    runs of 4 alternate between the sticks (for ``n = 32``, lanes 0-15 of each). The
    standard map has no second tile for such a host dim, so the layout names it as a
    synthetic device dim (stride ``-1``) of size 2: the standard map places every
    element at its coordinate 0, and the arrangement moves half of the runs to 1. The
    innermost such dim without gaps, if the lanes walk their segment alone.
    """
    last = len(valid_size) - 1
    if segment.axes != ((last, 1),) or segment.size > GROUP // 2:
        return None
    lone = [
        j
        for j, m in enumerate(stride_map[:last])
        if m == -1 and valid_size[j] == 2 and not any(gaps[j])
    ]
    return lone[-1] if lone else None


def arranged_coords(
    coords: list[Any], pair: int | None, arrangement: ElementArrangement, *, inverse: bool = False
) -> list[Any]:
    """Device coordinates moved inside their group: standard -> arranged (or back).

    Args:
        coords: one coordinate (int or integer array) per device dim; the last is the lane.
        pair: the device dim of the stick dim's tile count, whose tiles ``2k, 2k + 1``
            form a group (32-bit layouts); None for 16-bit layouts (a group is a stick).
        arrangement: the layout's arrangement.
        inverse: map arranged coordinates back to standard ones.

    Returns:
        A new list of coordinates (the input is not modified).
    """
    if arrangement is ElementArrangement.STANDARD:
        return list(coords)
    arr = arrangement.inverse if inverse else arrangement
    out = list(coords)
    lanes = GROUP if pair is None else GROUP // 2
    q = out[-1] if pair is None else out[pair] % 2 * lanes + out[-1]
    p = arr.place(q)
    if pair is None:
        out[-1] = p
    else:
        out[pair] = out[pair] - out[pair] % 2 + p // lanes
        out[-1] = p % lanes
    return out


def arrange_image(
    image: Any, pair: int | None, arrangement: ElementArrangement, *, inverse: bool = False
) -> Any:
    """A device image with every group permuted: standard -> arranged (or back).

    ``image`` is a NumPy or JAX array of the layout's device size; the tile count ``pair``
    (if any) has an even size. Whole groups move: the result holds at arranged position
    ``p`` what the input held at standard position ``i`` with ``place(i) == p``.
    """
    if arrangement is ElementArrangement.STANDARD:
        return image
    arr = arrangement.inverse if inverse else arrangement
    rank = image.ndim
    if pair is None:
        return _permuted_groups(image, arr)
    order = [j for j in range(rank - 1) if j != pair] + [pair, rank - 1]
    x = image.transpose(order)
    lead = x.shape[:-2]
    x = _permuted_groups(x.reshape(*lead, x.shape[-2] // 2, GROUP), arr)
    x = x.reshape(*lead, image.shape[pair], image.shape[-1])
    return x.transpose(tuple(int(k) for k in np.argsort(order)))


def _permuted_groups(x: Any, arr: ElementArrangement) -> Any:
    """``x`` (last axis: whole groups of 64) with each group placed by ``arr``.

    An arrangement permutes the digits of the index in a group: index ``i`` has digits
    ``d_k`` in the mixed radix of its CuTe shape (first digit fastest) and lands at
    ``sum(d_k * stride_k)``, itself a mixed-radix number with the digits ordered by
    stride. So the move is a reshape into the digits and one transpose: no gather.
    """
    shape, stride = _FLAT[arr.value]
    n = len(shape)
    by_stride = sorted(range(n), key=lambda k: -stride[k])  # the output's digits, slowest first
    lead = x.shape[:-1]
    y = x.reshape(*lead, *shape[::-1])  # input digits, slowest (last CuTe mode) first
    axes = [len(lead) + (n - 1 - k) for k in by_stride]
    y = y.transpose((*range(len(lead)), *axes))
    return y.reshape(*lead, GROUP)
