"""Where intermediate bfloat16 values are rounded: one rule, as ``jax.jit`` rounds them.

A 16-bit value is rounded wherever the jaxpr gives it its 16-bit dtype (sums accumulate
in float32 and round once), with XLA's one exception under ``jax.jit``: a bfloat16
elementwise op whose result is converted straight back to float32 (through views) is
computed in float32 and not rounded (excess precision; float16 has none). Applied on the
graph (``lowering._graph`` calls it last in a build), it holds at every element whatever
the kernels' fusions (padding masks, the poison-padding selects would otherwise decide):
the op runs once, in float32, on operands widened exactly; its other consumers read its
rounding, as under ``jax.jit``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
import numpy as np

from ..primitives import ELEMENTWISE
from ._graph_edits import _is_value

if TYPE_CHECKING:  # lowering._graph calls this module: its classes for the types only
    from ._graph import Graph, Node, Value

__all__ = ["keep_excess_precision"]

_BF16 = np.dtype(jnp.bfloat16)
_F32 = np.dtype(np.float32)
# Elementwise ops whose result is a rounding (max, min, neg, select... are exact).
_EXACT = {"max", "min", "neg", "abs", "sign", "floor", "ceil", "round", "clamp", "rem", "nextafter"}
_ROUNDED = {p for op in ELEMENTWISE for p in op.lowers if op.result == "same"} - _EXACT
_VIEWS = {"reshape", "squeeze", "expand_dims", "transpose", "broadcast_in_dim"}


def keep_excess_precision(graph: Graph) -> Graph:
    """Rewrite, in place, each float32 conversion of a just-computed bfloat16 result.

    The float32 op runs where the bfloat16 op ran, and the bfloat16 result its other
    consumers read is its rounding (as XLA computes it: ``add`` in float32, rounded
    once), so the op's operands are read once. The bfloat16 views it bypassed, and the
    rounding, go where nothing reads them.
    """
    producer = {v: n for n in graph.nodes for v in n.outs}
    chains = {id(n): c for n in graph.nodes if (c := _chain(n, producer))}
    early: dict[int, Node] = {}  # by the bfloat16 op's id: the conversion run in its place
    for node in graph.nodes:
        if id(node) in chains:
            early.setdefault(id(chains[id(node)][0]), node)
    nodes: list[Node] = []
    bypassed: set[Node] = set()
    for node in graph.nodes:
        convert = early.get(id(node))
        chain = chains.get(id(node))
        if convert is not None:  # the bfloat16 op: in float32, then rounded
            wide = _in_float32(convert, chains[id(convert)])
            rounded = _rounded(convert, wide[len(wide) - len(chains[id(convert)])], node)
            nodes.extend([*wide, rounded])
            bypassed.add(rounded)
        elif chain and early[id(chain[0])] is node:
            bypassed.update(chain)  # computed at the op's place
        else:
            nodes.extend(_in_float32(node, chain) if chain else [node])
            bypassed.update(chain or ())
    while bypassed:
        read = {v for n in nodes for v in n.ins} | set(graph.outputs)
        dead = {n for n in bypassed if not any(v in read for v in n.outs)}
        if not dead:
            break
        nodes = [n for n in nodes if n not in dead]
        bypassed -= dead
    graph.nodes = nodes
    return graph


def _chain(node: Node, producer: dict[Value, Node]) -> list[Node]:
    """The op and the views between it and ``node``, a float32 conversion, or ``[]``."""
    if node.prim != "convert_element_type" or np.dtype(node.params["new_dtype"]) != _F32:
        return []
    chain: list[Node] = []
    v = node.ins[0]
    while _is_value(v) and v.dtype == _BF16 and v in producer:
        p = producer[v]
        if len(p.outs) != 1:
            return []
        chain.insert(0, p)
        if p.prim in _ROUNDED:
            return chain
        if p.prim not in _VIEWS:
            return []
        v = p.ins[0]
    return []


def _in_float32(convert: Node, chain: list[Node]) -> list[Node]:
    """``convert``'s value computed as ``chain`` in float32 (operands widened exactly)."""
    op, views = chain[0], chain[1:]
    out: list[Node] = []
    ins: list[Any] = []  # values and scalars
    for a in op.ins:
        if not _is_value(a) and a.dtype == _BF16:  # a scalar
            ins.append(dataclasses.replace(a, value=np.float32(a.value), dtype=_F32))
        elif _is_value(a) and a.dtype == _BF16:
            wide = _value(a, a.shape, f"{a.name}_f32")
            params = {**convert.params, "new_dtype": _F32}
            out.append(_node(convert, "convert_element_type", params, [a], [wide], op.source))
            ins.append(wide)
        else:
            ins.append(a)
    last = views[-1] if views else op
    steps = [(op, ins)] + [(v, None) for v in views]
    prev: Value | None = None
    for n, n_ins in steps:
        res = (
            convert.outs[0]
            if n is last
            else _value(n.outs[0], n.outs[0].shape, n.outs[0].name + "_f32")
        )
        out.append(_node(n, n.prim, dict(n.params), n_ins if n_ins is not None else [prev], [res]))
        prev = res
    return out


def _rounded(convert: Node, wide: Node, op: Node) -> Node:
    """``op``'s bfloat16 result as the rounding of ``wide``, its float32 computation."""
    params = {**convert.params, "new_dtype": _BF16}
    return _node(convert, "convert_element_type", params, [wide.outs[0]], [op.outs[0]], op.source)


def _node(
    like: Node,
    prim: str,
    params: dict[str, Any],
    ins: list[Any],
    outs: list[Value],
    source: str | None = None,
) -> Node:
    """A node of ``prim`` with ``like``'s primitive object (and source line, unless given)."""
    source = like.source if source is None else source
    return dataclasses.replace(like, prim=prim, params=params, ins=ins, outs=outs, source=source)


def _value(like: Value, shape: tuple[int, ...], name: str) -> Value:
    return dataclasses.replace(like, shape=shape, dtype=_F32, name=name, kind="node", const=None)
