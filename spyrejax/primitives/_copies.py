"""The program's own copies: ``reshape_copy``, ``slice_copy``, ``concatenate``, ``pad``.

Each reads its operands through their layouts' DMA descriptors, moves the elements
(as bits: bit-exact), and writes the result with the target layout's descriptors. The
cost is the operands' device sizes (elements moved), charged as ``copy_cost``.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from .._errors import LayoutError, SpyreTypeError, SpyreUnsupportedError
from ..dma._dma import h2d_bits, h2d_values
from ..layout._layout import SpyreTensorLayout
from ._arguments import target_layout
from ._array import SpyreArray, SpyreType
from ._base import SpyrePrim, normalize_axes
from ._stick import restickify_cost
from ._values import logical_bits, logical_values
from ._views import reshaped

__all__ = [
    "Concatenate",
    "Copy",
    "Pad",
    "ReshapeCopy",
    "SliceCopy",
    "concatenate",
    "pad",
    "reshape_copy",
    "slice_copy",
]


class Copy(SpyrePrim):
    """A device copy: a logical function of the operands' values, in a fresh layout.

    Subclasses give ``shape(avals, **params)`` and ``compute(*values)``; the kernel reads each
    operand through its layout's DMA descriptors, computes, and writes the result with
    the target layout's. The cost is the operands' device sizes (elements moved).
    """

    role = "copy"
    takes_gaps = True  # reads and writes through DMA descriptors
    layout: SpyreTensorLayout
    #: Whether ``compute`` selects (a pad): the result's bits are then fenced
    #: (see :func:`spyrejax.dma._dma.from_bits`).
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

        Called on the bits (:func:`spyrejax.dma._dma.as_bits`) of the values for the result
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
    """A static slice (with strides), copied."""

    start: tuple[int, ...]
    limit: tuple[int, ...]
    strides: tuple[int, ...]

    @classmethod
    def shape(
        cls,
        avals: Any,
        *,
        start: tuple[int, ...],
        limit: tuple[int, ...],
        strides: tuple[int, ...],
    ) -> tuple[int, ...]:
        (aval,) = avals
        bounds = zip(start, limit, aval.shape, strict=False)
        if (
            len(start) != aval.ndim
            or len(limit) != aval.ndim
            or len(strides) != aval.ndim
            or any(not 0 <= a < b <= n for a, b, n in bounds)
            or any(s < 1 for s in strides)
        ):
            raise LayoutError(
                f"slice [{start}, {limit}) with strides {strides} is outside shape "
                f"{aval.shape}, empty, or not forward"
            )
        return tuple(-(-(b - a) // s) for a, b, s in zip(start, limit, strides, strict=True))

    def compute(self, x: jax.Array) -> jax.Array:
        return jax.lax.slice(x, self.start, self.limit, self.strides)


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
    strides: Any = None,
    *,
    layout: SpyreTensorLayout | None = None,
    dim_order: Any = None,
) -> SpyreArray:
    """``lax.slice(operand, start_indices, limit_indices, strides)`` copied into a fresh layout.

    Args:
        operand: the Spyre array.
        start_indices: the first index per dim.
        limit_indices: one past the last index per dim.
        strides: the step per dim (``x[:, ::2]``); None for all ones.
        layout: the result's layout; defaults to the default layout of its shape.
        dim_order: or the dim order of that default layout.

    Raises:
        LayoutError: if the ranges leave the array or are empty, or on a bad
            ``layout``/``dim_order``.
    """
    aval = _spyre_aval(operand, "slice_copy")
    start = tuple(int(i) for i in start_indices)
    limit = tuple(int(i) for i in limit_indices)
    steps = (1,) * len(start) if strides is None else tuple(int(i) for i in strides)
    shape = SliceCopy.shape([aval], start=start, limit=limit, strides=steps)
    layout = target_layout("slice_copy", shape, aval.layout.device_dtype, layout, dim_order)
    return SliceCopy(aval, layout=layout, start=start, limit=limit, strides=steps)(operand)


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
