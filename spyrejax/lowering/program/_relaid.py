"""Reductions of a restickified value the emulator runs on the value's source image.

The planner may restickify a value so that a reduction keeps the new stick dim (a layer
norm's ``[T, D]`` activation stuck on ``T``, so its conversions to float32 are in the
card's order and its row sums keep the stick: ``benchmarks/README.md`` item 48). On the
card that is the cheaper program. On the CPU, XLA cannot fuse the restickify (a
transpose) into its reduction fusions, so it wrote the relaid value (in float32, twice
the bytes) and reduced that. A restickify only moves data and pointwise ops compute
position by position, so the emulator runs such a chain on the source image instead:
the pointwise ops in the source's layout (their other operands restickified to its
stick where they are not on it: row statistics, small), the reduction over the
source's stick dim (lanes first, in memory order; a half-float sum widened in its
fusion, :func:`~spyrejax.primitives._widened_sum.widened_sum`), and its result put in
the planned type (a copy of the small result, its arrangement and padding fill). The
values are the standard order's; a float sum's order over the reduced dim is the only
difference, which XLA does not fix either. The record, the device model and the
per-core mode still see the planned ops.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import jax.numpy as jnp
import numpy as np

from ... import primitives as sp
from ...layout._lanes import LanedLayout
from ...primitives._arranged import arranged_image, standard_order
from ...primitives._array import PadFill, SpyreType
from ...primitives._masks import masked, poisoned
from ...primitives._stick import default_layout, serves
from ...primitives._widened_sum import Pointwise, widened_sum
from .._graph import Graph, Node, Scalar, Value
from .._planner import Plan
from .._registry import lower_node, stick_req

__all__ = ["HALF_FLOATS", "RelaidChain", "map_step", "relaid_chains", "run_relaid"]

HALF_FLOATS = (np.dtype(np.float16), np.dtype(jnp.bfloat16))
"""The dtypes whose sums accumulate in float32 (widened sums)."""
_F32 = np.dtype(np.float32)
_MAPS = {p: op for op in sp.ELEMENTWISE if op.result == "same" for p in op.lowers}
_POINTWISE = {p: op for op in sp.ELEMENTWISE for p in op.lowers}
_REDUCTIONS = {p for op in sp.REDUCTIONS_TABLE for p in op.lowers}


@dataclass(frozen=True)
class RelaidChain:
    """A reduction of pointwise ops of ``x``, which the plan restickified to read it.

    Attributes:
        x: the moved value.
        source: its type before the move: what the chain reads instead.
        nodes: the pointwise nodes from ``x``'s reader to the reduction's operand.
        reduce: the reduction node; the chain's result is its planned type ``out``.
        out: the reduction's planned result type.
        tail: where a half-float widened sum starts in ``nodes`` (its convert), or None.
        then: the maps after that convert (``widened_sum``'s ``then``).
    """

    x: Value
    source: SpyreType
    nodes: tuple[Node, ...]
    reduce: Node
    out: SpyreType
    tail: int | None
    then: Pointwise

    @property
    def skipped(self) -> tuple[Node, ...]:
        """The nodes the chain computes before its reduction."""
        return self.nodes


def map_step(node: Node) -> tuple[str, tuple[tuple[int, Any], ...], int] | None:
    """An elementwise node of one array and scalars: its op, scalar consts, array index.

    None for any other node (two arrays, a broadcast, a non-"same" result).
    """
    op = _MAPS.get(node.prim)
    if op is None or len(node.outs) != 1:
        return None
    operands = op.from_jax(list(node.ins), node.params)
    arrays = [k for k, a in enumerate(operands) if isinstance(a, Value)]
    if len(operands) != op.arity or len(arrays) != 1 or arrays[0] not in op.value_positions:
        return None
    (pos,) = arrays
    value = operands[pos]
    if value.shape != node.outs[0].shape or value.dtype != node.outs[0].dtype:
        return None
    consts = tuple(
        (k, np.asarray(a.value if isinstance(a, Scalar) else a).item())
        for k, a in enumerate(operands)
        if k != pos
    )
    return op.name, consts, node.ins.index(value)


def relaid_chains(graph: Graph, plan: Plan, taken: set[Node]) -> dict[Node, RelaidChain]:
    """Per reduction node, the chain it ends on a restickified value (module docstring).

    A chain's reduction keeps the stick dim it reads its operand in and reduces the
    source's: the restickify put the stick on a kept dim. Every node in it has one
    planned run (written in its own buffer), one reader and no move; its values have the
    shape of ``x``, its other operands are broadcast along the source's stick (row
    statistics, which the chain restickifies). Nodes in ``taken`` (other fused chains)
    are left alone.
    """
    readers = collections.Counter(u for n in graph.nodes for u in n.ins if isinstance(u, Value))
    readers.update(o for o in graph.outputs if isinstance(o, Value))
    made_by = {v: n for n in graph.nodes for v in n.outs}
    chains = {}
    for node in graph.nodes:
        runs = plan.runs.get(node, [])
        if node.prim not in _REDUCTIONS or len(runs) != 1 or runs[0].mode.place is not None:
            continue
        axes = tuple(node.params["axes"])
        found = _walk(node.ins[0], runs[0].ins[0], axes, plan, made_by, readers)
        if found is None or {node, *found[2]} & taken:
            continue
        x, source, nodes = found
        tail, then = _widened_tail(node, nodes)
        chains[node] = RelaidChain(x, source, nodes, node, runs[0].out, tail, then)
    return chains


def _walk(
    y: Any,
    t: SpyreType,
    axes: tuple[int, ...],
    plan: Plan,
    made_by: dict[Value, Node],
    readers: collections.Counter[Value],
) -> tuple[Value, SpyreType, tuple[Node, ...]] | None:
    """From a reduction's operand ``y`` (read as ``t``) back to the restickified value."""
    if t.stick_dim is None or t.stick_dim in axes:
        return None  # the reduction does not keep the stick: nothing to undo
    nodes: list[Node] = []
    while isinstance(y, Value):
        moved = [m for m in plan.moves.get(y, []) if m.target == t]
        if moved:
            s = moved[0].source
            plain = not (s.is_view or s.layout.is_arranged or s.layout.has_gaps)
            ok = plain and s.stick_dim in axes and not isinstance(s.layout, LanedLayout)
            return (y, s, tuple(reversed(nodes))) if ok and _small(nodes, s) else None
        node = made_by.get(y)
        runs = plan.runs.get(node, []) if node is not None else []
        if node is None or readers[y] != 1 or plan.moves.get(y) or len(runs) != 1:
            return None
        main = _main_operand(node, y)
        if main is None or runs[0].out != t or runs[0].mode.place is not None:
            return None
        nodes.append(node)
        y, t = node.ins[main], runs[0].ins[main]
    return None


