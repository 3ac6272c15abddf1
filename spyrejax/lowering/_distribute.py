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
inside a stick would turn the views into copies). A slice that takes exactly one piece
of a concatenate is that piece, and a slice of a ``broadcast_in_dim`` is the broadcast of
the slice of its operand, so the operands' own concatenates (``concatenate([cos, cos])``)
fold away too.

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
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..layout._dtypes import BYTES_PER_STICK, has_spyre_format
from ..layout._lanes import lane_refusal
from ..primitives import ELEMENTWISE
from ..primitives._stick import default_layout, grouped_layout

if TYPE_CHECKING:  # lowering._graph calls this module: its classes for the types only
    from ._graph import Graph, Node, Value

__all__ = ["Facts", "distribute"]

_POINTWISE = {p for op in ELEMENTWISE for p in op.lowers}


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


_PURE = {"concatenate", "broadcast_in_dim", "slice", "reshape", "expand_dims", "interleave"}


def _drop_unread(graph: Graph, facts: Facts | None = None) -> None:
    """Drop the concatenates, broadcasts and slices left unread (from ``facts`` too, if given)."""
    while True:
        read = {id(x) for n in graph.nodes for x in n.ins} | {id(x) for x in graph.outputs}
        dead = [
            n for n in graph.nodes if n.prim in _PURE and not any(id(v) in read for v in n.outs)
        ]
        if not dead:
            return
        for n in dead:
            graph.nodes.remove(n)
        if facts is not None:
            facts.swap(dead, [])


def _is_value(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "kind")


def _producers(graph: Graph) -> dict[Value, Node]:
    return {v: n for n in graph.nodes for v in n.outs}


def _aligned(offsets: list[int], dim: int, values: list[Value]) -> bool:
    """Every piece boundary cuts whole sticks of every value (off the last dim: always)."""
    if dim != values[0].ndim - 1:
        return True
    for v in values:
        per_stick = max(BYTES_PER_STICK // v.dtype.itemsize, 1)
        if any(o % per_stick for o in offsets):
            return False
    return True


def _broadcasts(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    """``shape`` is ``to`` or broadcasts to it by dims of 1 (as the pointwise ops read it)."""
    return len(shape) == len(to) and all(a in (b, 1) for a, b in zip(shape, to, strict=True))


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


def _new_node(
    like: Node, prim: str, params: dict[str, Any], ins: list[Any], outs: list[Any]
) -> Node:
    """A node of ``prim`` at ``like``'s source line."""
    return dataclasses.replace(like, prim=prim, params=params, ins=ins, outs=outs, primitive=None)


@dataclasses.dataclass
class Facts:
    """Each value's producer and readers, and the graph's output ids: one walk.

    It serves every rewrite of a build (pair sums', then this module's) until one
    changes the graph, or :meth:`swap`s its nodes in them.
    """

    producers: dict[Value, Node]
    readers: dict[Value, list[Node]]
    outputs: set[int]

    @classmethod
    def of(cls, graph: Graph) -> Facts:
        """The facts of ``graph`` (one walk of its nodes)."""
        return cls(_producers(graph), graph.consumers(), {id(v) for v in graph.outputs})

    def swap(self, gone: list[Node], new: list[Node]) -> None:
        """The facts once ``gone`` left the graph and ``new`` joined it (outputs unchanged)."""
        for n in gone:
            for v in n.outs:
                if self.producers.get(v) is n:
                    del self.producers[v]
            for v in n.ins:
                if _is_value(v):
                    self.readers[v].remove(n)
        for n in new:
            for v in n.outs:
                self.producers[v] = n
            for v in n.ins:
                if _is_value(v):
                    self.readers.setdefault(v, []).append(n)


def _pointwise(graph: Graph) -> Iterator[tuple[int, Node]]:
    """The pointwise nodes of one result, with their positions (rewrites stop the walk)."""
    return ((i, n) for i, n in enumerate(graph.nodes) if n.prim in _POINTWISE and len(n.outs) == 1)


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
            if not _aligned(offsets, dim, [c, node.outs[0], *others]):
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


def _slice_under_broadcast(
    node: Node, bcast: Node, lo: Any, hi: Any, steps: Any = None
) -> list[Node]:
    """``slice(broadcast_in_dim(y))`` as ``broadcast_in_dim(slice(y))``."""
    (y,) = bcast.ins
    dims = bcast.params["broadcast_dimensions"]
    steps = steps or (1,) * len(lo)
    ylo = [lo[d] if y.shape[k] != 1 else 0 for k, d in enumerate(dims)]
    yhi = [hi[d] if y.shape[k] != 1 else 1 for k, d in enumerate(dims)]
    ystep = tuple(steps[d] if y.shape[k] != 1 else 1 for k, d in enumerate(dims))
    out = node.outs[0]
    bparams = dict(bcast.params, shape=out.shape)
    if ylo == [0] * y.ndim and yhi == list(y.shape) and set(ystep) <= {1}:
        # the slice cuts broadcast dims only
        return [dataclasses.replace(bcast, params=bparams, outs=[out], source=node.source)]
    shape = tuple(-(-(b - a) // t) for a, b, t in zip(ylo, yhi, ystep, strict=True))
    ys = dataclasses.replace(y, shape=shape, name=f"{out.name}.y", kind="node", const=None)
    params = {
        "start_indices": tuple(ylo),
        "limit_indices": tuple(yhi),
        "strides": None if set(ystep) <= {1} else ystep,
    }
    sl = _new_node(node, "slice", params, [y], [ys])
    return [
        sl,
        dataclasses.replace(bcast, params=bparams, ins=[ys], outs=[out], source=node.source),
    ]


def _forward(graph: Graph, old: Value, new: Value) -> None:
    """Every read of ``old`` reads ``new``."""
    for n in graph.nodes:
        n.ins = [new if x is old else x for x in n.ins]
    graph.outputs = [new if x is old else x for x in graph.outputs]


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
    """``reshape(concatenate([expand_dims(a_k)], -1), [..., s * n])`` as one ``interleave``."""
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
        if pieces is None or not _has_grouped_stick(y):
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


# --- pointwise ops over interleaved lanes (issue 26: torch's repeat_interleave RoPE) ---


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


_REWRITES = (_distribute_once, _fold_slices_once, _pairs_as_lanes_once, _interleave_once)
_REWRITES += (_distribute_lanes_once,)  # :func:`distribute` tries them in order, each pass
