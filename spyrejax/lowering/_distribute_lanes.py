"""Pointwise ops over interleaved lanes, and lane slices of interleaves, rewritten (issue 26).

torch's ``repeat_interleave`` RoPE: a pointwise op reading an interleave whose pieces
are not all fresh results, or a ``jnp.repeat(y, s, -1)``, runs once per lane set
(:func:`_distribute_lanes_once`), and a lane slice ``x[..., k::s]`` of an interleave or
a repeat is its piece (:func:`_fold_lane_slice`). Part of ``lowering._distribute``'s
rewrites.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..layout._dtypes import has_spyre_format
from ..layout._lanes import lane_refusal
from ..primitives._stick import default_layout
from ._graph_edits import (
    _POINTWISE,
    Facts,
    _broadcasts,
    _forward,
    _is_value,
    _new_node,
    _pointwise,
    _slice_under_broadcast,
)

if TYPE_CHECKING:  # lowering._graph calls the rewrites: its classes for the types only
    from ._graph import Graph, Node, Value

__all__: list[str] = []


def _lane_slice(node: Node) -> tuple[int, int] | None:
    """``(k, s)`` if the slice ``node`` is ``x[..., k::s]`` (s > 1), else None."""
    x = node.ins[0]
    strides = node.params.get("strides")
    if not _is_value(x) or not strides or strides[-1] < 2 or set(strides[:-1]) - {1}:
        return None
    lo, hi = node.params["start_indices"], node.params["limit_indices"]
    k, s = lo[-1], strides[-1]
    whole = tuple(lo[:-1]) == (0,) * (x.ndim - 1) and tuple(hi) == x.shape
    return (k, s) if whole and k < s and x.shape[-1] % s == 0 else None


def _repeated(v: Value, producers: Any, readers: Any) -> tuple[Value, int, Node, Node] | None:
    """``(y, s, reshape, broadcast)`` if ``v`` is ``jnp.repeat(y, s, axis=-1)``."""
    rs = producers.get(v)
    if rs is None or rs.prim != "reshape" or rs.params.get("dimensions") is not None:
        return None
    b = rs.ins[0]
    bc = producers.get(b) if _is_value(b) else None
    if bc is None or bc.prim != "broadcast_in_dim" or len(bc.ins) != 1 or readers[b] != [rs]:
        return None
    (y,) = bc.ins
    if not _is_value(y) or y.ndim < 1 or b.ndim != y.ndim + 1 or b.shape[:-1] != y.shape:
        return None
    s = b.shape[-1]
    if tuple(bc.params["broadcast_dimensions"]) != tuple(range(y.ndim)) or s < 2:
        return None
    if v.shape != (*y.shape[:-1], y.shape[-1] * s):
        return None
    return y, s, rs, bc


def _lane_sources(v: Value, producers: Any, readers: Any) -> tuple[list[Value], list[Node]] | None:
    """The pieces of ``v`` on lanes ``k::s`` and the nodes giving ``v`` from them, or None."""
    src = producers.get(v)
    if src is not None and src.prim == "interleave":
        return list(src.ins), [src]
    rep = _repeated(v, producers, readers)
    if rep is None:
        return None
    y, s, rs, bc = rep
    return [y] * s, [rs, bc]


def _fold_lane_slice(graph: Graph, i: int, node: Node, facts: Facts) -> bool:
    """``x[..., k::s]`` of an interleave or repeat as its piece, of a broadcast beneath it."""
    lane = _lane_slice(node)
    if lane is None:
        return False
    k, s = lane
    x = node.ins[0]
    producers = facts.producers
    found = _lane_sources(x, producers, facts.readers)
    if found is not None and len(found[0]) == s:
        _forward(graph, node.outs[0], found[0][k])
        del graph.nodes[i]
        return True
    src = producers.get(x)
    if src is None or src.prim != "broadcast_in_dim" or len(src.ins) != 1:
        return False
    if not _is_value(src.ins[0]) or src.params["broadcast_dimensions"][-1:] != (x.ndim - 1,):
        return False
    lo, hi = node.params["start_indices"], node.params["limit_indices"]
    graph.nodes[i : i + 1] = _slice_under_broadcast(node, src, lo, hi, node.params["strides"])
    return True


def _distribute_lanes_once(graph: Graph, facts: Facts) -> bool:
    """One pointwise op over interleaved lanes it would otherwise copy, run lane by lane.

    ``f(interleave(a_0, ..., a_(s-1)), y)`` is ``interleave(f(a_k, y[..., k::s]))``: where
    a piece of the interleave is no fresh result (a view such as ``xr[..., 0]``, which
    no producer writes on the other lanes), or the operand is a ``jnp.repeat(y, s,
    -1)`` (torch's ``repeat_interleave``: ``y`` on every lane), the op runs once per
    lane set, each result written on its lanes (the in-place interleave), the other
    operands read on their lanes (lane views, or the pieces of their own interleave).
    """
    producers, readers, outputs = facts.producers, facts.readers, facts.outputs
    for i, node in _pointwise(graph):
        out = node.outs[0]
        if any(_is_value(x) and not _broadcasts(x.shape, out.shape) for x in node.ins):
            continue
        for arg, c in enumerate(node.ins):
            found = _lanes_to_split(c, node, producers, readers, outputs)
            if found is None or not _lanes_hold(out, len(found[0])):
                continue
            pieces, gone = found
            graph.nodes[i : i + 1] = _split_lanes(node, arg, pieces)
            for n in gone:
                graph.nodes.remove(n)
            return True
    return False


def _lanes_to_split(c: Any, node: Node, producers: Any, readers: Any, outputs: set[int]) -> Any:
    """``([(nodes giving the piece, piece)], nodes removed)`` for a split of ``node`` by ``c``."""
    if not _is_value(c) or id(c) in outputs or readers[c] != [node] or c.ndim < 1:
        return None
    if sum(x is c for x in node.ins) != 1 or c.shape[-1] != node.outs[0].shape[-1]:
        return None
    src = producers.get(c)
    outer: list[Node] = []
    v = c
    if src is not None and src.prim == "broadcast_in_dim" and len(src.ins) == 1:
        v = src.ins[0]
        dims = src.params["broadcast_dimensions"]
        ok = _is_value(v) and v.ndim >= 1 and dims[-1:] == (c.ndim - 1,)
        if not ok or v.shape[-1] != c.shape[-1] or readers[v] != [src] or id(v) in outputs:
            return None
        outer = [src]
    found = _lane_sources(v, producers, readers)
    if found is None:
        return None
    pieces, gone = found
    if gone[0].prim == "interleave" and all(_fresh(p, producers) for p in pieces):
        return None  # every piece is written on its lanes by its producer already
    if not outer:
        return [([], p) for p in pieces], gone
    (bc,) = outer
    split = []
    for k, p in enumerate(pieces):
        shape = (*c.shape[:-1], p.shape[-1])
        pc = dataclasses.replace(c, shape=shape, name=f"{c.name}.{k}")
        params = dict(bc.params, shape=shape)
        split.append(([dataclasses.replace(bc, params=params, ins=[p], outs=[pc])], pc))
    return split, [bc, *gone]


def _fresh(v: Any, producers: Any) -> bool:
    """Whether ``v`` is the result of a pointwise op (which can write it on lanes)."""
    src = producers.get(v) if _is_value(v) else None
    return src is not None and src.prim in _POINTWISE


def _lanes_hold(out: Value, s: int) -> bool:
    """Whether ``out``'s default layout takes pieces on lanes ``k::s`` (the in-place build)."""
    if not has_spyre_format(out.dtype) or out.shape[-1] % s:
        return False
    piece = (*out.shape[:-1], out.shape[-1] // s)
    dest = default_layout(out.shape, out.dtype, out.ndim - 1)
    return lane_refusal(dest, s, piece) is None


def _split_lanes(node: Node, arg: int, pieces: list[Any]) -> list[Node]:
    """``node`` computed lane set by lane set, its result their interleave."""
    out, s = node.outs[0], len(pieces)
    new, results = [], []
    for k, (before, piece) in enumerate(pieces):
        new.extend(before)
        ins = []
        for j, x in enumerate(node.ins):
            if j == arg:
                ins.append(piece)
            elif _is_value(x) and x.shape[-1] != 1:
                sl, v = _strided(x, k, s, f"{out.name}.{k}.{j}", node)
                new.append(sl)
                ins.append(v)
            else:
                ins.append(x)
        shape = (*out.shape[:-1], out.shape[-1] // s)
        res = dataclasses.replace(out, shape=shape, name=f"{out.name}.{k}")
        new.append(dataclasses.replace(node, ins=ins, outs=[res]))
        results.append(res)
    new.append(_new_node(node, "interleave", {}, results, [out]))
    return new


def _strided(y: Value, k: int, s: int, tag: str, node: Node) -> tuple[Node, Value]:
    """A slice node ``y[..., k::s]`` and the value it gives."""
    shape = (*y.shape[:-1], y.shape[-1] // s)
    out = dataclasses.replace(y, shape=shape, name=f"{y.name}.{tag}", kind="node", const=None)
    out.origin = f"slice (lanes) at {node.source}"
    params = {
        "start_indices": (0,) * (y.ndim - 1) + (k,),
        "limit_indices": y.shape,
        "strides": (1,) * (y.ndim - 1) + (s,),
    }
    return _new_node(node, "slice", params, [y], [out]), out
