"""Control flow: ``scan``, ``while`` and ``cond`` with bodies planned once, not unrolled.

This module holds what the three rules share (charges, planned bodies, the search for
the carries' types); the rules are in ``_scan``, ``_while`` and ``_cond``.

A loop's body (a cond's branch) is a sub-graph of its own, planned by the same planner
on the types its operands have, and run by the same interpreter inside ``lax.scan``,
``lax.while_loop`` or ``lax.switch`` on Spyre arrays (hijax lowers their types to the
device images).

Carries keep one type around the loop: the body must give each carry back in the type
it took. The rule looks for a fixed point: it plans the body on the carries' types as
they arrive, then on the types the body gives them back (until they agree), and on the
default layouts; for each candidate, carries that arrive in another type are
restickified once before the loop, and carries the body gives back in another type
once per iteration at the end of the body. The cheapest candidate wins; the cost of
what the body moves counts once per iteration (times the trip count of a ``scan``,
once for a ``while`` whose trip count is unknown) and ``explain`` lists each such
copy with its cost per iteration.

Stacked inputs of a ``scan`` are read one slice per iteration: a slice along logical
dim 0 is a view when dim 0 is the outermost device dim (a stacked layout); an input
in another layout is restickified once, before the loop, into the stacked layout whose
slices the body reads cheapest. Stacked outputs come out in the stacked layout of the
body's outputs.

Under ``jax.vmap`` a while on a batched predicate is folded into a plain one (the
predicate reduced for the test, a select in the body), and a cond on a batched index
becomes ``select_n`` on an int32 index, which this module lowers (a chain of
``where``; bool predicates go to the elementwise ``where`` rule it wraps).

Predicates and branch indices are 0-d Spyre arrays: they are read back to the host
(a DMA of one element) to steer the loop or pick the branch.

Under the planner's abstract evaluation the rules run no loop: they plan the bodies
and give the types, charging the copies a run would make.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field, replace
from typing import Any

import jax
import numpy as np

from ... import primitives as sp
from ..._errors import LayoutError
from ...layout._layout import SpyreTensorLayout
from ...primitives._array import PadFill, SpyreType
from ...primitives._stick import (
    SPARSE,
    canon,
    default_type,
    restickify_cost,
    stick_of,
)
from .._graph import Graph, Node, Scalar, Value, build_graph
from .._planner import Plan, host_input_type, plan_graph
from .._regions import host_regions
from .._registry import Mode, Rule
from .._traffic import through_ddr
from ..program._interpret import Interpreter, moved_value

__all__ = ["Charge", "HostCharge", "ddr_moves", "plan_charges"]

_FIXED_POINT_ROUNDS = 4  # bodies planned while a carry's type still changes


@dataclass(frozen=True)
class Charge:
    """A copy made inside a loop body, a branch or a ``shard_map`` body, charged per run.

    A loop body's copies are charged per iteration, a ``shard_map`` body's per card. It
    stands for the copying primitives (and collectives) of the sub-plan in a node's
    option (the planner sums ``moves``, ``explain`` lists it): the same attributes.

    Attributes:
        role: ``"restickify"``, ``"copy"`` or ``"collective"``.
        moves: elements moved in all (per iteration times the trip count).
        in_avals: the type copied from (first).
        layout: the layout a restickify writes.
        reason: why, and where in which loop.
        where: the operation and loop, for copies.
        value: the value moved.
        target: the type a loop's operand is put in once before the loop (the loop's
            own charge; None for others).
        through_ddr: whether the copy goes through DDR: not for a matmul's operand
            laid out anew in LX as the matmul loads it (the body's plan runs a
            ``LoadRelayout``), which the planner's objective then charges nothing, as
            at the top level (``lowering._traffic``).
    """

    role: str
    moves: int
    in_avals: tuple[Any, ...]
    layout: SpyreTensorLayout | None
    reason: str
    where: str
    value: Value | None = None
    target: SpyreType | None = None
    through_ddr: bool = True


@dataclass(frozen=True)
class HostCharge:
    """A host fallback inside a loop body or a branch, its bytes counted as often as it runs.

    ``explain`` lists it among the fallbacks under the primitive and line of the node
    run on the host (not of the loop).

    Attributes:
        prim: the primitive run on the host.
        line: its source line (``file:line (function)``).
        to_host_bytes: bytes its operands move device -> host, in all.
        to_device_bytes: bytes its results move back, in all.
    """

    prim: str
    line: str
    to_host_bytes: int
    to_device_bytes: int
    role: str = "host"
    moves: int = 0


def plan_charges(
    plan: Plan, times: int, context: str, unit: str = "iteration"
) -> list[Charge | HostCharge]:
    """A sub-plan's copies, collectives and host fallbacks, each charged ``times`` times."""
    out: list[Charge | HostCharge] = []
    for ms in plan.moves.values():
        for m in ms:
            base = m.cost
            out.append(
                Charge(
                    "restickify",
                    base * times,
                    (m.source,),
                    m.target.layout,
                    f"{m.reason} [{context}: {base} per {unit} x {times}]",
                    context,
                    m.value,
                )
            )
    for node, options in plan.runs.items():
        for option in options:
            for prim in option.copies:
                if prim.role == "host":
                    inner = isinstance(prim, HostCharge)  # from a loop inside the body
                    out.append(
                        HostCharge(
                            prim.prim if inner else node.prim,
                            prim.line if inner else node.line,
                            prim.to_host_bytes * times,
                            prim.to_device_bytes * times,
                        )
                    )
                if prim.role not in ("copy", "restickify", "collective"):
                    continue
                where = getattr(prim, "where", "") or node.describe()
                why = getattr(prim, "reason", "") or (
                    f"{node.describe()} asks for layout {getattr(prim, 'layout', None)}"
                )
                base = prim.moves
                out.append(
                    Charge(
                        prim.role,
                        base * times,
                        prim.in_avals,
                        getattr(prim, "layout", None),
                        f"{why} [{context}: {base} per {unit} x {times}]",
                        f"{where} [{context}: {base} per {unit} x {times}]",
                        moved_value(node, option.ins, prim),
                        through_ddr=through_ddr(prim),
                    )
                )
    return out


