"""The planner's options of a node, searched once per signature (issue 24).

A model's repeated layers give the planner nodes that differ only in their values: the
same primitive and parameters, inputs available in the same types at costs that differ
by one constant per input. Their best options are the same, so the planner searches
the first and reuses its options for the others, each total summed from the node's own
input costs as the search sums them (byte counts held exactly in floats).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..primitives._array import SpyreType
from ._graph import Node, Scalar, Value
from ._node_key import NodeKey
from ._registry import Mode

__all__ = ["option_total", "options_key"]


def options_key(
    node: Node,
    base: NodeKey | None,
    modes: Sequence[Mode],
    avail: Mapping[Value, Mapping[SpyreType, float]],
) -> Any:
    """What a node's options depend on, or None (not cached).

    Its primitive and parameters (``base``, its :func:`node_key`), and per input the
    types it is available in (``avail``), in order, with their costs less the cheapest
    one's: every total of the node then differs by the same sum. Modes that take
    windows or clobber an input depend on the rest of the graph: not cached.
    """
    if base is None or any(m.takes is not None or m.clobbers is not None for m in modes):
        return None
    ins: list[Any] = []
    for u in node.ins:
        if isinstance(u, Scalar):
            ins.append(None)
            continue
        have = avail[u]
        least = min(have.values())
        ins.append(tuple((t, t.vma, c - least) for t, c in have.items()))
    return (base, tuple(ins))


def option_total(
    node: Node, ins: Sequence[SpyreType | None], traffic: float, avail: Mapping[Value, Any]
) -> float:
    """An option's total for ``node``: its inputs' costs in ``ins``, then its traffic."""
    pairs = zip(node.ins, ins, strict=True)
    return sum(0.0 if t is None else avail[u][t] for u, t in pairs) + traffic
