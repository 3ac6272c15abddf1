"""``astype`` and ``bitcast``: convert elements, or reinterpret their bits.

``astype``, same stick geometry (float16 <-> bfloat16, float32 <-> int32): converted
stick by stick on the image, layout kept. Otherwise the default layout for the new
elements per stick is rebuilt around the same dim order (spec section 7); when the new
image differs from the old only in how the stick dim is cut into tiles and lanes (the
usual case), it is the old one with its sticks cut or joined, on the image (see
:func:`_stick_regroup`); otherwise a read of the logical values and a write.

``bitcast`` (``lax.bitcast_convert_type`` between dtypes of one width): the same bits
read in another format, stick by stick, layout kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import LayoutError, SpyreTypeError
from .._jax import poison_padding
from ..device._division import WorkDivision
from ..device._space import OpSpace, TensorSpec, elementwise_space
from ..dma._dma import as_bits, dma_h2d, from_bits, h2d_values
from ..dma._ffi import without_handler
from ..layout._arrangements import ElementArrangement
from ..layout._devdims import DevDim, layout_from_dims
from ..layout._dtypes import format_for_dtype, host_dtype
from ..layout._gaps import valid_nbytes
from ..layout._layout import SpyreTensorLayout
from ._arranged import (
    arranged_image,
    card_order_matters,
    card_relayout_bytes,
    converted_arrangement,
    emitted_layout,
    standard_image,
    standard_type,
)
from ._array import SpyreArray, SpyreType
from ._base import SpyrePrim
from ._lanes import is_laned, read_lanes, read_type
from ._masks import masked, poison, poisoned
from ._values import logical_values

__all__ = ["Astype", "Bitcast", "astype", "bitcast"]


class Astype(SpyrePrim):
    """Convert elements; a change of elements per stick rebuilds the layout.

    ``arranged`` (16 <-> 32-bit only): the result in the order the card's conversion
    emits it (``DL16_TO_FP32`` / ``FP32_TO_DL16``, see :mod:`._arranged`) rather than
    the standard one. An arranged operand converts to the standard order. A lane view
    (``x[..., ::2]`` in place: :mod:`._lanes`) is read lane by lane, as a pointwise
    kernel reads it (:func:`._lanes.read_type`), and converted from that order.
    """

    dtype: np.dtype
    arranged: bool
    space_kind = "elementwise"
    takes_arrangements = True
    takes_lanes = True  # reads a lane view lane by lane, as a pointwise kernel does

    def __init__(self, aval: SpyreType, *, dtype: np.dtype, arranged: bool = False) -> None:
        given, aval = aval, read_type(aval)  # a lane view as its kernel reads it
        self._read = aval
        self._same_sticks = dtype == np.bool_ or (
            format_for_dtype(dtype).elems_per_stick() == aval.layout.elems_per_stick
        )
        involved = converted_arrangement(aval, dtype, arranged) if dtype != np.bool_ else False
        if self._same_sticks:  # same geometry; the layout takes the new format
            lay = aval.layout
            if dtype != np.bool_:
                lay = SpyreTensorLayout.from_stride_map(
                    lay.device_size,
                    lay.stride_map,
                    format_for_dtype(dtype),
                    arrangement=lay.arrangement,
                )
            out = SpyreType(aval.shape, dtype, lay, aval.base_shape, aval.strides).canonical()
        elif involved:  # the card's conversion: emits its order, or undoes an arrangement
            plain = aval.layout.with_arrangement(ElementArrangement.STANDARD)
            lay = _rebuilt_layout(replace(aval, layout=plain), dtype)
            out = SpyreType.contiguous(
                aval.shape, dtype, emitted_layout(lay, aval.shape) if arranged else lay
            )
        else:
            out = SpyreType.contiguous(aval.shape, dtype, _rebuilt_layout(aval, dtype))
        # An arranged operand or result with padding regroups as the standard order does,
        # its groups put back first or placed last (the slice and pad of a read of the
        # logical values and a write would keep XLA from composing their transposes, so
        # it would write the values); without padding, XLA composes them into one. A
        # lone pair (a synthetic second stick) is no regroup.
        whole = involved and not any(_padded(t) for t in (aval, out))
        stays = self._same_sticks or whole
        self._regroup = None if stays else _stick_regroup(aval.dims, out.dims)
        self.in_avals = (given,)
        self.out_aval = out
        self.params = {"dtype": dtype, "arranged": arranged}
        super().__init__()

    @property
    def reorders(self) -> bool:
        """The card's conversion from the standard order to the standard order.

        On the card, a relayout inside each group (of the 16-bit side, before or after
        converting) that an arranged operand or result saves, where the order matters
        (:func:`._arranged.card_order_matters`); its cost is
        :func:`._arranged.card_relayout_bytes`.
        """
        aval = self._read
        plain = not (self.arranged or aval.layout.is_arranged)
        return plain and card_order_matters(aval, self.out_aval)

    @property
    def converted_nbytes(self) -> int:
        """The operand bytes the conversion converts: its image's, or a lane view's lanes.

        A lane view's image is its buffer's (it reads those sticks); the elements it
        converts, and a relayout in the standard order moves, are its lanes', as the
        kernel reads them (:func:`._lanes.read_type`).
        """
        return valid_nbytes(self._read.layout)

    def kernel(self, img: jax.Array) -> jax.Array:
        return self._convert(img, exact=True)

    def tangent_kernel(self, img: jax.Array) -> jax.Array:
        return self._convert(img, exact=False)

    def space(self, ins: Sequence[TensorSpec], out: TensorSpec) -> OpSpace | None:
        """An elementwise space: one variable per dim (an arranged operand in whole groups).

        In the standard order where that matters (:attr:`reorders`), its cores also
        relay the groups (``relayout_bytes``: :func:`._arranged.card_relayout_bytes`).
        """
        space = elementwise_space("astype", out, ins)
        if not self.reorders:
            return space
        relayout = card_relayout_bytes(self.converted_nbytes, out.nbytes)
        return replace(space, relayout_bytes=relayout)

    def core_kernel(self, div: WorkDivision, vals: list[jax.Array]) -> jax.Array:
        """Each core converts its own elements."""
        return vals[0].astype(self.out_aval.dtype)

    def _convert(self, img: jax.Array, exact: bool) -> jax.Array:
        out_t = self.out_aval
        if is_laned(self.in_avals[0]):  # its lanes, in the order of self._read
            img = read_lanes(img, self.in_avals[0])
        if self._same_sticks:  # stick by stick, on the image
            return poisoned(img.astype(self.dtype), out_t)
        if self._regroup is not None:  # sticks cut or joined, on the image
            return self._regroup_sticks(img, exact)
        values = logical_values(img, self._read, exact).astype(self.dtype)
        if not exact:
            return h2d_values(values, out_t.layout)
        with without_handler():  # a kernel's write: XLA fuses it with the conversion
            return dma_h2d(values, out_t.layout)

    def _regroup_sticks(self, img: jax.Array, exact: bool) -> jax.Array:
        """Convert, then re-cut the sticks (see :func:`_stick_regroup`).

        Exact results move as bits, as a DMA write does (XLA may alter bfloat16 it
        moves); tangents move as values (a bitcast has no derivative), padded with 0.
        In the standard order: an arranged operand's groups are put back first, an
        arranged result's placed last (after the fence, where a reader putting them
        back meets the transpose and XLA cancels the two).
        """
        out_t = self.out_aval
        plain = standard_type(out_t)
        values = standard_image(img, self._read).astype(self.dtype)
        fill = poison(self.dtype) if exact else jnp.zeros((), self.dtype)
        if exact:
            values, fill = as_bits(values), as_bits(fill)
        out = _regrouped(values, *self._regroup, out_t.layout.device_size)
        if not exact:
            return arranged_image(masked(out, plain, fill), out_t)
        out = masked(out, plain, fill) if poison_padding.value else out  # else undefined
        return from_bits(out, self.dtype, fence=True, then=lambda b: arranged_image(b, out_t))

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        return {"dtype": self.dtype, "arranged": self.arranged}


def _stick_regroup(
    src: tuple[DevDim, ...], dst: tuple[DevDim, ...]
) -> tuple[int | None, Any] | None:
    """How the image of ``dst`` regroups the image of ``src``, if it does.

    Images of two stick sizes that walk the logical dims alike except the stick dim,
    which each cuts into a tile-count axis (ratio: its stick size) and its lanes (the
    last axis), hold logical stick-dim index ``i`` at tile ``i // e``, lane ``i % e``.
    Then ``dst``'s image is ``src``'s with the stick dim's padded run re-cut into
    sticks of the new size: a reshape and one transpose of whole sticks, where a read
    of the logical values and a write would transpose elements twice.

    Returns:
        ``(tile axis, src lanes)``: the one device axis holding the stick dim's tile
        count (None if neither image has one: a sparse stick, or a stick dim within
        one stick); None when the images are not related so.
    """
    last = len(src) - 1
    if len(dst) != len(src) or last < 0:
        return None
    a, b = src[last], dst[last]
    if a.dims != b.dims or a.ratio != 1 or b.ratio != 1:
        return None
    differ = [j for j in range(last) if src[j] != dst[j]]
    if len(differ) > 1:
        return None
    p = differ[0] if differ else None

    def tiles(d: DevDim, lanes: int) -> bool:
        return (bool(a.dims) and d.dims == a.dims and d.ratio == lanes) or d == DevDim((), 1, 1)

    if p is not None and not (tiles(src[p], a.size) and tiles(dst[p], b.size)):
        return None
    walks_stick = [j for j in range(last) for d in (src[j], dst[j]) if set(a.dims) & set(d.dims)]
    if any(j != p for j in walks_stick):  # the stick dim folded or split further
        return None
    return p, a.size


def _padded(t: SpyreType) -> bool:
    """Whether ``t``'s image holds padding (more positions than elements)."""
    return math.prod(t.shape) != math.prod(t.layout.device_size)