def _type_of(x: Any) -> SpyreType | None:
    if isinstance(x, Scalar):
        return None
    t = jax.typeof(x)
    return t if isinstance(t, SpyreType) else None


def _carried(t: SpyreType) -> SpyreType:
    """The type a loop carries a value of type ``t`` in: contiguous, padding undefined."""
    if t.is_view:
        return default_type(t.shape, t.dtype, stick_of(t))
    return replace(t, pad=PadFill.POISON) if t.pad is not PadFill.POISON else t


def _into_cost(have: SpyreType, want: SpyreType) -> int:
    """Elements moved to make a value of type ``have`` one of type ``want``."""
    if have == want or (not have.is_view and _carried(have) == want):
        return 0
    return restickify_cost(have)


def _into(x: Any, want: SpyreType) -> Any:
    """``x`` as a value of the contiguous type ``want``: as is, relabelled, or restickified."""
    if isinstance(x, Scalar):
        x = sp.to_device(np.asarray(x.value, x.dtype))
    have = jax.typeof(x)
    if have == want:
        return x
    if not have.is_view and _carried(have) == want:  # forget that the padding is zero
        return sp.wrap(sp.image(x), want)
    return sp.restickify(x, layout=want.layout)


def _before(node: Node, args: list[Any], want: list[SpyreType], first: int, why: str) -> list[Any]:
    """Operands ``first...`` put in the loop's types once before it (charged with a why)."""
    called = sp.abstract_calls()
    if called is None:
        return [_into(a, t) for a, t in zip(args, want, strict=True)]
    for i, (a, t) in enumerate(zip(args, want, strict=True)):
        have = _type_of(a)
        cost = 0 if have is None else _into_cost(have, t)
        if cost:
            u = node.ins[first + i]
            called.append(
                Charge(
                    "restickify",
                    cost,
                    (have,),
                    t.layout,
                    f"{node.describe()}: operand {first + i} {why}, once before the loop",
                    node.describe(),
                    u if isinstance(u, Value) else None,
                    t,
                )
            )
    return [sp.abstract(t) for t in want]


