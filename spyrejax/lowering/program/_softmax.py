"""Softmax chains the emulator runs as one kernel (:class:`~spyrejax.primitives._softmax.Softmax`).

``jax.nn.softmax(x, axis)`` reaches the graph as ``reduce_max``, ``max`` with ``-inf``,
``broadcast_in_dim``, ``sub``, ``exp``, ``reduce_sum``, ``broadcast_in_dim`` and ``div``.
Where its probabilities go only to matmuls (attention's second product), the chain runs
as one kernel whose result's padding is zero, so the products need no select over it
(``benchmarks/README.md`` item 29). The record, the device model and the per-core mode
still see every op.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, replace

import numpy as np

from ...primitives._array import PadFill, SpyreType
from ...primitives._masks import holds_identity
from ...primitives._softmax import softmax_axes
from .._graph import Graph, Node, Scalar, Value
from .._planner import Plan

__all__ = ["SoftmaxChain", "softmax_chains"]


@dataclass(frozen=True)
class SoftmaxChain:
    """A softmax of ``x`` (read as ``t``) along ``axis``; ``skipped`` run inside it."""

    x: Value
    t: SpyreType
    axis: int
    skipped: tuple[Node, ...]


def softmax_chains(graph: Graph, plan: Plan) -> dict[Node, SoftmaxChain]:
    """Per final ``div`` node, the softmax chain it ends (see the module docstring).

    Every node of a chain has one planned run over one type ``t`` of the full-size
    values, no value in it is moved or read outside it, and the probabilities are read
    by ``dot_general`` nodes only (not moved, not an output).
    """
    readers: dict[Value, list[Node]] = collections.defaultdict(list, graph.consumers())
    outputs = {o for o in graph.outputs if isinstance(o, Value)}
    made_by = {v: n for n in graph.nodes for v in n.outs}
    finder = _Finder(plan, readers, outputs, made_by)
    chains = {}
    for node in graph.nodes:
        if node.prim == "div":
            found = finder.chain(node)
            if found is not None:
                chains[node] = found
    return chains


@dataclass(frozen=True)
class _Reduced:
    """A reduction broadcast back: its nodes in graph order, the reduction, the axis."""

    nodes: tuple[Node, ...]
    reduce: Node
    axis: int


class _Finder:
    """Walks back from a ``div`` through the nodes of a softmax (one reader each)."""

    def __init__(
        self,
        plan: Plan,
        readers: dict[Value, list[Node]],
        outputs: set[Value],
        made_by: dict[Value, Node],
    ) -> None:
        self.plan, self.readers, self.outputs, self.made_by = plan, readers, outputs, made_by

    def _maker(self, v: object, prim: str, n_readers: int = 1) -> Node | None:
        """The node of ``prim`` making ``v``, if ``v`` has ``n_readers`` and stays put."""
        if not isinstance(v, Value) or v in self.outputs or self.plan.moves.get(v):
            return None
        node = self.made_by.get(v)
        if node is None or node.prim != prim or len(self.readers[v]) != n_readers:
            return None
        return node if len(self.plan.runs.get(node, [])) == 1 else None

    def _reduced(self, v: object, prim: str, axis: int | None) -> _Reduced | None:
        """``broadcast_in_dim(reduce(x))`` making ``v``: its nodes, the reduction, the axis.

        For ``reduce_max``, a ``max(-inf, .)`` may sit in between (``jax.nn.softmax``).
        """
        bcast = self._maker(v, "broadcast_in_dim")
        if bcast is None or len(bcast.ins) != 1:
            return None
        shape, dims = bcast.params["shape"], tuple(bcast.params["broadcast_dimensions"])
        kept = [j for j in range(len(shape)) if j not in dims]
        if len(kept) != 1 or shape[kept[0]] != 1 or (axis is not None and kept[0] != axis):
            return None
        nodes, inner = [bcast], bcast.ins[0]
        floor = self._maker(inner, "max") if prim == "reduce_max" else None
        if floor is not None:
            consts = [u for u in floor.ins if isinstance(u, Scalar)]
            values = [u for u in floor.ins if isinstance(u, Value)]
            if len(consts) != 1 or len(values) != 1 or float(consts[0].value) != -np.inf:
                return None
            nodes.append(floor)
            inner = values[0]
        reduce = self._maker(inner, prim)
        if reduce is None or tuple(reduce.params["axes"]) != (kept[0],):
            return None
        nodes.append(reduce)
        return _Reduced(tuple(reversed(nodes)), reduce, kept[0])

    def chain(self, div: Node) -> SoftmaxChain | None:
        """The softmax chain ``div`` ends, if it is one the kernel may run."""
        (out,) = div.outs
        runs = self.plan.runs.get(div, [])
        if (
            len(runs) != 1
            or self.plan.moves.get(out)
            or not (self.readers[out] or out in self.outputs)
            or any(r.prim != "dot_general" for r in self.readers[out])
            or len(div.ins) != 2
        ):
            return None
        e, sb = div.ins
        exp = self._maker(e, "exp", n_readers=2)
        summed = self._reduced(sb, "reduce_sum", None)
        if exp is None or summed is None or summed.reduce.ins[0] is not e:
            return None
        if exp.params.get("accuracy") is not None:
            return None
        sub = self._maker(exp.ins[0], "sub")
        if sub is None or len(sub.ins) != 2:
            return None
        x, mb = sub.ins
        maxed = self._reduced(mb, "reduce_max", summed.axis)
        if maxed is None or not isinstance(x, Value) or maxed.reduce.ins[0] is not x:
            return None
        t = self.plan.runs[sub][0].ins[0]
        if not self._runs_fit(t, summed.axis, (maxed.reduce, sub, exp, summed.reduce, div)):
            return None
        # Unless its padding holds -inf already, the kernel selects over the whole image:
        # a pass only a mask's select before it absorbs, worth it where it spares the
        # products' select (an output is not worth it: item 32 of benchmarks/README.md).
        if out in self.outputs and not holds_identity(t, -np.inf):
            return None
        skipped = (*maxed.nodes, sub, exp, *summed.nodes)
        return SoftmaxChain(x, t, summed.axis, tuple(skipped))

    def _runs_fit(self, t: object, axis: int, nodes: tuple[Node, ...]) -> bool:
        """Whether the kernel may run ``reduce_max, sub, exp, reduce_sum, div`` as planned.

        ``x`` read as ``t`` (its padding may hold a fill), the values made inside as
        ``t`` with undefined padding.
        """
        if not isinstance(t, SpyreType) or softmax_axes(t, axis) is None:
            return False
        reduce_max, sub, exp, reduce_sum, div = (self.plan.runs[n][0] for n in nodes)
        inner = replace(t, pad=PadFill.POISON)
        ins = (reduce_max.ins[0], exp.ins[0], div.ins[0], reduce_sum.ins[0])
        outs = (sub.outs[0], exp.outs[0], div.outs[0])
        return ins == (t, inner, inner, inner) and outs == (inner, inner, inner)
