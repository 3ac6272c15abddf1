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
    "holds_identity",
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


def holds_identity(t: SpyreType, identity: Any) -> bool:
    """Whether every padding position of ``t``'s image holds ``identity``.

    Only a plain image (no view, gaps, lane view or element arrangement) whose type
    promises that fill (:meth:`PadFill.holds`): a view's padding positions are the
    base's, and its data box may leave base data outside it.
    """
    lay = t.layout
    if t.is_view or lay.has_gaps or lay.is_arranged or hasattr(lay, "lanes"):
        return False
    return np.dtype(t.dtype) != np.bool_ and t.pad.holds(identity)


def data_mask(t: SpyreType) -> jax.Array | None:
    """Bool array of the device size, True on data positions; None if there is no padding."""
    if not has_padding(t):
        return None
    layout = t.layout
    mapping = layout.for_host(t.base_shape)
    size = layout.device_size
    grids = [_Coord(jax.lax.broadcasted_iota(np.int32, size, j)) for j in range(len(size))]
    ok = mapping.data_positions(grids)
    return ok.x if isinstance(ok, _Coord) else jnp.full(size, ok)


class _Coord:
    """A device coordinate (a full-size iota) whose arithmetic and ordering are lax ops.

    ``*``, ``+``, ``-``, ``//``, ``%``, ``<``, ``>=`` and ``&``: what the layouts'
    array-agnostic position checks use (``HostMapping.data_positions``).

    ``jnp``'s operators each trace a nested ``jit``; a mask takes a few dozen of them,
    rebuilt for every kernel that masks, which made masks most of the Python time of
    lowering a padded program. The same ops bound directly are the same HLO.
    """

    __slots__ = ("x",)

    def __init__(self, x: jax.Array) -> None:
        self.x = x

    def __mul__(self, k: _Coord | int) -> _Coord:
        if isinstance(k, _Coord):  # a lane view's lane, zeroed off its lanes by a bool
            return _Coord(jax.lax.mul(self.x, jax.lax.convert_element_type(k.x, self.x.dtype)))
        return self if k == 1 else _Coord(jax.lax.mul(self.x, np.int32(k)))

    def __add__(self, other: _Coord | int) -> _Coord:
        if isinstance(other, int):
            return self if other == 0 else _Coord(jax.lax.add(self.x, np.int32(other)))
        return _Coord(jax.lax.add(self.x, other.x))

    __radd__ = __add__

    # An element arrangement's index map moves coordinates inside a group of lanes.
    def __sub__(self, other: _Coord | int) -> _Coord:
        if isinstance(other, int):  # a lane view's lanes start at its offset
            return self + (-other)
        return _Coord(jax.lax.sub(self.x, other.x))

    # A lane view's layout says which lanes are its own (``layout._lanes``: ``%``, ``<``,
    # ``>=`` and ``//``); ``==`` is not overloaded: a coordinate compares as an object.
    def __ge__(self, bound: int) -> _Coord:
        return _Coord(jax.lax.ge(self.x, np.int32(bound)))

    def __floordiv__(self, k: int) -> _Coord:
        return self if k == 1 else _Coord(jax.lax.div(self.x, np.int32(k)))

    def __mod__(self, k: int) -> _Coord:
        return _Coord(jax.lax.rem(self.x, np.int32(k)))

    def __lt__(self, bound: int) -> _Coord:
        return _Coord(jax.lax.lt(self.x, np.int32(bound)))

    def __and__(self, other: _Coord | bool) -> _Coord:
        if other is True:
            return self
        return _Coord(jax.lax.bitwise_and(self.x, other.x))

    __rand__ = __and__


def poison(dtype: Any) -> np.ndarray:
    """The poison scalar of ``dtype``, as a NumPy scalar.

    Kernels pass it to ops that may not need it (a mask of an image without padding);
    ``jnp.asarray`` would put a JAX op in the trace each time.
    """
    return np.asarray(poison_value(dtype), dtype=dtype)


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
