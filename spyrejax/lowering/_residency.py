"""Residency on the Spyre-level jaxpr: which values the device model keeps in LX.

:func:`residency_jaxpr` plans a program on a machine (:func:`program_ops`, then
:func:`spyrejax.device.plan_program`) and gives the Spyre-level jaxpr again with the
type of every variable the LX plan keeps in LX carrying that :class:`Residency`
(``f16[512,512]{... @LX[c0:32]+0x0}``); every other value lives in DDR and prints no
``@``. The device model names its buffers per (graph value, planned type) pair; the
interpreter's trace says which jaxpr variable holds each pair, and a value inside one
node's lowering is found by matching that lowering's own jaxpr, equation by equation
from its results back, against the program's.

Inner jaxprs (``shard_map``, ``scan``, ``cond`` bodies) are not annotated.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .._jax import ClosedJaxpr, Var
from ..device import DeviceProgram, Machine, plan_program
from ..primitives._array import SpyreType
from ._device import ProgramOps, program_ops
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
    by_name = _variables_by_name(closed, variables, ops)
    types = {}
    for name, at in program.lx.address.items():
        var = by_name.get(name)
        if at is not None and var is not None:
            types[var] = replace(var.aval, residency=program.residency(name))
    return _retyped(closed, types), program


def _variables_by_name(
    closed: ClosedJaxpr, variables: dict[tuple[Value, SpyreType], Any], ops: ProgramOps
) -> dict[str, Any]:
    """The variable of ``closed`` behind each buffer name of the device program."""
    by_name: dict[str, Any] = {}
    for key, name in ops.names.items():
        var = variables.get(key)
        if var is not None:
            by_name.setdefault(name, var)
    producer = {o: e for e in closed.jaxpr.eqns for o in e.outvars}
    for local, env in ops.lowerings:
        matched = _match(
            local, {o: by_name[env[o]] for o in local.outvars if env.get(o) in by_name}, producer
        )
        for var, name in env.items():
            if var in matched:
                by_name.setdefault(name, matched[var])
    return by_name


def _match(local: Any, known: dict[Any, Any], producer: dict[Any, Any]) -> dict[Any, Any]:
    """Variables of one node's lowering (``local``) paired with the program's.

    From the results (``known``) back: an equation producing a paired variable is
    paired with the program's equation producing its partner if both bind the same
    primitive with the same number of operands and results; their operands pair up.
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
    return pairs


def _same_op(a: Any, b: Any) -> bool:
    return (
        a.primitive == b.primitive
        and type(a.params.get("_prim")) is type(b.params.get("_prim"))
        and len(a.invars) == len(b.invars)
        and len(a.outvars) == len(b.outvars)
    )


def _retyped(closed: ClosedJaxpr, types: dict[Any, SpyreType]) -> ClosedJaxpr:
    """``closed`` with the variables of ``types`` replaced by variables of those types."""
    if not types:
        return closed
    new = {v: Var(t) for v, t in types.items()}

    def sub(xs: list[Any]) -> list[Any]:
        return [new.get(x, x) if isinstance(x, Var) else x for x in xs]

    eqns = [e.replace(invars=sub(e.invars), outvars=sub(e.outvars)) for e in closed.jaxpr.eqns]
    outvars = sub(closed.jaxpr.outvars)
    if outvars == list(closed.jaxpr.outvars):
        return closed.replace(eqns=eqns)
    return closed.replace(eqns=eqns, outvars=outvars)
