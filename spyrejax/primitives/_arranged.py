"""Element arrangements in the primitives: which results keep one, and astype's.

The card converts between 16-bit and 32-bit formats stick by stick and emits the
elements staggered (``layout._arrangements``): a 16-bit stick becomes two fp32 sticks in
``DL16_TO_FP32`` order, two fp32 sticks become one 16-bit stick in ``FP32_TO_DL16``
order, and converting an arranged value back gives the standard order. An op position
by position keeps its operands' arrangement, a reduction reads it (over the stick dim:
groups fold whole; over other dims: every row's groups are in one order, which its result
keeps); every other primitive refuses arranged
operands by name (``SpyrePrim.takes_arrangements``), so the planner restickifies them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import jax.numpy as jnp
import numpy as np
from numpy.typing import DTypeLike

from .._errors import LayoutError
from ..layout._arrangements import ElementArrangement, arrange_image
from ..layout._dtypes import format_for_dtype
from ..layout._layout import SpyreTensorLayout
from ._array import SpyreType

__all__ = [
    "arranged_image",
    "arranged_result",
    "card_conversion",
    "card_order_matters",
    "card_relayout_bytes",
    "converted_arrangement",
    "emitted_layout",
    "kept_arrangement",
    "lone_pair",
    "standard_image",
    "standard_order",
    "standard_type",
]

_EMITS = {32: ElementArrangement.DL16_TO_FP32, 64: ElementArrangement.FP32_TO_DL16}
_WIDTHS = {32, 64}  # elements per stick of 32-bit and 16-bit formats


def arranged_result(name: str, avals: Sequence[SpyreType], out: SpyreType) -> SpyreType:
    """``out`` in the operands' element arrangement, if they have one.

    An op position by position computes on arranged images as on standard ones when
    every arranged operand has the same arranged layout, unviewed, the result's shape
    and the result's layout (in the standard order), and the result's stick has the same
    width (a comparison's bool result has 64-lane sticks: not a 32-bit arrangement's).
    A standard operand may join them where it is broadcast along the stick dim (a row
    statistic, ``x * rsqrt(mean(x * x, -1, keepdims=True))``): it holds one value per
    group, which any order inside the group reads alike. Otherwise the operands need
    the standard arrangement.

    Raises:
        LayoutError: if an operand is arranged and the op cannot keep the arrangement.
    """
    arranged = [a for a in avals if a.layout.is_arranged]
    if not arranged:
        return out
    layout = arranged[0].layout
    same = all(a.layout == layout and a.shape == out.shape and not a.is_view for a in arranged)
    kept = out.layout.with_arrangement(layout.arrangement) == layout
    others = [a for a in avals if not a.layout.is_arranged]
    if not (same and kept and all(_along_stick(a, out) for a in others)):
        raise LayoutError(
            f"{name}: operands in element arrangement {layout.arrangement.value} must all have "
            "its layout, the result's shape and the result's stick width (others: broadcast "
            "along the stick dim); restickify them first"
        )
    return SpyreType.contiguous(out.shape, out.dtype, layout)


def _along_stick(a: SpyreType, out: SpyreType) -> bool:
    """Whether ``a`` (right-aligned to ``out``) is broadcast along ``out``'s stick dim."""
    stick = out.stick_dim
    if stick is None:
        return False
    k = stick - (out.ndim - a.ndim)
    return k < 0 or (a.shape[k] == 1 < out.shape[stick]) or a.strides[k] == 0


def card_conversion(src: DTypeLike, dst: DTypeLike) -> bool:
    """Whether converting ``src`` elements to ``dst`` is the card's 16 <-> 32-bit one.

    That conversion writes its result staggered (:data:`_EMITS`): the standard order
    costs a relayout inside each group, which an arranged result or operand saves. False
    for bool and for dtypes without a Spyre format.
    """
    if np.bool_ in (np.dtype(src), np.dtype(dst)):
        return False
    try:
        widths = {format_for_dtype(d).elems_per_stick() for d in (src, dst)}
    except LayoutError:
        return False
    return widths == _WIDTHS


def card_order_matters(src: SpyreType, dst: SpyreType) -> bool:
    """Whether the order a conversion of ``src`` to ``dst`` writes its result in matters.

    The one predicate of "where card order matters": the card's 16 <-> 32-bit
    conversion (:func:`card_conversion`) on dense sticks. There the standard order costs
    a relayout inside each group (:func:`card_relayout_bytes`) that the arranged order
    saves, so the planner offers the arranged mode and both costs charge the standard
    one. A sparse stick (either side's, ``SpyreTensorLayout.is_sparse``: a reduction's
    row sums, a value broadcast from them) holds its one element in lane 0, which both
    arrangements leave in place: the order does not matter there.

    Args:
        src: the conversion's operand type (the planner: a mode's operand, in the
            default layout of its stick).
        dst: its result type.
    """
    if src.layout.is_sparse or dst.layout.is_sparse:
        return False
    return card_conversion(src.dtype, dst.dtype)


