"""Axis helpers: operands aligned onto a result's device dims, and runs of axes merged."""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..layout._devdims import AlignPlan, DevDim

__all__ = ["aligned", "broadcast_all", "collapsed", "merge_axes", "merged_shape", "unmerged"]

# Traced images that are a reshape of a kernel's merged result (:func:`unmerged`), by id:
# the image's weak reference (its death removes the entry) and the merged result.
_UNMERGED: dict[int, tuple[weakref.ref[jax.Array], jax.Array]] = {}


def unmerged(result: jax.Array, shape: Sequence[int]) -> jax.Array:
    """A kernel's ``result`` on merged axes reshaped to its image ``shape``.

    While tracing, the image remembers ``result``: a reader that reshapes the image
    with no other op between (:func:`aligned` of an identity plan) reshapes ``result``
    instead, so the two kernels' reshapes (out to the image, back in to merged axes)
    leave the program (XLA would fold them; each is one op more to trace and compile).
    """
    image = result.reshape(tuple(shape))
    if image is not result and isinstance(image, jax.core.Tracer):
        key = id(image)
        _UNMERGED[key] = (weakref.ref(image, lambda _, key=key: _UNMERGED.pop(key, None)), result)
    return image


def _before_reshape(image: jax.Array) -> jax.Array:
    """The merged result ``image`` is a reshape of (see :func:`unmerged`), else ``image``."""
    entry = _UNMERGED.get(id(image))
    return entry[1] if entry is not None and entry[0]() is image else image


def broadcast_all(arrays: list[jax.Array]) -> list[jax.Array]:
    """The arrays broadcast to their common shape (``lax`` ops need equal shapes)."""
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    return [jnp.broadcast_to(a, shape) for a in arrays]


def aligned(image: jax.Array, plan: AlignPlan, shape: Sequence[int] | None = None) -> jax.Array:
    """Bring an operand's image onto the target's device dims (see ``_devdims.align``).

    In one reshape, to ``shape`` if given (``plan.shape`` with runs of axes merged, see
    ``merged_shape``): the dims taken at 0 are sliced to size 1, not squeezed, and any
    size-1 axis a reshape inserts or drops leaves the elements' order as it is. Every
    op here is one more op the interpreter traces and XLA compiles.
    """
    if plan.is_identity:  # a reshape of a reshape: one reshape
        image = _before_reshape(image)
    limits = tuple(1 if k in plan.take else n for k, n in enumerate(image.shape))
    if limits != image.shape:
        image = jax.lax.slice(image, (0,) * image.ndim, limits)
    if plan.perm != tuple(range(len(plan.perm))):
        kept = [k for k in range(image.ndim) if k not in plan.take]
        image = jax.lax.transpose(image, tuple(kept[p] for p in plan.perm) + plan.take)
    return image.reshape(plan.shape if shape is None else tuple(shape))


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
