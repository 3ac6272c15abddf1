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
built on lanes (``primitives._lanes``: rotate-half at float16 head dim 64). Where a
piece straddles a stick (rotate-half's halves at 16-bit head dim 80), the pieces are
cut at every stick boundary first (:func:`_refined`), so each part is a tile window of
its value. A slice
that takes exactly one piece of a concatenate is that piece (inside one piece: a slice
of it), and a slice of a
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
import itertools
from typing import TYPE_CHECKING, Any

from ..layout._dtypes import has_spyre_format, stick_elems
from ..layout._lanes import in_one_stick
from ..primitives._stick import grouped_layout
from ._distribute_lanes import _distribute_lanes_once, _fold_lane_slice, _lanes_hold
from ._graph_edits import (
    _POINTWISE,
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
    per_stick = [_eps(v) for v in values]
    if all(o % eps == 0 for eps in per_stick for o in offsets):
        return True
    windows = min(sizes) >= 2 and all(has_spyre_format(v.dtype) for v in values)
    return windows and _within_sticks(offsets, values)


def _eps(v: Value) -> int:
    """Elements a stick of ``v``'s dtype (the device format's: a bool's stick is 64)."""
    return stick_elems(v.dtype)


def _within_sticks(offsets: list[int], values: list[Value]) -> bool:
    """Whether every piece between the offsets lies in one stick of every value's last dim.

    Then each piece of every value is a lane window (``layout._lanes.lane_window``): of
    a last dim of one stick a row, or of one stick of a longer one (a tile window).
    """
    for v in values:
        eps, bounds = _eps(v), [0, *offsets, v.shape[-1]]
        if not all(in_one_stick(a, b, eps) for a, b in itertools.pairwise(bounds)):
            return False
    return True


def _joins(others: list[Value], node: Node, dim: int, facts: Facts) -> set[int]:
    """Where the other operands that are concatenates along ``dim`` (read here alone) join.

    Cut there too, each piece of theirs is one of their pieces' slices, not a copy.
    Only along a last dim (pieces cut inside sticks: ``_refined``).
    """
    out: set[int] = set()
    for x in others:
        joined = _joined(x, node, facts.producers, facts.readers, facts.outputs)
        if dim != x.ndim - 1 or joined is None or joined[0] != dim or x.shape[dim] == 1:
            continue
        sizes = [p.shape[dim] for _, p in joined[1]]
        out |= {sum(sizes[:k]) for k in range(1, len(sizes))}
    return out


_MAX_PARTS = 8
"""The most parts :func:`_refined` cuts an op's pieces into (its cuts, the last one the
end). Rotate-half at a head dim of a partial stick needs four (f32 D 96, 16-bit D 80);
unbounded, ``concatenate([x[..., :100], y]) * 2`` over 512 fp16 lanes (eight sticks)
took 50 s to plan and 1,024 lanes did not finish in two minutes (each part a slice, an
op and a join, the rewrite repeated): past the bound the op keeps its copy."""


def _refined(
    pieces: list[Any],
    values: list[Value],
    producers: Any,
    readers: Any,
    at: Node,
    joins: set[int] = frozenset(),  # type: ignore[assignment]
) -> Any:
    """The pieces cut so each lies in one stick of every value and of its own source.

    Rotate-half at 16-bit head dim 80: ``concatenate([-x[..., 40:], x[..., :40]])`` read
    by a pointwise op over ``[..., 80]`` values; the half ``x[..., 40:80]`` straddles
    x's two sticks (lanes 40-63 and 0-15), so it is cut at x's stick boundary and the
    result's: ``-x[..., 40:64]``, ``-x[..., 64:80]``, ``x[..., :24]``, ``x[..., 24:40]``,
    each a tile window of x and of the result. The cuts are the pieces' boundaries, the
    values' stick boundaries and, inside a piece that is a slice of the last dim of some
    ``x`` (through one-operand pointwise ops read by the next alone), x's. Any other
    piece is sliced where each part lies in one of its sticks (``concatenate([cos,
    cos])``'s pieces: the slices fold into slices of ``cos``). Returns the new pieces
    ``[(nodes giving it, piece)]`` and the nodes of the sliced pieces' chains they
    redo (unread once the op is split: the caller drops them), or None: a part
    straddling a stick of another piece, or a piece of 1 element.
    """
    if any(not has_spyre_format(v.dtype) for v in values) or values[0].ndim < 1:
        return None
    length = values[0].shape[-1]
    cuts = {k * _eps(v) for v in values for k in range(1, -(-v.shape[-1] // _eps(v)))}
    cuts |= joins
    start, sources = 0, []
    for before, piece in pieces:
        found = None if before else _sliced(piece, producers, readers)
        sources.append(found)
        x, first = (piece, 0) if found is None else found[:2]  # the piece's sticks, or x's
        n, eps = piece.shape[-1], _eps(x)
        cuts |= {start + m for m in range(1, n) if (first + m) % eps == 0}
        start += piece.shape[-1]
        cuts.add(start)
    if len(cuts) > _MAX_PARTS:
        return None  # a long last dim: the op is copied once, not cut into a part a stick
    out, redone, start = [], [], 0
    for (before, piece), found in zip(pieces, sources, strict=True):
        n = piece.shape[-1]
        inner = sorted(c - start for c in cuts if start < c < start + n)
        for lo, hi in zip([0, *inner], [*inner, n], strict=True):
            if (lo, hi) == (0, n):
                out.append((before, piece))
            elif found is not None:
                out.append(_sub_piece(found, lo, hi))
                redone.extend(found[2])
            elif in_one_stick(lo, hi, _eps(piece)):
                node, v = _slice(piece, piece.ndim - 1, lo, hi - lo, f"{lo}_{hi}", at)
                out.append(([*before, node], v))
            else:
                return None
        start += n
    sizes = [p.shape[-1] for _, p in out]
    offsets = [sum(sizes[:k]) for k in range(1, len(sizes))]
    aligned = start == length and _aligned(offsets, values[0].ndim - 1, values, sizes)
    return (out, redone) if aligned else None


def _sliced(piece: Value, producers: Any, readers: Any) -> Any:
    """``(x, start, [nodes from the slice up])`` if ``piece`` is ``f(x[..., start:stop])``.

    ``f`` a chain of pointwise ops of one value operand each, every value on the way
    read by the next op alone; the slice of the last dim only, unit strides.
    """
    chain, v = [], piece
    while (p := producers.get(v)) is not None and p.prim != "slice":
        args = [x for x in p.ins if _is_value(x)]
        if p.prim not in _POINTWISE or len(p.outs) != 1 or len(args) != 1 or args[0] is v:
            return None
        if readers.get(args[0]) != [p]:
            return None
        chain.append(p)
        v = args[0]
    if p is None or p.params.get("strides") not in (None, (1,) * v.ndim):
        return None
    x, lo, hi = p.ins[0], p.params["start_indices"], p.params["limit_indices"]
    if tuple(lo[:-1]) != (0,) * (v.ndim - 1) or tuple(hi[:-1]) != x.shape[:-1]:
        return None
    return x, lo[-1], [p, *reversed(chain)]


def _sub_piece(found: Any, lo: int, hi: int) -> tuple[list[Node], Value]:
    """Elements ``[lo, hi)`` of a sliced piece: the slice narrowed, the chain redone on it."""
    x, at, (sl, *chain) = found
    tag = f"{lo}_{hi}"
    node, v = _slice(x, x.ndim - 1, at + lo, hi - lo, tag, sl)
    nodes = [node]
    for p in chain:
        (old,) = p.outs
        shape = (*old.shape[:-1], hi - lo)
        name = f"{old.name}.{tag}"
        new = dataclasses.replace(old, shape=shape, name=name, kind="node", const=None)
        ins = [v if _is_value(a) else a for a in p.ins]
        nodes.append(dataclasses.replace(p, ins=ins, outs=[new]))
        v = new
    return nodes, v


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
            values = [c, node.outs[0], *others]
            sizes = [p.shape[dim] for _, p in pieces]
            offsets = [sum(sizes[:k]) for k in range(1, len(sizes))]
            joins = _joins(others, node, dim, facts) - set(offsets)
            aligned, redone = _aligned(offsets, dim, values, sizes), []
            if joins or not aligned:
                last = dim == c.ndim - 1  # cuts inside sticks: a last dim's only
                refined = (
                    _refined(pieces, values, producers, readers, node, joins) if last else None
                )
                if refined is None and not aligned:
                    continue
                pieces, redone = refined or (pieces, [])
            graph.nodes[i : i + 1] = _split(node, arg, dim, pieces, gone[-1])
            for n in gone:
                graph.nodes.remove(n)
            _drop_unread(graph, among=redone)  # the chains cut into parts: evaluated no more
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
            found = _inner_piece(src, lo, hi)
            if found is not None and found[1] == (0,) * len(lo) and found[2] == found[0].shape:
                _forward(graph, node.outs[0], found[0])
                del graph.nodes[i]
                return True
            if found is not None:  # a part of one piece: a slice of that piece
                params = dict(node.params, start_indices=found[1], limit_indices=found[2])
                graph.nodes[i] = dataclasses.replace(node, params=params, ins=[found[0]])
                return True
        elif src.prim == "broadcast_in_dim" and _is_value(src.ins[0]) and len(src.ins) == 1:
            graph.nodes[i : i + 1] = _slice_under_broadcast(node, src, lo, hi)
            return True
    return False


def _inner_piece(cat: Node, lo: tuple[int, ...], hi: tuple[int, ...]) -> Any:
    """``(piece, lo, hi)`` of the concatenate's one piece the slice lies in, else None.

    The other dims whole; the bounds along the joined dim are the piece's own.
    """
    dim, start = cat.params["dimension"], 0
    for piece in cat.ins:
        n = piece.shape[dim]
        whole = zip(lo, hi, piece.shape, strict=True)
        if any((a, b) != (0, m) for d, (a, b, m) in enumerate(whole) if d != dim):
            return None
        if start <= lo[dim] and hi[dim] <= start + n:
            plo, phi = list(lo), list(hi)
            plo[dim], phi[dim] = lo[dim] - start, hi[dim] - start
            return piece, tuple(plo), tuple(phi)
        start += n
    return None


def _window_under_expand_once(graph: Graph, facts: Facts) -> bool:
    """``broadcast_in_dim(y[..., a:b])`` inserting size-1 dims as a window of ``y`` reshaped.

    Rotate-half's angles cut inside a stick (``cos[:, a:b][:, None]``, where ``_refined``
    cut the pieces): the slice of the reshaped ``y`` is a lane window of it (a reshape
    inserting size-1 dims is a plain array in its default layout), which a pointwise op
    reads in place; the broadcast of a lane view would be a copy.
    """
    producers, readers, outputs = facts.producers, facts.readers, facts.outputs
    for i, node in enumerate(graph.nodes):
        if node.prim != "broadcast_in_dim" or len(node.ins) != 1 or not _is_value(node.ins[0]):
            continue
        (v,) = node.ins
        sl = producers.get(v)
        if sl is None or sl.prim != "slice" or readers[v] != [node] or id(v) in outputs:
            continue
        y, out, dims = sl.ins[0], node.outs[0], tuple(node.params["broadcast_dimensions"])
        kept = [d for d in range(out.ndim) if d not in dims]
        if list(dims) != sorted(dims) or any(out.shape[d] != 1 for d in kept):
            continue
        if any(v.shape[k] != out.shape[d] for k, d in enumerate(dims)):
            continue  # the broadcast also widens a dim of size 1: not a window alone
        if (
            sl.params.get("strides") not in (None, (1,) * v.ndim)
            or not dims
            or dims[-1] != out.ndim - 1
        ):
            continue
        lo, hi = sl.params["start_indices"], sl.params["limit_indices"]
        if tuple(lo[:-1]) != (0,) * (v.ndim - 1) or tuple(hi[:-1]) != y.shape[:-1]:
            continue
        if not _window_in_stick(y, lo[-1], hi[-1]):
            continue
        shape = [1] * out.ndim
        for k, d in enumerate(dims):
            shape[d] = y.shape[k]
        ry = dataclasses.replace(y, shape=tuple(shape), name=f"{y.name}.x", kind="node", const=None)
        params = {"new_sizes": tuple(shape), "dimensions": None, "sharding": None}
        reshape = _new_node(node, "reshape", params, [y], [ry])
        hi_out = (*shape[:-1], hi[-1])
        window = {"start_indices": (0,) * (out.ndim - 1) + (lo[-1],), "limit_indices": hi_out}
        cut = _new_node(node, "slice", {**window, "strides": None}, [ry], [out])
        graph.nodes[i : i + 1] = [reshape, cut]
        graph.nodes.remove(sl)
        return True
    return False


def _window_in_stick(y: Value, a: int, b: int) -> bool:
    """Whether ``y[..., a:b]`` may be a lane window: 2 lanes or more inside one stick."""
    if not has_spyre_format(y.dtype) or (a, b) == (0, y.shape[-1]) or b - a < 2:
        return False
    return in_one_stick(a, b, _eps(y))


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
_REWRITES += (_window_under_expand_once,)
_REWRITES += (_distribute_lanes_once,)  # :func:`distribute` tries them in order, each pass