def card_relayout_bytes(read: int, written: int) -> int:
    """What the card pays to give its 16 <-> 32-bit conversion in the standard order.

    ``read`` and ``written`` are the conversion's operand and result bytes. The
    conversion writes its result staggered (``DL16_TO_FP32`` / ``FP32_TO_DL16``): the
    standard order is a relayout inside each group, read and written once, on the side
    with fewer bytes (the 16-bit operand put in the inverse order first, or the result
    put back): twice the smaller side. An arranged result or operand saves it; a
    conversion where the order does not matter (:func:`card_order_matters`) pays none.
    The planner's objective (``lowering._traffic``) charges these bytes; the device
    model charges them as the astype's ``OpSpace.relayout_bytes``, through its cores'
    LX ports (``device._cost``).

    Origin: issue 26 item 4's text, not a measurement (the card's conversion writes the
    staggered order; a relayout is a read and a write of the smaller side).
    """
    return 2 * min(read, written)


def converted_arrangement(aval: SpyreType, dtype: object, arranged: bool) -> bool:
    """Whether ``astype(aval, dtype)`` involves an arrangement (consumed or emitted).

    Raises:
        LayoutError: if the conversion is not the card's 16 <-> 32-bit one but an
            arrangement is involved, or ``arranged`` is asked of an arranged operand
            (converting it back gives the standard order).
    """
    if not (arranged or aval.layout.is_arranged):
        return False
    if not card_conversion(aval.dtype, dtype):
        raise LayoutError(
            f"astype to {dtype}: the element arrangements are those of the card's conversion "
            f"between 16-bit and 32-bit formats, not of {aval.str_short()} to {dtype}"
        )
    if arranged and aval.layout.is_arranged:
        raise LayoutError(
            f"astype: {aval.str_short()} is already in {aval.layout.arrangement.value}; "
            "converting it gives the standard order"
        )
    return True


def emitted_layout(standard: SpyreTensorLayout, shape: tuple[int, ...]) -> SpyreTensorLayout:
    """The layout the card's conversion writes: ``standard`` in the order it emits.

    A 32-bit result pairs the tiles of its stick dim (each 16-bit stick became two
    fp32 sticks), so an odd tile count gets one more, padding. A stick dim within one
    stick has a tile count of 1 that walks nothing: it becomes the group's second stick,
    a synthetic dim of size 2 (``layout._arrangements._lone_pair``).

    Raises:
        LayoutError: if the lanes are not on a host dim, or a stick dim within one stick
            has no tile count of 1 beside them.
    """
    arrangement = _EMITS[standard.elems_per_stick]
    if standard.elems_per_stick == 32:
        mapping = standard.for_host(shape)
        last = standard.device_rank - 1
        lanes = [s for s in mapping.segmentation.segments if (last, 1) in s.axes]
        pair = [j for s in lanes for j, ratio in s.axes if ratio == 32]
        size, smap = list(standard.device_size), list(standard.stride_map)
        if pair:
            size[pair[0]] += size[pair[0]] % 2
        else:
            tile = [
                j
                for j in mapping.segmentation.ignored
                if j != last and size[j] == 1 and smap[j] == 32 * smap[last]
            ]
            if not lanes or not tile:
                raise LayoutError(
                    f"astype: {arrangement.value} pairs the stick dim's tiles; {list(shape)} "
                    f"in {standard} has no tile count of its lanes to pair"
                )
            size[tile[-1]], smap[tile[-1]] = 2, -1  # the group's second stick: synthetic
        standard = SpyreTensorLayout.from_stride_map(
            size, smap, standard.device_dtype, device_gaps=standard.device_gaps
        )
    layout = standard.with_arrangement(arrangement)
    layout.for_host(shape)  # validates the pair
    return layout


