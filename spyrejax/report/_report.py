"""``spyrejax.explain``'s :class:`Report`: its summary, details and HTML, and the device tables."""

from __future__ import annotations

import functools
import html
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._errors import DeviceError
from ..device import DeviceOp, DeviceProgram
from ..dma._dci import DCI
from ..layout._residency import Residency
from ..lowering._graph import reason_line, source_line
from ..lowering.program._interpret import Record
from ..primitives._array import SpyreType
from ._records import Fallback, LineInfo, OpInfo, TensorInfo

__all__ = ["Report", "var_names"]


def _short(line: str) -> str:
    """``file.py:12 (fn)`` without the directories."""
    path, sep, rest = line.partition(":")
    return path.rsplit("/", 1)[-1] + sep + rest


def _count(cost: int, n: int) -> str:
    return f"{cost} ({n})" if n else "-"


def _host(row: LineInfo) -> str:
    return f"{row.to_host_bytes}/{row.to_device_bytes}" if row.to_host_bytes else "-"


# The summary's columns: header and cell of a LineInfo (one table for text and HTML).
_COLUMNS: tuple[tuple[str, Callable[[LineInfo], str]], ...] = (
    ("source line", lambda r: _short(r.line)),
    ("restickify (n)", lambda r: _count(r.restickify_cost, r.restickifies)),
    ("copy (n)", lambda r: _count(r.copy_cost, r.copies)),
    ("host B out/in", _host),
    ("device B", lambda r: str(r.device_bytes)),
    ("device us", lambda r: f"{r.device_s * 1e6:.1f}" if r.device_s else "-"),
    ("ops", lambda r: _clip(r.prims, _OPS_CELL)),
)
_MAX_ROWS = 20  # lines shown in the summary (moving data or taking device time)
_MIN_ROWS = 8  # rows shown when fewer lines do (the next by device bytes)
_MAX_CELL = 48
_OPS_CELL = 32  # the primitives of a line: report.lines has them all


def _clip(text: str, width: int = _MAX_CELL) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


