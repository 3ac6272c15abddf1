"""``widened_sum``: a half-float sum accumulated in float32 without the widened image.

``sum(astype(x, float32))`` of a float16/bfloat16 ``x`` is one primitive
(:class:`WidenedSum`): the interpreter runs each such pair of a program as one.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from .._errors import LayoutError, SpyreTypeError
from ._array import SpyreArray, SpyreType
from ._astype import Astype
from ._base import SpyrePrim, normalize_axes
from ._reduce import CLASSES, Reduce
from ._values import accumulator

__all__ = ["WidenedSum", "widened_sum"]


class WidenedSum(SpyrePrim):
    """``sum(astype(x, dtype), axes)`` of a float16/bfloat16 ``x``, as one primitive.

    Its type is the pair's: the sum of the widened array. The kernel reads the narrow
    image and accumulates in ``dtype``, as a half-float sum does anyway, so the widened
    image is never written: jnp's ``mean`` of a bfloat16 array widens it to float32
    first, and that image (twice the bytes, its sticks re-cut into other tiles by a
    transpose) cost more than the sum itself (layer norm over 4096x1000 bfloat16).
    Where the two sums' data dims differ (the stick dim kept: its tiles differ) or the
    narrow sum has no layout (a view folding reduced and kept dims), the kernel widens
    first.
    """

    axes: tuple[int, ...]
    keepdims: bool
    dtype: np.dtype

    def __init__(
        self, aval: SpyreType, *, axes: tuple[int, ...], keepdims: bool, dtype: np.dtype
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
        self.params = {"axes": axes, "keepdims": keepdims, "dtype": dtype}
        super().__init__()

    def kernel(self, img: jax.Array) -> jax.Array:
        if self._narrow is None:
            return self._wide.kernel(self._widen.kernel(img))
        return self._wide.finish(*self._narrow.data_result(img))

    def batch_params(self, batched: tuple[bool, ...], size: int) -> dict[str, Any]:
        axes = tuple(a + 1 for a in self.axes)
        return {"axes": axes, "keepdims": self.keepdims, "dtype": self.dtype}


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


def widened_sum(x: SpyreArray, axes: tuple[int, ...], dtype: Any) -> SpyreArray:
    """``sum(astype(x, dtype), axes)`` of a half-float ``x``, without the widened image.

    The result is the pair's, type and values (the order of the additions aside).

    Raises:
        SpyreTypeError: unless ``x`` is float16/bfloat16 and ``dtype`` float32.
    """
    aval = jax.typeof(x)
    if not isinstance(aval, SpyreType):
        raise SpyreTypeError(f"widened sum: needs a SpyreArray, got {aval}")
    axes = tuple(sorted(normalize_axes(axes, aval.ndim, "sum")))
    return WidenedSum(aval, axes=axes, keepdims=False, dtype=np.dtype(dtype))(x)
