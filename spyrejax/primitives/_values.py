"""Logical values of device images (a DMA read through the layout), and accumulators."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..dma._boxes import box_plan, read_box
from ..dma._dma import d2h_bits, d2h_values, from_bits
from ._array import SpyreType

__all__ = ["accumulator", "logical_bits", "logical_values"]


def logical_values(image: jax.Array, t: SpyreType, exact: bool = True) -> jax.Array:
    """The logical values of an image: a DMA read with its layout, then its view.

    ``exact`` moves bits (see :func:`logical_bits`); otherwise values (differentiable,
    for tangents).
    """
    if not exact:
        return _view(d2h_values(image, t.base_shape, t.layout), t)
    # Not dma_d2h when traced: a kernel's read stays one transpose XLA fuses with its reader.
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
