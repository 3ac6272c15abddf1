"""DDR <-> LX moves of the per-core executor (``emulate="cores"``), as XLA ops.

The index maps (descriptors, LX boxes, iteration order) are composed in NumPy when an
op is traced (:mod:`spyrejax.device._coremaps`). Each map then becomes one XLA op:

- a map that is a strided view of the image (:class:`~spyrejax.device._coremaps.Strided`:
  most operands of default-layout ops, whose cores read blocks of whole sticks) is read
  as a slice, a reshape into nested blocks and a transpose, and written back as the
  inverse (a ``pad`` with poison around the blocks): XLA compiles and runs these as
  copies, where a gather or scatter is compiled and run one element at a time;
- any other map is a gather (a scatter per store descriptor) with index constants of
  one core's size where the map factors (:class:`~spyrejax.device._coremaps.CoreMap`).

Both forms move exactly the elements the map names (poison where it names none), so a
division that does not tile its space exactly once still shows up as poison.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ...device import WorkDivision
from ...device._coremaps import (
    CoreMap,
    Strided,
    load_sources,
    local_shape,
    lx_index,
    lx_map,
    store_runs,
)
from ...primitives._masks import poison

__all__ = ["loaded", "lx_image", "lx_stored", "stored"]


def lx_image(div: WorkDivision, operand: int, img: jax.Array) -> jax.Array:
    """Every core's LX image of an operand: ``[cores, box elements]`` (poison where unread).

    The load descriptors alone (:func:`loaded` composes them with the iteration order).
    """
    return _take(img.reshape(-1), lx_map(div, operand), poison(img.dtype))


def lx_stored(div: WorkDivision, operand: int, lx: jax.Array) -> jax.Array:
    """The DDR image of an operand from every core's LX image (poison where none writes)."""
    shape = local_shape(div, operand)
    idx = lx_index(div, operand)
    result = jnp.take(lx, jnp.asarray(idx.reshape(-1), np.int32), axis=1)
    return stored(div, operand, result.reshape((lx.shape[0], *shape)))


def loaded(div: WorkDivision, operand: int, img: jax.Array) -> jax.Array:
    """A core's LX data of an operand in iteration order: ``[cores, *local shape]``."""
    vals = _take(img.reshape(-1), load_sources(div, operand), poison(img.dtype))
    return vals.reshape((div.cores_used, *local_shape(div, operand)))


def stored(div: WorkDivision, operand: int, result: jax.Array) -> jax.Array:
    """The output's DDR image from every core's result in iteration order.

    Poison where no core writes; only points inside the logical extents reach LX.
    """
    t = div.space.operands[operand].tensor
    size = math.prod(t.layout.device_size)
    cores = div.cores_used
    values = jnp.broadcast_to(result, (cores, *local_shape(div, operand))).reshape(-1)
    fill = poison(result.dtype)
    runs = store_runs(div, operand)
    if len(runs) == 1 and _writes_once(runs[0][0].strided):
        dst, held = runs[0]
        assert dst.strided is not None
        return _placed(_take(values, held, fill).reshape(-1), dst.strided, size, fill).reshape(
            t.layout.device_size
        )
    flat = jnp.full((size,), fill, result.dtype)
    for dst, held in runs:
        flat = flat.at[_indices(dst, size).reshape(-1)].set(
            _take(values, held, fill).reshape(-1),
            mode="promise_in_bounds" if dst.complete else "drop",
            indices_are_sorted=dst.ascending,
            unique_indices=dst.unique,
        )
    return flat.reshape(t.layout.device_size)


def _take(flat: jax.Array, where: CoreMap, fill: Any) -> jax.Array:
    """``flat[where]`` as ``[cores, points]``, ``fill`` where the map says -1."""
    if where.strided is not None:
        return _view(flat, where.strided).reshape(where.shape)
    idx = _indices(where, flat.shape[0])
    if where.complete:  # every index in bounds: a plain gather, no mask
        return flat.at[idx].get(
            mode="promise_in_bounds",
            indices_are_sorted=where.ascending,
            unique_indices=where.unique,
        )
    return flat.at[idx].get(mode="fill", fill_value=fill)


