"""``astype`` and ``bitcast``: convert elements, or reinterpret their bits.

``astype``, same stick geometry (float16 <-> bfloat16, float32 <-> int32): converted
stick by stick on the image, layout kept. Otherwise the default layout for the new
elements per stick is rebuilt around the same dim order (spec section 7).

``bitcast`` (``lax.bitcast_convert_type`` between dtypes of one width): the same bits
read in another format, stick by stick, layout kept.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from .._errors import LayoutError, SpyreTypeError
from ..dma._dma import dma_h2d, h2d_values
from ..layout._devdims import layout_from_dims
from ..layout._dtypes import format_for_dtype, host_dtype
from ..layout._layout import SpyreTensorLayout
from ._array import SpyreArray, SpyreType
from ._base import SpyrePrim
from ._masks import masked, poison
from ._values import logical_values

__all__ = ["Astype", "Bitcast", "astype", "bitcast"]


class Astype(SpyrePrim):
    """Convert elements; a change of elements per stick rebuilds the layout."""

    dtype: np.dtype

    def __init__(self, aval: SpyreType, *, dtype: np.dtype) -> None:
        self._same_sticks = dtype == np.bool_ or (
            format_for_dtype(dtype).elems_per_stick() == aval.layout.elems_per_stick
        )
        if self._same_sticks:  # same geometry; the layout takes the new format
            lay = aval.layout
            if dtype != np.bool_:
                lay = SpyreTensorLayout.from_stride_map(
                    lay.device_size, lay.stride_map, format_for_dtype(dtype)
                )
            out = SpyreType(aval.shape, dtype, lay, aval.base_shape, aval.strides)
        else:
            out = SpyreType.contiguous(aval.shape, dtype, _rebuilt_layout(aval, dtype))
        self.in_avals = (aval,)
        self.out_aval = out
        self.params = {"dtype": dtype}
        super().__init__()

    def kernel(self, img: jax.Array) -> jax.Array:
        return self._convert(img, exact=True)

    def tangent_kernel(self, img: jax.Array) -> jax.Array:
        return self._convert(img, exact=False)

    def _convert(self, img: jax.Array, exact: bool) -> jax.Array:
        out_t = self.out_aval
        if self._same_sticks:  # stick by stick, on the image
            return masked(img.astype(self.dtype), out_t, poison(self.dtype))
        values = logical_values(img, self.in_avals[0], exact).astype(self.dtype)
        return dma_h2d(values, out_t.layout) if exact else h2d_values(values, out_t.layout)

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        return {"dtype": self.dtype}


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
        order = layout.dim_order(t.shape)
        if order is not None:
            return SpyreTensorLayout(t.shape, dtype, order or None)
        if layout == SpyreTensorLayout.row_major(t.shape, fmt):
            return SpyreTensorLayout.row_major(t.shape, dtype)
    stick = t.stick_dim
    others = [d for d in range(t.ndim) if d != stick]
    order = [*others, -1] if stick is None and t.layout.is_sparse else [*others, stick]
    if stick is None and not t.layout.is_sparse:
        order = None
    return SpyreTensorLayout(t.shape, dtype, order)


def astype(x: SpyreArray, dtype: Any) -> SpyreArray:
    """Convert a Spyre array's elements to ``dtype``, as ``x.astype(dtype)``.

    Same elements per stick (float16 <-> bfloat16, float32 <-> int32, int8 <-> float8):
    converted in place, layout kept. Otherwise (float16 <-> float32...): the layout is
    rebuilt for the new stick size (spec section 7) with the same dim order (a default
    layout of ``dim_order [2, 1, 0]`` stays ``[2, 1, 0]``; a row-major one stays
    row-major), or around the same stick dim for any other layout.

    Raises:
        LayoutError: if ``dtype`` has no Spyre format.
    """
    aval = _spyre_aval(x, "astype")
    dt = host_dtype(dtype)
    if dt == aval.dtype:
        return x
    return Astype(aval, dtype=dt)(x)


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
        out = jax.lax.bitcast_convert_type(img, self.dtype)
        return masked(out, self.out_aval, poison(self.dtype))

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
