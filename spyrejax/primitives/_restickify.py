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
from .._devdims import layout_from_dims
from .._dma import dma_h2d, h2d_bits, h2d_values
from .._dtypes import format_for_dtype, host_dtype
from .._errors import LayoutError, SpyreTypeError, SpyreUnsupportedError
from .._layout import SpyreTensorLayout
from .._stick import restickify_cost
from ._base import SpyrePrim, normalize_axes, target_layout
from ._kernels import logical_bits, logical_values, masked, poison
from ._views import reshaped

__all__ = [
    "Astype",
    "ReshapeCopy",
    "Restickify",
    "astype",
    "compact",
    "concatenate",
    "pad",
    "reshape_copy",
    "restickify",
    "slice_copy",
]


class Restickify(SpyrePrim):
    """Copy a Spyre array into a new layout (a device-to-device DMA)."""

    role = "restickify"
    layout: SpyreTensorLayout

    def __init__(self, aval: SpyreType, *, layout: SpyreTensorLayout) -> None:
        layout.for_host(aval.shape)
        if format_for_dtype(aval.dtype) != layout.device_dtype and aval.dtype != np.bool_:
            raise LayoutError(
                f"restickify: layout {layout} does not fit dtype {aval.dtype} of {aval.str_short()}"
            )
        self.in_avals = (aval,)
        self.out_aval = SpyreType.contiguous(aval.shape, aval.dtype, layout)
        self.params = {"layout": layout}
        super().__init__()

    @property
    def moves(self) -> int:
        """``prod(input device_size)`` elements (spec section 7)."""
        return restickify_cost(self.in_avals[0])

    def pp_params(self) -> dict[str, Any]:
        return {"cost": self.moves}

    def kernel(self, img: jax.Array) -> jax.Array:
        aval = self.in_avals[0]
        return h2d_bits(logical_bits(img, aval), aval.dtype, self.layout)

    def tangent_kernel(self, img: jax.Array) -> jax.Array:
        return h2d_values(logical_values(img, self.in_avals[0], exact=False), self.layout)

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        return {"layout": batched_layout(self.layout, self.in_avals[0].shape, size)}


class Copy(SpyrePrim):
    """A device copy: a logical function of the operands' values, in a fresh layout.

    Subclasses give ``shape(avals, **params)`` and ``compute(*values)``; the kernel reads each
    operand through its layout's DMA descriptors, computes, and writes the result with
    the target layout's. The cost is the operands' device sizes (elements moved).
    """

    role = "copy"
    layout: SpyreTensorLayout
    #: Whether ``compute`` selects (a pad): the result's bits are then fenced
    #: (see :func:`spyrejax._dma.from_bits`).
    selects = False

    def __init__(self, *avals: SpyreType, layout: SpyreTensorLayout, **params: Any) -> None:
        self.params = {"layout": layout, **params}
        shape = self.shape(avals, **params)
        if any(a.dtype != avals[0].dtype for a in avals):
            raise SpyreTypeError(f"{type(self).__name__}: operands need one dtype")
        layout.for_host(shape)
        self.in_avals = tuple(avals)
        self.out_aval = SpyreType.contiguous(shape, avals[0].dtype, layout)
        super().__init__()

    @classmethod
    def shape(cls, avals: Any, **params: Any) -> tuple[int, ...]:
        """The result's shape (raises LayoutError on bad parameters)."""
        raise NotImplementedError

    def compute(self, *values: jax.Array) -> jax.Array:
        """The result's values from the operands' logical values (or their bits).

        Called on the bits (:func:`spyrejax._dma.as_bits`) of the values for the result
        and on the values themselves for tangents, so it may only move elements.
        """
        raise NotImplementedError

    @property
    def moves(self) -> int:
        """The operands' device sizes, in elements."""
        return sum(restickify_cost(a) for a in self.in_avals)

    def pp_params(self) -> dict[str, Any]:
        shown = {k: v for k, v in self.params.items() if k != "layout"}
        return {**shown, "cost": self.moves}

    def _copy(self, imgs: tuple[jax.Array, ...], exact: bool) -> jax.Array:
        pairs = zip(imgs, self.in_avals, strict=True)
        if not exact:
            out = self.compute(*(logical_values(i, t, exact=False) for i, t in pairs))
            return h2d_values(out, self.layout)
        out = self.compute(*(logical_bits(i, t) for i, t in pairs))  # moves bits only
        return h2d_bits(out, self.out_aval.dtype, self.layout, selected=self.selects)

    def kernel(self, *imgs: jax.Array) -> jax.Array:
        return self._copy(imgs, exact=True)

    def tangent_kernel(self, *imgs: jax.Array) -> jax.Array:
        return self._copy(imgs, exact=False)


