"""Control flow: ``scan``, ``while`` and ``cond`` with bodies planned once, not unrolled.

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
import jax.numpy as jnp
import numpy as np

from .. import primitives as sp
from .._errors import LayoutError, SpyreInternalError
from .._jax import cond_branches, jaxpr_as_fun, scan_options, scan_parts, while_parts
from ..layout._layout import SpyreTensorLayout
from ..primitives._array import PadFill, SpyreType, batched_type
from ..primitives._mapping import stacked_type
from ..primitives._stick import (
    SPARSE,
    canon,
    default_type,
    restickify_cost,
    stick_of,
    stick_options,
)
from . import _record as record
from ._graph import Graph, Node, Scalar, Value, build_graph
from ._interpret import Interpreter
from ._planner import Plan, host_input_type, plan_graph
from ._regions import host_regions
from ._rules import RULES, Mode, Rule, _register

__all__ = ["Charge", "HostCharge", "plan_charges"]

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
    """

    role: str
    moves: int
    in_avals: tuple[Any, ...]
    layout: SpyreTensorLayout | None
    reason: str
    where: str
    value: Value | None = None
    target: SpyreType | None = None


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
                        getattr(prim, "value", None) or node.outs[0],
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


def _plan_body(graph: Graph, types: list[SpyreType]) -> _Body:
    plan = plan_graph(graph, dict(zip(graph.inputs, types, strict=True)))
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


def _body(node: Node, key: str, graph: Graph, types: list[SpyreType]) -> _Body:
    c = _cache(node)
    k = (key, tuple(types))
    if k not in c.bodies:
        c.bodies[k] = _plan_body(graph, types)
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
        per = body.plan.cost + (cond.plan.cost if cond else 0)
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