def standard_order(aval: SpyreType, axes: Sequence[int], name: str) -> SpyreType:
    """``aval`` in the standard order, for a reduction over ``axes`` that may read it so.

    A group (a 16-bit stick, a pair of 32-bit tiles) holds elements of the stick dim
    only. A reduction over the stick dim folds each group whole, so which element sits
    where inside it does not change the result; a reduction over other dims (the stick
    dim kept) combines the same position of every row, and every row's groups are in the
    same order, so its result is the standard order's in that order
    (:func:`kept_arrangement`). The card reduces the groups as they are; the emulator
    puts them back first (:func:`standard_image`) and arranges a kept result after, so
    the reduction's result is the standard order's, bit for bit (a whole norm or softmax
    planned so is within rounding of its standard-order plan, not bit-equal: 1 ulp seen
    on 1-2 elements, the cause not analysed). Its padding is the standard layout's,
    moved inside the groups: the standard image has it in its standard places. A stick
    dim within one stick (:func:`lone_pair`) has its second sticks dropped: they hold
    nothing.

    Raises:
        LayoutError: if ``aval`` is arranged and a view.
    """
    if not aval.layout.is_arranged:
        return aval
    if aval.is_view:
        raise LayoutError(
            f"{name} over axes {tuple(axes)}: {aval.str_short()} is in element arrangement "
            f"{aval.layout.arrangement.value}, which a reduction reads unviewed; restickify "
            "it to the standard arrangement first"
        )
    plain = aval.layout.with_arrangement(ElementArrangement.STANDARD)
    lone = lone_pair(aval)
    if lone is not None:  # the groups' second sticks, empty in the standard order: dropped
        size = [1 if j == lone else n for j, n in enumerate(plain.device_size)]
        plain = SpyreTensorLayout.from_stride_map(size, plain.stride_map, plain.device_dtype)
    return replace(aval, layout=plain)


def kept_arrangement(aval: SpyreType, axes: Sequence[int], out: SpyreType) -> SpyreType:
    """A reduction's result ``out`` (standard order) in ``aval``'s arrangement, if it keeps it.

    A reduction of an arranged ``aval`` keeping its stick dim (``axes`` reduce others)
    reads every row's groups in the same order, so its result is in that order: the
    layout the card's conversion emits for ``out`` (:func:`emitted_layout`, which names
    the same arrangement: the stick's width decides it). A reduction over the stick dim
    folds the groups: its result is standard (``out``).

    Raises:
        LayoutError: if the stick dim is within one stick (:func:`lone_pair`: the result's
            layout names no pair of sticks), or the result's layout cannot hold the
            arrangement.
    """
    if not aval.layout.is_arranged or aval.stick_dim in axes or out.stick_dim is None:
        return out
    if lone_pair(aval) is not None:
        raise LayoutError(
            f"reduction over axes {tuple(axes)}: {aval.str_short()} has its stick dim within "
            "one stick, a synthetic pair a kept result does not name; restickify it to the "
            "standard arrangement first"
        )
    layout = emitted_layout(out.layout, out.shape)
    if layout.arrangement is not aval.layout.arrangement:  # pragma: no cover - width decides
        raise LayoutError(
            f"reduction over axes {tuple(axes)}: {aval.str_short()}'s arrangement "
            f"{aval.layout.arrangement.value} is not {out.str_short()}'s {layout.arrangement.value}"
        )
    return SpyreType.contiguous(out.shape, out.dtype, layout, out.pad)


def arranged_image(img: Any, aval: SpyreType) -> Any:
    """``img`` (in ``aval``'s standard order, :func:`standard_order`) put in its arrangement.

    The inverse of :func:`standard_image`: a synthetic pair (:func:`lone_pair`) cut to
    its first sticks gets its empty second sticks back (zeros: padding) before the
    groups are permuted. Otherwise a reshape and one transpose, which a reader putting
    the groups back cancels.
    """
    if not aval.layout.is_arranged:
        return img
    lone = lone_pair(aval)
    if lone is not None and img.shape[lone] == 1:  # the standard order's empty pair
        pad = [(0, 0)] * img.ndim
        pad[lone] = (0, 1)
        img = jnp.pad(img, pad)
    mapping = aval.layout.for_host(aval.base_shape)
    return arrange_image(img, mapping.pair, aval.layout.arrangement)


def standard_image(img: Any, aval: SpyreType) -> Any:
    """``img`` (of ``aval``'s layout) in :func:`standard_order`'s: every group put back."""
    if not aval.layout.is_arranged:
        return img
    mapping = aval.layout.for_host(aval.base_shape)
    img = arrange_image(img, mapping.pair, aval.layout.arrangement, inverse=True)
    lone = lone_pair(aval)
    return img if lone is None else img[(slice(None),) * lone + (slice(0, 1),)]


def standard_type(aval: SpyreType) -> SpyreType:
    """``aval`` with its elements in the standard order (its layout's arrangement dropped)."""
    if not aval.layout.is_arranged:
        return aval
    return replace(aval, layout=aval.layout.with_arrangement(ElementArrangement.STANDARD))


def lone_pair(aval: SpyreType) -> int | None:
    """The synthetic device dim holding the second stick of ``aval``'s groups, or None.

    A 32-bit arranged stick dim within one stick (``emitted_layout``) has no tile
    count: its groups' second sticks are a synthetic dim of size 2, which the standard
    order leaves empty.
    """
    if not aval.layout.is_arranged:
        return None
    pair = aval.layout.for_host(aval.base_shape).pair
    plain = standard_type(aval)
    return pair if pair is not None and not plain.dims[pair].is_data else None
