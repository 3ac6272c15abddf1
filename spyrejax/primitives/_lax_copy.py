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

from ..dma._dma import dma_h2d, h2d_values
from ..layout._dtypes import host_dtype
from ..layout._layout import SpyreTensorLayout
from ._arguments import host_operand
from ._array import SpyreType
from ._base import SpyrePrim, _vma
from ._copies import Copy
from ._values import logical_values

__all__ = ["LaxCopy", "bind_on_values", "lax_copy", "split_operands"]


class LaxCopy(SpyrePrim):
    """A JAX primitive on the operands' logical values; the results in fresh layouts.

    Attributes:
        primitive: the JAX primitive.
        primitive_params: its parameters, as sorted ``(name, value)`` pairs.
        consts: ``(position, value)`` of operands given as scalars.
        out_shapes: each result's shape.
        out_dtypes: each result's dtype.
        layouts: each result's layout.
    """

    role = "copy"
    takes_gaps = True  # reads and writes through DMA descriptors
    primitive: Any
    primitive_params: tuple[tuple[str, Any], ...]
    consts: tuple[tuple[int, Any], ...]
    out_shapes: tuple[tuple[int, ...], ...]
    out_dtypes: tuple[np.dtype, ...]
    layouts: tuple[SpyreTensorLayout, ...]

    def __init__(
        self,
        *avals: SpyreType,
        primitive: Any,
        primitive_params: tuple[tuple[str, Any], ...],
        consts: tuple[tuple[int, Any], ...],
        out_shapes: tuple[tuple[int, ...], ...],
        out_dtypes: tuple[np.dtype, ...],
        layouts: tuple[SpyreTensorLayout, ...],
    ) -> None:
        outs = []
        for shape, dtype, layout in zip(out_shapes, out_dtypes, layouts, strict=True):
            layout.for_host(shape)
            outs.append(SpyreType.contiguous(shape, dtype, layout))
        self.params = {
            "layouts": layouts,
            "primitive": primitive,
            "primitive_params": primitive_params,
            "consts": consts,
            "out_shapes": out_shapes,
            "out_dtypes": out_dtypes,
        }
        self.in_avals = tuple(avals)
        self.out_aval = tuple(outs) if primitive.multiple_results else outs[0]
        SpyrePrim.__init__(self)

    moves = Copy.moves

    def pp_params(self) -> dict[str, Any]:
        return {"primitive": self.primitive.name, "cost": self.moves}

    def _copy(self, imgs: tuple[jax.Array, ...], exact: bool) -> Any:
        """On the operands' values, not their bits: the primitive may compute (cumsum).

        The transfers themselves stay exact (``dma_d2h``/``dma_h2d``); a pure move
        (a gather) of bfloat16 values through XLA could flush a subnormal, which the
        bit-exact copies of ``_restickify`` avoid by moving bits.
        """
        pairs = zip(imgs, self.in_avals, strict=True)
        outs = self.compute(*(logical_values(i, t, exact) for i, t in pairs))
        outs = outs if self.primitive.multiple_results else [outs]
        write = dma_h2d if exact else h2d_values
        images = [write(o, layout) for o, layout in zip(outs, self.layouts, strict=True)]
        return self._results(images)

    def kernel(self, *imgs: jax.Array) -> Any:
        return self._copy(imgs, exact=True)

    def tangent_kernel(self, *imgs: jax.Array) -> Any:
        return self._copy(imgs, exact=False)

    def compute(self, *values: jax.Array) -> Any:
        operands: list[Any] = list(values)
        for pos, value in self.consts:
            operands.insert(pos, value)
        return self.primitive.bind(*_same_varying(operands), **dict(self.primitive_params))


def _same_varying(operands: list[Any]) -> list[Any]:
    """``operands`` varying over the same mesh axes (inside ``jax.shard_map``).

    JAX's wrappers (``lax.gather``...) cast an operand the same on every card to varying
    where it meets per-card ones; a bare ``bind`` does not, and a gather of a replicated
    table by per-card indices would be refused.
    """
    vmas = [_vma(jax.typeof(x)) for x in operands]
    union = frozenset().union(*vmas)
    if not union:
        return operands
    return [
        x if v == union else jax.lax.pcast(x, tuple(sorted(union - v)), to="varying")
        for x, v in zip(operands, vmas, strict=True)
    ]


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
            raise host_operand(primitive.name, f"operand {pos}", jax.typeof(x))
        arrays.append(x)
    return arrays, consts


def lax_copy(
    primitive: Any,
    operands: list[Any],
    params: dict[str, Any],
    out_shape: Any,
    out_dtype: Any,
    *,
    layout: Any,
) -> Any:
    """Run a JAX primitive on the values of Spyre arrays (and scalars) as a device copy.

    Args:
        primitive: a JAX primitive.
        operands: Spyre arrays and Python/NumPy scalars, in the primitive's order.
        params: the primitive's parameters.
        out_shape: the result's shape; for a primitive with several results (``sort``,
            ``top_k``), a sequence of shapes.
        out_dtype: the result's dtype, or a sequence of them.
        layout: the result's layout, or a sequence of them.

    Returns:
        A Spyre array, or a tuple of them for a primitive with several results.

    Raises:
        SpyreTypeError: if an operand is a host array, or none is a Spyre array.
        LayoutError: if a layout cannot hold its result.
    """
    return bind_on_values(LaxCopy, primitive, operands, params, out_shape, out_dtype, layout)


def bind_on_values(
    cls: type[LaxCopy],
    primitive: Any,
    operands: list[Any],
    params: dict[str, Any],
    out_shape: Any,
    out_dtype: Any,
    layout: Any,
) -> Any:
    """Build and call a :class:`LaxCopy` (sub)class on ``operands``, as :func:`lax_copy` says."""
    arrays, consts = split_operands(primitive, operands)
    several = primitive.multiple_results
    shapes = [tuple(s) for s in out_shape] if several else [tuple(out_shape)]
    dtypes = list(out_dtype) if several else [out_dtype]
    layouts = list(layout) if several else [layout]
    prim = cls(
        *[jax.typeof(a) for a in arrays],
        primitive=primitive,
        primitive_params=tuple(sorted(params.items())),
        consts=tuple(consts),
        out_shapes=tuple(shapes),
        out_dtypes=tuple(host_dtype(d) for d in dtypes),
        layouts=tuple(layouts),
    )
    return prim(*arrays)
