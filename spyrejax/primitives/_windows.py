"""``windows``: the patches (im2col) copy behind convolutions and pooling.

A convolution runs on Spyre's systolic array as a matmul, and pooling as a reduction:
both first copy every window of the input into a patches tensor (each input element
once per window that covers it). This primitive is that copy. Per input dim it takes a
window (size, stride, padding, base and window dilation, as ``lax.reduce_window``) and
gives two dims, ``[out, window]``; the ``2 * rank`` dims in that interleaved order are
then reshaped to ``mid_shape`` (splitting dims, e.g. channels into feature groups),
transposed by ``perm`` and reshaped to the result's shape (merging dims, e.g. the
window and channel dims into a matmul's k). Positions of the padding and of the base
dilation's holes hold ``fill`` (0 for a convolution and a sum, -inf for max pooling).

The kernel moves bits, like every copy: read the operand through its layout's DMA
descriptors, pad, gather each windowed dim along an index computed from iotas
(``out * stride + window * dilation``: no index array is stored), and write the result
with the target layout's descriptors. The cost is the result's device size: each
element of the patches tensor is moved once.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import LayoutError, SpyreTypeError
from ..layout._layout import SpyreTensorLayout
from ._arguments import target_layout
from ._array import SpyreArray, SpyreType
from ._copies import Copy
from ._stick import restickify_cost

__all__ = ["Window", "Windows", "window_out_size", "windows"]

# One dim's window: (size, stride, (low, high) padding, base dilation, window dilation).
Window = tuple[int, int, tuple[int, int], int, int]


def window_out_size(n: int, window: Window) -> int:
    """How many windows fit along a dim of size ``n`` (``lax.reduce_window``'s count)."""
    size, stride, (lo, hi), base, dil = window
    padded = lo + hi + (n - 1) * base + 1 if n else lo + hi
    span = (size - 1) * dil + 1
    return max(0, (padded - span) // stride + 1)


class Windows(Copy):
    """Every window of the operand, arranged as ``mid_shape -> perm -> out_shape``."""

    window: tuple[Window, ...]
    fill: Any
    mid_shape: tuple[int, ...]
    perm: tuple[int, ...]
    out_shape: tuple[int, ...]
    selects = True

    @classmethod
    def shape(
        cls,
        avals: Any,
        *,
        window: tuple[Window, ...],
        fill: Any,
        mid_shape: tuple[int, ...],
        perm: tuple[int, ...],
        out_shape: tuple[int, ...],
    ) -> tuple[int, ...]:
        (aval,) = avals
        if len(window) != aval.ndim:
            raise LayoutError(f"windows: {len(window)} windows for shape {aval.shape}")
        if any(w[0] < 1 or w[1] < 1 or w[3] < 1 or w[4] < 1 for w in window):
            raise LayoutError(f"windows: sizes, strides and dilations must be >= 1: {window}")
        inter = [
            n
            for d, w in zip(aval.shape, window, strict=True)
            for n in (window_out_size(d, w), w[0])
        ]
        if 0 in inter:
            raise LayoutError(f"windows: no window fits shape {aval.shape} with {window}")
        total = math.prod(inter)
        if math.prod(mid_shape) != total or math.prod(out_shape) != total:
            raise LayoutError(
                f"windows: cannot arrange windows {inter} as {mid_shape} then {out_shape}"
            )
        if sorted(perm) != list(range(len(mid_shape))):
            raise LayoutError(f"windows: {perm} is no permutation of {len(mid_shape)} dims")
        return tuple(out_shape)

    @property
    def moves(self) -> int:
        """The result's device size: each patch element is moved once."""
        return restickify_cost(self.out_aval)

    def compute(self, x: jax.Array) -> jax.Array:
        # x holds values (tangents) or their bits (see Copy._copy): the fill follows suit.
        fill = jnp.asarray(np.asarray(self.fill, self.in_avals[0].dtype).view(x.dtype))
        pads = [(lo, hi, base - 1) for _, _, (lo, hi), base, _ in self.window]
        x = jax.lax.pad(x, fill, pads)
        for axis in reversed(range(x.ndim)):  # later axes first: earlier ones keep their index
            x = _gather_windows(x, axis, self.window[axis])
        return x.reshape(self.mid_shape).transpose(self.perm).reshape(self.out_shape)


def _gather_windows(x: jax.Array, axis: int, window: Window) -> jax.Array:
    """``x`` with ``axis`` (already padded) replaced by ``[out, window]``."""
    size, stride, _, _, dil = window
    n = x.shape[axis]
    out = (n - ((size - 1) * dil + 1)) // stride + 1
    if size == 1:  # a strided slice: no gather
        x = jax.lax.slice_in_dim(x, 0, (out - 1) * stride + 1, stride, axis)
        return jnp.expand_dims(x, axis + 1)
    pos = jax.lax.broadcasted_iota(np.int32, (out, size), 0) * stride
    idx = pos + jax.lax.broadcasted_iota(np.int32, (out, size), 1) * dil
    return jnp.take(x, idx, axis=axis, mode="clip")


def windows(
    x: SpyreArray,
    window: Any,
    *,
    fill: Any = 0,
    mid_shape: Any = None,
    perm: Any = None,
    out_shape: Any = None,
    layout: SpyreTensorLayout | None = None,
    dim_order: Any = None,
) -> SpyreArray:
    """The windows of ``x`` copied into a patches tensor (im2col).

    Args:
        x: the Spyre array.
        window: per dim, ``(size, stride, (low, high), base_dilation, window_dilation)``
            as in ``lax.reduce_window`` (padding may be negative).
        fill: the value of padding positions and base-dilation holes.
        mid_shape: the interleaved ``[out0, window0, out1, window1, ...]`` dims
            reshaped to this first (default: unchanged).
        perm: then transposed by this (default: none).
        out_shape: then reshaped to this, the result's shape (default: unchanged).
        layout: the result's layout; defaults to the default layout of ``out_shape``.
        dim_order: or the dim order of that default layout.

    Raises:
        LayoutError: on windows that do not fit ``x`` or an arrangement that does not
            fit the windows, or a bad ``layout``/``dim_order``.
        SpyreTypeError: if ``x`` is not a Spyre array.
    """
    aval = jax.typeof(x)
    if not isinstance(aval, SpyreType):
        raise SpyreTypeError(f"windows: needs a SpyreArray, got {aval}")
    win = tuple(
        (int(k), int(s), (int(p[0]), int(p[1])), int(b), int(d)) for k, s, p, b, d in window
    )
    if len(win) != aval.ndim:
        raise LayoutError(f"windows: {len(win)} windows for shape {aval.shape}")
    inter = tuple(
        n for d, w in zip(aval.shape, win, strict=True) for n in (window_out_size(d, w), w[0])
    )
    mid = inter if mid_shape is None else tuple(int(n) for n in mid_shape)
    order = tuple(range(len(mid))) if perm is None else tuple(int(p) for p in perm)
    shape = tuple(mid[p] for p in order) if out_shape is None else tuple(int(n) for n in out_shape)
    value = np.asarray(fill, aval.dtype).item()
    Windows.shape([aval], window=win, fill=value, mid_shape=mid, perm=order, out_shape=shape)
    layout = target_layout("windows", shape, aval.layout.device_dtype, layout, dim_order)
    params = {"window": win, "fill": value, "mid_shape": mid, "perm": order, "out_shape": shape}
    return Windows(aval, layout=layout, **params)(x)
