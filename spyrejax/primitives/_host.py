"""``host_call``: a JAX primitive the device has no rule for, run on the host.

Spyre's software stack runs on the CPU the ops the device does not: the operands are
moved device -> host through the DMA (their logical values), JAX computes the
primitive on the host, and the result is moved back host -> device in a fresh layout.
The emulator does exactly that (the kernel of :class:`~._lax_copy.LaxCopy`: read
through each operand's DMA descriptors, compute, write through the result's). The cost
is no device copy but DMA traffic, in bytes each way (:attr:`HostCall.to_host_bytes`,
:attr:`HostCall.to_device_bytes`): every logical element in its device format.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._jax import ShapedArray
from ..layout._layout import SpyreTensorLayout
from ._lax_copy import LaxCopy, bind_on_values

__all__ = ["HostCall", "dma_bytes", "host_call"]


def dma_bytes(shape: tuple[int, ...], layout: SpyreTensorLayout) -> int:
    """Bytes a DMA moves for the logical elements of ``shape`` in ``layout``'s format."""
    return math.prod(shape) * layout.device_dtype.bits // 8


class HostCall(LaxCopy):
    """A JAX primitive run on the host: operands to the host, the result back.

    Parameters as :class:`LaxCopy`'s.
    """

    role = "host"

    def __init__(self, *avals: Any, **params: Any) -> None:
        # The primitive's effects (jax.debug.print's callback) are the call's, so JAX
        # keeps a call whose results nobody reads, as it keeps the primitive.
        self.effects = _effects(params["primitive"], avals, params)
        super().__init__(*avals, **params)

    @property
    def moves(self) -> int:
        """No elements move between device layouts: the traffic is DMA bytes."""
        return 0

    @property
    def to_host_bytes(self) -> int:
        """Bytes the operands move device -> host."""
        return sum(dma_bytes(a.shape, a.layout) for a in self.in_avals)

    @property
    def to_device_bytes(self) -> int:
        """Bytes the result moves host -> device."""
        return sum(dma_bytes(s, t) for s, t in zip(self.out_shapes, self.layouts, strict=True))

    def pp_params(self) -> dict[str, Any]:
        return {
            "primitive": self.primitive.name,
            "to_host_bytes": self.to_host_bytes,
            "to_device_bytes": self.to_device_bytes,
        }


def _effects(primitive: Any, avals: tuple[Any, ...], params: dict[str, Any]) -> frozenset:
    """The effects of ``primitive`` applied to operands of these types and scalars."""
    operands: list[Any] = [ShapedArray(a.shape, a.dtype) for a in avals]
    for pos, value in params["consts"]:
        operands.insert(pos, ShapedArray(np.shape(value), np.asarray(value).dtype))
    _, effects = primitive.abstract_eval(*operands, **dict(params["primitive_params"]))
    return frozenset(effects)


def host_call(
    primitive: Any,
    operands: list[Any],
    params: dict[str, Any],
    out_shape: Any,
    out_dtype: Any,
    *,
    layout: Any,
) -> Any:
    """Run a JAX primitive on the host on the values of Spyre arrays (and scalars).

    Args:
        primitive: a JAX primitive.
        operands: Spyre arrays and Python/NumPy scalars, in the primitive's order.
        params: the primitive's parameters.
        out_shape: the result's shape (a sequence of them for several results).
        out_dtype: the result's dtype (or a sequence).
        layout: the layout the result comes back in (or a sequence).

    Raises:
        SpyreTypeError: if an operand is a host array.
        LayoutError: if ``layout`` cannot hold the result.
    """
    return bind_on_values(HostCall, primitive, operands, params, out_shape, out_dtype, layout)
