"""Views: ``transpose``, ``reshape``, ``squeeze``, ``expand_dims``, ``broadcast_to``.

A view never moves data (spec section 3): it changes the logical shape and the strides
over the same device image, exactly like a NumPy view over host memory. Whatever the
view, the device dims keep walking the same host offsets, so later ops still find the
stick. A reshape that would need a copy is a :class:`LayoutError` pointing to
``restickify``.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import LayoutError, SpyreTypeError
from ..layout._devdims import DevDim, device_dims, padded_base_dims, view_strides_for_reshape
from ..layout._layout import SpyreTensorLayout
from ._array import SpyreArray, SpyreType
from ._base import SpyrePrim, normalize_axes

__all__ = ["align_batch_dims", "broadcast_to", "expand_dims", "reshape", "squeeze", "transpose"]


class ShapeView(SpyrePrim):
    """A primitive whose kernel reshapes the image at most; subclasses set the type."""

    role = "view"

    def _setup(
        self,
        aval: SpyreType,
        out_shape: Any,
        out_strides: Any,
        layout: SpyreTensorLayout | None = None,
        **params: Any,
    ) -> None:
        layout = layout or aval.layout
        try:
            out = SpyreType(
                out_shape, aval.dtype, layout, aval.base_shape, out_strides, aval.pad
            ).canonical()
        except LayoutError as err:
            raise LayoutError(
                f"{type(self).__name__.lower()}: {aval.str_short()} -> shape {list(out_shape)} "
                f"cannot be a view of its device image ({err}); copy it into a new layout "
                "with spyrejax.restickify first"
            ) from None
        self.in_avals = (aval,)
        self.out_aval = out
        self.params = params
        super().__init__()

    def kernel(self, img: jax.Array) -> jax.Array:
        # A view keeps the image; a split device dim is a row-major reshape of it.
        return img.reshape(self.out_aval.layout.device_size)


def _spyre_aval(x: Any, op: str) -> SpyreType:
    aval = jax.typeof(x)
    if not isinstance(aval, SpyreType):
        raise SpyreTypeError(f"{op}: needs a SpyreArray, got {aval}")
    return aval


# --- transpose ------------------------------------------------------------------------


class Transpose(ShapeView):
    """Permute logical dims (no data moves)."""

    perm: tuple[int, ...]

    def __init__(self, aval: SpyreType, *, perm: tuple[int, ...]) -> None:
        shape = tuple(aval.shape[p] for p in perm)
        strides = tuple(aval.strides[p] for p in perm)
        self._setup(aval, shape, strides, perm=perm)

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        return {"perm": (0, *(p + 1 for p in self.perm))}


def transpose(a: SpyreArray, axes: Any = None) -> SpyreArray:
    """Permute the logical dims of a Spyre array, as ``jnp.transpose`` (a view).

    Raises:
        LayoutError: if ``axes`` is not a permutation.
    """
    aval = _spyre_aval(a, "transpose")
    perm = (
        tuple(reversed(range(aval.ndim)))
        if axes is None
        else normalize_axes(axes, aval.ndim, "transpose")
    )
    if sorted(perm) != list(range(aval.ndim)):
        raise LayoutError(f"transpose: axes {axes} are not a permutation of range({aval.ndim})")
    if perm == tuple(range(aval.ndim)):
        return a
    return Transpose(aval, perm=perm)(a)


# --- reshape --------------------------------------------------------------------------


class Reshape(ShapeView):
    """A copy-free reshape of the logical view."""

    new_shape: tuple[int, ...]

    def __init__(self, aval: SpyreType, *, new_shape: tuple[int, ...]) -> None:
        strides = view_strides_for_reshape(aval.shape, aval.strides, new_shape)
        if not reshape_is_view(aval, new_shape):
            raise LayoutError(
                f"reshape: {aval.str_short()} -> {list(new_shape)} needs a copy (it is not a "
                "view, or it merges a padded dim with another): copy it with "
                f"spyrejax.primitives.reshape_copy(x, {tuple(new_shape)}), or restickify "
                "it onto a dim the merge leaves alone (spyrejax.restickify(x, "
                "dim_order=...)) and reshape that, or reshape inside spyrejax.jit, which "
                "plans the copy"
            )
        layout = _split_folds(aval, new_shape, strides)
        self._setup(aval, new_shape, strides, layout, new_shape=new_shape)

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        return {"new_shape": (size, *self.new_shape)}


def reshape_is_view(aval: SpyreType, new_shape: tuple[int, ...]) -> bool:
    """Whether ``aval`` reshaped to ``new_shape`` is a view of its image (:class:`Reshape`).

    It is unless the new dims need strides the image does not have, or one spans a
    padded dim and another (the padding would interleave the data).
    """
    strides = view_strides_for_reshape(aval.shape, aval.strides, new_shape)
    return strides is not None and not _merges_padding(aval, new_shape, strides)


def _split_folds(
    aval: SpyreType, shape: tuple[int, ...], strides: tuple[int, ...]
) -> SpyreTensorLayout | None:
    """A layout whose device dims no longer fold several of the new logical dims.

    A device dim over folded dims that covers whole dims exactly (its innermost part
    may be whole tiles of a dim: heads and the tiles of a head dim) is split into one
    device dim per part: a row-major reshape of the image, so no data moves. The
    stick is never split. Returns None when nothing splits.
    """
    try:
        dims = device_dims(aval.layout, aval.base_shape, shape, strides)
    except LayoutError:
        return None
    sizes, smap = [], []
    last = aval.layout.device_rank - 1
    layout = aval.layout
    for j, (d, n, m) in enumerate(zip(dims, layout.device_size, layout.stride_map, strict=True)):
        parts = _exact_cover(d, shape, strides) if len(d.dims) > 1 and j != last else None
        sizes += [n] if parts is None else [size for size, _ in parts]
        smap += [m] if parts is None else [stride for _, stride in parts]
    if len(sizes) == layout.device_rank:
        return None
    split = SpyreTensorLayout.from_stride_map(sizes, smap, layout.device_dtype)
    try:
        split.for_host(aval.base_shape)
    except LayoutError:
        return None
    return split


def _exact_cover(
    d: DevDim, shape: tuple[int, ...], strides: tuple[int, ...]
) -> list[tuple[int, int]] | None:
    """``(size, host stride)`` of the parts a folded device dim covers exactly, or None.

    Inside the fold, dim ``k`` steps by the product of the sizes inside it. The device
    dim starts in the dim ``k`` whose step divides its own step (ratio) and whose
    extent the ratio divides into whole parts (the tiles of a dim, or the whole dim
    when the ratio is its step); it covers that part and whole outer dims exactly
    when its size is the product of their sizes. Outermost part first.
    """
    steps = {}
    inner = 1
    for k in reversed(d.dims):
        steps[k] = inner
        inner *= shape[k]
    start = next(
        (
            k
            for k in d.dims
            if d.ratio % steps[k] == 0
            and d.ratio < steps[k] * shape[k]
            and shape[k] % (d.ratio // steps[k]) == 0
        ),
        None,
    )
    if start is None:
        return None
    unit = d.ratio // steps[start]
    covered = [(shape[start] // unit, strides[start] * unit)]
    span = covered[0][0]
    for k in reversed(d.dims[: d.dims.index(start)]):
        if span >= d.size:
            break
        covered.insert(0, (shape[k], strides[k]))
        span *= shape[k]
    return covered if span == d.size and len(covered) > 1 else None


def _merges_padding(aval: SpyreType, new_shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether a new dim spans a padded base dim and another one (padding would interleave).

    Splitting a padded dim is fine: its parts stay within its padded extent.
    """
    for d, stride in padded_base_dims(aval.layout, aval.base_shape).items():
        lo, hi = stride, stride * aval.base_shape[d]
        for n, s in zip(new_shape, strides, strict=True):
            if n > 1 and s > 0 and s < hi and s * n > lo and (s < lo or s * n > hi):
                return True
    return False