@dataclass(frozen=True, repr=False)
class Report:
    """What spyrejax.jit does with a function for one input signature.

    ``str(report)`` (and ``repr``) is a summary, like a profile: one row per user
    source line that moves data (restickifies and copies with the elements they move,
    host fallbacks with the bytes they move each way, device bytes), then the totals.
    :meth:`details` is the full text; notebooks render the summary as HTML with the
    details in a folding section.

    Attributes:
        jaxpr: the Spyre-level jaxpr, a layout on every value, and ``@LX[c0:n]+offset``
            on those the device model keeps in the LX of cores 0..n-1 (no ``@``: DDR).
        restickifies: each restickify with its value, reason, layouts, cost and line.
        restickify_cost: their total cost (elements moved).
        tensors: device bytes and padding overhead of every value.
        input_dcis: DMA descriptors moving the host inputs to the device.
        output_dcis: DMA descriptors moving the outputs back.
        copies: the copies the program's own ops make (slice, concatenate, pad, a
            reshape that is no view), each with its cost (elements moved).
        device: the program on the machine (spyrejax.device): every op divided over
            the cores, LX residency, predicted time.
        nodes: every node of the plan with what it costs, in plan order.
        fallbacks: every node run on the host (no device rule), with the bytes it
            moves each way.
        source_bytes: device bytes of the inputs and constants.
        collectives: each collective between cards, with the bytes one card sends.
        collective_cost: elements all the cards send each other (the plan's cost of
            the collectives: every card counts, as restickify_cost counts every card's
            restickifies inside a ``shard_map``).
    """

    _closed: Any  # the Spyre-level ClosedJaxpr: jaxpr and tensors come from it on demand
    restickifies: tuple[Record, ...]
    restickify_cost: int
    input_dcis: tuple[tuple[str, DCI], ...]
    output_dcis: tuple[tuple[str, DCI], ...]
    copies: tuple[tuple[str, int], ...] = ()
    _nodes: Callable[[], tuple[OpInfo, ...]] = field(default=tuple, compare=False)
    source_bytes: int = 0
    device: DeviceProgram | None = None

    @functools.cached_property
    def jaxpr(self) -> str:
        """The Spyre-level jaxpr as text, printed when first asked for.

        A large program's text costs a good part of ``explain``'s time.
        """
        return self._closed.pretty_print(use_color=False)  # plain text in notebooks too

    @functools.cached_property
    def nodes(self) -> tuple[OpInfo, ...]:
        """Every node of the plan with its costs, in plan order (made when first asked for)."""
        return self._nodes()

    @functools.cached_property
    def fallbacks(self) -> tuple[Fallback, ...]:
        """Every node run on the host, with the bytes it moves each way."""
        return tuple(f for o in self.nodes for f in o.fallbacks)

    @functools.cached_property
    def tensors(self) -> tuple[TensorInfo, ...]:
        """Device bytes and padding overhead of every value (made when first asked for)."""
        return _tensors(self._closed, self._views())

    @property
    def ops(self) -> tuple[DeviceOp, ...]:
        """The device ops: ``ops[i].division.splits``, ``.read_bytes``, ``.time_s``..."""
        return self.device.ops if self.device is not None else ()

    @property
    def time_s(self) -> float:
        """The program's predicted device time on the machine, in seconds.

        Host overhead per call (``machine.host_call_s``) is not in it.
        """
        return self.device.time_s if self.device is not None else 0.0

    @property
    def lx_fraction(self) -> float | None:
        """The scratchpad budget the prediction was made with (None: no device model)."""
        return self.device.lx_fraction if self.device is not None else None

    collectives: tuple[tuple[str, int], ...] = ()
    collective_cost: int = 0
    # The names (as the jaxpr prints them) of the values that are views, from the record.
    _views: Callable[[], frozenset[str]] = field(default=frozenset, compare=False)

    def residency(self, name: str) -> Residency:
        """Where the value of jaxpr variable ``name`` (as :attr:`jaxpr` prints it) lives.

        Variables of the top level (:attr:`tensors`); inside a ``shard_map`` body the
        jaxpr text shows them and ``report.device.residency`` gives them by buffer name.

        Raises:
            DeviceError: for a name that is not a Spyre value of the jaxpr.
        """
        for t in self.tensors:
            if t.name == name:
                return t.residency
        raise DeviceError(
            f"Report.residency: {name!r} is not a Spyre value of the jaxpr "
            f"(report.tensors lists them: {', '.join(t.name for t in self.tensors[:8])}...)"
        )

    @property
    def copy_cost(self) -> int:
        """Elements moved by the program's own copies."""
        return sum(cost for _, cost in self.copies)

    @property
    def lines(self) -> tuple[LineInfo, ...]:
        """One row per source line, the costliest first (device time, elements moved, bytes).

        The lines of the JAX-level ops, and the lines of the ops inside loop and branch
        bodies (rows with no op of their own, their device time only), so the device
        times of the rows add up to the program's.
        """
        by_line: dict[str, list[OpInfo]] = {}
        for op in self.nodes:
            by_line.setdefault(op.line, []).append(op)
        times = self.line_times
        rows = [
            LineInfo.of(line, tuple(ops), times.get(line, 0.0)) for line, ops in by_line.items()
        ]
        rows += [LineInfo.of(line, (), t) for line, t in times.items() if line not in by_line]
        return tuple(
            sorted(rows, key=lambda r: (-r.device_s, -r.moved, -r.to_host_bytes, -r.device_bytes))
        )

    @functools.cached_property
    def line_times(self) -> dict[str, float]:
        """Predicted device seconds per source line (of the ops the totals count).

        A restickify the plan makes for a node counts on that node's line.
        """
        out: dict[str, float] = {}
        for op in self.device.counted if self.device is not None else ():
            line = reason_line(op.source)
            out[line] = out.get(line, 0.0) + op.time_s
        return out

    @property
    def device_bytes(self) -> int:
        """Device bytes of the inputs and of everything the ops allocate."""
        return self.source_bytes + sum(o.device_bytes for o in self.nodes)

    def _op_lines(self) -> int:
        """How many source lines the JAX-level ops are on."""
        return len({op.line for op in self.nodes})

    def _rows(self) -> tuple[list[LineInfo], list[LineInfo]]:
        """The lines shown (the costly ones first, then by device bytes), and the rest."""
        lines = self.lines
        busy = [r for r in lines if r.costly or r.device_s]
        shown = busy[:_MAX_ROWS]
        shown += [r for r in lines if r not in busy][: max(0, _MIN_ROWS - len(shown))]
        return shown, [r for r in lines if r not in shown]

    def _totals(self) -> list[str]:
        in_lx = sum(r.in_lx for r in self.restickifies)
        loaded = f", {in_lx} of them relaid in LX as a matmul loads them" if in_lx else ""
        out = [
            f"restickify_cost: {self.restickify_cost} elements moved "
            f"({len(self.restickifies)} restickifies{loaded})",
            f"copy_cost: {self.copy_cost} elements moved by the program's copies "
            f"({len(self.copies)} copies)",
        ]
        if self.fallbacks:
            to_host = sum(f.to_host_bytes for f in self.fallbacks)
            back = sum(f.to_device_bytes for f in self.fallbacks)
            out.append(
                f"host fallbacks: {len(self.fallbacks)} ops without a device rule run on the "
                f"host, moving {to_host} B to the host and {back} B back"
            )
        else:
            out.append("host fallbacks: none")
        out.append(
            f"device bytes: {self.device_bytes} ({self.source_bytes} of inputs and constants, "
            "the rest allocated by the ops)"
        )
        if self.collectives:
            out.append(f"collectives between cards: {self._collectives_line()}")
        if self.device is not None:
            out.extend(_device_lines(self.device))
        return out

    def _collectives_line(self) -> str:
        sent = sum(b for _, b in self.collectives)
        line = f"{sent} B sent per card"
        if self.device is not None:
            secs = sent / self.device.machine.card_link_bw
            line += f" ({secs * 1e6:.2f} us card to card on {self.device.machine.name})"
        return line + f"; collective_cost: {self.collective_cost} elements sent by all cards"

    def _counts(self) -> str:
        """``12 ops on 3 source lines`` (``1 op on 1 source line``)."""
        ops, lines = len(self.nodes), self._op_lines()
        return f"{_plural(ops, 'op')} on {_plural(lines, 'source line')}"

    def summary(self) -> str:
        """The profile: the costly source lines, then the totals (``str(report)``)."""
        shown, rest = self._rows()
        out = [f"spyrejax.explain: {self._counts()}"]
        if not any(r.costly for r in shown):
            out.append("  nothing moves between layouts: no restickify, copy or host fallback")
        if shown:
            cells = [[h for h, _ in _COLUMNS]]
            cells += [[_clip(cell(r)) for _, cell in _COLUMNS] for r in shown]
            widths = [max(len(row[i]) for row in cells) for i in range(len(_COLUMNS))]
            for row in cells:
                cols = "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
                out.append(f"  {cols}".rstrip())
        if rest:
            ops = sum(len(r.ops) for r in rest)
            nbytes = sum(r.device_bytes for r in rest)
            more = sum(r.costly for r in rest)
            what = f"{more} more that move data, " if more else ""
            out.append(
                f"  ({len(rest)} other lines: {what}{ops} ops, {nbytes} device B; report.lines)"
            )
        out.extend(self._totals())
        out.append(
            "report.details(): the Spyre-level jaxpr, every restickify and copy with its "
            "layouts, device bytes per tensor, DMA descriptors, the device model per op"
        )
        return "\n".join(out)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return self.summary()

    def details(self) -> str:
        """The full report: Spyre-level jaxpr, every restickify, copy, fallback, tensor, DMA."""
        out = ["Spyre-level jaxpr:", self.jaxpr, ""]
        out.append(f"restickify_cost: {self.restickify_cost} elements moved")
        for r in self.restickifies:
            out.append(f"  restickify {r.value} (cost {r.cost}): {r.reason}")
            out.append(f"    from {r.source_type}")
            out.append(f"    to   {r.target}")
        if self.copies:
            out.append(f"copy_cost: {self.copy_cost} elements moved by the program's copies")
            out.extend(f"  {what} (cost {cost})" for what, cost in self.copies)
        if self.fallbacks:
            out.append("host fallbacks (no device rule):")
            out.extend(
                f"  {f.prim} at {f.line}: {f.to_host_bytes} B to the host, "
                f"{f.to_device_bytes} B back"
                for f in self.fallbacks
            )
        if self.collectives:
            out.append(f"collectives: {self._collectives_line()}")
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
        if self.device is not None:
            out.extend(["", str(self.device)])
        return "\n".join(out)

    def _repr_html_(self) -> str:
        e = html.escape
        shown, rest = self._rows()
        parts = ["<div class='spyrejax-report'>"]
        parts.append(f"<p>spyrejax.explain: {self._counts()}</p>")
        head = "".join(f"<th>{e(h)}</th>" for h, _ in _COLUMNS)
        rows = "".join(
            "<tr>" + "".join(f"<td>{e(cell(r))}</td>" for _, cell in _COLUMNS) + "</tr>"
            for r in shown
        )
        parts.append(f"<table><tr>{head}</tr>{rows}</table>")
        if rest:
            parts.append(f"<p>{len(rest)} other source lines (<code>report.lines</code>)</p>")
        parts.append("<ul>" + "".join(f"<li>{e(t)}</li>" for t in self._totals()) + "</ul>")
        parts.append(f"<details><summary>details</summary>{self._details_html()}</details>")
        parts.append("</div>")
        return "".join(parts)

    def _details_html(self) -> str:
        e = html.escape
        parts = [f"<p><b>restickify_cost</b>: {self.restickify_cost} elements moved</p>"]
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
        if self.fallbacks:
            rows = "".join(
                f"<tr><td>{e(f.prim)}</td><td>{e(f.line)}</td><td>{f.to_host_bytes}</td>"
                f"<td>{f.to_device_bytes}</td></tr>"
                for f in self.fallbacks
            )
            parts.append(
                "<p>host fallbacks (no device rule)</p><table><tr><th>primitive</th>"
                f"<th>source line</th><th>B to host</th><th>B back</th></tr>{rows}</table>"
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
        if self.device is not None:
            parts.append(_device_html(self.device))
        parts.append(
            f"<details><summary>Spyre-level jaxpr</summary><pre>{e(self.jaxpr)}</pre></details>"
        )
        return "".join(parts)


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _device_lines(program: DeviceProgram) -> list[str]:
    """The predicted time, and what the loops and branches count, for the summary."""
    m, ops = program.machine, program.counted
    bound = {b: sum(op.time_s for op in ops if op.bound == b) for b in ("compute", "memory")}
    classes = ", ".join(f"{t * 1e6:.3f} us {b}-bound" for b, t in bound.items() if t > 0)
    out = [
        f"predicted time on {m.name} ({m.cores} cores, LX fraction {m.lx_fraction:g}): "
        f"{program.time_s * 1e6:.3f} us of device time (each op by its larger term: "
        f"{classes or 'none'}; report.ops per op)",
        f"  LX peak {program.lx_peak} of {program.lx_budget} B per core; host overhead "
        f"per call {m.host_call_s * 1e3:g} ms wall, not in the device time",
    ]
    out.extend(_fused_lines(program))
    regions: dict[Any, list[DeviceOp]] = {}
    for op in program.ops:
        if op.region is not None:
            regions.setdefault(op.region, []).append(op)
    if not regions:
        return out
    parts = []
    for region, inside in regions.items():
        what = ("scan " if region.kind == "scan" else "") + region.describe()
        left = "" if any(op.runs for op in inside) else ", not counted: a cheaper branch"
        at = _short(source_line(region.source))
        parts.append(f"{what} at {at} ({len(inside)} ops{left})")
    out.append("  in loops and branches: " + "; ".join(parts))
    if program.lower_bound:
        out.append(
            "  a lower bound: each while loop's body counts once (its trip count is unknown "
            "at trace time)"
        )
    return out


_MAX_FUSED = 3  # kernel families named in the summary; report.device.groups has them all


def _fused_lines(program: DeviceProgram) -> list[str]:
    """The fused kernels, those of one family on one line together (repeated layers).

    A kernel whose intermediates do not stay in LX says where they are (``softmax (two
    passes, rows over LX)``).
    """
    if not program.groups:
        return []
    by: dict[tuple[str, str], list[Any]] = {}
    for g in program.groups:
        if any(program.ops[i].runs for i in g.ops):
            line = _short(source_line(g.source)).split(" (", 1)[0]  # file:line
            family = g.family if g.in_lx else f"{g.family} ({g.where})"
            by.setdefault((family, line), []).append(g)
    ranked = sorted(by.items(), key=lambda kv: -sum(g.time_s for g in kv[1]))
    parts = []
    for (family, line), gs in ranked[:_MAX_FUSED]:
        n = f"{len(gs)}x " if len(gs) > 1 else ""
        fused, apart = sum(g.time_s for g in gs) * 1e6, sum(g.unfused_s for g in gs) * 1e6
        parts.append(f"{n}{family} at {line} {fused:.1f} us ({apart:.1f} us unfused)")
    more = f"; {len(ranked) - _MAX_FUSED} more" if len(ranked) > _MAX_FUSED else ""
    return [f"  fused kernels ({len(program.groups)}): " + "; ".join(parts) + more]


_DEVICE_COLUMNS = (
    ("op", "op"),
    ("division", "division"),
    ("read_bytes", "DDR read B"),
    ("write_bytes", "DDR write B"),
    ("macs", "MACs"),
    ("lx_peak", "LX peak B"),
    ("time_us", "predicted us"),
    ("bound", "bound"),
    ("kernel", "fused kernel"),
    ("source", "source"),
    ("loop", "loop / branch"),
)


def _device_html(program: DeviceProgram) -> str:
    """The device model's table: one row per op (``DeviceProgram.table``), and the total."""
    e = html.escape
    head = "".join(f"<th>{e(title)}</th>" for _, title in _DEVICE_COLUMNS)
    rows = []
    for r in program.table():
        cells = []
        for key, _ in _DEVICE_COLUMNS:
            v = r[key]
            text = f"{v:.3f}" if isinstance(v, float) else str(v)
            if key == "time_us" and r["note"]:
                text += f" ({r['note']})"
            cells.append(f"<td>{e(text)}</td>")
        rows.append(f"<tr>{''.join(cells)}</tr>")
    m = program.machine
    lower = " (a lower bound: while loops counted once)" if program.lower_bound else ""
    return (
        f"<p><b>device model</b> ({e(m.name)}, {m.cores} cores, LX fraction "
        f"{m.lx_fraction:g}): predicted {program.time_s * 1e6:.3f} us{lower} of device "
        f"time (host overhead per call {m.host_call_s * 1e3:g} ms wall, not in it), "
        f"LX peak {program.lx_peak} of {program.lx_budget} B per core</p>"
        f"<table><tr>{head}</tr>{''.join(rows)}</table>"
    )


def var_names(closed: Any) -> dict[Any, str]:
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


def _tensors(closed: Any, views: frozenset[str]) -> tuple[TensorInfo, ...]:
    """A row per Spyre value of the top level of ``closed``, as it prints them.

    ``views``: the names of the values that are views of another value's image (the
    program's record says which op made each value: ``explain`` reads them from it).
    """
    out = []
    seen = set()
    names = var_names(closed)
    for var in [*closed.jaxpr.invars, *(o for e in closed.jaxpr.eqns for o in e.outvars)]:
        aval = var.aval
        if not isinstance(aval, SpyreType) or var in seen:
            continue
        seen.add(var)
        lay = aval.layout
        data = math.prod(aval.shape) * 128 // lay.elems_per_stick
        name = names[var]
        out.append(
            TensorInfo(name, aval.str_short(), lay.nbytes, data, name in views, aval.residency)
        )
    return tuple(out)