class _Scan(_ControlRule):
    def _decide(
        self, node: Node, types: list[Any]
    ) -> tuple[_Loop, list[SpyreType], list[SpyreType]]:
        """The loop, the stacked inputs' types and the constants' types it runs with."""
        body, nc, nk, length = scan_parts(node.params)
        c = _cache(node)
        key = tuple(types)
        if key in c.decisions:
            return c.decisions[key]
        bound = [u if isinstance(u, Scalar) else None for u in node.ins[:nc]]
        graph = _graph(node, "body", body, bound)
        consts = [t for t in types[:nc] if t is not None]
        init = [
            t if t is not None else _scalar_type(u)
            for t, u in zip(types[nc : nc + nk], node.ins[nc : nc + nk], strict=True)
        ]
        given = types[nc + nk :]
        stacked = [stacked_type(t, length) for t in given]

        def choose(stacked: list[SpyreType], consts: list[SpyreType] = consts) -> _Loop:
            xs = [t.dec_rank(length, 0) for t in stacked]

            def plan_for(carry: list[SpyreType]) -> tuple[_Body, None]:
                return _body(node, "body", graph, [*consts, *carry, *xs]), None

            return _choose_carry(init, plan_for, length)

        loop = choose(stacked)
        # A stacked input moved before the loop anyway may as well be moved into the
        # stick its slices are read in: try each, one input at a time.
        for j, t in enumerate(given):
            if stacked[j] == t:
                continue
            for s in stick_options(t.shape[1:]):
                alt = batched_type(default_type(t.shape[1:], t.dtype, s), length)
                if alt == stacked[j]:
                    continue
                try:
                    other = choose([*stacked[:j], alt, *stacked[j + 1 :]])
                except LayoutError:
                    continue
                if other.cost < loop.cost:
                    loop, stacked = other, [*stacked[:j], alt, *stacked[j + 1 :]]
        # A constant the body relays out on every iteration (a weight read transposed,
        # or sliced by a loop inside the body) is relaid out once before the loop.
        hoisted = _invariant_types(loop.body, consts)
        if hoisted != consts and length > 1:
            try:
                other = choose(stacked, hoisted)
            except LayoutError:
                other = None
            once = sum(_into_cost(a, b) for a, b in zip(consts, hoisted, strict=True))
            if other is not None and other.cost + once < loop.cost:
                loop, consts = replace(other, cost=other.cost + once), hoisted
        c.decisions[key] = (loop, stacked, consts)
        return loop, stacked, consts

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        _, nc, nk, length = scan_parts(node.params)
        reverse, unroll = scan_options(node.params)
        types = [_type_of(a) for a in args]
        loop, stacked, const_types = self._decide(node, types)
        held = [(i, a) for i, a in enumerate(args[:nc]) if not isinstance(a, Scalar)]
        consts = [
            _before(node, [a], [t], i, "into the layout the body reads it in")[0]
            for (i, a), t in zip(held, const_types, strict=True)
        ]
        init = _before(node, args[nc : nc + nk], loop.carry, nc, "into the type it is carried in")
        xs = _before(
            node, args[nc + nk :], stacked, nc + nk, "into the stacked layout of its slices"
        )
        body, carry = loop.body, loop.carry
        context = f"in the body of {node.describe()}"
        called = sp.abstract_calls()
        if called is not None:  # planning: the types, and what the iterations copy
            _emit(called, plan_charges(body.plan, length, context))
            _emit(called, _fix_charges(body, carry, length, context))
            ys = [batched_type(t, length) for t in body.outs[nk:]]
            return [sp.abstract(t) for t in [*carry, *ys]]

        x_types = [t.dec_rank(length, 0) for t in stacked]
        y_types = [batched_type(t, length) for t in body.outs[nk:]]

        images = [sp.image(x) for x in xs]
        loop = record.loop("scan", length)

        # Stacked operands go through the loop as device images (sliced and stacked
        # along the image's dim 0, the logical dim 0 of a stacked layout); carries as
        # Spyre arrays.
        def step(c: list[Any], x: list[Any]) -> tuple[list[Any], list[Any]]:
            with record.body(loop, "body", list(c), list(init), images=list(x)) as b:
                x = [sp.wrap(i, t) for i, t in zip(x, x_types, strict=True)]
                outs = body.run(*consts, *c, *x)
                c = [_into(o, t) for o, t in zip(outs[:nk], carry, strict=True)]
                if b is not None:
                    b.outs = c
                return c, [sp.image(y) for y in outs[nk:]]

        c_out, ys = jax.lax.scan(step, init, images, length=length, reverse=reverse, unroll=unroll)
        record.finish(loop, c_out, images=ys)
        return [*c_out, *(sp.wrap(y, t) for y, t in zip(ys, y_types, strict=True))]


_register(_Scan(), "scan")


def _any_predicate(params: dict[str, Any]) -> tuple[Any, Any, int, int]:
    """A while whose predicate is batched (``jax.vmap``), as one with a scalar predicate.

    JAX runs such a loop while any element's predicate holds, and each iteration
    updates only the elements whose predicate holds: the predicate is folded into the
    body (a select) and reduced for the test, so the body and test are plain jaxprs.

    Returns:
        The loop's predicate and body and how many constants each takes first
        (:func:`spyrejax._jax.while_parts`).
    """
    cond, body, cn, bn = while_parts(params)
    if cond.out_avals[0].shape == ():
        return cond, body, cn, bn
    test_fn, step_fn = jaxpr_as_fun(cond), jaxpr_as_fun(body)
    cconsts = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in cond.in_avals[:cn]]
    bconsts = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in body.in_avals[:bn]]
    carry = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in body.in_avals[bn:]]

    def any_test(*args: Any) -> Any:
        (pred,) = test_fn(*args)
        return jnp.max(pred.astype(np.int32)) > 0

    def masked_step(*args: Any) -> list[Any]:
        cc, bc, c = args[:cn], args[cn : cn + bn], args[cn + bn :]
        (pred,) = test_fn(*cc, *c)
        new = step_fn(*bc, *c)
        keep = range(pred.ndim)
        return [
            jax.lax.select(jax.lax.broadcast_in_dim(pred, n.shape, tuple(keep)), n, o)
            for n, o in zip(new, c, strict=True)
        ]

    return (
        jax.make_jaxpr(any_test)(*cconsts, *carry),
        jax.make_jaxpr(masked_step)(*cconsts, *bconsts, *carry),
        cn,
        cn + bn,
    )