def _scalar_type(x: Any) -> SpyreType:
    """The type a scalar operand is put on the device in."""
    return host_input_type((), np.dtype(x.dtype))


@dataclass
class _Body:
    """One body (or branch, or loop predicate) planned for its input types."""

    graph: Graph
    plan: Plan
    outs: list[SpyreType]

    def run(self, *args: Any) -> list[Any]:
        return Interpreter(self.graph, self.plan).run(*args)


def _plan_body(graph: Graph, types: list[SpyreType], carried: range = range(0)) -> _Body:
    # A carry's buffer is the loop's own (as in XLA): the body may update it in place.
    donated = frozenset(graph.inputs[i] for i in carried)
    plan = plan_graph(graph, dict(zip(graph.inputs, types, strict=True)), donated=donated)
    outs = [
        host_input_type((), o.dtype) if t is None else t
        for o, t in zip(graph.outputs, plan.outputs, strict=True)
    ]
    return _Body(graph, plan, outs)


@dataclass
class _NodeCache:
    """Per node: its sub-graphs and the bodies planned for given input types."""

    graphs: dict[str, Graph] = field(default_factory=dict)
    bodies: dict[Any, _Body] = field(default_factory=dict)
    decisions: dict[Any, Any] = field(default_factory=dict)


_CACHE: weakref.WeakKeyDictionary[Node, _NodeCache] = weakref.WeakKeyDictionary()


def _cache(node: Node) -> _NodeCache:
    c = _CACHE.get(node)
    if c is None:
        c = _CACHE[node] = _NodeCache()
    return c


def _graph(node: Node, key: str, closed: Any, bound: list[Scalar | None]) -> Graph:
    c = _cache(node)
    if key not in c.graphs:
        graph = c.graphs[key] = host_regions(build_graph(closed, bound))
        for v in graph.inputs:  # "argument leaf i" of the body: say whose
            v.origin = v.origin.replace("argument leaf", f"{key} operand") + f" of {node.prim}"
    return c.graphs[key]


def _body(
    node: Node, key: str, graph: Graph, types: list[SpyreType], carried: range = range(0)
) -> _Body:
    c = _cache(node)
    k = (key, tuple(types))
    if k not in c.bodies:
        c.bodies[k] = _plan_body(graph, types, carried)
    return c.bodies[k]


class _ControlRule(Rule):
    """Takes every operand as it is (the cheapest type) and normalises it itself."""

    candidates = 1

    def modes(self, node: Node) -> list[Mode]:
        return [Mode((None,) * len(node.ins), SPARSE)]


def _emit(called: list[Any], charges: list[Charge | HostCharge]) -> None:
    called.extend(c for c in charges if c.moves or c.role == "host")


# --- loops: scan and while ------------------------------------------------------------


@dataclass
class _Loop:
    """A loop's decision: the carries' type, the body (and predicate) planned for it."""

    carry: list[SpyreType]
    body: _Body
    cond: _Body | None
    cost: float


def _fix_charges(
    body: _Body, carry: list[SpyreType], times: int, context: str, what: str = "carry"
) -> list[Charge]:
    """Restickifies at the end of the body: carries (outputs) given in another type."""
    unit = "iteration" if what == "carry" else "run"
    out = []
    for i, (got, want) in enumerate(zip(body.outs, carry, strict=False)):
        cost = _into_cost(got, want)
        if cost:
            v = body.graph.outputs[i]
            out.append(
                Charge(
                    "restickify",
                    cost * times,
                    (got,),
                    want.layout,
                    f"{what} {i}: the body gives it as {got.str_short()}, the "
                    f"{'loop carries' if what == 'carry' else 'cond gives'} "
                    f"{want.str_short()} [{context}: {cost} per {unit} x {times}]",
                    context,
                    v if isinstance(v, Value) else None,
                )
            )
    return out


