"""The device model's ops of a planned program, read from the record of its one trace.

:func:`program_ops` lists the Spyre primitives a planned program runs, from the record
the interpreter made while tracing it (:mod:`spyrejax.lowering.program._record`: every op keeps
its node's source line), as :class:`spyrejax.device.OpDesc` values for
:func:`spyrejax.device.plan_program` (work division, LX residency and cost). The ops of
loop bodies and ``cond`` branches are listed too, each with its
:class:`spyrejax.device.Region`; an op's ``with_division`` hint is its record entry's
(``Call.division_hint``, placed by :func:`spyrejax.lowering.program._device.resolve_hints`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

import jax

from ..._errors import DeviceError
from ...device import OpDesc, Region
from ...primitives._array import SpyreType
from ...primitives._base import Wrap
from ...primitives._lanes import LaneView
from .._graph import Graph, Value
from .._planner import Plan
from .._spaces import type_spec as _spec
from ._device import classify, resolve_hints, traced
from ._record import Body, Call, Loop, NodeRun, Recorder

__all__ = ["ProgramOps", "program_ops"]


class _Names:
    """Names of (value, type) pairs: a value moved into another type is another buffer.

    It also numbers the program's loops and ``cond``s (``Region.index``).
    """

    def __init__(self) -> None:
        self.names: dict[tuple[Value, SpyreType], str] = {}
        self.count: dict[Value, int] = {}
        self.regions = itertools.count()
        self.buffers: dict[str, str] = {}  # a lane view's name -> its buffer's

    def __call__(self, v: Value, t: SpyreType) -> str:
        key = (v, t)
        if key not in self.names:
            k = self.count.get(v, 0)
            self.count[v] = k + 1
            self.names[key] = v.name if k == 0 else f"{v.name}~{k}"
        return self.names[key]


# --- a program's ops, from its record ------------------------------------------------------


class _Walk:
    """The ops one top-level node run binds, named and placed in regions.

    A value inside the lowering is named ``<first result>.<k>`` (``k``: the ops listed
    before it), a result by its (value, type) pair. A body's inputs take the names of
    the loop's operands, and the body's results that are the node's results take theirs;
    a loop's results take the names the body gave. ``shard_map`` bodies are one card's
    ops (no region); ``scan`` bodies' ops are listed once with the trip count as their
    ``repeat`` (nested scans multiply), ``while`` bodies and predicates once, every
    ``cond`` branch's ops (the program's totals count the costliest). Collectives are
    named but no device op (``explain`` times them at the card-to-card bandwidth).
    """

    def __init__(self, run: NodeRun, names: _Names, images: set[int]) -> None:
        self.names = names
        self.images = images
        self.env: dict[int, str] = {}
        self.objects: dict[int, Any] = {}
        self.descs: list[OpDesc] = []
        self.top = run
        self.first = ""
        self._regions: dict[int, Region] = {}
        self._shared: dict[int, list[str | None]] = {}

    def name(self, x: Any, name: str) -> None:
        self.env[id(x)] = name
        self.objects[id(x)] = x

    def start(self) -> dict[int, str] | None:
        """The run's operands and results named; its finals (None: it gives nothing new)."""
        run = self.top
        spyre = zip(run.ins, run.node.ins, run.option.ins, strict=True)
        for x, u, t in spyre:
            if t is not None:
                self.name(x, self.names(u, t))
        finals: dict[int, str] = {}
        for x, v, t in zip(run.outs, run.node.outs, run.option.outs, strict=True):
            if not traced(x) or id(x) in finals:
                continue
            if id(x) in self.env:  # a result that only forwards an operand
                self.names.names[v, t] = self.env[id(x)]
            else:
                finals[id(x)] = self.names(v, t)
        if not finals:
            return None
        self.first = next(iter(finals.values()))
        return finals

    def walk(
        self,
        entries: list[Any],
        finals: dict[int, str],
        region: Region | None,
        source: str,
    ) -> None:
        for e in entries:
            if isinstance(e, NodeRun):  # a body's node
                self.walk(e.entries, finals, region, e.node.source)
            elif isinstance(e, Body):
                self._body(e, finals, region, source)
            else:
                self._call(e, finals, region, source)

    def _call(self, call: Call, finals: dict[int, str], region: Region | None, source: str) -> None:
        outs = [o for o in call.outs if isinstance(jax.typeof(o), SpyreType)]
        if len(outs) != 1:
            return
        (out,) = outs
        self.name(out, finals.get(id(out)) or f"{self.first}.{len(self.descs)}")
        prim = call.prim
        if getattr(prim, "role", "") == "collective":
            return  # between cards: timed at the card link, not a device op
        ins = [(self.env[id(a)], jax.typeof(a)) for a in call.args if id(a) in self.env]
        buffers = self.names.buffers
        if isinstance(prim, LaneView) and ins:  # its sticks are its operand's
            buffers[self.env[id(out)]] = buffers.get(ins[0][0], ins[0][0])
        in_specs = [_spec(t, n, buffers.get(n, "")) for n, t in ins]
        out_spec = _spec(jax.typeof(out), self.env[id(out)])
        try:
            kind, opfunc, space = classify(prim, in_specs, out_spec)
        except DeviceError:
            kind, opfunc, space = "copy", type(prim).__name__.lower(), None
        if isinstance(prim, Wrap) and id(call.args[0]) in self.images:
            kind = "view"
        hint = call.division_hint if kind == "compute" else None
        self.descs.append(
            OpDesc(
                opfunc,
                kind,
                source,
                tuple((s.name, s) for s in in_specs),
                (out_spec.name, out_spec),
                space,
                hint,
                region=region,
            )
        )

    def _body(self, b: Body, finals: dict[int, str], region: Region | None, source: str) -> None:
        loop = b.loop
        inside = region if loop.kind == "shard_map" else self._region(loop, b, region, source)
        for x, o in b.ins:
            if id(o) in self.env:
                self.name(x, self.env[id(o)])
        named: dict[int, str] = {}
        for x, o in zip(b.outs, self._results(loop, finals), strict=False):
            if traced(x) and id(x) not in self.env and id(x) not in named and o is not None:
                named[id(x)] = o
        start = len(self.descs)
        self.walk(b.entries, named, inside, source)
        if loop.kind == "scan":
            n = loop.trips or 1
            self.descs[start:] = [replace(d, repeat=d.repeat * n) for d in self.descs[start:]]
        if loop.kind == "cond":
            return  # its results are named once, for every branch (see _results)
        if loop.kind != "shard_map" and b.role == "body":
            for x, o in zip(b.outs, loop.results, strict=False):
                if id(x) in self.env:
                    self.name(o, self.env[id(x)])

    def _results(self, loop: Loop, finals: dict[int, str]) -> list[str | None]:
        """The names a body's results take: the loop's results' (a ``cond``'s, shared)."""
        if loop.kind != "cond":
            return [finals.get(id(o)) for o in loop.results]
        shared = self._shared.get(id(loop))
        if shared is None:
            index = self._regions[id(loop)].index
            shared = [
                finals.get(id(o)) or f"{self.first}.cond{index}.{k}"
                for k, o in enumerate(loop.results)
            ]
            self._shared[id(loop)] = shared
            for o, name in zip(loop.results, shared, strict=True):
                self.name(o, name)
        return shared

    def _region(self, loop: Loop, b: Body, parent: Region | None, source: str) -> Region:
        """The region of a body: one per loop (a ``while``'s test and body share it)."""
        found = self._regions.get(id(loop))
        if found is None:
            found = Region(next(self.names.regions), loop.kind, source, loop.trips, parent=parent)
            self._regions[id(loop)] = found
        if loop.kind == "cond":
            return replace(found, branch=b.role, branches=len(loop.bodies))
        return found


