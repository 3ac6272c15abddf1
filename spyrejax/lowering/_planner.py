"""The layout planner: a stick for every value at the least total restickify cost.

Each node has modes (see ``_rules``): the stick every input needs and the stick its
output gets. A value not in a needed stick is restickified, costing
``prod(device_size)`` of its layout (spec section 7). The planner searches globally:

1. Forward dynamic programming in topological order: ``avail[v][s]`` is the least
   cost to have ``v`` in stick ``s`` (producing it in some stick, then restickifying
   if that is cheaper), over all modes of its producer and its inputs' best sticks.
   This is exact on trees, such as the spec's cases.
2. Backward reconstruction: from the outputs, every value's consumers *demand* sticks;
   its producer's stick and mode are chosen to minimise its own cost plus one
   restickify per distinct demanded stick it cannot serve, so shared values are
   restickified once per target, not once per consumer.

3. Row-major products: a batched product whose layout reaches no reshape is laid out
   ``SpyreTensorLayout.row_major`` (same stick, same size: no cost changes), the order
   its ``dot_general`` computes it in.

All passes are linear in the graph's size (times the few sticks per value).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, replace

from .._errors import SpyreUnsupportedError
from ._graph import Graph, Node, Scalar, Value
from ._rules import SPARSE, Mode, layout_for, rule_for, stick_options

__all__ = ["Plan", "accepts", "move_cost", "plan_graph"]

INF = float("inf")


def move_cost(v: Value, stick: int) -> int:
    """Elements a restickify of ``v`` from ``stick`` moves: its device size."""
    return math.prod(layout_for(v.shape, v.dtype, stick).device_size)


def accepts(v: Value, stick: int, required: int | None) -> bool:
    """Whether ``v`` in ``stick`` serves a consumer that needs ``required``.

    A sparse broadcast view serves any stick along which it is broadcast.
    """
    return required is None or stick == required or (stick == SPARSE and required in v.bcast)


@dataclass
class Plan:
    """The planner's decisions.

    Attributes:
        modes: the mode of every live node.
        sticks: the stick every live value is produced in.
        conversions: the sticks each value is restickified to, for its consumers.
        cost: planned elements moved by restickifies and copying reshapes.
    """

    modes: dict[Node, Mode] = field(default_factory=dict)
    sticks: dict[Value, int] = field(default_factory=dict)
    conversions: dict[Value, set[int]] = field(default_factory=dict)
    cost: int = 0


def plan_graph(graph: Graph, input_sticks: dict[Value, int]) -> Plan:
    """Plan sticks for a graph whose inputs arrive in ``input_sticks``.

    Raises:
        SpyreUnsupportedError: for a primitive with no lowering rule (naming its line).
    """
    produced: dict[Value, dict[int, float]] = {}
    best_mode: dict[Node, dict[int, Mode]] = {}
    avail: dict[Value, dict[int, float]] = {}

    for v in graph.inputs:
        produced[v] = {input_sticks[v]: 0}
    for c in graph.consts:
        produced[c] = dict.fromkeys(stick_options(c.shape), 0)
    for v in [*graph.inputs, *graph.consts]:
        avail[v] = _closure(v, produced[v])

    for node in graph.nodes:
        if len(node.outs) != 1:
            raise SpyreUnsupportedError(f"{node.describe()}: nodes with several outputs")
        out = node.outs[0]
        prod: dict[int, float] = {}
        modes: dict[int, Mode] = {}
        for m in rule_for(node).modes(node):
            cost = m.cost + sum(_in_cost(avail, u, r) for u, r in zip(node.ins, m.ins, strict=True))
            if cost < prod.get(m.out, INF):
                prod[m.out], modes[m.out] = cost, m
        produced[out], best_mode[node] = prod, modes
        avail[out] = _closure(out, prod)

    plan = _reconstruct(graph, produced, best_mode, input_sticks)
    _row_major_products(graph, plan)
    return plan


def _row_major_products(graph: Graph, plan: Plan) -> None:
    """Lay out products row-major where that saves a copy and changes no planned cost.

    A batched ``dot_general`` computes ``[batch..., m, n]``; its default layout
    interleaves the batches inside each tile, so producing it is a transposing copy
    of the whole product, and a second batched product reading it copies it back.
    ``SpyreTensorLayout.row_major`` is stuck on the same dim with the same size, so
    every planned stick and restickify cost stays exact. Only a reshape's cost depends
    on more than the stick (whether it is a view), and it was planned on default
    layouts: a product whose layout can reach a reshape, through nodes whose output
    follows an input's layout, keeps the default layout.
    """
    consumers = graph.consumers()
    for node, mode in list(plan.modes.items()):
        if rule_for(node).row_major_helps(node) and not _reaches_reshape(
            node.outs[0], consumers, plan
        ):
            plan.modes[node] = replace(mode, row_major=True)


def _reaches_reshape(v: Value, consumers: dict[Value, list[Node]], plan: Plan) -> bool:
    """Whether ``v``'s layout can reach a node that needs default layouts."""
    todo, seen = [v], {v}
    while todo:
        for node in consumers.get(todo.pop(), []):
            if node not in plan.modes:
                continue  # dead
            rule = rule_for(node)
            if rule.needs_default_layout:
                return True
            out = node.outs[0]
            if rule.inherits_layout and out not in seen:
                seen.add(out)
                todo.append(out)
    return False


