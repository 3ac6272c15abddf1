"""Padding masks: where a device image holds data, and poison for the rest.

Masks are built from iotas over the device dims (fused by XLA), never baked as constants.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._jax import poison_padding
from ..layout._dtypes import poison_value
from ._array import SpyreType
from ._axes import broadcast_all

__all__ = [
    "data_mask",
    "from_data_dims",
    "has_padding",
    "masked",
    "padding_in_data_dims",
    "poison",
    "poisoned",
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


def masked(image: jax.Array, t: SpyreType, fill: Any) -> jax.Array:
    """``image`` with its padding positions replaced by ``fill``."""
    mask = data_mask(t)
    return image if mask is None else select(mask, image, jnp.asarray(fill, image.dtype))


def poisoned(image: jax.Array, t: SpyreType) -> jax.Array:
    """``image`` as a kernel's result of type ``t`` whose padding is undefined (``pad=poison``).

    The padding keeps what the computation left there (kernels that read padding mask
    it), so a chain of elementwise ops stays one XLA loop; under the debug option
    ``spyrejax_poison_padding`` it is overwritten with poison, so a missing mask
    downstream shows up as NaN (the tests run with it on).
    """
    return masked(image, t, poison(image.dtype)) if poison_padding.value else image


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
