"""``SpyreJit.place``: the arguments in the layouts the function's products read in place.

A weight ``w[k, n]`` in the default layout of its shape, image ``[T(n), k, S(n)]``, has
n's tiles and lanes on both sides of k, which no GEMM reads: the matmul kernel's XLA dot
copies all of it into ``[k, n]`` on every call (16 MB for a 1000 x 4000 float32 weight,
a quarter of an MLP's time; ``benchmarks/README.md`` items 26 and 33). Laid out
``SpyreTensorLayout.row_major`` with zero padding it is that matrix already, and the dot
reads it as it is. A weight does not change between calls, so it is moved once, by the
user, before the calls: ``place`` asks the traced program which arguments only products
read as their weight (``x @ w``, ``h @ w.T``, ``W @ h``; the ``dot_general`` rule owns
the layout it reads in place: ``lowering.rules._dot.in_place_layout``) and returns them
in that layout.

An argument that max reductions read (a softmax's input), with elementwise ops only
besides, comes back in its layout with ``-inf`` in the padding (``pad=-inf``), the max's
identity: the reductions then read the tiled image unmasked, where masking the padding
makes them windows over the image's tile dim (1.2-1.5x of ``jax.jit``'s softmax,
``benchmarks/README.md`` items 32 and 37).

It is explicit rather than a cache inside the call: a relaid copy kept per argument
would double the weights' memory behind the user's back and need invalidating when an
array is donated or freed.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import SpyreInternalError, SpyrePlacementWarning
from .._jax import ClosedJaxpr
from ..layout._dtypes import has_infinity
from ..layout._layout import SpyreTensorLayout
from ..lowering._graph import Node, build_graph
from ..lowering._planner import host_input_type
from ..lowering.rules._dot import in_place_layout
from ..primitives import ELEMENTWISE, to_device, to_host
from ..primitives._array import PadFill, SpyreType
from ._arguments import split_call

if TYPE_CHECKING:
    from ._jit import SpyreJit

__all__ = ["Placement", "in_place_layouts", "place_arguments"]

_ELEMENTWISE = frozenset(p for op in ELEMENTWISE for p in op.lowers)
"""The graph's primitives an elementwise op lowers: their results' padding is their own."""


@dataclass(frozen=True)
class Placement:
    """Where an argument goes: ``layout`` (None: its own) with ``pad`` in the padding."""

    layout: SpyreTensorLayout | None
    pad: PadFill


def in_place_layouts(closed: ClosedJaxpr) -> list[Placement | str | None]:
    """For each input of the traced function, where its readers want it.

    A weight: the layout where every reader of the input is a product that reads it in
    the same layout with no copy (and the input is no result of the function), zero
    padding; where a product reads it (directly or converted to another dtype) but not
    so, the reason. A float input no product reads as its rhs that ``reduce_max`` and
    otherwise elementwise ops only read (not a result): its own layout, ``-inf``
    padding. None for other inputs (an activation, the ``x`` of ``x @ w``).
    """
    graph = build_graph(closed, heads=False)  # products as written: see lowering._heads
    readers = graph.consumers()
    outputs = {id(o) for o in graph.outputs}
    made = {id(o): n for n in graph.nodes for o in n.outs}
    inputs = {id(v) for v in graph.inputs}

    def argument(x: Any) -> Any:
        """The argument ``x`` is, converted, transposed or reshaped; else None."""
        while id(x) in made and made[id(x)].prim in _ARGUMENT_FORMS:
            x = made[id(x)].ins[0]
        return x if id(x) in inputs else None

    return [_placement(v, readers, id(v) in outputs, argument) for v in graph.inputs]


_ARGUMENT_FORMS = frozenset({"convert_element_type", "transpose", "reshape", "copy"})


def _placement(
    v: Any, readers: dict[Any, list[Any]], is_output: bool, argument: Callable[[Any], Any]
) -> Placement | str | None:
    """Where input ``v`` goes (see :func:`in_place_layouts`)."""
    got = _in_place(v, readers, is_output, argument)
    if isinstance(got, SpyreTensorLayout):
        return Placement(got, PadFill.ZERO)
    if got is None and not is_output:
        return _max_read(v, readers.get(v, []))
    return got


def _max_read(v: Any, readers: list[Node]) -> Placement | None:
    """``-inf`` padding for a float ``v`` that max reductions read (see above)."""
    prims = {node.prim for node in readers}
    floating = jnp.issubdtype(v.dtype, jnp.floating) and has_infinity(v.dtype)
    if not floating or "reduce_max" not in prims or not prims <= {"reduce_max", *_ELEMENTWISE}:
        return None
    return Placement(None, PadFill.NEG_INF)


def _weight_of(node: Node, v: Any, argument: Callable[[Any], Any]) -> bool | str:
    """Whether product ``node`` reads input ``v`` as its weight, or why that is not known.

    The rhs is the weight (``w`` in ``x @ w``, ``x @ w.T``: jnp traces ``w.T`` as a
    transpose and a ``[1], [0]`` product); the lhs is where the rhs is computed
    (``W @ h``), not an argument (``x @ w.astype(...)``). Both arguments, each
    contracted over its last dim in the product itself, read alike:
    ``jnp.einsum("mk,nk->mn", x, w)``, or ``W @ x`` under ``vmap`` (equinox's ``Linear``).
    """
    lhs, rhs = node.ins
    other = argument(rhs if v is lhs else lhs)
    if other is None:
        return True
    if other is argument(v):  # x @ x.T: no weight
        return False
    lc, rc, *_ = _dims(node)
    if lc == (lhs.ndim - 1,) and rc == (rhs.ndim - 1,):
        return (
            "its product's other operand is an argument too, read alike"
            " (einsum('mk,nk->mn', x, w), a vmapped W @ x)"
        )
    return v is rhs


def _dims(node: Node) -> tuple[tuple[int, ...], tuple[int, ...]]:
    (lc, rc), _ = node.params["dimension_numbers"]
    return tuple(lc), tuple(rc)


def _in_place(
    v: Any, readers: dict[Any, list[Any]], is_output: bool, argument: Callable[[Any], Any]
) -> SpyreTensorLayout | str | None:
    """The layout every reader of input ``v`` takes it in place, why not, or None."""
    nodes = readers.get(v, [])
    weighs: dict[int, Any] = {
        id(n): _weight_of(n, v, argument) for n in nodes if n.prim == "dot_general"
    }
    for n in nodes:
        if n.prim == "transpose" and (got := _transposed(n, v, readers, argument)) is not None:
            weighs[id(n)] = got
    products = [n for n in nodes if weighs.get(id(n), False) is not False]
    converted = [
        n
        for n in nodes
        if n.prim == "convert_element_type"
        if any(
            r.prim == "dot_general" and _weight_of(r, n.outs[0], argument) is not False
            for r in readers.get(n.outs[0], [])
        )
    ]
    if converted:
        return f"it is converted to {converted[0].outs[0].dtype} before its product"
    if not products:
        return None
    if is_output:
        return "it is also a result of the function"
    wanted = [
        w
        if isinstance(w := weighs.get(id(node)), str | SpyreTensorLayout)
        else in_place_layout(node, v)
        for node in nodes
    ]
    reasons = [w for w in wanted if isinstance(w, str)]
    if reasons:
        return reasons[0]
    if len(set(wanted)) > 1:
        return "its products read it in different layouts"
    return wanted[0]


def _transposed(
    t: Node, v: Any, readers: dict[Any, list[Any]], argument: Callable[[Any], Any]
) -> SpyreTensorLayout | str | None:
    """The layout of ``v`` whose transpose ``t`` products read in place (``x @ w.T``).

    The row-major image of ``w.T`` is ``w`` laid out in the transpose's dim order: the
    products read it, the transpose is a view. None if no product reads ``w.T``.
    """
    out = t.outs[0]
    got = _in_place(out, readers, False, argument)
    if not isinstance(got, SpyreTensorLayout):
        return got
    if got != SpyreTensorLayout.row_major(out.shape, out.dtype):
        return "its transpose is read in another layout than row-major"
    return SpyreTensorLayout.row_major(v.shape, v.dtype, order=t.params["permutation"])


_FILLS = {PadFill.ZERO: 0, PadFill.NEG_INF: -np.inf}


def _placed(x: Any, placement: Placement | str | None) -> Any:
    """``x`` as ``placement`` says (itself if it is, or if there is none)."""
    if (
        not isinstance(placement, Placement)
        or isinstance(x, jax.core.Tracer)
        or not hasattr(x, "shape")
    ):
        return x
    t = jax.typeof(x)
    layout = placement.layout
    if isinstance(t, SpyreType):
        layout = t.layout if layout is None and not t.is_view else layout
        if t.layout == layout and not t.is_view and t.pad is placement.pad:
            return x
        x = to_host(x)
    if layout is None:
        layout = host_input_type(tuple(x.shape), x.dtype).layout
    return to_device(x, layout=layout, pad_value=_FILLS[placement.pad])


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
