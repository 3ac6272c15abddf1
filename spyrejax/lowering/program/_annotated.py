"""The Spyre-level jaxpr annotated with where the device model keeps each value.

The residency value (DDR, or LX of which cores at which offset) is owned by
:mod:`spyrejax.layout._residency`; which values are in LX is the device plan's
(:func:`spyrejax.device.plan_program`). This module only writes that plan into types.

:func:`residency_jaxpr` plans a program on a machine (:func:`program_ops`, then
:func:`spyrejax.device.plan_program`) and gives the Spyre-level jaxpr again with the
type of every variable the LX plan keeps in LX carrying that :class:`Residency`
(``f16[512,512]{... @LX[c0:32]+0x0}``); every other value lives in DDR and prints no
``@``. The device model names its buffers per (graph value, planned type) pair; the
interpreter's trace says which jaxpr variable holds each pair, and the record of the
same trace which traced value (so which variable) each name inside a node's lowering
is.

A ``shard_map`` body (one card's program) is annotated too, and so are the bodies of
loops and branches (a value crossing their boundary lives in DDR: only the values one
iteration or branch makes and reads can be in LX).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..._counts import count
from ..._jax import ClosedJaxpr, Var, tracer_var, with_bodies
from ...device import DeviceProgram, Machine, plan_program
from ...primitives._array import SpyreType
from .._graph import Graph, Value
from .._planner import Plan
from ._program import ProgramOps, program_ops
from ._record import Recorder

__all__ = ["residency_jaxpr"]


def residency_jaxpr(
    closed: ClosedJaxpr,
    variables: dict[tuple[Value, SpyreType], Any],
    graph: Graph,
    plan: Plan,
    record: Recorder,
    machine: Machine | None = None,
) -> tuple[ClosedJaxpr, DeviceProgram]:
    """The Spyre-level jaxpr with residencies, and the device program they come from.

    Args:
        closed: the Spyre-level jaxpr (the interpreter traced on the input types).
        variables: the variable of ``closed`` holding each (graph value, planned type).
        graph: the planned graph.
        plan: its plan.
        record: what the same trace bound (:mod:`spyrejax.lowering.program._record`).
        machine: the machine profile (default ``Machine.spyre()``).
    """
    count("program.plan")
    ops = program_ops(graph, plan, record)
    program = plan_program(ops.descs, machine or Machine.spyre(), ops.ddr)
    types = {}
    for name, vars_ in _variables_by_name(variables, ops).items():
        if program.lx.in_lx(name):
            where = program.residency(name)
            types.update({v: replace(v.aval, residency=where) for v in vars_})
    return _retyped(closed, types), program


def _variables_by_name(
    variables: dict[tuple[Value, SpyreType], Any], ops: ProgramOps
) -> dict[str, list[Any]]:
    """The variables behind each buffer name of the device program.

    A (graph value, planned type) name is the variable holding that pair; a recorded
    value is its own variable (``tracer_var``: the record is of the jaxpr's own trace
    in both modes, as ``explain``'s view marks read it). A node's result is both the
    ``shard_map`` result and the value its body returns: a name may have several
    variables (an ordered set of them, as dict keys).
    """
    by_name: dict[str, dict[Any, None]] = {}
    for key, name in ops.names.items():
        if key in variables:
            by_name.setdefault(name, {variables[key]: None})
    for name, values in ops.values.items():
        for x in values:
            var = tracer_var(x)
            if var is not None:
                by_name.setdefault(name, {})[var] = None
    return {name: list(vs) for name, vs in by_name.items()}


def _retyped(jaxpr: Any, types: dict[Any, SpyreType]) -> Any:
    """``jaxpr`` with the variables of ``types`` replaced by variables of those types.

    ``shard_map``, loop and branch bodies are rebuilt too; other inner jaxprs are left
    as they are.
    """
    if not types:
        return jaxpr
    new = {v: Var(t) for v, t in types.items()}
    return _substituted(jaxpr, new)


def _substituted(jaxpr: Any, new: dict[Any, Any]) -> Any:
    def sub(xs: list[Any]) -> list[Any]:
        return [new.get(x, x) if isinstance(x, Var) else x for x in xs]

    def inner(body: Any) -> Any:
        return _substituted(body, new)

    eqns = [
        e.replace(invars=sub(e.invars), outvars=sub(e.outvars), params=with_bodies(e, inner))
        for e in jaxpr.eqns
    ]
    changes: dict[str, Any] = {"eqns": eqns}
    for field in ("invars", "outvars"):  # replaced only if changed (keeps debug names)
        xs = sub(getattr(jaxpr, field))
        if xs != list(getattr(jaxpr, field)):
            changes[field] = xs
    return jaxpr.replace(**changes)