def reshape(a: SpyreArray, shape: Any) -> SpyreArray:
    """Reshape a Spyre array without copying (one ``-1`` allowed), as ``jnp.reshape``.

    Raises:
        LayoutError: if the sizes differ or the reshape cannot be a view of the image.
    """
    aval = _spyre_aval(a, "reshape")
    return Reshape(aval, new_shape=reshaped(aval, shape, "reshape"))(a)


def reshaped(aval: SpyreType, shape: Any, op: str) -> tuple[int, ...]:
    """``shape`` as a tuple of ints for ``aval``'s size, its one ``-1`` resolved.

    Raises:
        LayoutError: if the sizes differ or ``shape`` is no shape.
    """
    new = (shape,) if isinstance(shape, int | np.integer) else tuple(int(n) for n in shape)
    if new.count(-1) > 1 or any(n < -1 for n in new):
        raise LayoutError(f"{op}: bad shape {new}")
    if -1 in new:
        known = math.prod(n for n in new if n != -1)
        if known == 0 or aval.size % known:
            raise LayoutError(f"{op}: cannot reshape {aval.shape} into {new}")
        new = tuple(aval.size // known if n == -1 else n for n in new)
    if math.prod(new) != aval.size:
        raise LayoutError(f"{op}: cannot reshape {aval.shape} into {new}")
    return new


# --- squeeze / expand_dims -------------------------------------------------------------


class Squeeze(ShapeView):
    """Drop size-1 logical dims."""

    axes: tuple[int, ...]

    def __init__(self, aval: SpyreType, *, axes: tuple[int, ...]) -> None:
        keep = [d for d in range(aval.ndim) if d not in axes]
        shape = tuple(aval.shape[d] for d in keep)
        strides = tuple(aval.strides[d] for d in keep)
        self._setup(aval, shape, strides, axes=axes)

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        return {"axes": tuple(a + 1 for a in self.axes)}


def squeeze(a: SpyreArray, axis: Any = None) -> SpyreArray:
    """Drop size-1 dims (all of them when ``axis`` is None), as ``jnp.squeeze``.

    Raises:
        LayoutError: if a named axis does not have size 1.
    """
    aval = _spyre_aval(a, "squeeze")
    if axis is None:
        axes = tuple(d for d, n in enumerate(aval.shape) if n == 1)
    else:
        axes = normalize_axes(axis, aval.ndim, "squeeze")
        bad = [d for d in axes if aval.shape[d] != 1]
        if bad:
            raise LayoutError(f"squeeze: axes {bad} of shape {aval.shape} do not have size 1")
    return Squeeze(aval, axes=tuple(sorted(axes)))(a)


class ExpandDims(ShapeView):
    """Insert size-1 logical dims."""

    axes: tuple[int, ...]

    def __init__(self, aval: SpyreType, *, axes: tuple[int, ...]) -> None:
        shape, strides = list(aval.shape), list(aval.strides)
        for a in axes:
            shape.insert(a, 1)
            strides.insert(a, 0)
        self._setup(aval, tuple(shape), tuple(strides), axes=axes)

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        return {"axes": tuple(a + 1 for a in self.axes)}


def expand_dims(a: SpyreArray, axis: Any) -> SpyreArray:
    """Insert size-1 dims at ``axis`` (positions in the result), as ``jnp.expand_dims``."""
    aval = _spyre_aval(a, "expand_dims")
    n = len((axis,) if isinstance(axis, int | np.integer) else tuple(axis))
    axes = tuple(sorted(normalize_axes(axis, aval.ndim + n, "expand_dims")))
    return ExpandDims(aval, axes=axes)(a)


# --- broadcast_to ---------------------------------------------------------------------


class BroadcastTo(ShapeView):
    """Broadcast to a larger shape: new and size-1 dims get stride 0 (no data moves)."""

    shape: tuple[int, ...]

    def __init__(self, aval: SpyreType, *, shape: tuple[int, ...]) -> None:
        lead = len(shape) - aval.ndim
        strides = [0] * lead
        for d, (n, s) in enumerate(zip(aval.shape, aval.strides, strict=True)):
            strides.append(0 if n == 1 and shape[lead + d] != 1 else s)
        self._setup(aval, shape, tuple(strides), shape=shape)

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        return {"shape": (size, *self.shape)}


def broadcast_to(array: SpyreArray, shape: Any) -> SpyreArray:
    """Broadcast a Spyre array to ``shape`` without copying, as ``jnp.broadcast_to``.

    Raises:
        LayoutError: if the shapes are not broadcast-compatible.
    """
    aval = _spyre_aval(array, "broadcast_to")
    shape = tuple(int(n) for n in shape)
    try:
        ok = np.broadcast_shapes(aval.shape, shape) == shape
    except ValueError:
        ok = False
    if not ok or len(shape) < aval.ndim:
        raise LayoutError(f"broadcast_to: cannot broadcast {aval.shape} to {shape}")
    return BroadcastTo(aval, shape=shape)(array)


def align_batch_dims(args: list[Any], batched: tuple[bool, ...], avals: Any) -> list[Any]:
    """Batched operands of lower rank with size-1 dims after their batch dim (dim 0).

    Up to the highest operand rank, so that right-aligned broadcasting lines the batch
    dims up. Without them, ``x[b, i] * s[b]`` (a per-example vector times a per-example
    scalar) would broadcast ``s`` along ``i``: wrong numbers whenever the sizes agree.
    """
    rank = max(aval.ndim for aval in avals)
    out = []
    for a, b, aval in zip(args, batched, avals, strict=True):
        if b and aval.ndim < rank:
            axes = tuple(range(1, 1 + rank - aval.ndim))
            a = expand_dims(a, axes) if isinstance(aval, SpyreType) else jnp.expand_dims(a, axes)
        out.append(a)
    return out