def ddr_moves(plan: Plan) -> int:
    """Elements a (sub-)plan moves through DDR: its cost but for LX-only relayouts.

    A matmul's operand laid out anew as the matmul loads it (``LoadRelayout``,
    ``through_ddr`` False) moves nothing through DDR (``lowering._traffic``): the
    planner's objective charges it nothing, so comparing carries must not either.
    Elements, as the carries' own restickifies (``_into_cost``) are counted: every
    candidate carries the same values in the same dtypes, so the comparison is the
    planner's ``restickify_cost`` measure, not its byte objective.
    """
    in_lx = sum(p.moves for o in plan.options() for p in o.copies if not through_ddr(p))
    return plan.cost - in_lx


def _choose_carry(init: list[SpyreType], plan_for: Any, times: int) -> _Loop:
    """The cheapest carry types: as they arrive, the body's fixed point, or the defaults.

    Raises:
        LayoutError: the body's, if it cannot run on any of them.
    """
    tried: list[tuple[SpyreType, ...]] = []
    loops: list[_Loop] = []
    errors: list[LayoutError] = []

    def attempt(cand: tuple[SpyreType, ...]) -> _Loop | None:
        tried.append(cand)
        try:
            body, cond = plan_for(list(cand))
        except LayoutError as err:
            errors.append(err)
            return None
        before = sum(_into_cost(a, b) for a, b in zip(init, cand, strict=True))
        per = ddr_moves(body.plan) + (ddr_moves(cond.plan) if cond else 0)
        per += sum(_into_cost(a, b) for a, b in zip(body.outs, cand, strict=False))
        loop = _Loop(list(cand), body, cond, before + times * per)
        loops.append(loop)
        return loop

    carry = tuple(_carried(t) for t in init)
    for _ in range(_FIXED_POINT_ROUNDS):
        loop = attempt(carry)
        if loop is None:
            break
        back = tuple(_carried(t) for t in loop.body.outs[: len(carry)])
        if back == carry or back in tried:
            break
        carry = back
    defaults = tuple(host_input_type(t.shape, t.dtype) for t in init)
    if defaults not in tried:
        attempt(defaults)
    if not loops:
        raise errors[0]
    return min(loops, key=lambda lp: lp.cost)  # the first of the cheapest


def _invariant_types(body: _Body, consts: list[SpyreType]) -> list[SpyreType]:
    """The types a body reads its constants in where it relays them out every iteration.

    A constant is a loop invariant: where the body's plan restickifies it or its
    transpose (a planned move: ``h @ w.T``), or a loop inside the body puts it in
    another type before that loop runs, it may as well be put in that type once, before
    this loop.
    """
    out = list(consts)
    const_inputs = set(body.graph.inputs[: len(consts)])
    targets: dict[Value, SpyreType] = {}
    for node in body.graph.nodes:
        if node.prim != "transpose" or node.ins[0] not in const_inputs:
            continue
        v = node.ins[0]
        for m in body.plan.moves.get(node.outs[0], []):
            stick = stick_of(m.target)
            if stick != SPARSE:
                s = node.params["permutation"][stick]
                targets.setdefault(v, default_type(v.shape, v.dtype, canon(v.shape, s)))
    for v in const_inputs:
        moves = body.plan.moves.get(v)
        if moves:
            targets[v] = moves[0].target
    for options in body.plan.runs.values():
        for option in options:
            for prim in option.copies:
                if isinstance(prim, Charge) and prim.target is not None and prim.value:
                    targets.setdefault(prim.value, prim.target)
    for i, v in enumerate(body.graph.inputs[: len(consts)]):
        out[i] = targets.get(v, consts[i])
    return out
