"""Half-float sums that never write their widened image (``WidenedSum``).

jnp's ``mean`` of a bfloat16 array widens it to float32 first, and layer norm's
``mean((x - m) ** 2)`` squares in float32 what it widened (XLA's excess precision, which
the graph keeps: ``spyrejax.lowering._graph``). Run op by op, the widened image (twice
the bytes, its sticks re-cut into other tiles by a transpose) cost more than the sum
itself. A :class:`WidenedSum` reads the narrow image, widens it inside the reduction's
fusion, maps it with the elementwise ops in between (``then``) and accumulates in
float32, as a half-float sum does anyway.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from .._errors import LayoutError, SpyreTypeError
from ._array import SpyreArray, SpyreType
from ._astype import Astype
from ._base import SpyrePrim, normalize_axes
from ._elementwise import Scalar
from ._elementwise_ops import OP
from ._pointwise import pointwise
from ._reduce import CLASSES, Reduce
from ._values import accumulator

__all__ = ["Pointwise", "WidenedSum", "widened_sum"]

Pointwise = tuple[tuple[str, tuple[tuple[int, Scalar], ...]], ...]
"""Elementwise ops applied in order to one array: ``(op name, scalar consts)`` each."""


class WidenedSum(SpyrePrim):
    """``sum(then(astype(x, dtype)), axes)`` of a float16/bfloat16 ``x``, as one primitive.

    Its type is the chain's: the sum of the widened (and mapped) array. The kernel reads
    the narrow image and widens it in the reduction's fusion, so the widened image is
    never written. ``then`` lists elementwise ops of one array each (``integer_pow``
    by 2, ``x * 0.5``...) computed in ``dtype`` on the widened values, before padding is
    replaced by the sum's identity. Where the two sums' data dims differ (the stick dim
    kept: its tiles differ) or the narrow sum has no layout (a view folding reduced and
    kept dims), the kernel widens first.
    """

    axes: tuple[int, ...]
    keepdims: bool
    dtype: np.dtype
    then: Pointwise

    def __init__(
        self,
        aval: SpyreType,
        *,
        axes: tuple[int, ...],
        keepdims: bool,
        dtype: np.dtype,
        then: Pointwise = (),
    ) -> None:
        acc = accumulator(aval.dtype)
        if acc is None or np.dtype(acc) != dtype:
            raise SpyreTypeError(
                f"widened sum: {aval.dtype} does not accumulate in {dtype}; use astype and sum"
            )
        self._widen = Astype(aval, dtype=dtype)
        self._wide = CLASSES["sum"](self._widen.out_aval, axes=axes, keepdims=keepdims)
        self._narrow = _narrow_sum(aval, axes, keepdims, self._wide.out_aval)
        self.in_avals = (aval,)
        self.out_aval = self._wide.out_aval
        self.params = {"axes": axes, "keepdims": keepdims, "dtype": dtype, "then": then}
        super().__init__()

    def kernel(self, img: jax.Array, trust_padding: bool = True) -> jax.Array:
        then = self._then if self.then else None
        if self._narrow is None:
            wide = self._widen.kernel(img)
            return self._wide.kernel(wide if then is None else then(wide))
        narrow = self._narrow.data_result(img, then, trust=trust_padding)
        return self._wide.finish(*narrow)

    def tangent_kernel(self, img: jax.Array) -> jax.Array:
        """The kernel with the padding masked: a tangent's padding holds no zero."""
        return self.kernel(img, trust_padding=False)

    def _then(self, x: jax.Array) -> jax.Array:
        for name, consts in self.then:
            x = pointwise(OP[name], consts, [x], x.dtype)
        return x

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        axes = tuple(a + 1 for a in self.axes)
        return {"axes": axes, "keepdims": self.keepdims, "dtype": self.dtype, "then": self.then}


def _narrow_sum(
    aval: SpyreType, axes: tuple[int, ...], keepdims: bool, wide: SpyreType
) -> Reduce | None:
    """The sum of the narrow ``aval`` whose data dims are the ``wide`` result's, if any."""
    try:  # a view may fold reduced and kept dims: the widened copy does not
        narrow = CLASSES["sum"](aval, axes=axes, keepdims=keepdims)
    except LayoutError:
        return None
    same = [d for d in narrow.out_aval.dims if d.is_data] == [d for d in wide.dims if d.is_data]
    return narrow if same else None


def widened_sum(
    x: SpyreArray, axes: tuple[int, ...], dtype: Any, then: Pointwise = ()
) -> SpyreArray:
    """``sum(then(astype(x, dtype)), axes)`` of a half-float ``x``, no widened image.

    The result is the chain's, type and values (the order of the additions aside).

    Raises:
        SpyreTypeError: unless ``x`` is float16/bfloat16 and ``dtype`` float32.
    """
    aval = jax.typeof(x)
    if not isinstance(aval, SpyreType):
        raise SpyreTypeError(f"widened sum: needs a SpyreArray, got {aval}")
    axes = tuple(sorted(normalize_axes(axes, aval.ndim, "sum")))
    prim = WidenedSum(aval, axes=axes, keepdims=False, dtype=np.dtype(dtype), then=then)
    return prim(x)