class ReshapeCopy(Copy):
    """Reshape by copying (for reshapes that are no view)."""

    new_shape: tuple[int, ...]

    @classmethod
    def shape(cls, avals: Any, *, new_shape: tuple[int, ...]) -> tuple[int, ...]:
        (aval,) = avals
        if math.prod(new_shape) != aval.size:
            raise LayoutError(f"reshape_copy: cannot reshape {aval.shape} into {new_shape}")
        return new_shape

    def compute(self, x: jax.Array) -> jax.Array:
        return x.reshape(self.new_shape)


class SliceCopy(Copy):
    """A static slice, copied."""

    start: tuple[int, ...]
    limit: tuple[int, ...]

    @classmethod
    def shape(
        cls, avals: Any, *, start: tuple[int, ...], limit: tuple[int, ...]
    ) -> tuple[int, ...]:
        (aval,) = avals
        bounds = zip(start, limit, aval.shape, strict=False)
        if (
            len(start) != aval.ndim
            or len(limit) != aval.ndim
            or any(not 0 <= a < b <= n for a, b, n in bounds)
        ):
            raise LayoutError(f"slice [{start}, {limit}) is outside shape {aval.shape} or empty")
        return tuple(b - a for a, b in zip(start, limit, strict=True))

    def compute(self, x: jax.Array) -> jax.Array:
        return jax.lax.slice(x, self.start, self.limit)


class Concatenate(Copy):
    """Operands joined along one dim, copied."""

    dimension: int

    @classmethod
    def shape(cls, avals: Any, *, dimension: int) -> tuple[int, ...]:
        d = dimension
        others = {tuple(n for k, n in enumerate(a.shape) if k != d) for a in avals}
        if len({a.ndim for a in avals}) != 1 or len(others) != 1:
            raise LayoutError(f"concatenate: shapes {[a.shape for a in avals]} differ off dim {d}")
        shape = list(avals[0].shape)
        shape[d] = sum(a.shape[d] for a in avals)
        return tuple(shape)

    def compute(self, *xs: jax.Array) -> jax.Array:
        return jax.numpy.concatenate(xs, axis=self.dimension)


class Pad(Copy):
    """``lax.pad`` with a scalar fill and (low, high, interior) per dim, copied."""

    config: tuple[tuple[int, int, int], ...]
    value: Any
    selects = True

    @classmethod
    def shape(cls, avals: Any, *, config: Any, value: Any = 0) -> tuple[int, ...]:
        (aval,) = avals
        if len(config) != aval.ndim:
            raise LayoutError(f"pad: config {config} does not fit shape {aval.shape}")
        shape = tuple(
            lo + hi + n + max(n - 1, 0) * mid
            for n, (lo, hi, mid) in zip(aval.shape, config, strict=True)
        )
        if any(n < 1 for n in shape):
            raise LayoutError(f"pad: config {config} leaves shape {shape}")
        return shape

    def compute(self, x: jax.Array) -> jax.Array:
        # x holds values (tangents) or their bits (see Copy._copy): the fill follows suit.
        fill = np.asarray(self.value, self.in_avals[0].dtype).view(x.dtype)
        return jax.lax.pad(x, jax.numpy.asarray(fill), self.config)


def reshape_copy(
    a: SpyreArray,
    shape: Any,
    *,
    layout: SpyreTensorLayout | None = None,
    dim_order: Any = None,
) -> SpyreArray:
    """``jnp.reshape(a, shape)`` copied into a fresh layout (for reshapes that are no view).

    Args:
        a: the Spyre array.
        shape: the new shape (one ``-1`` allowed).
        layout: the result's layout; defaults to the default layout of ``shape``.
        dim_order: or the dim order of that default layout.

    Raises:
        LayoutError: if the sizes differ, or on a bad ``layout``/``dim_order``.
    """
    aval = _spyre_aval(a, "reshape_copy")
    new_shape = reshaped(aval, shape, "reshape_copy")
    layout = target_layout("reshape_copy", new_shape, aval.layout.device_dtype, layout, dim_order)
    return ReshapeCopy(aval, layout=layout, new_shape=new_shape)(a)


