"""``spyrejax.explain``: what spyrejax.jit does with a function, as a report."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .._counts import count
from .._jax import tracer_var
from ..device import Machine
from ..frontend._filter_jit import FilterJit, staged
from ..frontend._gc import gc_paused
from ..frontend._jit import SpyreJit
from ..frontend._lowering import Lowering
from ..layout._layout import SpyreTensorLayout
from ..lowering._graph import Node
from ..lowering._planner import Move, Plan
from ..lowering.program._interpret import records
from ..lowering.program._record import Call
from ..lowering.rules._collectives import collective_records
from ..lowering.rules._control import HostCharge
from ..primitives._array import SpyreType
from ._records import Fallback, OpInfo
from ._report import Report, var_names

__all__ = ["explain"]


@gc_paused
def explain(
    fun: Callable[..., Any] | SpyreJit | FilterJit,
    *args: Any,
    machine: Machine | None = None,
    **kwargs: Any,
) -> Report:
    """What :func:`spyrejax.jit` does with ``fun`` on these arguments.

    Args:
        fun: a plain JAX function, a :class:`SpyreJit` or a :class:`FilterJit`; an
            equinox module, or a function given modules, is planned as ``filter_jit``
            runs it (a module's Python bool and float fields static).
        *args: its arguments (host arrays and Spyre arrays, as for the jitted call, or
            ``jax.ShapeDtypeStruct`` values: plan and cost without data).
        machine: the machine profile of the device model (default ``Machine.spyre()``):
            the report's division, LX plan and time, and the residencies its jaxpr
            shows (``@LX[c0:n]+offset`` on the values kept in LX; no ``@``: DDR).
        **kwargs: its keyword arguments.

    Returns:
        A :class:`Report`: ``str()`` is a text report, and notebooks render it as HTML.
    """
    jitted = staged(fun, args, kwargs)
    lowering, moved = jitted._call_lowering(args, kwargs)
    plan = lowering.plan
    closed, program = lowering.residency_jaxpr(machine)
    restickifies = tuple(records(plan))
    inputs = []
    for i, (v, var) in enumerate(zip(lowering.graph.inputs, closed.jaxpr.invars, strict=True)):
        if isinstance(var.aval, SpyreType) and i not in moved:
            continue  # already on the device (a host array is moved by the call, first)
        layout = SpyreTensorLayout(var.aval.shape, var.aval.dtype)
        inputs.append((v.name, layout.for_host(v.shape).dci(host_dtype=var.aval.dtype)))
    outputs = []
    for i, var in enumerate(closed.jaxpr.outvars):
        t = var.aval
        if isinstance(t, SpyreType):
            mapping = t.layout.for_host(t.base_shape)
            dci = mapping.dci(host_to_device=False, host_dtype=t.dtype)
            outputs.append((f"out{i}", dci))
    copies = tuple(
        (getattr(prim, "where", "") or node.describe(), prim.moves)
        for node, options in plan.runs.items()
        for option in options
        for prim in option.copies
        if prim.role == "copy"
    )
    return Report(
        closed,
        restickifies,
        sum(r.cost for r in restickifies),
        tuple(inputs),
        tuple(outputs),
        copies,
        functools.partial(_ops, plan),  # the rows: made when first asked for
        sum(t.layout.nbytes for types in plan.sources.values() for t in types),
        program,
        collective_records(lowering.record),
        plan.collective_cost,
        functools.partial(_view_names, lowering),
    )


def _view_names(lowering: Lowering) -> frozenset[str]:
    """The top-level values the program makes as views of another value's image.

    Read from the program's record (``Lowering.record``): the primitive each node run
    bound to make each value. The record is of the trace ``explain`` prints, in both
    modes (under ``emulate="cores"``, the per-core program as it runs), so a recorded
    value is its variable (``tracer_var``, as residency maps the record:
    ``_annotated.residency_jaxpr``). Names are as ``explain`` prints the jaxpr
    (retyping the residencies keeps every variable where it is, so the names too).
    """
    views = {
        tracer_var(x)
        for run in lowering.record.runs
        for call in run.entries
        if isinstance(call, Call) and call.prim.role == "view"
        for x in call.outs
    }
    names = var_names(lowering.spyre_jaxpr)
    return frozenset(names[v] for v in views if v in names)


def _ops(plan: Plan) -> tuple[OpInfo, ...]:
    """Every planned node with its costs; a planned move is charged to its consumer.

    A move of a program's result (no consumer) is charged to the node that makes it.
    """
    moved: dict[Node, list[Move]] = {}
    for ms in plan.moves.values():
        for m in ms:
            if m.charged_to is not None:
                moved.setdefault(m.charged_to, []).append(m)
    return tuple(_op(node, options, moved.get(node, [])) for node, options in plan.runs.items())


def _op(node: Node, options: Any, moves: list[Move]) -> OpInfo:
    """One planned node's record: its bytes, restickifies, copies and host fallbacks."""
    count("explain.row")
    prims = [p for o in options for p in o.copies]
    resticks = [p for p in prims if p.role == "restickify"]
    copies = [p for p in prims if p.role == "copy"]
    hosts = [p for p in prims if p.role == "host"]
    nbytes = sum(t.layout.nbytes for o in options for t in o.outs if not (o.view or t.is_view))
    nbytes += sum(m.target.layout.nbytes for m in moves)
    nbytes += sum(p.layout.nbytes for p in resticks)
    return OpInfo(
        node.prim,
        node.line,
        " ".join(t.str_short() for o in options for t in o.outs),
        nbytes,
        len(moves) + len(resticks),
        sum(m.cost for m in moves) + sum(p.moves for p in resticks),
        len(copies),
        sum(p.moves for p in copies),
        _own_fallback(node, hosts),
        tuple(
            Fallback(p.prim, p.line, p.to_host_bytes, p.to_device_bytes)
            for p in hosts
            if isinstance(p, HostCharge)
        ),
    )


def _own_fallback(node: Node, hosts: list[Any]) -> Fallback | None:
    """The node's own host fallback (not one inside its bodies), or None."""
    own = [p for p in hosts if not isinstance(p, HostCharge)]
    if not own:
        return None
    up = sum(p.to_host_bytes for p in own)
    return Fallback(node.prim, node.line, up, sum(p.to_device_bytes for p in own))