class _While(_ControlRule):
    def _parts(self, node: Node) -> tuple[Any, Any, int, int]:
        """The loop's predicate, body and constant counts (a batched predicate folded)."""
        c = _cache(node)
        if "parts" not in c.decisions:
            c.decisions["parts"] = _any_predicate(node.params)
        return c.decisions["parts"]

    def _ins(self, node: Node, args: list[Any]) -> list[Any]:
        """The operands as the loop takes them: the predicate's constants also the body's."""
        cond, _, cn, _ = while_parts(node.params)
        if self._parts(node)[0] is cond:
            return args
        return [*args[:cn], *args[:cn], *args[cn:]]

    def _decide(self, node: Node, types: list[Any]) -> _Loop:
        test, step, cn, bn = self._parts(node)
        c = _cache(node)
        key = tuple(types)
        if key in c.decisions:
            return c.decisions[key]
        ins = self._ins(node, list(node.ins))
        cbound = [u if isinstance(u, Scalar) else None for u in ins[:cn]]
        bbound = [u if isinstance(u, Scalar) else None for u in ins[cn : cn + bn]]
        cgraph = _graph(node, "cond", test, cbound)
        bgraph = _graph(node, "body", step, bbound)
        cconsts = [t for t in types[:cn] if t is not None]
        bconsts = [t for t in types[cn : cn + bn] if t is not None]
        init = [
            t if t is not None else _scalar_type(u)
            for t, u in zip(types[cn + bn :], ins[cn + bn :], strict=True)
        ]

        def plan_for(carry: list[SpyreType]) -> tuple[_Body, _Body]:
            return (
                _body(node, "body", bgraph, [*bconsts, *carry]),
                _body(node, "cond", cgraph, [*cconsts, *carry]),
            )

        loop = c.decisions[key] = _choose_carry(init, plan_for, 1)
        return loop

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        _, _, cn, bn = self._parts(node)
        args = self._ins(node, args)
        loop = self._decide(node, [_type_of(a) for a in args])
        cconsts = [a for a in args[:cn] if not isinstance(a, Scalar)]
        bconsts = [a for a in args[cn : cn + bn] if not isinstance(a, Scalar)]
        init = _before(node, args[cn + bn :], loop.carry, cn + bn, "into the type it is carried in")
        body, cond, carry = loop.body, loop.cond, loop.carry
        if cond is None:
            raise SpyreInternalError(f"internal error: {node.describe()} has no planned predicate")
        called = sp.abstract_calls()
        if called is not None:
            context = f"per iteration of {node.describe()} (trip count unknown)"
            _emit(called, plan_charges(body.plan, 1, context))
            _emit(called, plan_charges(cond.plan, 1, context))
            _emit(called, _fix_charges(body, carry, 1, context))
            return [sp.abstract(t) for t in carry]

        loop = record.loop("while")

        def test(c: tuple[Any, ...]) -> Any:
            with record.body(loop, "test", list(c), init):
                return sp.to_host(cond.run(*cconsts, *c)[0])

        def step(c: tuple[Any, ...]) -> tuple[Any, ...]:
            with record.body(loop, "body", list(c), init) as b:
                outs = body.run(*bconsts, *c)
                new = tuple(_into(o, t) for o, t in zip(outs, carry, strict=True))
                if b is not None:
                    b.outs = list(new)
                return new

        results = list(jax.lax.while_loop(test, step, tuple(init)))
        record.finish(loop, results)
        return results


_register(_While(), "while")


# --- cond and switch ------------------------------------------------------------------


@dataclass
class _Branches:
    bodies: list[_Body]
    outs: list[SpyreType]


