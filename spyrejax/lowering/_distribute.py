"""Pointwise ops distributed over a concatenate: each piece computed in its window.

``f(concatenate([a, b]), y)`` is ``concatenate([f(a, y[:n]), f(b, y[n:])])`` for a
pointwise ``f``. Rewritten so, the concatenate joins computed pieces, each written by its
op straight into its window of the result (the in-place concatenate), and the slices of
the other operands are views; the concatenate of ``a`` and ``b`` themselves (a copy of
any piece not computed there, such as a view of an input) is gone. Rotate-half RoPE's
``x * c + concatenate([-x2, x1]) * s`` so runs with no copy on the rotation (issue 26):
the halves of ``x``, ``c`` and ``s`` are views, and each half of the result is written by
its own ops.

Rewritten only where the concatenate is read by that op alone, and where every piece
boundary along the joined dim cuts whole sticks of every value sliced (a boundary
inside a stick would turn the views into copies), or every value's last dim lies in
one stick a row: then the slices are lane windows and the result's concatenate is
built on lanes (``primitives._lanes``: rotate-half at float16 head dim 64). A slice
that takes exactly one piece of a concatenate is that piece, and a slice of a
``broadcast_in_dim`` is the broadcast of the slice of its operand, so the operands' own
concatenates (``concatenate([cos, cos])``) fold away too.

Interleaved pairs picked out of ``x.reshape(..., D // s, s)`` (``xr[..., k]``: a slice of
the last dim and a squeeze) are the strided slice ``x[..., k::s]``, which the planner
reads in place on its lanes of ``x``'s sticks (``primitives._lanes``): rewritten so.
And the way back, ``stack([a_0, ..., a_(s-1)], -1).reshape(..., s * n)`` (an
``expand_dims`` per piece, a ``concatenate`` and a ``reshape``), is one ``interleave``
node (``lowering.rules._interleave``), which the planner may build in place: each
piece written by its producer on its lanes of the result's sticks.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..layout._dtypes import BYTES_PER_STICK, has_spyre_format
from ..primitives._stick import grouped_layout
from ._distribute_lanes import _distribute_lanes_once, _fold_lane_slice, _lanes_hold
from ._graph_edits import (
    Facts,
    _broadcasts,
    _drop_unread,
    _forward,
    _is_value,
    _new_node,
    _pointwise,
    _slice_under_broadcast,
)

if TYPE_CHECKING:  # lowering._graph calls this module: its classes for the types only
    from ._graph import Graph, Node, Value

__all__ = ["Facts", "distribute"]


def distribute(graph: Graph, facts: Facts | None = None) -> Graph:
    """Rewrite ``graph`` in place until no rewrite applies; return it.

    ``facts``: the graph's :class:`Facts`, if walked already (re-walked after a rewrite).
    """
    changed = False
    facts = Facts.of(graph) if facts is None else facts
    while any(rewrite(graph, facts) for rewrite in _REWRITES):
        changed = True
        facts = Facts.of(graph)
    if changed:
        _drop_unread(graph)
    return graph


def _aligned(offsets: list[int], dim: int, values: list[Value], sizes: list[int]) -> bool:
    """Every piece boundary cuts whole sticks of every value (off the last dim: always).

    Or the pieces are lane windows (``layout._lanes.lane_window``): every value's last
    dim lies in one stick a row and every piece is 2 lanes or more. The halves on lanes
    are padded to a stick (twice their data), which the planner charges at LX traffic
    where a chain of kernels makes and reads them (``_traffic.chained``): rotate-half
    then plans on lanes at any other dims (docs/layouts.md, benchmarks/README.md item 54).
    """
    if dim != values[0].ndim - 1:
        return True
    per_stick = [max(BYTES_PER_STICK // v.dtype.itemsize, 1) for v in values]
    if all(o % eps == 0 for eps in per_stick for o in offsets):
        return True
    one_stick = all(v.shape[-1] <= eps for v, eps in zip(values, per_stick, strict=True))
    return one_stick and min(sizes) >= 2 and all(has_spyre_format(v.dtype) for v in values)


def _slice(y: Value, dim: int, start: int, size: int, tag: str, node: Node) -> tuple[Node, Value]:
    """A slice node of ``y`` along ``dim`` and the value it gives."""
    lo = [0] * y.ndim
    hi = list(y.shape)
    lo[dim], hi[dim] = start, start + size
    shape = tuple(b - a for a, b in zip(lo, hi, strict=True))
    out = dataclasses.replace(y, shape=shape, name=f"{y.name}.{tag}", kind="node", const=None)
    out.origin = f"slice (distributed) at {node.source}"
    params = {"start_indices": tuple(lo), "limit_indices": tuple(hi), "strides": None}
    return _new_node(node, "slice", params, [y], [out]), out


def _distribute_once(graph: Graph, facts: Facts) -> bool:
    """One pointwise op over a concatenate read by it alone, split by the pieces."""
    producers, readers, outputs = facts.producers, facts.readers, facts.outputs
    for i, node in _pointwise(graph):
        for arg, c in enumerate(node.ins):
            if not _is_value(c) or id(c) in outputs or sum(x is c for x in node.ins) != 1:
                continue
            joined = _joined(c, node, producers, readers, outputs)
            if joined is None:
                continue
            dim, pieces, gone = joined
            others = [x for x in node.ins if _is_value(x) and x is not c and x.shape[dim] != 1]
            if any(not _broadcasts(x.shape, node.outs[0].shape) for x in node.ins if _is_value(x)):
                continue
            sizes = [p.shape[dim] for _, p in pieces]
            offsets = [sum(sizes[:k]) for k in range(1, len(sizes))]
            if not _aligned(offsets, dim, [c, node.outs[0], *others], sizes):
                continue
            graph.nodes[i : i + 1] = _split(node, arg, dim, pieces, gone[-1])
            for n in gone:
                graph.nodes.remove(n)
            return True
    return False


def _joined(c: Value, node: Node, producers: Any, readers: Any, outputs: set[int]) -> Any:
    """``c`` as pieces along a dim: a concatenate's, or (broadcast) one's broadcast.

    Returns ``(dim, [(nodes giving the piece, piece)], nodes the rewrite removes)`` or
    None: each value on the way is read by the next node alone.
    """
    src = producers.get(c)
    if src is None or readers[c] != [node]:
        return None
    if src.prim == "concatenate":
        return src.params["dimension"], [([], p) for p in src.ins], [src]
    if src.prim != "broadcast_in_dim" or len(src.ins) != 1 or not _is_value(src.ins[0]):
        return None
    (v,) = src.ins
    cat = producers.get(v)
    if cat is None or cat.prim != "concatenate" or readers[v] != [src] or id(v) in outputs:
        return None
    dims = src.params["broadcast_dimensions"]
    dim = dims[cat.params["dimension"]]
    pieces = []
    for k, p in enumerate(cat.ins):
        shape = tuple(
            p.shape[cat.params["dimension"]] if d == dim else n for d, n in enumerate(c.shape)
        )
        pc = dataclasses.replace(c, shape=shape, name=f"{c.name}.{k}")
        params = dict(src.params, shape=shape)
        pieces.append(([dataclasses.replace(src, params=params, ins=[p], outs=[pc])], pc))
    return dim, pieces, [src, cat]


def _split(node: Node, arg: int, dim: int, pieces: list[Any], cat: Node) -> list[Node]:
    """``node`` computed piece by piece, its result their in-place concatenate."""
    out, start = node.outs[0], 0
    new, results = [], []
    for k, (before, piece) in enumerate(pieces):
        size = piece.shape[dim]
        new.extend(before)
        ins = []
        for j, x in enumerate(node.ins):
            if j == arg:
                ins.append(piece)
            elif _is_value(x) and x.shape[dim] != 1:
                sl, v = _slice(x, dim, start, size, f"{out.name}.{k}.{j}", node)
                new.append(sl)
                ins.append(v)
            else:
                ins.append(x)
        shape = tuple(size if d == dim else n for d, n in enumerate(out.shape))
        res = dataclasses.replace(out, shape=shape, name=f"{out.name}.{k}")
        new.append(dataclasses.replace(node, ins=ins, outs=[res]))
        results.append(res)
        start += size
    params = {"dimension": dim}
    new.append(dataclasses.replace(cat, params=params, ins=results, outs=[out], source=node.source))
    return new


def _fold_slices_once(graph: Graph, facts: Facts) -> bool:
    """A slice of one whole piece of a concatenate, or of a broadcast, moved to its operand.

    Likewise a slice of lanes ``k::s`` of an interleave (or a repeat) is its piece ``k``.
    """
    producers = facts.producers
    for i, node in enumerate(graph.nodes):
        if node.prim == "slice" and _fold_lane_slice(graph, i, node, facts):
            return True
        if node.prim != "slice" or node.params.get("strides") not in (
            None,
            (1,) * node.ins[0].ndim,
        ):
            continue
        src = producers.get(node.ins[0])
        if src is None:
            continue
        lo, hi = node.params["start_indices"], node.params["limit_indices"]
        if src.prim == "concatenate":
            piece = _whole_piece(src, lo, hi)
            if piece is not None:
                _forward(graph, node.outs[0], piece)
                del graph.nodes[i]
                return True
        elif src.prim == "broadcast_in_dim" and _is_value(src.ins[0]) and len(src.ins) == 1:
            graph.nodes[i : i + 1] = _slice_under_broadcast(node, src, lo, hi)
            return True
    return False


def _whole_piece(cat: Node, lo: tuple[int, ...], hi: tuple[int, ...]) -> Value | None:
    dim, start = cat.params["dimension"], 0
    for piece in cat.ins:
        n = piece.shape[dim]
        want = [(0, s) for s in piece.shape]
        want[dim] = (start, start + n)
        if list(zip(lo, hi, strict=True)) == want:
            return piece
        start += n
    return None


def _pairs_as_lanes_once(graph: Graph, facts: Facts) -> bool:
    """``squeeze(slice(reshape(x, [..., D // s, s]))[..., k:k+1])`` as ``x[..., k::s]``."""
    producers, readers, outputs = facts.producers, facts.readers, facts.outputs
    for i, node in enumerate(graph.nodes):
        if node.prim != "squeeze" or not _is_value(node.ins[0]):
            continue
        (c,) = node.ins
        sl = producers.get(c)
        if sl is None or sl.prim != "slice" or readers[c] != [node] or id(c) in outputs:
            continue
        found = _pair_pick(sl, producers, tuple(node.params["dimensions"]))
        if found is None:
            continue
        x, k, step = found
        params = {
            "start_indices": (0,) * (x.ndim - 1) + (k,),
            "limit_indices": x.shape,
            "strides": (1,) * (x.ndim - 1) + (step,),
        }
        graph.nodes[i] = _new_node(node, "slice", params, [x], node.outs)
        graph.nodes.remove(sl)
        return True
    return False


def _pair_pick(sl: Node, producers: Any, squeezed: tuple[int, ...]) -> Any:
    """``(x, k, s)`` if ``sl`` takes index ``k`` of the pairs of ``x.reshape(..., D // s, s)``."""
    b = sl.ins[0]
    rs = producers.get(b) if _is_value(b) else None
    if rs is None or rs.prim != "reshape" or rs.params.get("dimensions") is not None:
        return None
    x = rs.ins[0]
    if not _is_value(x) or x.ndim + 1 != b.ndim or squeezed != (b.ndim - 1,):
        return None
    step = b.shape[-1]
    if step < 2 or b.shape[:-2] != x.shape[:-1] or b.shape[-2] * step != x.shape[-1]:
        return None
    strides = sl.params.get("strides")
    if strides not in (None, (1,) * b.ndim):
        return None
    lo, hi = sl.params["start_indices"], sl.params["limit_indices"]
    k = lo[-1]
    if tuple(lo[:-1]) != (0,) * (b.ndim - 1) or tuple(hi) != (*b.shape[:-1], k + 1):
        return None
    return x, k, step


def _interleave_once(graph: Graph, facts: Facts) -> bool:
    """``reshape(concatenate([expand_dims(a_k)], -1), [..., s * n])`` as one ``interleave``.

    Where the stacked pairs have a grouped stick (their copy is then one view away
    from the result) or the result's sticks take the pieces on lanes ``k::s`` (built
    in place: a head dim of a partial last stick, D 80 or 96 in 16 bits).
    """
    producers, readers, outputs = facts.producers, facts.readers, facts.outputs
    for i, node in enumerate(graph.nodes):
        if node.prim != "reshape" or node.params.get("dimensions") is not None:
            continue
        cat = producers.get(node.ins[0]) if _is_value(node.ins[0]) else None
        if cat is None or cat.prim != "concatenate" or len(cat.ins) < 2:
            continue
        y, out = cat.outs[0], node.outs[0]
        if readers[y] != [node] or id(y) in outputs or cat.params["dimension"] != y.ndim - 1:
            continue
        if y.ndim < 2 or out.shape != (*y.shape[:-2], y.shape[-2] * y.shape[-1]):
            continue
        pieces = _expanded_pieces(cat, producers, readers, outputs)
        if pieces is None or not (_has_grouped_stick(y) or _lanes_hold(out, len(pieces))):
            continue
        graph.nodes[i] = _new_node(node, "interleave", {}, [a for a, _ in pieces], [out])
        for n in [cat, *(e for _, e in pieces)]:
            graph.nodes.remove(n)
        return True
    return False


def _expanded_pieces(cat: Node, producers: Any, readers: Any, outputs: set[int]) -> Any:
    """``[(a_k, its expand_dims node)]`` if each piece of ``cat`` is ``a_k`` with a last 1."""
    out = []
    for p in cat.ins:
        e = producers.get(p) if _is_value(p) else None
        if e is None or e.prim != "expand_dims" or readers[p] != [cat] or id(p) in outputs:
            return None
        (a,) = e.ins
        if not _is_value(a) or tuple(e.params["dimensions"]) != (a.ndim,) or a.ndim < 1:
            return None
        out.append((a, e))
    return out


def _has_grouped_stick(y: Value) -> bool:
    """Whether the stacked pairs have a Spyre format and a stick over their trailing dims."""
    return has_spyre_format(y.dtype) and grouped_layout(y.shape, y.dtype) is not None


_REWRITES = (_distribute_once, _fold_slices_once, _pairs_as_lanes_once, _interleave_once)
_REWRITES += (_distribute_lanes_once,)  # :func:`distribute` tries them in order, each pass
