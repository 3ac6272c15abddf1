"""Graph rewriting's common ground: who produces and reads each value, and small edits.

The rewrites of a build (``lowering._pair_sums``, ``lowering._distribute``,
``lowering._distribute_lanes``) walk a graph's producers and readers once
(:class:`Facts`), and make, forward and drop nodes with these helpers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..primitives import ELEMENTWISE

if TYPE_CHECKING:  # lowering._graph calls the rewrites: its classes for the types only
    from ._graph import Graph, Node, Value

__all__ = ["Facts"]

_POINTWISE = {p for op in ELEMENTWISE for p in op.lowers}


_PURE = {"concatenate", "broadcast_in_dim", "slice", "reshape", "expand_dims", "interleave"}


def _drop_unread(graph: Graph, facts: Facts | None = None, among: Iterable[Node] = ()) -> None:
    """Drop the concatenates, broadcasts and slices left unread (from ``facts`` too, if given).

    ``among``: other nodes a rewrite left behind (a pointwise chain it redid on parts),
    dropped too once nothing reads them.
    """
    also = {id(n) for n in among}
    while True:
        read = {id(x) for n in graph.nodes for x in n.ins} | {id(x) for x in graph.outputs}
        dead = [
            n
            for n in graph.nodes
            if (n.prim in _PURE or id(n) in also) and not any(id(v) in read for v in n.outs)
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


def _broadcasts(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    """``shape`` is ``to`` or broadcasts to it by dims of 1 (as the pointwise ops read it)."""
    return len(shape) == len(to) and all(a in (b, 1) for a, b in zip(shape, to, strict=True))


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