def _indices(where: CoreMap, size: int) -> jax.Array:
    """The map's ``[cores, points]`` indices in the program (-1: ``size``, out of range)."""
    a, b = where.indices(size)
    return jnp.asarray(a) if b is None else jnp.asarray(a) + jnp.asarray(b)


# --- strided maps as views ----------------------------------------------------------------


def _moving(s: Strided) -> list[tuple[int, int, int]]:
    """``(stride, size, loop)`` of the loops that move, largest stride first."""
    return sorted(
        ((t, n, i) for i, (n, t) in enumerate(s.dims) if t > 0 and n > 1),
        key=lambda m: -m[0],
    )


def _blocks(moving: list[tuple[int, int, int]]) -> tuple[list[int], list[int]]:
    """The nested blocks of the span the loops walk, and how much of each they use.

    The span (``size * stride`` of the outermost loop) reshaped to ``blocks`` holds the
    element ``i_0 * t_0 + i_1 * t_1 + ... + r`` at ``(i_0, i_1, ..., r)``; the loops read
    ``[:used]`` of each block dim (``r`` at 0).
    """
    strides = [t for t, _, _ in moving]
    blocks = [moving[0][1]] + [a // b for a, b in itertools.pairwise(strides)]
    return [*blocks, strides[-1]], [n for _, n, _ in moving] + [1]


def _view(flat: jax.Array, s: Strided) -> jax.Array:
    """``flat[s]`` (the nest's indices, flattened in its order) without an index array."""
    moving = _moving(s)
    shape = tuple(n for n, _ in s.dims)
    if not moving:
        return jnp.broadcast_to(flat[s.offset], shape).reshape(-1)
    blocks, used = _blocks(moving)
    span = math.prod(blocks)
    end = s.offset + span
    x = jax.lax.slice(flat, (s.offset,), (min(end, flat.shape[0]),))
    if end > flat.shape[0]:  # the last block's unused tail runs past the image
        x = jnp.pad(x, (0, end - flat.shape[0]))
    x = jax.lax.slice(x.reshape(blocks), (0,) * len(blocks), tuple(used))
    x = x.reshape(used[:-1])  # axes: the moving loops, largest stride first
    order = [i for _, _, i in moving]
    x = jnp.transpose(x, np.argsort(order))  # axes: the moving loops in the nest's order
    kept = tuple(n if i in order else 1 for i, n in enumerate(shape))
    return jnp.broadcast_to(x.reshape(kept), shape).reshape(-1)


def _writes_once(s: Strided | None) -> bool:
    """A strided map that names each of its elements once (no stride-0 loop)."""
    return s is not None and all(t > 0 or n == 1 for n, t in s.dims)


def _placed(values: jax.Array, s: Strided, size: int, fill: Any) -> jax.Array:
    """A flat image of ``size`` holding ``values`` at ``s``'s indices, ``fill`` elsewhere.

    The inverse of :func:`_view`: the values padded with ``fill`` into the nested blocks,
    then around them (``lax.pad``; a negative high pad crops the last block's tail).
    """
    moving = _moving(s)
    if not moving:
        return jax.lax.pad(values.reshape(1), fill, [(s.offset, size - s.offset - 1, 0)])
    blocks, used = _blocks(moving)
    order = [i for _, _, i in moving]
    x = values.reshape(tuple(n for n, _ in s.dims if n > 1))
    nest = [i for i, (n, _) in enumerate(s.dims) if n > 1]
    x = jnp.transpose(x, [nest.index(i) for i in order]).reshape(used)
    x = jax.lax.pad(x, fill, [(0, b - u, 0) for b, u in zip(blocks, used, strict=True)])
    span = math.prod(blocks)
    return jax.lax.pad(x.reshape(-1), fill, [(s.offset, size - s.offset - span, 0)])
