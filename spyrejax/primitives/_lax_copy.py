"""``lax_copy``: a JAX primitive computed on its operands' values, written as a device copy.

Gathers, scatters, dynamic slices and cumulative ops move elements between positions
that depend on indices or on their neighbours along a dim. On Spyre they are DMA
transfers of sticks and whole-tensor passes, not pointwise work on one layout: the
emulator reads each operand through its layout's DMA descriptors (its logical values),
runs the JAX primitive itself on them, and writes the result with the target layout's
descriptors. So the values are exactly JAX's, whatever the layouts, and the cost is
that of a copy: every operand's device elements (``moves``), as for slices and pads.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from .._errors import SpyreTypeError
from ..dma._dma import dma_h2d, h2d_values
from ..layout._dtypes import host_dtype
from ..layout._layout import SpyreTensorLayout
from ._array import SpyreArray, SpyreType
from ._base import SpyrePrim
from ._copies import Copy
from ._values import logical_values

__all__ = ["LaxCopy", "lax_copy", "split_operands"]


class LaxCopy(Copy):
    """A JAX primitive on the operands' logical values; the result in a fresh layout.

    Attributes:
        primitive: the JAX primitive.
        primitive_params: its parameters, as sorted ``(name, value)`` pairs.
        consts: ``(position, value)`` of operands given as scalars.
        out_shape: the result's shape.
        out_dtype: the result's dtype.
        layout: the result's layout.
    """

    primitive: Any
    primitive_params: tuple[tuple[str, Any], ...]
    consts: tuple[tuple[int, Any], ...]
    out_shape: tuple[int, ...]
    out_dtype: np.dtype
    layout: SpyreTensorLayout

    def __init__(
        self,
        *avals: SpyreType,
        primitive: Any,
        primitive_params: tuple[tuple[str, Any], ...],
        consts: tuple[tuple[int, Any], ...],
        out_shape: tuple[int, ...],
        out_dtype: np.dtype,
        layout: SpyreTensorLayout,
    ) -> None:
        layout.for_host(out_shape)
        self.params = {
            "layout": layout,
            "primitive": primitive,
            "primitive_params": primitive_params,
            "consts": consts,
            "out_shape": out_shape,
            "out_dtype": out_dtype,
        }
        self.in_avals = tuple(avals)
        self.out_aval = SpyreType.contiguous(out_shape, out_dtype, layout)
        SpyrePrim.__init__(self)

    def pp_params(self) -> dict[str, Any]:
        return {"primitive": self.primitive.name, "cost": self.moves}

    def _copy(self, imgs: tuple[jax.Array, ...], exact: bool) -> jax.Array:
        """On the operands' values, not their bits: the primitive may compute (cumsum).

        The transfers themselves stay exact (``dma_d2h``/``dma_h2d``); a pure move
        (a gather) of bfloat16 values through XLA could flush a subnormal, which the
        bit-exact copies of ``_restickify`` avoid by moving bits.
        """
        pairs = zip(imgs, self.in_avals, strict=True)
        out = self.compute(*(logical_values(i, t, exact) for i, t in pairs))
        return dma_h2d(out, self.layout) if exact else h2d_values(out, self.layout)

    def compute(self, *values: jax.Array) -> jax.Array:
        operands: list[Any] = list(values)
        for pos, value in self.consts:
            operands.insert(pos, value)
        return self.primitive.bind(*operands, **dict(self.primitive_params))


def split_operands(primitive: Any, operands: list[Any]) -> tuple[list[Any], list[Any]]:
    """The Spyre arrays among ``operands``, and the ``(position, value)`` of the scalars.

    Raises:
        SpyreTypeError: if an operand is a host array.
    """
    arrays, consts = [], []
    for pos, x in enumerate(operands):
        if isinstance(x, bool | int | float | np.generic | np.ndarray):
            consts.append((pos, np.asarray(x)))
            continue
        if not isinstance(jax.typeof(x), SpyreType):
            raise SpyreTypeError(
                f"{primitive.name}: operand {pos} is a host array {jax.typeof(x)}; move it with "
                "spyrejax.to_device"
            )
        arrays.append(x)
    return arrays, consts


def lax_copy(
    primitive: Any,
    operands: list[Any],
    params: dict[str, Any],
    out_shape: tuple[int, ...],
    out_dtype: Any,
    *,
    layout: SpyreTensorLayout,
) -> SpyreArray:
    """Run a JAX primitive on the values of Spyre arrays (and scalars) as a device copy.

    Args:
        primitive: a JAX primitive with one result.
        operands: Spyre arrays and Python/NumPy scalars, in the primitive's order.
        params: the primitive's parameters.
        out_shape: the result's shape.
        out_dtype: the result's dtype.
        layout: the result's layout.

    Raises:
        SpyreTypeError: if an operand is a host array, or none is a Spyre array.
        LayoutError: if ``layout`` cannot hold the result.
    """
    arrays, consts = split_operands(primitive, operands)
    prim = LaxCopy(
        *[jax.typeof(a) for a in arrays],
        primitive=primitive,
        primitive_params=tuple(sorted(params.items())),
        consts=tuple(consts),
        out_shape=tuple(out_shape),
        out_dtype=host_dtype(out_dtype),
        layout=layout,
    )
    return prim(*arrays)
