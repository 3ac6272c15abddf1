"""A float32 softmax whose result's padding is zero (``Softmax``).

``jax.nn.softmax`` is a max, a subtraction, an exp, a sum and a division. Run op by op,
each reduction reads only the data of the reduced dim (a window over the image) and the
result's padding is undefined, so a matmul contracting over that dim (attention's second
product) masks it: a select that is a pass of its own over the whole image and keeps
XLA from fusing the softmax into the product (``benchmarks/README.md`` item 29).

:class:`Softmax` runs the chain as one kernel: it writes ``-inf`` (the max's identity)
into the input's padding, so both reductions run over whole device dims, and the result's
padding comes out as ``exp(-inf - max) / sum = 0``. Its type says so (``pad=0``). An
input whose padding holds ``-inf`` already (``pad=-inf``) needs no select: the kernel is
then ``jax.nn.softmax``'s plain reductions over the tiled image. A line
whose data are all ``-inf`` or hold a NaN is NaN in ``jax.nn.softmax`` too; its padding
may hold NaN as well, which a product over that line turns into the NaN it gives anyway.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import SpyreTypeError
from ._array import PadFill, SpyreArray, SpyreType
from ._base import SpyrePrim
from ._masks import data_mask, holds_identity, select

__all__ = ["Softmax", "softmax_axes", "softmax_with_zero_padding"]


def softmax_axes(t: SpyreType, axis: int) -> tuple[int, ...] | None:
    """The device dims of ``t`` that walk ``axis``, if a :class:`Softmax` reads ``t``.

    None unless ``t`` is a plain float32 image (no view, gaps, arrangement or broadcast
    dim) whose device dims each walk one logical dim and whose padding is along
    ``axis`` only: then every line along ``axis`` holds data, and ``-inf`` in the
    padding is the max's identity there and nothing else's.
    """
    lay = t.layout
    if (
        np.dtype(t.dtype) != np.float32
        or t.is_view
        or lay.has_gaps
        or lay.is_arranged
        or not 0 <= axis < t.ndim
    ):
        return None
    dims = t.dims
    if any(len(d.dims) != 1 for d in dims):
        return None
    for j, n in enumerate(t.shape):
        walked = int(np.prod([d.size for d in dims if d.dims == (j,)]))
        if walked < n or (j != axis and walked != n):
            return None
    return tuple(k for k, d in enumerate(dims) if d.dims == (axis,))


class Softmax(SpyrePrim):
    """``jax.nn.softmax(x, axis)`` of a float32 ``x``; the result's padding is zero.

    The type is ``x``'s with ``pad=0``. See the module docstring for the kernel.
    """

    axis: int

    def __init__(self, aval: SpyreType, *, axis: int) -> None:
        axes = softmax_axes(aval, axis)
        if axes is None:
            raise SpyreTypeError(
                f"softmax: needs a float32 image padded along dim {axis} only, "
                f"got {aval.str_short()}"
            )
        self._axes = axes
        self.in_avals = (aval,)
        self.out_aval = replace(aval, pad=PadFill.ZERO)
        self.params = {"axis": axis}
        super().__init__()

    def kernel(self, img: jax.Array, trust_padding: bool = True) -> jax.Array:
        """The softmax; the padding is selected to -inf unless it holds it already."""
        x, axes, ok = img, self._axes, data_mask(self.in_avals[0])
        if axes == tuple(range(axes[0], axes[-1] + 1)):  # adjacent: one axis (a bitcast)
            merged = (*x.shape[: axes[0]], -1, *x.shape[axes[-1] + 1 :])
            x, axes = x.reshape(merged), (axes[0],)
            ok = None if ok is None else ok.reshape(merged)
        if ok is not None and not (trust_padding and holds_identity(self.in_avals[0], -np.inf)):
            x = select(ok, x, jnp.asarray(-np.inf, x.dtype))  # the max's identity
        m = jnp.max(x, axis=axes, keepdims=True)
        e = jnp.exp(x - m)
        return (e / jnp.sum(e, axis=axes, keepdims=True)).reshape(img.shape)

    def tangent_kernel(self, img: jax.Array) -> jax.Array:
        """The kernel with the padding selected: a tangent's padding holds no zero."""
        return self.kernel(img, trust_padding=False)

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        return {"axis": self.axis + 1}


def softmax_with_zero_padding(x: SpyreArray, axis: int) -> SpyreArray:
    """``jax.nn.softmax(x, axis)`` as one :class:`Softmax` (its padding zero).

    Raises:
        SpyreTypeError: unless :func:`softmax_axes` accepts ``x``'s type.
    """
    aval = jax.typeof(x)
    if not isinstance(aval, SpyreType):
        raise SpyreTypeError(f"softmax: needs a SpyreArray, got {aval}")
    return Softmax(aval, axis=axis)(x)