def slice_copy(
    operand: SpyreArray,
    start_indices: Any,
    limit_indices: Any,
    *,
    layout: SpyreTensorLayout | None = None,
    dim_order: Any = None,
) -> SpyreArray:
    """``lax.slice(operand, start_indices, limit_indices)`` copied into a fresh layout.

    Args:
        operand: the Spyre array.
        start_indices: the first index per dim.
        limit_indices: one past the last index per dim.
        layout: the result's layout; defaults to the default layout of its shape.
        dim_order: or the dim order of that default layout.

    Raises:
        LayoutError: if the ranges leave the array or are empty, or on a bad
            ``layout``/``dim_order``.
    """
    aval = _spyre_aval(operand, "slice_copy")
    start = tuple(int(i) for i in start_indices)
    limit = tuple(int(i) for i in limit_indices)
    shape = SliceCopy.shape([aval], start=start, limit=limit)
    layout = target_layout("slice_copy", shape, aval.layout.device_dtype, layout, dim_order)
    return SliceCopy(aval, layout=layout, start=start, limit=limit)(operand)


def concatenate(
    arrays: Any,
    axis: int = 0,
    *,
    layout: SpyreTensorLayout | None = None,
    dim_order: Any = None,
) -> SpyreArray:
    """``jnp.concatenate(arrays, axis)`` of Spyre arrays, copied into a fresh layout.

    Args:
        arrays: the Spyre arrays, of one dtype and equal shapes off ``axis``.
        axis: the dim they are joined along (negative counts from the end).
        layout: the result's layout; defaults to the default layout of its shape.
        dim_order: or the dim order of that default layout.

    Raises:
        LayoutError: on shapes that differ off ``axis``, a bad ``axis``, no arrays, or
            a bad ``layout``/``dim_order``.
        SpyreTypeError: on host arrays or mixed dtypes.
        SpyreUnsupportedError: on ``axis=None`` (jnp's flattening concatenate).
    """
    if axis is None:
        raise SpyreUnsupportedError(
            "concatenate: axis=None (flatten, then join) is not supported; reshape first"
        )
    avals = [_spyre_aval(x, "concatenate") for x in arrays]
    if not avals:
        raise LayoutError("concatenate needs at least one array")
    (dimension,) = normalize_axes(axis, avals[0].ndim, "concatenate")
    shape = Concatenate.shape(avals, dimension=dimension)
    layout = target_layout("concatenate", shape, avals[0].layout.device_dtype, layout, dim_order)
    return Concatenate(*avals, layout=layout, dimension=dimension)(*arrays)


def pad(
    operand: SpyreArray,
    padding_value: Any,
    padding_config: Any,
    *,
    layout: SpyreTensorLayout | None = None,
    dim_order: Any = None,
) -> SpyreArray:
    """``lax.pad(operand, padding_value, padding_config)`` copied into a fresh layout.

    Args:
        operand: the Spyre array.
        padding_value: the scalar fill.
        padding_config: ``(low, high, interior)`` per dim (low and high may be negative).
        layout: the result's layout; defaults to the default layout of its shape.
        dim_order: or the dim order of that default layout.

    Raises:
        LayoutError: on a config that does not fit the array or leaves it empty, or a
            bad ``layout``/``dim_order``.
    """
    aval = _spyre_aval(operand, "pad")
    cfg = tuple((int(lo), int(hi), int(mid)) for lo, hi, mid in padding_config)
    shape = Pad.shape([aval], config=cfg)
    layout = target_layout("pad", shape, aval.layout.device_dtype, layout, dim_order)
    value = np.asarray(padding_value).item()
    return Pad(aval, layout=layout, config=cfg, value=value)(operand)


def _spyre_aval(x: Any, op: str) -> SpyreType:
    aval = jax.typeof(x)
    if not isinstance(aval, SpyreType):
        raise SpyreTypeError(f"{op}: needs a SpyreArray, got {aval}")
    return aval


def restickify(
    x: SpyreArray,
    layout: SpyreTensorLayout | None = None,
    *,
    dim_order: Any = None,
) -> SpyreArray:
    """Copy a Spyre array into a new layout on the device.

    Args:
        x: the Spyre array (any view).
        layout: the target layout for ``x.shape``; defaults to the default layout of
            ``x.shape`` (stuck on the last dim).
        dim_order: or the dim order of that default layout (the last entry is the new
            stick dim).

    Returns:
        A contiguous Spyre array in the new layout. Moving the stick from one dim to
        another costs ``prod(x.layout.device_size)`` element moves.

    Raises:
        LayoutError: if both or a bad ``layout``/``dim_order`` are given.
    """
    aval = _spyre_aval(x, "restickify")
    layout = target_layout("restickify", aval.shape, aval.layout.device_dtype, layout, dim_order)
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