def _closure(v: Value, prod: dict[int, float]) -> dict[int, float]:
    """Cheapest way to have ``v`` in every stick: produced there, or restickified."""
    if not prod:
        return {}
    base = min(cost + move_cost(v, p) for p, cost in prod.items())
    sticks = set(stick_options(v.shape)) | set(prod)
    return {s: min(prod.get(s, INF), base) for s in sticks}


def _in_cost(avail: dict[Value, dict[int, float]], u: Value | Scalar, r: int | None) -> float:
    if isinstance(u, Scalar):
        return 0
    options = [cost for s, cost in avail[u].items() if accepts(u, s, r)]
    return min(options, default=INF)


def _reconstruct(
    graph: Graph,
    produced: dict[Value, dict[int, float]],
    best_mode: dict[Node, dict[int, Mode]],
    input_sticks: dict[Value, int],
) -> Plan:
    plan = Plan()
    demands: dict[Value, set[int | None]] = defaultdict(set)
    for out in graph.outputs:
        if isinstance(out, Value):
            demands[out].add(None)
    for node in reversed(graph.nodes):
        v = node.outs[0]
        if not demands.get(v):
            continue  # dead: nothing reads it
        stick = _choose(v, produced[v], demands[v])
        mode = best_mode[node][stick]
        plan.modes[node] = mode
        _settle(plan, v, stick, demands[v])
        plan.cost += mode.cost
        for u, r in zip(node.ins, mode.ins, strict=True):
            if isinstance(u, Value):
                demands[u].add(r)
    for v in graph.inputs:
        _settle(plan, v, input_sticks[v], demands.get(v, set()))
    for c in graph.consts:
        if demands.get(c):
            _settle(plan, c, _choose(c, produced[c], demands[c]), demands[c])
    return plan


def _choose(v: Value, prod: dict[int, float], wanted: set[int | None]) -> int:
    """The stick to produce ``v`` in: own cost plus one restickify per unserved demand."""

    def total(p: int) -> float:
        unserved = {r for r in wanted if not accepts(v, p, r)}
        return prod[p] + len(unserved) * move_cost(v, p)

    return min(prod, key=lambda p: (total(p), p == SPARSE, p))


def _settle(plan: Plan, v: Value, stick: int, wanted: set[int | None]) -> None:
    plan.sticks[v] = stick
    moves = {r for r in wanted if r is not None and not accepts(v, stick, r)}
    plan.conversions[v] = moves
    plan.cost += len(moves) * move_cost(v, stick)
