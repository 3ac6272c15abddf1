"""``with_layout``: a layout hint inside plain JAX code.

Under ``jax.jit`` (or no jit) it is the identity; under :func:`spyrejax.jit` the planner
treats it as a constraint on the value's layout; on a Spyre array it restickifies when
the layout differs.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ... import primitives as sp
from ..._errors import LayoutError
from ..._jax import Primitive, ad, batching, mlir
from ...layout._layout import SpyreTensorLayout
from ...primitives._array import SpyreType, batched_layout
from ...primitives._stick import SPARSE, canon
from .._graph import Node
from .._registry import Mode, Rule, _register

__all__ = ["with_layout", "with_layout_p"]

with_layout_p = Primitive("spyre_with_layout")
with_layout_p.def_impl(lambda x, **_: x)
with_layout_p.def_abstract_eval(lambda x, **_: x)
mlir.register_lowering(with_layout_p, lambda ctx, x, **_: [x])
ad.deflinear2(with_layout_p, lambda ct, x, **params: [with_layout_p.bind(ct, **params)])


def _batch(args: Any, dims: Any, *, layout: Any, dim_order: Any) -> tuple[Any, int]:
    (x,), (d,) = args, dims
    x = jnp.moveaxis(x, d, 0)
    if layout is not None:
        layout = batched_layout(layout, x.shape[1:], x.shape[0])
    if dim_order is not None:
        dim_order = (0, *(o + 1 if o >= 0 else o for o in dim_order))
    return with_layout_p.bind(x, layout=layout, dim_order=dim_order), 0


batching.primitive_batchers[with_layout_p] = _batch


def with_layout(x: Any, layout: SpyreTensorLayout | None = None, *, dim_order: Any = None) -> Any:
    """Ask for a layout for ``x``: a hint that costs nothing outside spyrejax.

    Args:
        x: an array (traced or not) or a Spyre array.
        layout: the exact layout wanted.
        dim_order: or the dim order of the default layout wanted (its last entry is
            the stick dim).

    Returns:
        ``x`` itself under plain JAX; under :func:`spyrejax.jit` the planner puts ``x``
        in that layout (restickifying if needed); a Spyre array is restickified if
        its layout differs.

    Raises:
        LayoutError: if both or neither are given, or they do not fit ``x``.
    """
    if layout is None and dim_order is None:
        raise LayoutError("with_layout needs a layout or a dim_order")
    aval = jax.typeof(x)
    if dim_order is not None:
        dim_order = tuple(int(d) for d in dim_order)
    target = sp.target_layout("with_layout", aval.shape, aval.dtype, layout, dim_order)
    target.for_host(aval.shape)  # raises if the layout cannot hold x
    if isinstance(aval, SpyreType):
        return _restickify_to(x, layout, dim_order)
    return with_layout_p.bind(x, layout=layout, dim_order=dim_order)


def _restickify_to(x: Any, layout: Any, dim_order: Any) -> Any:
    t = jax.typeof(x)
    return sp.in_layout(x, layout or SpyreTensorLayout(t.shape, t.layout.device_dtype, dim_order))


def hinted_stick(shape: tuple[int, ...], params: dict[str, Any]) -> int:
    """The stick a with_layout node asks for."""
    if params["layout"] is not None:
        s = params["layout"].for_host(shape).stick_dim()
        return SPARSE if s is None else canon(shape, s)
    order = params["dim_order"]
    return SPARSE if not order or order[-1] == -1 else canon(shape, order[-1])


class _WithLayout(Rule):
    sets_layout = True

    def modes(self, node: Node) -> list[Mode]:
        s = hinted_stick(node.ins[0].shape, node.params)
        return [Mode((s,), s)]

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        return [_restickify_to(args[0], node.params["layout"], node.params["dim_order"])]


_register(_WithLayout(), with_layout_p.name)
