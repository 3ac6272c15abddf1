"""Residency on the Spyre-level jaxpr: which values the device model keeps in LX.

:func:`residency_jaxpr` plans a program on a machine (:func:`program_ops`, then
:func:`spyrejax.device.plan_program`) and gives the Spyre-level jaxpr again with the
type of every variable the LX plan keeps in LX carrying that :class:`Residency`
(``f16[512,512]{... @LX[c0:32]+0x0}``); every other value lives in DDR and prints no
``@``. The device model names its buffers per (graph value, planned type) pair; the
interpreter's trace says which jaxpr variable holds each pair, and a value inside one
node's lowering is found by matching that lowering's own jaxpr, equation by equation
from its results back, against the program's.

A ``shard_map`` body (one card's program) is annotated too, and so are the bodies of
loops and branches (a value crossing their boundary lives in DDR: only the values one
iteration or branch makes and reads can be in LX).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .._jax import ClosedJaxpr, Var
from ..device import DeviceProgram, Machine, plan_program
from ..primitives._array import SpyreType
from ._device import ProgramOps, inner_jaxprs, program_ops
from ._graph import Graph, Value
from ._planner import Plan

__all__ = ["residency_jaxpr"]


def residency_jaxpr(
    closed: ClosedJaxpr,
    variables: dict[tuple[Value, SpyreType], Any],
    graph: Graph,
    plan: Plan,
    machine: Machine | None = None,
) -> tuple[ClosedJaxpr, DeviceProgram]:
    """The Spyre-level jaxpr with residencies, and the device program they come from.

    Args:
        closed: the Spyre-level jaxpr (the interpreter traced on the input types).
        variables: the variable of ``closed`` holding each (graph value, planned type).
        graph: the planned graph.
        plan: its plan.
        machine: the machine profile (default ``Machine.spyre()``).
    """
    ops = program_ops(graph, plan)
    program = plan_program(ops.descs, machine or Machine.spyre(), ops.ddr)
    types = {}
    for name, vars_ in _variables_by_name(closed, variables, ops).items():
        if program.lx.in_lx(name):
            where = program.residency(name)
            types.update({v: replace(v.aval, residency=where) for v in vars_})
    return _retyped(closed, types), program


def _variables_by_name(
    closed: ClosedJaxpr, variables: dict[tuple[Value, SpyreType], Any], ops: ProgramOps
) -> dict[str, list[Any]]:
    """The variables behind each buffer name of the device program.

    A node's result is both the ``shard_map`` result and the value its body returns:
    a name may have several variables (an ordered set of them, as dict keys).
    """
    held = {}  # the variable holding each (graph value, type) pair, by its name
    for key, name in ops.names.items():
        if key in variables:
            held.setdefault(name, variables[key])
    by_name: dict[str, dict[Any, None]] = {name: {var: None} for name, var in held.items()}
    producer = _producers(closed.jaxpr)
    for local, env in ops.lowerings:
        outs = [o for o in local.outvars if isinstance(o, Var) and env.get(o) in held]
        matched = _match(local, {o: held[env[o]] for o in outs}, producer)
        for var, name in env.items():
            if var in matched:
                by_name.setdefault(name, {})[matched[var]] = None
    return {name: list(vs) for name, vs in by_name.items()}


def _match(local: Any, known: dict[Any, Any], producer: dict[Any, Any]) -> dict[Any, Any]:
    """Variables of one node's lowering (``local``) paired with the program's.

    From the results (``known``) back: an equation producing a paired variable is
    paired with the program's equation producing its partner if both bind the same
    primitive with the same number of operands and results; their operands pair up,
    and so do the variables of two paired ``shard_map`` bodies.
    """
    pairs = dict(known)
    for eqn in reversed(local.eqns):
        out = next((o for o in eqn.outvars if o in pairs), None)
        twin = producer.get(pairs[out]) if out is not None else None
        if twin is None or not _same_op(eqn, twin):
            continue
        for a, b in zip(eqn.outvars, twin.outvars, strict=True):
            pairs.setdefault(a, b)
        for a, b in zip(eqn.invars, twin.invars, strict=True):
            if isinstance(a, Var) and isinstance(b, Var):
                pairs.setdefault(a, b)
        for body, twin_body in zip(inner_jaxprs(eqn), inner_jaxprs(twin), strict=True):
            ends = [
                *zip(body.invars, twin_body.invars, strict=True),
                *zip(body.outvars, twin_body.outvars, strict=True),
            ]
            inner = {a: b for a, b in ends if isinstance(a, Var) and isinstance(b, Var)}
            pairs.update(_match(body, inner, _producers(twin_body)))
    return pairs


def _producers(jaxpr: Any) -> dict[Any, Any]:
    """The equation producing each variable of ``jaxpr`` (its top level)."""
    return {o: e for e in jaxpr.eqns for o in e.outvars}


def _same_op(a: Any, b: Any) -> bool:
    return (
        a.primitive == b.primitive
        and type(a.params.get("_prim")) is type(b.params.get("_prim"))
        and len(a.invars) == len(b.invars)
        and len(a.outvars) == len(b.outvars)
    )


def _retyped(jaxpr: Any, types: dict[Any, SpyreType]) -> Any:
    """``jaxpr`` with the variables of ``types`` replaced by variables of those types.

    ``shard_map``, loop and branch bodies are rebuilt too; other inner jaxprs are left
    as they are.
    """
    if not types:
        return jaxpr
    new = {v: Var(t) for v, t in types.items()}
    return _substituted(jaxpr, new)


def _closed(closed: ClosedJaxpr, new: dict[Any, Any]) -> ClosedJaxpr:
    return ClosedJaxpr(_substituted(closed.jaxpr, new), closed.consts)


def _substituted(jaxpr: Any, new: dict[Any, Any]) -> Any:
    def sub(xs: list[Any]) -> list[Any]:
        return [new.get(x, x) if isinstance(x, Var) else x for x in xs]

    eqns = []
    for e in jaxpr.eqns:
        params = e.params
        if e.primitive.name == "shard_map":
            params = {**params, "jaxpr": _substituted(params["jaxpr"], new)}
        elif e.primitive.name == "scan":
            params = {**params, "jaxpr": _closed(params["jaxpr"], new)}
        elif e.primitive.name == "while":
            params = {
                **params,
                "cond_jaxpr": _closed(params["cond_jaxpr"], new),
                "body_jaxpr": _closed(params["body_jaxpr"], new),
            }
        elif e.primitive.name == "cond":
            params = {**params, "branches": tuple(_closed(b, new) for b in params["branches"])}
        eqns.append(e.replace(invars=sub(e.invars), outvars=sub(e.outvars), params=params))
    changes: dict[str, Any] = {"eqns": eqns}
    for field in ("invars", "outvars"):  # replaced only if changed (keeps debug names)
        xs = sub(getattr(jaxpr, field))
        if xs != list(getattr(jaxpr, field)):
            changes[field] = xs
    return jaxpr.replace(**changes)
