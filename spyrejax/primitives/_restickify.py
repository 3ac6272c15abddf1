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
from .._dma import dma_h2d, h2d_bits, h2d_values
from .._dtypes import format_for_dtype, host_dtype
from .._errors import LayoutError, SpyreTypeError
from .._layout import SpyreTensorLayout
from ._base import SpyrePrim
from ._kernels import logical_bits, logical_values, masked, poison

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
    "restickify_cost",
    "slice_copy",
]


def restickify_cost(t: SpyreType) -> int:
    """Elements a restickify of ``t`` moves: ``prod(input device_size)`` (spec section 7)."""
    return math.prod(t.layout.device_size)


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

    #: Whether ``compute`` selects (a pad): the result's bits are then fenced
    #: (see :func:`spyrejax._dma.from_bits`).
    selects = False

    def __init__(self, *avals: SpyreType, layout: SpyreTensorLayout, **params: Any) -> None:
        self.params = {"layout": layout, **params}
        shape = self.shape(avals, **params)
        if any(a.dtype != avals[0].dtype for a in avals):
            raise SpyreTypeError(f"{type(self).__name__}: operands need one dtype")
        layout.host_mapping(shape)
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

    def pp_params(self) -> dict[str, Any]:
        shown = {k: v for k, v in self.params.items() if k != "layout"}
        return {**shown, "cost": sum(restickify_cost(a) for a in self.in_avals)}

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


def _target(shape: tuple[int, ...], aval: SpyreType, dim_order: Any, layout: Any) -> Any:
    return layout or SpyreTensorLayout(shape, aval.layout.device_dtype, dim_order)


def reshape_copy(
    x: SpyreArray, new_shape: Any, dim_order: Any = None, *, layout: SpyreTensorLayout | None = None
) -> SpyreArray:
    """Reshape by copying into the default layout of the new shape (or ``layout``).

    For reshapes that cannot be views (they merge a padded dim with another); costs a
    restickify of ``x``.
    """
    aval = _spyre_aval(x, "reshape_copy")
    new_shape = tuple(int(n) for n in new_shape)
    if math.prod(new_shape) != aval.size:
        raise LayoutError(f"reshape_copy: cannot reshape {aval.shape} into {new_shape}")
    layout = _target(new_shape, aval, dim_order, layout)
    return ReshapeCopy(aval, layout=layout, new_shape=new_shape)(x)


def slice_copy(x: SpyreArray, start: Any, limit: Any, dim_order: Any = None) -> SpyreArray:
    """``x[start:limit]`` (one range per dim), copied into the default layout of its shape.

    Raises:
        LayoutError: if the ranges leave the array.
    """
    aval = _spyre_aval(x, "slice_copy")
    start, limit = tuple(int(i) for i in start), tuple(int(i) for i in limit)
    shape = SliceCopy.shape([aval], start=start, limit=limit)
    layout = _target(shape, aval, dim_order, None)
    return SliceCopy(aval, layout=layout, start=start, limit=limit)(x)


def concatenate(xs: Any, dimension: int = 0, dim_order: Any = None) -> SpyreArray:
    """Spyre arrays joined along ``dimension``, copied into the default layout of the result.

    Raises:
        LayoutError: on shapes that differ off ``dimension`` or a bad dimension.
        SpyreTypeError: on host arrays or mixed dtypes.
    """
    avals = [_spyre_aval(x, "concatenate") for x in xs]
    if not avals or not -avals[0].ndim <= dimension < avals[0].ndim:
        raise LayoutError(f"concatenate: bad dimension {dimension} or no operands")
    dimension %= avals[0].ndim
    shape = Concatenate.shape(avals, dimension=dimension)
    layout = _target(shape, avals[0], dim_order, None)
    return Concatenate(*avals, layout=layout, dimension=dimension)(*xs)


def pad(x: SpyreArray, value: Any, config: Any, dim_order: Any = None) -> SpyreArray:
    """``lax.pad(x, value, config)`` copied into the default layout of the result.

    Args:
        x: the Spyre array.
        value: the scalar fill.
        config: ``(low, high, interior)`` per dim (low and high may be negative).
        dim_order: dim order of the result's layout.
    """
    aval = _spyre_aval(x, "pad")
    cfg = tuple((int(lo), int(hi), int(mid)) for lo, hi, mid in config)
    shape = Pad.shape([aval], config=cfg)
    layout = _target(shape, aval, dim_order, None)
    return Pad(aval, layout=layout, config=cfg, value=np.asarray(value).item())(x)


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
        values = logical_values(img, self.in_avals[0], exact).astype(self.dtype)
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
