"""``restickify`` and ``compact``: copies of a Spyre array into another layout.

``restickify`` is a real device-to-device copy (spec section 7): a fresh image in the
target layout, written through the DMA engine from the source image (read with the
source layout's descriptors, written with the target's), moving the bits. Its cost is
``prod(input device_size)`` elements moved. ``compact`` turns a sparse array (one
element per stick) dense.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import LayoutError, SpyreTypeError
from .._jax import poison_padding
from ..dma._dma import as_bits, from_bits, h2d_bits, h2d_values, relayout_bits
from ..layout._dtypes import format_for_dtype, poison_value
from ..layout._lanes import LanedLayout
from ..layout._layout import SpyreTensorLayout
from ._arguments import target_layout
from ._array import SpyreArray, SpyreType, batched_layout
from ._base import SpyrePrim
from ._masks import masked
from ._stick import restickify_cost
from ._values import logical_bits, logical_values

__all__ = ["LoadRelayout", "Restickify", "compact", "in_layout", "load_relayout", "restickify"]


class Restickify(SpyrePrim):
    """Copy a Spyre array into a new layout (a device-to-device DMA)."""

    eager_jit = False  # eagerly, the host DMA engine moves the data (no compile)

    role = "restickify"
    takes_gaps = True  # a DMA read and write: any window of a buffer
    takes_lanes = True  # the DMA engines move lanes
    through_ddr = True  # its source image read from DDR, its target's written there
    takes_arrangements = True  # the DMA engines place elements in any arrangement
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
        plain = not aval.is_view and not hasattr(aval.layout, "lanes")
        perm = aval.layout.permutation_to(self.layout) if plain else None
        if perm is not None:
            return _transposed(img, perm, self.out_aval)
        if aval.is_view:
            return h2d_bits(logical_bits(img, aval), aval.dtype, self.layout)
        return relayout_bits(img, aval.dtype, aval.base_shape, aval.layout, self.layout)

    def tangent_kernel(self, img: jax.Array) -> jax.Array:
        return h2d_values(logical_values(img, self.in_avals[0], exact=False), self.layout)

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        return {"layout": batched_layout(self.layout, self.in_avals[0].shape, size)}


class LoadRelayout(Restickify):
    """A matmul's operand laid out anew as the matmul loads it (its one reader).

    The card's matmul brings each block of its operands from DDR into LX; a block of an
    operand stuck on another dim is relaid out there (whole sticks through the LX
    ports) before the PT reads it, so the new image never goes to DDR: the planner
    charges it nothing beyond the matmul's read of its operand (``lowering._traffic``),
    the device model its LX ports' time (``device._program``); a loop body's charge for
    it carries the same flag (``lowering.rules._control``). Its kernel is a
    restickify's (the same image).
    """

    through_ddr = False
    takes_lanes = False  # a whole-stick relayout in LX


def _transposed(img: jax.Array, perm: tuple[int, ...], out_t: SpyreType) -> jax.Array:
    """The image in a layout whose device dims permute the source's: one transpose.

    Each position of the new image holds what the same position of the source held
    (data to data, padding to padding), so the data moves bit for bit as the DMA's
    unpack and repack would move it, in one pass instead of two. The padding is
    undefined (``pad=poison``): the source's, or poison under ``spyrejax_poison_padding``
    (then the image is the DMA's, bit for bit).
    """
    bits = jax.lax.transpose(as_bits(img), perm)
    if not poison_padding.value:
        return from_bits(bits, img.dtype)
    fill = np.asarray(poison_value(img.dtype), img.dtype)
    return from_bits(masked(bits, out_t, as_bits(jnp.asarray(fill))), img.dtype, fence=True)


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

    The result has the default layout of its shape: sticks full of data again. A lane
    view (every ``s``-th lane of its buffer's sticks) is sparse in that sense too.
    """
    aval = _spyre_aval(x, "compact")
    if not (aval.layout.is_sparse or isinstance(aval.layout, LanedLayout)):
        return x
    return restickify(x)


def in_layout(x: SpyreArray, layout: SpyreTensorLayout) -> SpyreArray:
    """``x`` as a fresh array in ``layout``: itself if it already is, else a restickify."""
    t = _spyre_aval(x, "in_layout")
    return x if t.layout == layout and not t.is_view else restickify(x, layout=layout)


def load_relayout(x: SpyreArray, layout: SpyreTensorLayout) -> SpyreArray:
    """``x`` in ``layout`` as a matmul loads it (:class:`LoadRelayout`); itself if it is."""
    t = _spyre_aval(x, "load_relayout")
    return x if t.layout == layout and not t.is_view else LoadRelayout(t, layout=layout)(x)
