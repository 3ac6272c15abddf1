"""Helpers for kernels that compute on device images.

Masks are built from iotas over the device dims (fused by XLA), never baked as constants.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._array import SpyreType
from .._devdims import AlignPlan, DevDim
from .._dma import box_plan, d2h_bits, d2h_values, dma_d2h, from_bits, read_box
from .._dtypes import poison_value

__all__ = [
    "accumulator",
    "aligned",
    "broadcast_all",
    "collapsed",
    "data_mask",
    "from_data_dims",
    "has_padding",
    "logical_bits",
    "logical_values",
    "masked",
    "merge_axes",
    "merged_shape",
    "padding_in_data_dims",
    "poison",
    "select",
]


def _data_positions_count(t: SpyreType) -> int:
    """How many image positions hold data: each element once per broadcast (stride-0) copy."""
    layout = t.layout
    copies = math.prod(
        n for n, s in zip(layout.device_size, layout.stride_map, strict=True) if s == 0
    )
    return math.prod(t.base_shape) * copies


def has_padding(t: SpyreType) -> bool:
    """Whether the image of ``t`` has positions that hold no data."""
    return _data_positions_count(t) != math.prod(t.layout.device_size)


def padding_in_data_dims(t: SpyreType) -> bool:
    """Whether ``t`` has padding besides the lanes of synthetic device dims.

    :func:`from_data_dims` already poisons those lanes, so a kernel whose output has
    no other padding need not mask it again.
    """
    return _data_positions_count(t) != math.prod(d.size for d in t.dims if d.is_data)


def data_mask(t: SpyreType) -> jax.Array | None:
    """Bool array of the device size, True on data positions; None if there is no padding."""
    if not has_padding(t):
        return None
    layout = t.layout
    mapping = layout.for_host(t.base_shape)
    rank = layout.device_rank
    grids = [
        jax.lax.broadcasted_iota(np.int32, tuple(n if k == j else 1 for k in range(rank)), j)
        for j, n in enumerate(layout.device_size)
    ]
    return jnp.broadcast_to(mapping.data_positions(grids), layout.device_size)


def poison(dtype: Any) -> jax.Array:
    """The poison scalar of ``dtype``."""
    return jnp.asarray(poison_value(dtype), dtype=dtype)


def select(pred: Any, on_true: Any, on_false: Any) -> jax.Array:
    """``jnp.where`` without its nested ``jit`` (one less function for XLA to inline)."""
    dtype = jnp.result_type(on_true, on_false)
    args = [jnp.asarray(pred, bool), jnp.asarray(on_true, dtype), jnp.asarray(on_false, dtype)]
    return jax.lax.select(*broadcast_all(args))


def broadcast_all(arrays: list[jax.Array]) -> list[jax.Array]:
    """The arrays broadcast to their common shape (``lax`` ops need equal shapes)."""
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    return [jnp.broadcast_to(a, shape) for a in arrays]


def masked(image: jax.Array, t: SpyreType, fill: Any) -> jax.Array:
    """``image`` with its padding positions replaced by ``fill``."""
    mask = data_mask(t)
    return image if mask is None else select(mask, image, jnp.asarray(fill, image.dtype))


def aligned(image: jax.Array, plan: AlignPlan) -> jax.Array:
    """Bring an operand's image onto the target's device dims (see ``_devdims.align``)."""
    if plan.take:
        image = image[tuple(0 if k in plan.take else slice(None) for k in range(image.ndim))]
    return image.transpose(plan.perm).reshape(plan.shape)


def from_data_dims(result: jax.Array, t: SpyreType) -> jax.Array:
    """The image of ``t`` from values over its data device dims only.

    ``result`` has one axis per data device dim of ``t``, in order. Synthetic device
    dims get their index 0 from it; the rest of them (the lanes of a sparse stick) is
    filled with poison.
    """
    dims = t.dims
    result = result.reshape(tuple(d.size if d.is_data else 1 for d in dims))
    widths = [(0, 0 if d.is_data else d.size - 1, 0) for d in dims]
    if all(w[1] == 0 for w in widths):
        return result
    return jax.lax.pad(result, poison(result.dtype), widths)


def logical_values(image: jax.Array, t: SpyreType, exact: bool = True) -> jax.Array:
    """The logical values of an image: a DMA read with its layout, then its view.

    ``exact`` moves bits (see :func:`logical_bits`); otherwise values (differentiable,
    for tangents).
    """
    if not exact:
        return _view(d2h_values(image, t.base_shape, t.layout), t)
    if not t.is_view:
        return dma_d2h(image, t.base_shape, t.layout)
    return from_bits(logical_bits(image, t), t.dtype)


def logical_bits(image: jax.Array, t: SpyreType) -> jax.Array:
    """The logical values of an image as :func:`as_bits`: a DMA read, then the view.

    Copies compute on these (slices, concatenations, pads move integers), so XLA cannot
    alter a float on the way.
    """
    return _view(d2h_bits(image, t.base_shape, t.layout), t)


def _view(base: jax.Array, t: SpyreType) -> jax.Array:
    if not t.is_view:
        return base
    return read_box(base, box_plan(t.base_shape, t.shape, t.strides, 0))


def accumulator(dtype: Any) -> Any:
    """The dtype float16/bfloat16 sums accumulate in (float32); None keeps ``dtype``."""
    return jnp.float32 if dtype in (jnp.float16, jnp.bfloat16) else None


def _joins_next(dims: Sequence[DevDim], j: int) -> bool:
    """Whether device dim ``j`` steps through one logical dim in whole runs of ``j + 1``.

    Such a pair (a tile count and its stick, adjacent) is one row-major axis of the
    logical dim, padding included: merging them is a free reshape of the image.
    """
    a, b = dims[j], dims[j + 1]
    return a.is_data and len(a.dims) == 1 and a.dims == b.dims and a.ratio == b.ratio * b.size


def collapsed(
    dims: Sequence[DevDim], shape: Sequence[int], shapes: Sequence[Sequence[int]] = ()
) -> list[tuple[int, ...]]:
    """Runs of device axes a kernel may compute on as one axis.

    A run is adjacent device dims over one logical dim (see ``_joins_next``) of an image
    of ``shape``, which every operand (of aligned ``shapes``) holds whole or broadcasts
    whole. Kernels merge each run with a reshape: XLA then sees the shapes its own ops
    produce (a batched dot emits ``[batch, m, n]``, not ``[..., T, S]``), so an
    elementwise op on a dot's result can update it in place.
    """
    runs: list[list[int]] = []
    for j in range(len(dims)):
        pair = (shape[j - 1], shape[j]) if j else ()
        if (
            j
            and _joins_next(dims, j - 1)
            and all((s[j - 1], s[j]) in (pair, (1, 1)) for s in shapes)
        ):
            runs[-1].append(j)
        else:
            runs.append([j])
    return [tuple(r) for r in runs]


def merged_shape(shape: Sequence[int], runs: list[tuple[int, ...]]) -> tuple[int, ...]:
    """``shape`` with each run of axes (from ``collapsed``) as one axis."""
    return tuple(math.prod(shape[j] for j in r) for r in runs)


def merge_axes(x: Any, runs: list[tuple[int, ...]]) -> Any:
    """``x`` reshaped so each run of axes becomes one axis (scalars pass through)."""
    if not isinstance(x, jax.Array) or not x.ndim or len(runs) == x.ndim:
        return x
    return x.reshape(merged_shape(x.shape, runs))
