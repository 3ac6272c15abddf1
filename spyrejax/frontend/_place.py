"""``SpyreJit.place``: the arguments in the layouts the function's products read in place.

A weight ``w[k, n]`` in the default layout of its shape, image ``[T(n), k, S(n)]``, has
n's tiles and lanes on both sides of k, which no GEMM reads: the matmul kernel's XLA dot
copies all of it into ``[k, n]`` on every call (16 MB for a 1000 x 4000 float32 weight,
a quarter of an MLP's time; ``benchmarks/README.md`` items 26 and 33). Laid out
``SpyreTensorLayout.row_major`` with zero padding it is that matrix already, and the dot
reads it as it is. A weight does not change between calls, so it is moved once, by the
user, before the calls: ``place`` asks the traced program which arguments only products
read as their rhs (the ``dot_general`` rule owns that answer:
``lowering.rules._dot.in_place_layout``) and returns them in that layout.

It is explicit rather than a cache inside the call: a relaid copy kept per argument
would double the weights' memory behind the user's back and need invalidating when an
array is donated or freed.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import jax

from .._errors import SpyreInternalError, SpyrePlacementWarning
from .._jax import ClosedJaxpr
from ..layout._layout import SpyreTensorLayout
from ..lowering._graph import build_graph
from ..lowering.rules._dot import in_place_layout
from ..primitives import to_device, to_host
from ..primitives._array import PadFill, SpyreType
from ._arguments import split_call

if TYPE_CHECKING:
    from ._jit import SpyreJit

__all__ = ["in_place_layouts", "place_arguments"]


def in_place_layouts(closed: ClosedJaxpr) -> list[SpyreTensorLayout | str | None]:
    """For each input of the traced function, the layout its readers take in place.

    A layout where every reader of the input is a product that reads it in the same
    layout with no copy (and the input is no result of the function); where a product
    reads it (directly or converted to another dtype) but not so, the reason; None for
    an input no product reads as its rhs (an activation, the ``x`` of ``x @ w``).
    """
    graph = build_graph(closed)
    readers = graph.consumers()
    outputs = {id(o) for o in graph.outputs}
    return [_in_place(v, readers, id(v) in outputs) for v in graph.inputs]


def _in_place(
    v: Any, readers: dict[Any, list[Any]], is_output: bool
) -> SpyreTensorLayout | str | None:
    """The layout every reader of input ``v`` takes it in place, why not, or None."""
    nodes = readers.get(v, [])
    products = [n for n in nodes if n.prim == "dot_general" and n.ins[-1] is v]
    converted = [
        n
        for n in nodes
        if n.prim == "convert_element_type"
        if any(r.prim == "dot_general" for r in readers.get(n.outs[0], []))
    ]
    if converted:
        return f"it is converted to {converted[0].outs[0].dtype} before its product"
    if not products:
        return None
    if is_output:
        return "it is also a result of the function"
    wanted = [in_place_layout(node, v) for node in nodes]
    reasons = [w for w in wanted if isinstance(w, str)]
    if reasons:
        return reasons[0]
    if len(set(wanted)) > 1:
        return "its products read it in different layouts"
    return wanted[0]


def _placed(x: Any, layout: SpyreTensorLayout | str | None) -> Any:
    """``x`` in ``layout`` with zero padding (itself if it is, or if no layout)."""
    if (
        not isinstance(layout, SpyreTensorLayout)
        or isinstance(x, jax.core.Tracer)
        or not hasattr(x, "shape")
    ):
        return x
    t = jax.typeof(x)
    if isinstance(t, SpyreType):
        if t.layout == layout and not t.is_view and t.pad is PadFill.ZERO:
            return x
        x = to_host(x)
    return to_device(x, layout=layout, pad_value=0)


def place_arguments(jitted: SpyreJit, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with every weight in the layout the function's products read in place.

    See :meth:`SpyreJit.place`.

    Raises:
        SpyreInternalError: if the traced function's inputs do not match the leaves.
    """
    closed = jitted.trace(*args).jaxpr
    _, call = split_call(jitted.argnums, args, {})
    leaves, treedef = jax.tree.flatten(call.dynamic())
    layouts = in_place_layouts(closed)
    if len(layouts) != len(leaves):
        raise SpyreInternalError(
            f"place: {len(leaves)} argument leaves, {len(layouts)} inputs of the trace"
        )
    placed = [_placed(x, lay) for x, lay in zip(leaves, layouts, strict=True)]
    left = [f"{call.path(i)}: {why}" for i, why in enumerate(layouts) if isinstance(why, str)]
    if left:
        warnings.warn(
            "place left these arguments of products where they are (each product relays "
            "its operand out on every call):\n  " + "\n  ".join(left),
            SpyrePlacementWarning,
            stacklevel=3,
        )
    dyn_args, _ = treedef.unflatten(placed)
    out = list(args)
    for pos, a in zip(call.positions, dyn_args, strict=True):
        out[pos] = a
    return tuple(out)
