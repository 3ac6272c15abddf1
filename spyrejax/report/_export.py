"""``spyrejax.export``: what the torch-spyre back end would get for a function.

One SuperDSC document per divided op, the program's launch spec (RFC 4755) and the DCI
JSON of its inputs and outputs, all from the plan of :func:`spyrejax.jit` and the device
model; ``write(directory)`` saves them as JSON files.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..device import DeviceProgram, Machine, default_machine, plan_program
from ..device._superdsc import launch_spec, program_superdsc
from ..frontend._filter_jit import FilterJit, staged
from ..frontend._gc import gc_paused
from ..frontend._jit import SpyreJit
from ..lowering._planner import host_input_type
from ..lowering.program._program import program_ops
from ..primitives._array import SpyreType

__all__ = ["Export", "export"]


@dataclass(frozen=True)
class Export:
    """The kernel specs of one function for one input signature.

    Attributes:
        superdsc: one SuperDSC document per divided op, in program order.
        launch: the launch spec.
        dci: per input and output (``in0``, ``out0``...), its DCI JSON object.
        program: the device model's plan the documents come from.
    """

    superdsc: tuple[dict[str, Any], ...]
    launch: dict[str, Any]
    dci: dict[str, dict[str, Any]]
    program: DeviceProgram

    def write(self, directory: str | Path) -> list[Path]:
        """Save every document as ``<name>.json`` under ``directory``; the paths written."""
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        files = {f"superdsc_{next(iter(d))}": d for d in self.superdsc}
        files["launch"] = self.launch
        files.update({f"dci_{k}": v for k, v in self.dci.items()})
        paths = []
        for name, doc in files.items():
            path = root / f"{name}.json"
            path.write_text(json.dumps(doc, indent=1))
            paths.append(path)
        return paths


def _ddr_bases(names: list[str], sizes: dict[str, int], align: int) -> dict[str, int]:
    """DDR base addresses: values one after another, aligned."""
    out, at = {}, 0
    for n in names:
        out[n] = at
        at += -(-sizes[n] // align) * align
    return out


def _written_in_place(program: DeviceProgram) -> DeviceProgram:
    """The program whose ops writing a result into a window of a larger buffer say so.

    A result the plan places in a window (``primitives._in_place.Place``) is written
    there by its producer: that op's output operand takes the window's layout, so its
    SuperDSC carries the window's ``frontGap_``/``backGap_``.
    """
    windows = {
        d.inputs[0][0]: d.output[1].layout
        for d in (op.desc for op in program.ops)
        if d.opfunc == "place" and d.inputs
    }
    ops = []
    for op in program.ops:
        div, name = op.division, op.desc.output[0]
        if div is not None and name in windows:
            out = div.space.output
            placed = replace(out, tensor=replace(out.tensor, layout=windows[name]))
            space = replace(div.space, operands=(*div.space.operands[:-1], placed))
            op = replace(op, division=replace(div, space=space))
        ops.append(op)
    return replace(program, ops=tuple(ops))


@gc_paused
def export(
    fun: Callable[..., Any] | SpyreJit | FilterJit,
    *args: Any,
    machine: Machine | None = None,
    **kwargs: Any,
) -> Export:
    """The SuperDSC documents, launch spec and DCI JSON of ``fun`` on these arguments.

    Args:
        fun: a plain JAX function, a :class:`SpyreJit` or a :class:`FilterJit`; an
            equinox module, or a function given modules, is planned as ``filter_jit``
            runs it (a module's Python bool and float fields static).
        *args: its arguments (arrays, Spyre arrays or ``jax.ShapeDtypeStruct``).
        machine: the machine profile (default ``Machine.spyre()``).
        **kwargs: its keyword arguments.
    """
    jitted = staged(fun, args, kwargs)
    lowering, _ = jitted._call_lowering(args, kwargs)
    machine = default_machine(machine)
    ops = program_ops(lowering.graph, lowering.plan, lowering.record)
    descs = ops.descs
    program = _written_in_place(plan_program(descs, machine, ops.ddr))
    sizes = {}
    for d in descs:
        for n, t in (*d.inputs, d.output):
            sizes[n] = t.nbytes
    base = _ddr_bases(list(sizes), sizes, machine.lx_alignment)
    docs = tuple(program_superdsc(program, base))
    in_types = [
        a if isinstance(a, SpyreType) else host_input_type(tuple(a.shape), a.dtype)
        for a in lowering.in_avals
    ]
    rows, dci = [], {}
    for i, t in enumerate(in_types):
        rows.append(("input", t.shape, t.dtype.name, t.layout))
        d = t.layout.for_host(t.base_shape).dci(host_dtype=t.dtype, name=f"in{i}")
        dci[f"in{i}"] = d.to_dict()
    for i, t in enumerate(lowering.out_types):
        rows.append(("output", t.shape, t.dtype.name, t.layout))
        d = t.layout.for_host(t.base_shape).dci(
            host_to_device=False, host_dtype=t.dtype, name=f"out{i}"
        )
        dci[f"out{i}"] = d.to_dict()
    name = getattr(jitted.fun, "__name__", "kernel")
    return Export(docs, launch_spec(name, rows), dci, program)