def _regrouped(img: jax.Array, tile: int | None, lanes: int, shape: tuple[int, ...]) -> jax.Array:
    """``img`` (lanes ``lanes`` per stick) with its sticks re-cut into ``shape``'s.

    The stick dim's padded run (tiles times lanes) is cut into granules of the smaller
    stick size, which move whole: cut or padded (with NaN/garbage the caller masks) to
    the new run's length, then regrouped into the new tiles.
    """
    rank = img.ndim
    new_lanes = shape[-1]
    if tile is None:  # one stick each: keep or extend the lanes
        if new_lanes <= lanes:
            return jax.lax.slice_in_dim(img, 0, new_lanes, axis=rank - 1)
        return _extended(img, rank - 1, new_lanes)
    g = min(lanes, new_lanes)
    # [..., T, ..., lanes] -> [others..., T, lanes / g, g] -> [others..., granules, g]
    x = img.reshape(*img.shape[:-1], lanes // g, g)
    others = [j for j in range(rank - 1) if j != tile]
    x = jax.lax.transpose(x, (*others, tile, rank - 1, rank))
    lead = tuple(img.shape[j] for j in others)
    x = x.reshape(*lead, -1, g)
    granules = shape[tile] * new_lanes // g
    if x.shape[-2] >= granules:
        x = jax.lax.slice_in_dim(x, 0, granules, axis=rank - 2)
    else:
        x = _extended(x, rank - 2, granules)
    # [others..., T', new_lanes / g, g] -> the new image's axis order
    x = x.reshape(*lead, shape[tile], new_lanes // g, g)
    inverse = [0] * (rank + 1)
    for k, j in enumerate((*others, tile, rank - 1, rank)):
        inverse[j] = k
    return jax.lax.transpose(x, tuple(inverse)).reshape(shape)


def _extended(x: jax.Array, axis: int, size: int) -> jax.Array:
    """``x`` padded at the end of ``axis`` to ``size`` (the fill is masked later)."""
    widths = [(0, size - n if k == axis else 0, 0) for k, n in enumerate(x.shape)]
    return jax.lax.pad(x, jnp.zeros((), x.dtype), widths)


def _rebuilt_layout(t: SpyreType, dtype: np.dtype) -> SpyreTensorLayout:
    """``t``'s layout rebuilt for a new eps, as ``t.shape`` laid out contiguously.

    A default layout keeps its whole dim order (read back by
    :meth:`SpyreTensorLayout.dim_order`, so a size-1 stick dim stays one and adds no
    synthetic dim) and a row-major layout stays row-major. Any other layout gets the
    default layout around the same stick dim (or sparse stick).
    """
    fmt = t.layout.device_dtype
    layout = t.layout
    if t.is_view:
        try:
            layout = layout_from_dims(t.shape, t.dims, fmt)
        except LayoutError:
            layout = None
    if layout is not None:
        for shape in (t.shape, _stick_group_merged(t)):
            rebuilt = _same_kind(layout, shape, fmt, dtype) if shape else None
            if rebuilt is not None and (shape == t.shape or _holds(rebuilt, t.shape)):
                return rebuilt
    permuted = _permuted_row_major(t, dtype)
    if permuted is not None:
        return permuted
    stick = t.stick_dim
    others = [d for d in range(t.ndim) if d != stick]
    order = [*others, -1] if stick is None and t.layout.is_sparse else [*others, stick]
    if stick is None and not t.layout.is_sparse:
        order = None
    return SpyreTensorLayout(t.shape, dtype, order)


def _same_kind(
    layout: SpyreTensorLayout, shape: tuple[int, ...], fmt: Any, dtype: np.dtype
) -> SpyreTensorLayout | None:
    """``layout``'s kind for ``dtype``: the default layout of the same dim order, or row-major.

    None if ``layout`` is neither kind of layout of ``shape`` in ``fmt``.
    """
    order = layout.dim_order(shape)
    if order is not None:
        return SpyreTensorLayout(shape, dtype, order or None)
    if layout == SpyreTensorLayout.row_major(shape, fmt):
        return SpyreTensorLayout.row_major(shape, dtype)
    return None


def _permuted_row_major(t: SpyreType, dtype: np.dtype) -> SpyreTensorLayout | None:
    """``t``'s device dim order, row-major for ``dtype``: whole dims, then the stick's tiles.

    A transposed view of a row-major value (the scores of a product laid out
    row-major, read as ``[g, b, k, t, s]``) is no layout of its own shape's kinds; the
    default layout around its stick would put its first dim inside each tile (the
    query groups of GQA's probabilities, which ``P @ V`` then reads as a strided A).
    Its device dims are all whole host dims in some order, then the stick's tile count
    and lanes: in the same order for the new stick size, the result is laid out as
    the value it views (the sticks only re-cut). None if ``t``'s device dims are not so.
    """
    dims = t.dims
    if len(dims) < 2 or t.layout.is_sparse:
        return None
    tile, lanes = dims[-2], dims[-1]
    stuck = len(lanes.dims) == 1 and lanes.ratio == 1
    if not stuck or tile.dims != lanes.dims or tile.ratio != lanes.size:
        return None
    outer = [d for d in dims[:-2] if d.is_data]
    if any(len(d.dims) != 1 or d.ratio != 1 or d.size != t.shape[d.dims[0]] for d in outer):
        return None
    stick = lanes.dims[0]
    order = [d.dims[0] for d in outer]
    ones = [k for k in range(t.ndim) if k not in (*order, stick)]
    if len(set(order)) != len(order) or stick in order or any(t.shape[k] != 1 for k in ones):
        return None
    return SpyreTensorLayout.row_major(t.shape, dtype, order=[*ones, *order, stick])


def _stick_group_merged(t: SpyreType) -> tuple[int, ...] | None:
    """``t.shape`` with the dims its stick folds merged into one, or None.

    A stick over a group of host dims (``2*d2 + d3``: the pairs of RoPE's
    ``x.reshape(..., D // 2, 2)``) is the stick of the merged dim: rebuilding the
    merged shape's layout keeps the group in one stick for the new stick size, where
    the stick dim alone (2 wide) would be padded to a whole stick.
    """
    group = t.dims[-1].dims if t.dims and t.dims[-1].ratio == 1 else ()
    if len(group) < 2 or list(group) != list(range(group[0], group[-1] + 1)):
        return None
    merged = math.prod(t.shape[d] for d in group)
    return (*t.shape[: group[0]], merged, *t.shape[group[-1] + 1 :])


def _holds(layout: SpyreTensorLayout, shape: tuple[int, ...]) -> bool:
    """Whether ``layout`` (built for a merged shape) holds a host tensor of ``shape``."""
    try:
        layout.for_host(shape)
    except LayoutError:
        return False
    return True


def astype(x: SpyreArray, dtype: Any, *, arranged: bool = False) -> SpyreArray:
    """Convert a Spyre array's elements to ``dtype``, as ``x.astype(dtype)``.

    Same elements per stick (float16 <-> bfloat16, float32 <-> int32, int8 <-> float8):
    converted in place, layout kept. Otherwise (float16 <-> float32...): the layout is
    rebuilt for the new stick size (spec section 7) with the same dim order (a default
    layout of ``dim_order [2, 1, 0]`` stays ``[2, 1, 0]``; a row-major one stays
    row-major), or around the same stick dim for any other layout.

    Between 16-bit and 32-bit formats the card's conversion emits the elements
    staggered: ``arranged=True`` keeps that order (the result's layout has arrangement
    ``DL16_TO_FP32`` or ``FP32_TO_DL16``), which ops position by position and the
    conversion back read as they are, and every other op refuses. An arranged ``x``
    converts to the standard order.

    Raises:
        LayoutError: if ``dtype`` has no Spyre format, or an arrangement is asked of (or
            given to) any other conversion.
    """
    aval = _spyre_aval(x, "astype")
    dt = host_dtype(dtype)
    if dt == aval.dtype and not arranged:
        return x
    return Astype(aval, dtype=dt, arranged=arranged)(x)


def _spyre_aval(x: Any, op: str) -> SpyreType:
    aval = jax.typeof(x)
    if not isinstance(aval, SpyreType):
        raise SpyreTypeError(f"{op}: needs a SpyreArray, got {aval}")
    return aval


class Bitcast(SpyrePrim):
    """Reinterpret each element's bits as another dtype of the same width, in place.

    Same width means the same stick geometry: the layout is kept, with the new format.
    """

    dtype: np.dtype

    def __init__(self, aval: SpyreType, *, dtype: np.dtype) -> None:
        if np.bool_ in (dtype, aval.dtype) or dtype.itemsize != aval.dtype.itemsize:
            raise SpyreTypeError(
                f"bitcast: {aval.dtype} to {dtype} changes the element width; spyrejax "
                "bitcasts between dtypes of the same width only"
            )
        lay = aval.layout
        lay = SpyreTensorLayout.from_stride_map(
            lay.device_size, lay.stride_map, format_for_dtype(dtype)
        )
        self.in_avals = (aval,)
        self.out_aval = SpyreType(aval.shape, dtype, lay, aval.base_shape, aval.strides)
        self.params = {"dtype": dtype}
        super().__init__()

    def kernel(self, img: jax.Array) -> jax.Array:
        return poisoned(jax.lax.bitcast_convert_type(img, self.dtype), self.out_aval)

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        return {"dtype": self.dtype}


def bitcast(x: SpyreArray, dtype: Any) -> SpyreArray:
    """Reinterpret the bits of a Spyre array's elements, as ``lax.bitcast_convert_type``.

    Between dtypes of the same width (uint32 <-> float32 <-> int32, float16 <->
    bfloat16): the layout is kept, only the format changes.

    Raises:
        SpyreTypeError: if the widths differ.
        LayoutError: if ``dtype`` has no Spyre format.
    """
    aval = _spyre_aval(x, "bitcast")
    dt = host_dtype(dtype)
    if dt == aval.dtype:
        return x
    return Bitcast(aval, dtype=dt)(x)
