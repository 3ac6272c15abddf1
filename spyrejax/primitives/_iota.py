"""Fresh Spyre arrays: ``iota`` (each element's index along one dim) and ``full``.

Kernels compute on the device image directly (iotas over the device dims and their
tags, or a fill; no host array is built), then poison the padding. Either is built in
any layout at no cost: the planner makes constants where their consumers need them.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import LayoutError
from ..layout._dtypes import host_dtype
from ..layout._layout import SpyreTensorLayout
from ._arguments import target_layout
from ._array import SpyreArray, SpyreType
from ._base import SpyrePrim
from ._masks import poisoned

__all__ = ["Full", "Iota", "full", "iota"]


class Iota(SpyrePrim):
    """Indices along ``dimension`` for an array of ``shape`` in ``layout``."""

    shape: tuple[int, ...]
    dtype: np.dtype
    dimension: int
    layout: SpyreTensorLayout

    def __init__(
        self, *, shape: tuple[int, ...], dtype: Any, dimension: int, layout: SpyreTensorLayout
    ) -> None:
        layout.for_host(shape)
        self.in_avals = ()
        self.out_aval = SpyreType.contiguous(shape, dtype, layout)
        self.params = {"shape": shape, "dtype": dtype, "dimension": dimension, "layout": layout}
        super().__init__()

    def pp_params(self) -> dict[str, Any]:
        return {"dimension": self.dimension}

    def kernel(self) -> jax.Array:
        t = self.out_aval
        size = t.layout.device_size
        walking = [(j, d) for j, d in enumerate(t.dims) if self.dimension in d.dims]
        index: Any = jnp.zeros(size, np.int32)
        for j, d in walking:  # position in the (possibly folded) dims walked
            step = jax.lax.broadcasted_iota(np.int32, size, j)
            if d.ratio != 1:
                step = jax.lax.mul(step, jax.lax.full(size, d.ratio, np.int32))
            index = jax.lax.add(index, step)
        if walking:  # unravelled to the index along ``dimension`` (indices are >= 0)
            folded = walking[0][1].dims
            inner = math.prod(t.shape[k] for k in folded if k > self.dimension)
            if inner > 1:
                index = jax.lax.div(index, np.int32(inner))
            if any(k < self.dimension for k in folded):
                index = jax.lax.rem(index, np.int32(t.shape[self.dimension]))
        return poisoned(index.astype(self.dtype), t)


def iota(
    dtype: Any,
    shape: Any,
    dimension: int,
    *,
    layout: SpyreTensorLayout | None = None,
    dim_order: Any = None,
) -> SpyreArray:
    """``lax.broadcasted_iota(dtype, shape, dimension)`` as a Spyre array.

    Each element holds its index along ``dimension``.

    Args:
        dtype: element dtype.
        shape: the logical shape.
        dimension: the dim whose index each element holds.
        layout: its layout; defaults to the default layout of ``shape``.
        dim_order: or the dim order of that default layout.

    Raises:
        LayoutError: on a bad dimension, dtype, layout or dim order.
    """
    shape = tuple(int(n) for n in shape)
    if not 0 <= dimension < len(shape):
        raise LayoutError(f"iota: dimension {dimension} is out of range for shape {shape}")
    dt = host_dtype(dtype)
    layout = target_layout("iota", shape, dt, layout, dim_order)
    return Iota(shape=shape, dtype=dt, dimension=dimension, layout=layout)()


class Full(SpyrePrim):
    """An array of ``shape`` in ``layout`` whose every element is ``value``."""

    shape: tuple[int, ...]
    dtype: np.dtype
    value: Any
    layout: SpyreTensorLayout

    def __init__(
        self, *, shape: tuple[int, ...], dtype: Any, value: Any, layout: SpyreTensorLayout
    ) -> None:
        layout.for_host(shape)
        self.in_avals = ()
        self.out_aval = SpyreType.contiguous(shape, dtype, layout)
        self.params = {"shape": shape, "dtype": dtype, "value": value, "layout": layout}
        super().__init__()

    def pp_params(self) -> dict[str, Any]:
        return {"value": self.value}

    def kernel(self) -> jax.Array:
        t = self.out_aval
        img = jax.lax.full(t.layout.device_size, np.asarray(self.value, self.dtype), self.dtype)
        return poisoned(img, t)


def full(
    shape: Any,
    fill_value: Any,
    dtype: Any = None,
    *,
    layout: SpyreTensorLayout | None = None,
    dim_order: Any = None,
) -> SpyreArray:
    """``jnp.full(shape, fill_value, dtype)`` as a Spyre array.

    Args:
        shape: the logical shape.
        fill_value: a scalar.
        dtype: element dtype; defaults to the fill value's.
        layout: its layout; defaults to the default layout of ``shape``.
        dim_order: or the dim order of that default layout.

    Raises:
        LayoutError: on a bad dim order or layout, or both given.
    """
    shape = tuple(int(n) for n in shape)
    dt = host_dtype(np.asarray(fill_value).dtype if dtype is None else dtype)
    layout = target_layout("full", shape, dt, layout, dim_order)
    scalar = np.asarray(fill_value, dt).item()  # hashable, exact in the element dtype
    return Full(shape=shape, dtype=dt, value=scalar, layout=layout)()
