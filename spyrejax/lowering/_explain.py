"""``spyrejax.explain``: what spyrejax.jit does with a function, as a report."""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..dma._dci import DCI
from ..layout._layout import SpyreTensorLayout
from ..primitives._array import SpyreType
from ._collectives import CARD_TO_CARD_BYTES_PER_S, collective_records
from ._interpret import Record, records
from ._jit import SpyreJit

__all__ = ["Report", "TensorInfo", "explain"]


@dataclass(frozen=True)
class TensorInfo:
    """Device memory of one value of the Spyre-level jaxpr.

    Attributes:
        name: the jaxpr variable.
        type: its Spyre type (printed form).
        device_bytes: bytes of its device image.
        data_bytes: bytes its logical elements need in the device format.
        view: whether it is a view of another value's image (no memory of its own).
    """

    name: str
    type: str
    device_bytes: int
    data_bytes: int
    view: bool

    @property
    def padding_overhead(self) -> float:
        """Device bytes per data byte, minus one."""
        return self.device_bytes / self.data_bytes - 1 if self.data_bytes else 0.0


@dataclass(frozen=True)
class Report:
    """What spyrejax.jit does with a function for one input signature.

    Attributes:
        jaxpr: the Spyre-level jaxpr, a layout on every value.
        restickifies: each restickify with its value, reason, layouts and cost.
        restickify_cost: their total cost (elements moved).
        tensors: device bytes and padding overhead of every value.
        input_dcis: DMA descriptors moving the host inputs to the device.
        output_dcis: DMA descriptors moving the outputs back.
        copies: the copies the program's own ops make (slice, concatenate, pad, a
            reshape that is no view), each with its cost (elements moved).
        collectives: each collective between cards, with the bytes one card sends.
    """

    jaxpr: str
    restickifies: tuple[Record, ...]
    restickify_cost: int
    tensors: tuple[TensorInfo, ...]
    input_dcis: tuple[tuple[str, DCI], ...]
    output_dcis: tuple[tuple[str, DCI], ...]
    copies: tuple[tuple[str, int], ...] = ()
    collectives: tuple[tuple[str, int], ...] = ()

    @property
    def copy_cost(self) -> int:
        """Elements moved by the program's own copies."""
        return sum(cost for _, cost in self.copies)

    def __str__(self) -> str:
        out = ["Spyre-level jaxpr:", self.jaxpr, ""]
        out.append(f"restickify_cost: {self.restickify_cost} elements moved")
        for r in self.restickifies:
            out.append(f"  restickify {r.value} (cost {r.cost}): {r.reason}")
            out.append(f"    from {r.source_type}")
            out.append(f"    to   {r.target}")
        if self.copies:
            out.append(f"copy_cost: {self.copy_cost} elements moved by the program's copies")
            out.extend(f"  {what} (cost {cost})" for what, cost in self.copies)
        if self.collectives:
            sent = sum(b for _, b in self.collectives)
            secs = sent / CARD_TO_CARD_BYTES_PER_S
            out.append(f"collectives: {sent} B sent per card ({secs * 1e6:.2f} us card to card)")
            out.extend(f"  {what}: {b} B per card" for what, b in self.collectives)
        out.append("")
        out.append("tensors (device bytes, padding overhead):")
        for t in self.tensors:
            kind = "view" if t.view else f"{t.device_bytes} B, +{t.padding_overhead:.1%}"
            out.append(f"  {t.name}: {t.type}  [{kind}]")
        for title, dcis in (("input", self.input_dcis), ("output", self.output_dcis)):
            out.append("")
            out.append(f"{title} DMA descriptors:")
            for name, dci in dcis:
                out.append(f"  {name}: {len(dci)} descriptor(s)")
                for d in dci:
                    nest = d.loop_nest()
                    offsets = (nest.host_offset, nest.device_offset)
                    out.append(
                        f"    ranges {nest.ranges} host {nest.host_strides} "
                        f"device {nest.device_strides} offsets {offsets}"
                    )
        return "\n".join(out)

    def _repr_html_(self) -> str:
        e = html.escape
        parts = ["<div class='spyrejax-report'>"]
        parts.append(f"<p><b>restickify_cost</b>: {self.restickify_cost} elements moved</p>")
        if self.copies:
            parts.append(f"<p><b>copy_cost</b>: {self.copy_cost} elements moved by copies</p>")
        rows = "".join(
            f"<tr><td>{e(r.value)}</td><td>{r.cost}</td><td>{e(r.reason)}</td>"
            f"<td><code>{e(r.source_type)}</code></td><td><code>{e(str(r.target))}</code></td></tr>"
            for r in self.restickifies
        )
        parts.append(
            "<table><tr><th>value</th><th>cost</th><th>reason</th><th>from</th><th>to</th></tr>"
            f"{rows}</table>"
        )
        rows = "".join(
            f"<tr><td>{e(t.name)}</td><td><code>{e(t.type)}</code></td>"
            f"<td>{'view' if t.view else t.device_bytes}</td>"
            f"<td>{'' if t.view else f'{t.padding_overhead:.1%}'}</td></tr>"
            for t in self.tensors
        )
        parts.append(
            "<table><tr><th>value</th><th>type</th><th>device bytes</th><th>padding</th></tr>"
            f"{rows}</table>"
        )
        for title, dcis in (("input", self.input_dcis), ("output", self.output_dcis)):
            rows = "".join(
                f"<tr><td>{e(name)}</td><td>{i}</td><td>{d.loop_nest().ranges}</td>"
                f"<td>{d.loop_nest().host_strides}</td><td>{d.loop_nest().device_strides}</td></tr>"
                for name, dci in dcis
                for i, d in enumerate(dci)
            )
            parts.append(
                f"<p>{title} DMA descriptors</p><table><tr><th>value</th><th>#</th>"
                f"<th>ranges</th><th>host strides</th><th>device strides</th></tr>{rows}</table>"
            )
        parts.append(
            f"<details><summary>Spyre-level jaxpr</summary><pre>{e(self.jaxpr)}</pre></details>"
        )
        parts.append("</div>")
        return "".join(parts)