class _Cond(_ControlRule):
    def _decide(self, node: Node, types: list[Any]) -> _Branches:
        c = _cache(node)
        key = tuple(types)
        if key in c.decisions:
            return c.decisions[key]
        bound = [u if isinstance(u, Scalar) else None for u in node.ins[1:]]
        ops = [t for t in types[1:] if t is not None]
        bodies = []
        for k, branch in enumerate(cond_branches(node.params)):
            graph = _graph(node, f"branch{k}", branch, bound)
            bodies.append(_body(node, f"branch{k}", graph, ops))
        outs = []
        for got in zip(*(b.outs for b in bodies), strict=True):
            outs.append(got[0] if len(set(got)) == 1 else _carried(got[0]))
        d = c.decisions[key] = _Branches(bodies, outs)
        return d

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        index, ops = args[0], [a for a in args[1:] if not isinstance(a, Scalar)]
        d = self._decide(node, [_type_of(a) for a in args])
        called = sp.abstract_calls()
        if called is not None:
            n = len(d.bodies)
            for k, b in enumerate(d.bodies):
                context = f"in branch {k} of {node.describe()} (one of {n} runs)"
                _emit(called, plan_charges(b.plan, 1, context, "run"))
                _emit(called, _fix_charges(b, d.outs, 1, context, "output"))
            return [sp.abstract(t) for t in d.outs]

        if isinstance(index, Scalar):  # known at trace time: that branch alone
            k = min(max(int(index.value), 0), len(d.bodies) - 1)
            return [_into_out(o, t) for o, t in zip(d.bodies[k].run(*ops), d.outs, strict=True)]
        loop = record.loop("cond")

        def branch(k: int, b: _Body) -> Any:
            def run(*xs: Any) -> list[Any]:
                with record.body(loop, k, list(xs), ops) as rb:
                    outs = [_into_out(o, t) for o, t in zip(b.run(*xs), d.outs, strict=True)]
                    if rb is not None:
                        rb.outs = outs
                    return outs

            return run

        fns = [branch(k, b) for k, b in enumerate(d.bodies)]
        results = list(jax.lax.switch(sp.to_host(index), fns, *ops))
        record.finish(loop, results)
        return results


def _into_out(x: Any, want: SpyreType) -> Any:
    """A branch's output in the type every branch gives (views kept when all agree)."""
    return x if jax.typeof(x) == want else _into(x, want)


_register(_Cond(), "cond")


# --- select_n with an integer index: cond and switch under jax.vmap ---------------------


class _SelectN(Rule):
    """``select_n`` with a bool predicate (``where``), or an int32 case index.

    ``jax.vmap`` turns a ``cond``/``switch`` on a batched index into every branch and a
    ``select_n`` on the index: case ``k`` where the index is ``k``, a chain of
    ``where(index == k, case_k, ...)`` on the device.
    """

    def __init__(self, where: Rule) -> None:
        self.where = where

    def modes(self, node: Node) -> list[Mode]:
        out = node.outs[0]
        if not out.shape:
            return [Mode((None,) * len(node.ins), SPARSE)]
        return [
            Mode(tuple(_stick_req(v, s) for v in node.ins), canon(out.shape, s))
            for s in stick_options(out.shape)
        ]

    def lower(self, node: Node, args: list[Any], mode: Mode) -> list[Any]:
        index, cases = args[0], args[1:]
        kind = np.dtype(index.dtype) if isinstance(index, Scalar) else jax.typeof(index).dtype
        if kind == np.bool_ and len(cases) == 2:
            return self.where.lower(node, args, mode)
        dtype = node.outs[0].dtype
        out_shape = node.outs[0].shape
        vals = [sp.full(out_shape, c.value, dtype) if isinstance(c, Scalar) else c for c in cases]
        if isinstance(index, Scalar):
            return [vals[int(index.value)]]
        out = vals[-1]
        for k in range(len(vals) - 2, -1, -1):
            hit = sp.elementwise("eq", index, np.asarray(k, kind))
            out = sp.elementwise("where", hit, vals[k], out)
        return [out]


def _stick_req(v: Value | Scalar, stick: int) -> int | None:
    if isinstance(v, Scalar) or not v.shape:
        return None
    return canon(v.shape, stick)


_register(_SelectN(RULES["select_n"]), "select_n")
