"""What ``jax.vmap`` and ``lax.scan`` map a Spyre array over: its slices along one dim.

A slice along logical dim 0 is a view of the image when dim 0 is the outermost device
dim (``SpyreType.maps_in_place``): the batched layout of the slice's layout
(:func:`~spyrejax.primitives._array.batched_layout`). Any other mapped dim, in any
layout, is first *moved*: restickified into the stacked layout of :func:`mapped_type`
(the slice's default layout, stuck on the dim the array is stuck on), which costs one
restickify of the array. This module owns that rule for every path that maps:

- ``jax.vmap`` over a Spyre array (``SpyreType.dec_rank`` gives the per-example type;
  each Spyre primitive's batch rule moves its operand with :func:`to_front`);
- ``lax.scan`` over one, outside ``spyrejax.jit`` (JAX's hijax scan lowers its stacked
  inputs with the per-iteration type: ``SpyreType.lower_val`` moves the image with
  :func:`stacked_image`);
- ``spyrejax.jit``'s scan rule, whose planner restickifies a stacked input into
  :func:`stacked_type` before the loop (charged, shown by ``explain``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import jax

from ..dma._dma import h2d_bits
from ._array import MOVES, SpyreArray, SpyreType, batched_layout, batched_type
from ._restickify import restickify
from ._stick import SPARSE, default_type, stick_of
from ._values import logical_bits
from ._views import transpose

__all__ = ["install", "mapped_type", "stacked_image", "stacked_type", "to_front"]


def mapped_type(t: SpyreType, axis: int) -> SpyreType:
    """One slice of ``t`` along ``axis``, as a fresh array: the per-example type of a move.

    The default layout of the slice's shape, stuck on the dim ``t`` is stuck on; when
    ``t`` is stuck on ``axis`` itself (or is sparse), on the slice's last dim if it has
    more than one element, else sparse.
    """
    inner = t.shape[:axis] + t.shape[axis + 1 :]
    s = stick_of(t)
    stick = SPARSE if s in (SPARSE, axis) else s - (s > axis)
    if stick == SPARSE and inner and inner[-1] > 1:
        stick = len(inner) - 1
    fresh = default_type(inner, t.dtype, stick if inner else SPARSE)
    return replace(fresh, vma=t.vma, mapped_from=(t, axis))


def stacked_type(t: SpyreType, length: int) -> SpyreType:
    """The type a value of type ``t`` is sliced along dim 0 from: ``t`` if in place."""
    if t.maps_in_place(0):
        return t
    return batched_type(mapped_type(t, 0), length)


def to_front(x: Any, axis: int) -> SpyreArray:
    """``x`` mapped along ``axis``, as a value mapped along dim 0 in place.

    ``x`` itself when its slices along ``axis`` are views; else a transpose view that
    puts ``axis`` first, restickified into the stacked layout of :func:`mapped_type`.
    """
    t = jax.typeof(x)
    if t.maps_in_place(axis):
        return x
    perm = (axis, *(d for d in range(t.ndim) if d != axis))
    inner = mapped_type(t, axis)
    return restickify(transpose(x, perm), batched_layout(inner.layout, inner.shape, t.shape[axis]))


def stacked_image(image: jax.Array, have: SpyreType, want: SpyreType) -> jax.Array:
    """The image of a stack of ``want`` values read from ``image``, a value of type ``have``.

    The device image of ``have``'s logical values in ``want``'s stacked layout (the
    restickify :func:`to_front` makes, on the image: for ``lax.scan``'s lowering).
    """
    layout = batched_layout(want.layout, want.base_shape, have.shape[0])
    return h2d_bits(logical_bits(image, have), have.dtype, layout)


def install() -> None:
    """Install the rule where the Spyre types and the batch rule read it (``Moves``)."""
    MOVES.mapped_type = mapped_type
    MOVES.stacked_image = stacked_image
    MOVES.to_front = to_front
