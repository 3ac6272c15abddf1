"""Copies into a new layout: ``restickify``, ``compact`` and ``astype``.

``restickify`` is a real device-to-device copy (spec section 7): a fresh image in the
target layout, written through the DMA engine from the source image (read with the
source layout's descriptors, written with the target's). Its cost is
``prod(input device_size)`` elements moved. ``compact`` turns a sparse array (one
element per stick) dense. ``astype`` converts stick by stick when the element size
keeps the stick geometry, and otherwise rebuilds the default layout for the new
elements per stick.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from .._array import SpyreArray, SpyreType, batched_layout
from .._dma import box_plan, d2h_values, dma_d2h, dma_h2d, h2d_values, read_box
from .._dtypes import format_for_dtype, host_dtype
from .._errors import LayoutError, SpyreTypeError
from .._layout import SpyreTensorLayout
from ._base import SpyrePrim
from ._kernels import masked, poison

__all__ = [
    "Astype",
    "ReshapeCopy",
    "Restickify",
    "astype",
    "compact",
    "reshape_copy",
    "restickify",
    "restickify_cost",
]


def restickify_cost(t: SpyreType) -> int:
    """Elements a restickify of ``t`` moves: ``prod(input device_size)`` (spec section 7)."""
    return math.prod(t.layout.device_size)


def _logical(img: jax.Array, t: SpyreType, exact: bool = True) -> jax.Array:
    """The logical values of an image (DMA read with the source layout, then the view)."""
    base = (
        dma_d2h(img, t.base_shape, t.layout) if exact else d2h_values(img, t.base_shape, t.layout)
    )
    if not t.is_view:
        return base
    return read_box(base, box_plan(t.base_shape, t.shape, t.strides, 0))


class Restickify(SpyrePrim):
    """Copy a Spyre array into a new layout (a device-to-device DMA)."""

    def __init__(self, aval: SpyreType, *, layout: SpyreTensorLayout) -> None:
        layout.host_mapping(aval.shape)
        if format_for_dtype(aval.dtype) != layout.device_dtype and aval.dtype != np.bool_:
            raise LayoutError(
                f"restickify: layout {layout} does not fit dtype {aval.dtype} of {aval.str_short()}"
            )
        self.in_avals = (aval,)
        self.out_aval = SpyreType.contiguous(aval.shape, aval.dtype, layout)
        self.params = {"layout": layout}
        super().__init__()

    def pp_params(self) -> dict[str, Any]:
        return {"cost": restickify_cost(self.in_avals[0])}

    def kernel(self, img: jax.Array) -> jax.Array:
        return dma_h2d(_logical(img, self.in_avals[0]), self.layout)

    def tangent_kernel(self, img: jax.Array) -> jax.Array:
        return h2d_values(_logical(img, self.in_avals[0], exact=False), self.layout)

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        return {"layout": batched_layout(self.layout, self.in_avals[0].shape, size)}


class ReshapeCopy(SpyrePrim):
    """Copy a Spyre array into a new shape and layout (for reshapes that are no view)."""

    def __init__(
        self, aval: SpyreType, *, new_shape: tuple[int, ...], layout: SpyreTensorLayout
    ) -> None:
        if math.prod(new_shape) != aval.size:
            raise LayoutError(f"reshape_copy: cannot reshape {aval.shape} into {new_shape}")
        layout.host_mapping(new_shape)
        self.in_avals = (aval,)
        self.out_aval = SpyreType.contiguous(new_shape, aval.dtype, layout)
        self.params = {"new_shape": new_shape, "layout": layout}
        super().__init__()

    def pp_params(self) -> dict[str, Any]:
        return {"new_shape": self.new_shape, "cost": restickify_cost(self.in_avals[0])}

    def kernel(self, img: jax.Array) -> jax.Array:
        values = _logical(img, self.in_avals[0]).reshape(self.new_shape)
        return dma_h2d(values, self.layout)

    def tangent_kernel(self, img: jax.Array) -> jax.Array:
        values = _logical(img, self.in_avals[0], exact=False).reshape(self.new_shape)
        return h2d_values(values, self.layout)


def reshape_copy(
    x: SpyreArray, new_shape: Any, dim_order: Any = None, *, layout: SpyreTensorLayout | None = None
) -> SpyreArray:
    """Reshape by copying into the default layout of the new shape (or ``layout``).

    For reshapes that cannot be views (they merge a padded dim with another); costs a
    restickify of ``x``.
    """
    aval = _spyre_aval(x, "reshape_copy")
    new_shape = tuple(int(n) for n in new_shape)
    if layout is None:
        layout = SpyreTensorLayout(new_shape, aval.layout.device_dtype, dim_order)
    return ReshapeCopy(aval, new_shape=new_shape, layout=layout)(x)


def _spyre_aval(x: Any, op: str) -> SpyreType:
    aval = jax.typeof(x)
    if not isinstance(aval, SpyreType):
        raise SpyreTypeError(f"{op}: needs a SpyreArray, got {aval}")
    return aval


def restickify(
    x: SpyreArray,
    dim_order: Any = None,
    *,
    layout: SpyreTensorLayout | None = None,
) -> SpyreArray:
    """Copy a Spyre array into a new layout on the device.

    Args:
        x: the Spyre array (any view).
        dim_order: dim order of the target's default layout (the last entry is the new
            stick dim); defaults to ``range(ndim)`` (stuck on the last dim).
        layout: an explicit target layout for ``x.shape`` instead.

    Returns:
        A contiguous Spyre array in the new layout. Moving the stick from one dim to
        another costs ``prod(x.layout.device_size)`` element moves.

    Raises:
        LayoutError: if both or a bad ``dim_order``/``layout`` are given.
    """
    aval = _spyre_aval(x, "restickify")
    if layout is not None and dim_order is not None:
        raise LayoutError("restickify takes a dim_order or a layout, not both")
    if layout is None:
        layout = SpyreTensorLayout(aval.shape, aval.layout.device_dtype, dim_order)
    elif not isinstance(layout, SpyreTensorLayout):
        raise LayoutError(f"layout must be a SpyreTensorLayout, got {layout!r}")
    return Restickify(aval, layout=layout)(x)


def compact(x: SpyreArray) -> SpyreArray:
    """A dense copy of a sparse Spyre array (spec 2.5); dense arrays are returned as is.

    The result has the default layout of its shape: sticks full of data again.
    """
    aval = _spyre_aval(x, "compact")
    if not aval.layout.is_sparse:
        return x
    return restickify(x)


class Astype(SpyrePrim):
    """Convert elements; a change of elements per stick rebuilds the layout."""

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
        values = _logical(img, self.in_avals[0], exact).astype(self.dtype)
        return dma_h2d(values, out_t.layout) if exact else h2d_values(values, out_t.layout)

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        return {"dtype": self.dtype}


def _rebuilt_layout(t: SpyreType, dtype: np.dtype) -> SpyreTensorLayout:
    """The default layout for a new eps that keeps ``t``'s stick dim (or sparsity)."""
    stick = t.stick_dim
    others = [d for d in range(t.ndim) if d != stick]
    order = [*others, -1] if stick is None and t.layout.is_sparse else [*others, stick]
    if stick is None and not t.layout.is_sparse:
        order = None
    return SpyreTensorLayout(t.shape, dtype, order)


def astype(x: SpyreArray, dtype: Any) -> SpyreArray:
    """Convert a Spyre array's elements to ``dtype``, as ``x.astype(dtype)``.

    Same elements per stick (float16 <-> bfloat16, float32 <-> int32, int8 <-> float8):
    converted in place, layout kept. Otherwise (float16 <-> float32...): the default
    layout for the new stick size is rebuilt around the same stick dim (spec section 7).

    Raises:
        LayoutError: if ``dtype`` has no Spyre format.
    """
    aval = _spyre_aval(x, "astype")
    dt = host_dtype(dtype)
    if dt == aval.dtype:
        return x
    return Astype(aval, dtype=dt)(x)