def _var_names(closed: Any) -> dict[Any, str]:
    """Names as JAX prints them: a, b, ..., z, ba, bb, ... in order of appearance."""

    def name(n: int) -> str:
        s = ""
        while not s or n:
            n, i = divmod(n, 26)
            s += chr(ord("a") + i)
        return s[::-1]

    jaxpr = closed.jaxpr
    order = [*jaxpr.constvars, *jaxpr.invars, *(o for e in jaxpr.eqns for o in e.outvars)]
    return {v: name(i) for i, v in enumerate(order)}


def _tensors(closed: Any) -> tuple[TensorInfo, ...]:
    out = []
    seen = set()
    names = _var_names(closed)
    producers = {o: e.params.get("_prim") for e in closed.jaxpr.eqns for o in e.outvars}
    for var in [*closed.jaxpr.invars, *(o for e in closed.jaxpr.eqns for o in e.outvars)]:
        aval = var.aval
        if not isinstance(aval, SpyreType) or var in seen:
            continue
        seen.add(var)
        lay = aval.layout
        data = math.prod(aval.shape) * 128 // lay.elems_per_stick
        prim = producers.get(var)
        view = getattr(prim, "role", None) == "view"
        out.append(TensorInfo(names[var], aval.str_short(), lay.nbytes, data, view))
    return tuple(out)


def explain(fun: Callable[..., Any] | SpyreJit, *args: Any, **kwargs: Any) -> Report:
    """What :func:`spyrejax.jit` does with ``fun`` on these arguments.

    Args:
        fun: a plain JAX function or a :class:`SpyreJit`.
        *args: its arguments (host arrays and Spyre arrays, as for the jitted call).
        **kwargs: its keyword arguments.

    Returns:
        A :class:`Report`: ``str()`` is a text report, and notebooks render it as HTML.
    """
    jitted = fun if isinstance(fun, SpyreJit) else SpyreJit(fun)
    lowering, _ = jitted._lowering(*args, **kwargs)
    plan = lowering.plan
    closed = lowering.spyre_jaxpr
    restickifies = tuple(records(plan))
    inputs = []
    for v, var in zip(lowering.graph.inputs, closed.jaxpr.invars, strict=True):
        t = var.aval
        if isinstance(t, SpyreType):
            continue  # already on the device
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
        (node.describe(), prim.moves)
        for node, options in plan.runs.items()
        for option in options
        for prim in option.copies
        if prim.role == "copy"
    )
    return Report(
        str(closed),
        restickifies,
        sum(r.cost for r in restickifies),
        _tensors(closed),
        tuple(inputs),
        tuple(outputs),
        copies,
        collective_records(closed),
    )