def _small(nodes: list[Node], source: SpyreType) -> bool:
    """Whether the other operands of ``nodes`` are broadcast along ``source``'s stick dim.

    Each is then at most the reduction's result in size (a row statistic): what the
    chain restickifies onto the source's stick is small beside the value it reads.
    """
    s = source.stick_dim
    return all(
        u.shape[s] == 1
        for n in nodes
        for u in n.ins
        if isinstance(u, Value) and u.shape != source.shape
    )


def _main_operand(node: Node, y: Value) -> int | None:
    """The index of the one operand of ``y``'s shape of a pointwise ``node``, if any.

    The others are scalars or arrays of ``y``'s rank broadcast to it (row statistics).
    """
    if node.prim != "convert_element_type" and node.prim not in _POINTWISE:
        return None
    if len(node.outs) != 1 or node.outs[0] is not y:
        return None
    full = [k for k, u in enumerate(node.ins) if isinstance(u, Value) and u.shape == y.shape]
    others = [u for u in node.ins if isinstance(u, Value) and u.shape != y.shape]
    if len(full) != 1 or any(len(u.shape) != len(y.shape) for u in others):
        return None
    return full[0]


def _widened_tail(reduce: Node, nodes: tuple[Node, ...]) -> tuple[int | None, Pointwise]:
    """Where a widened sum starts in ``nodes`` (a half float's convert), and its maps."""
    if reduce.prim != "reduce_sum":
        return None, ()
    for k, node in enumerate(nodes):
        x, (y,) = node.ins[0], node.outs
        if node.prim != "convert_element_type" or not isinstance(x, Value):
            continue
        steps = [map_step(n) for n in nodes[k + 1 :]]
        if x.dtype in HALF_FLOATS and y.dtype == _F32 and all(s is not None for s in steps):
            return k, tuple(s[:2] for s in steps if s is not None)
    return None, ()


def run_relaid(
    chain: RelaidChain,
    env: dict[tuple[Value, SpyreType], Any],
    plan: Plan,
    lower: Callable[..., list[Any]] = lower_node,
) -> Any:
    """The chain's reduction, computed on its value's source image, in its planned type."""
    cur = env[chain.x, chain.source]
    stick = chain.source.stick_dim
    stop = len(chain.nodes) if chain.tail is None else chain.tail
    for node in chain.nodes[:stop]:
        (option,) = plan.runs[node]
        main = _main_operand(node, node.outs[0])
        args = [
            cur if k == main else _operand(u, t, stick, env)
            for k, (u, t) in enumerate(zip(node.ins, option.ins, strict=True))
        ]
        (cur,) = lower(node, args, replace(option.mode, variant=""))
    if chain.tail is not None:
        out = widened_sum(cur, tuple(chain.reduce.params["axes"]), _F32, chain.then)
    else:
        (option,) = plan.runs[chain.reduce]
        (out,) = lower(chain.reduce, [cur], option.mode)
    return _in_type(out, chain.out)


def _operand(u: Any, t: SpyreType | None, stick: int | None, env: dict[Any, Any]) -> Any:
    """Operand ``u`` (planned as ``t``) of a pointwise op run on the source's ``stick``."""
    if not isinstance(u, Value) or t is None or stick is None:
        return u
    x = env[u, t]
    need = stick_req(u, stick)
    if serves(t, need) and not t.layout.is_arranged:
        return x
    return sp.restickify(x, layout=default_layout(u.shape, u.dtype, need))


def _in_type(x: Any, want: SpyreType) -> Any:
    """A reduction's result ``x`` in the planned type ``want``: copied, arranged, filled.

    ``want`` is a reduction's result type: contiguous, its padding zero or undefined,
    maybe in an element arrangement (its standard order's image permuted).
    """
    std = standard_order(want, (), "reduction")
    img = sp.image(sp.in_layout(x, std.layout))
    img = masked(img, std, 0) if want.pad is PadFill.ZERO else poisoned(img, std)
    return sp.wrap(arranged_image(img, want), want)
