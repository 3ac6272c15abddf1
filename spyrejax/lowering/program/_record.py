"""What a planned program binds, recorded once while the interpreter traces it.

The interpreter runs each node's planned option with Spyre primitives; with a
:class:`Recorder` active (:func:`recording`) every primitive bound is recorded in
order, with its operands and its result (the traced values themselves: which op reads
which is their identity), inside the node run (:class:`NodeRun`) that bound it. The
loop, branch and ``shard_map`` rules open a :class:`Body` around each body they trace
(:func:`body`) and say which outer values its inputs and results stand for
(:func:`finish`): a body's node runs nest inside it. The device model
(:func:`spyrejax.lowering.program._program.program_ops`), the ``with_division`` hints and
residency read this record: nothing traces a lowering again or walks a jaxpr. A hint is
resolved on the record to the calls it divides (their ``division_hint``:
:func:`spyrejax.lowering.program._device.resolve_hints`).

JAX may trace one body more than once (to settle a carry's type): the last trace is
the one the program keeps, so :func:`finish` keeps the last body traced per role.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from ... import primitives as sp
from ...primitives._base import Image
from .._graph import Node

__all__ = ["Body", "Call", "Loop", "NodeRun", "Recorder", "body", "finish", "loop", "recording"]


@dataclass(eq=False)
class Call:
    """One Spyre primitive bound: the primitive, its operands and its result(s).

    ``division_hint``: the splits of the ``with_division`` hint that divides it (set when
    the record's hints are resolved), or None.
    """

    prim: Any
    args: tuple[Any, ...]
    out: Any
    division_hint: dict[str, int] | None = None

    @property
    def outs(self) -> list[Any]:
        """Its results (a primitive with several gives a tuple)."""
        return list(self.out) if isinstance(self.out, tuple | list) else [self.out]


@dataclass(eq=False)
class NodeRun:
    """One planned option of a node, run: what its lowering bound.

    Attributes:
        node: the node.
        index: which of its planned options.
        option: that option.
        ins: the values its lowering was given (scalars as they are).
        outs: the values it returned.
        hint: the node's ``with_division`` hint (``_device.Hint``), or None.
        entries: the calls, bodies and (inside bodies) node runs, in binding order.
    """

    node: Node
    index: int
    option: Any
    ins: list[Any]
    hint: Any = None
    outs: list[Any] = field(default_factory=list)
    entries: list[Any] = field(default_factory=list)


@dataclass(eq=False)
class Loop:
    """A loop, ``cond`` or ``shard_map`` of a lowering: its bodies and its results.

    Attributes:
        kind: ``"scan"``, ``"while"``, ``"cond"`` or ``"shard_map"``.
        trips: a scan's length.
        results: the values the loop gives (set by :func:`finish`).
        bodies: its bodies traced, by role (a ``while``'s ``"test"`` and ``"body"``, a
            branch's index), the last trace of each.
    """

    kind: str
    trips: int | None = None
    results: list[Any] = field(default_factory=list)
    bodies: dict[Any, Body] = field(default_factory=dict)


@dataclass(eq=False)
class Body:
    """One body of a :class:`Loop` as traced.

    Attributes:
        loop: its loop.
        role: its role in the loop (see :attr:`Loop.bodies`).
        ins: ``(inside, outside)`` pairs: the body's inputs and the loop operands they are.
        images: device images the body takes as inputs (a scan's slices).
        outs: the values the body gives (the first are the loop's results').
        entries: what it bound (see :attr:`NodeRun.entries`).
    """

    loop: Loop
    role: Any
    ins: list[tuple[Any, Any]]
    images: list[Any] = field(default_factory=list)
    outs: list[Any] = field(default_factory=list)
    entries: list[Any] = field(default_factory=list)


class Recorder:
    """Collects what a program binds (see the module docstring).

    Attributes:
        runs: the top-level node runs, in order.
        images: device images that are an array's own (:class:`~spyrejax.primitives._base.Image`
            results, a loop's stacked results): a ``wrap`` of one moves no data.
        hinted: once the hints are resolved (``_device.resolve_hints``), what each
            hinted node run's hint divides, by ``(node, option index)``; None before.
        executes: the program runs with its own executor while recorded (the per-core
            program of ``emulate="cores"``): each call's result is the executor's, a
            value of the trace the program is (see :func:`recording`).
    """

    def __init__(self, executes: bool = False) -> None:
        self.executes = executes
        self.runs: list[NodeRun] = []
        self.images: set[int] = set()
        self.hinted: dict[tuple[Node, int], Any] | None = None
        self._stack: list[Any] = []
        self._kept: list[Any] = []  # every object whose id the record uses stays alive

    def __call__(self, prim: Any, args: tuple[Any, ...], out: Any) -> None:
        if not self._stack:
            return  # between nodes: a planned move, a constant or an input put on the device
        call = Call(prim, args, out)
        self._stack[-1].entries.append(call)
        if isinstance(prim, Image):
            self.images.update(id(o) for o in call.outs)

    @contextlib.contextmanager
    def node(self, run: NodeRun) -> Iterator[NodeRun]:
        """Record the calls of one node run (nested in the open body, if any)."""
        (self._stack[-1].entries if self._stack else self.runs).append(run)
        self._stack.append(run)
        try:
            yield run
        finally:
            self._stack.pop()

    @contextlib.contextmanager
    def body(self, b: Body) -> Iterator[Body]:
        """Record the calls of one body of a loop."""
        self._stack[-1].entries.append(b)
        self._stack.append(b)
        try:
            yield b
        finally:
            self._stack.pop()
        self.images.update(id(x) for x in b.images)
        self._kept.append(b)


_RECORDER: ContextVar[Recorder | None] = ContextVar("spyrejax_recorder", default=None)


@contextlib.contextmanager
def recording(executes: bool = False) -> Iterator[Recorder]:
    """Record what the interpreter binds inside the block.

    By default no executor runs meanwhile: the record is the program's own ops, traced
    plain. ``executes``: the interpreter runs with its executor (``emulate="cores"``'s
    per-core one) and the record is of that trace, the same primitives bound on the
    same operand types, each result the executor's (the printed per-core program's
    variables are then the recorded values').
    """
    rec = Recorder(executes)
    token = _RECORDER.set(rec)
    try:
        with (
            contextlib.nullcontext() if executes else sp.executing(None),  # type: ignore[arg-type]
            sp.recording(rec),
        ):
            yield rec
    finally:
        _RECORDER.reset(token)


def active() -> Recorder | None:
    """The recorder of the trace running, or None."""
    return _RECORDER.get()


def loop(kind: str, trips: int | None = None) -> Loop | None:
    """A new loop of the node run being recorded (None when nothing records)."""
    return None if _RECORDER.get() is None else Loop(kind, trips)


@contextlib.contextmanager
def body(
    of: Loop | None, role: Any, ins: list[Any], outer: list[Any], images: Sequence[Any] = ()
) -> Iterator[Body | None]:
    """Record one body of ``of`` traced inside the block; its inputs stand for ``outer``.

    The block sets the yielded body's ``outs``. Nothing is recorded if ``of`` is None.
    """
    rec = _RECORDER.get()
    if of is None or rec is None:
        yield None
        return
    b = Body(of, role, list(zip(ins, outer, strict=True)), list(images))
    with rec.body(b):
        yield b
    old = of.bodies.get(role)
    if old is not None:  # traced again: the program keeps the last trace
        for entries in _entries_holding(rec, old):
            entries.remove(old)
    of.bodies[role] = b


def _entries_holding(rec: Recorder, b: Body) -> Iterator[list[Any]]:
    for frame in rec._stack:
        if b in frame.entries:
            yield frame.entries


def finish(of: Loop | None, results: list[Any], images: Sequence[Any] = ()) -> None:
    """The values a loop gives (``images``: its stacked results, device images)."""
    rec = _RECORDER.get()
    if of is None or rec is None:
        return
    of.results = list(results)
    rec.images.update(id(x) for x in images)
    rec._kept.append(list(images))