def _node_descs(run: NodeRun, names: _Names, images: set[int]) -> _Walk:
    """The walk of one top-level node run (its ops in ``descs``)."""
    w = _Walk(run, names, images)
    finals = w.start()
    if finals is not None:
        w.walk(run.entries, finals, None, run.node.source)
    return w


@dataclass(frozen=True)
class ProgramOps:
    """A planned graph's device ops and the names of its values.

    Attributes:
        descs: the ops in program order.
        ddr: the names that live in DDR whatever the LX plan (graph inputs, outputs).
        names: the buffer name of each (graph value, planned type) pair.
        values: the traced values behind each name inside the nodes' lowerings (loop
            and ``shard_map`` bodies included).
    """

    descs: list[OpDesc]
    ddr: list[str]
    names: dict[tuple[Value, SpyreType], str]
    values: dict[str, list[Any]]


def program_ops(graph: Graph, plan: Plan, record: Recorder) -> ProgramOps:
    """The ops of a planned graph in program order, from the record of its trace.

    Raises:
        DeviceError: for a ``with_division`` hint the record cannot place
            (:func:`spyrejax.lowering.program._device.resolve_hints`).
    """
    resolve_hints(record)
    names = _Names()
    runs = {(r.node, r.index): r for r in record.runs}
    descs: list[OpDesc] = []
    values: dict[str, list[Any]] = {}
    ddr = []
    for v in graph.inputs:
        for t in plan.sources.get(v, []):
            ddr.append(names(v, t))
        descs.extend(_move_descs(plan, v, names))
    for node in graph.nodes:
        if not node.outs:  # run on the host for its effects only (jax.debug.print)
            continue
        for i in range(len(plan.runs.get(node, []))):
            w = _node_descs(runs[node, i], names, record.images)
            descs.extend(w.descs)
            for k, name in w.env.items():
                values.setdefault(name, []).append(w.objects[k])
        for v in node.outs:
            descs.extend(_move_descs(plan, v, names))
    for o, t in zip(graph.outputs, plan.outputs, strict=True):
        if isinstance(o, Value) and t is not None:
            ddr.append(names(o, t))
    return ProgramOps(descs, ddr, names.names, values)


def _move_descs(plan: Plan, v: Value, names: _Names) -> list[OpDesc]:
    out = []
    for m in plan.moves.get(v, []):
        src, dst = names(v, m.source), names(v, m.target)
        out.append(
            OpDesc(
                "restickify",
                "restickify",
                m.reason,
                ((src, _spec(m.source, src)),),
                (dst, _spec(m.target, dst)),
            )
        )
    return out
