"""A program on the device: its ops, their divisions, LX placement and predicted cost.

The lowering side lists a program's ops as :class:`OpDesc` values (pure data: names of
the values each reads and writes, their :class:`TensorSpec`, the iteration space of a
compute op); :func:`~spyrejax.device.plan_program` (:mod:`._plan`) makes of them a
:class:`DeviceProgram`: every op a :class:`DeviceOp` with its division and cost.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from .._errors import DeviceError
from ..layout._residency import DDR, Residency
from ._cost import OpCost
from ._division import WorkDivision
from ._lx import LXPlan, Stream
from ._machine import Machine
from ._space import OpSpace, TensorSpec

__all__ = [
    "DeviceOp",
    "DeviceProgram",
    "FusedGroup",
    "OpDesc",
    "Region",
]


@dataclass(frozen=True)
class Region:
    """The body of a loop, or one branch of a ``cond``, that ops of a program belong to.

    Attributes:
        index: which loop or ``cond`` of the program (the branches of one ``cond``
            share it), in program order.
        kind: ``"scan"``, ``"while"`` or ``"cond"``.
        source: the user's source line of the loop or ``cond``.
        trips: a ``scan``'s trip count; None for a ``while`` (unknown at trace time,
            counted once: a lower bound) and a ``cond``.
        branch: a ``cond``'s branch (0-based), else None.
        branches: how many branches the ``cond`` has, else None.
        parent: the region around this one, None at the top level.
    """

    index: int
    kind: str
    source: str
    trips: int | None = None
    branch: int | None = None
    branches: int | None = None
    parent: Region | None = None

    def chain(self) -> tuple[Region, ...]:
        """The regions from the outermost to this one."""
        return (*(self.parent.chain() if self.parent else ()), self)

    def describe(self) -> str:
        """``x12`` (a scan), ``while (>=1)``, ``cond branch 1 of 2``; nested ones outer first."""
        parts = []
        for r in self.chain():
            if r.kind == "scan":
                parts.append(f"x{r.trips}")
            elif r.kind == "while":
                parts.append("while (>=1)")
            else:
                parts.append(f"cond branch {r.branch} of {r.branches}")
        return " ".join(parts)


@dataclass(frozen=True)
class OpDesc:
    """One op of a program, as the lowering lists it.

    Attributes:
        opfunc: the op's name.
        kind: ``"compute"`` (divided), ``"restickify"``, ``"copy"`` (a device copy) or
            ``"view"`` (no data moves).
        source: the user's source line.
        inputs: ``(value name, tensor)`` per Spyre operand.
        output: ``(value name, tensor)`` of the result.
        space: the iteration space of a compute op.
        hint: splits the user fixed with ``with_division``.
        repeat: how many times it runs: the trip counts of the ``scan`` loops around
            it (1 outside loops; a ``while`` loop counts once). Its cost counts every run.
        region: the innermost loop body or branch it belongs to (None: top level).
    """

    opfunc: str
    kind: str
    source: str
    inputs: tuple[tuple[str, TensorSpec], ...]
    output: tuple[str, TensorSpec]
    space: OpSpace | None = None
    hint: Mapping[str, int] | None = None
    repeat: int = 1
    region: Region | None = None


@dataclass(frozen=True)
class DeviceOp:
    """One op of a planned program.

    Attributes:
        index: position in the program.
        desc: what the lowering listed.
        division: the work division (compute ops), else None.
        cost: the predicted cost, of every run of an op in a loop (``desc.repeat``).
        lx_inputs: names of the inputs read from LX.
        lx_output: whether the result stays in LX.
        streams: per input/output operand index, the streaming loop of a per-core
            slice too large for LX (only operands that need one).
        lx_peak: LX bytes per core live while the op runs (intermediates placed in LX).
        runs: how many times it counts in the program's totals: ``repeat``, or 0 for
            an op of a ``cond`` branch that is not the costliest.
        group: the index of the fused kernel it runs in (``DeviceProgram.groups``), or
            None: its own kernel. Its cost is then its part of that kernel (no launch but
            the first op's, no DDR traffic for the values kept in LX).
    """

    index: int
    desc: OpDesc
    division: WorkDivision | None
    cost: OpCost
    lx_inputs: tuple[str, ...] = ()
    lx_output: bool = False
    streams: tuple[tuple[int, Stream], ...] = ()
    lx_peak: int = 0
    runs: int = 1
    group: int | None = None

    @property
    def opfunc(self) -> str:
        """The op's name."""
        return self.desc.opfunc

    @property
    def source(self) -> str:
        """The user's source line."""
        return self.desc.source

    @property
    def repeat(self) -> int:
        """How many times it runs (the trip counts of the loops around it)."""
        return self.desc.repeat

    @property
    def region(self) -> Region | None:
        """The innermost loop body or ``cond`` branch it belongs to (None: top level)."""
        return self.desc.region

    @property
    def read_bytes(self) -> int:
        """DDR bytes read."""
        return self.cost.read_bytes

    @property
    def write_bytes(self) -> int:
        """DDR bytes written."""
        return self.cost.write_bytes

    @property
    def macs(self) -> int:
        """Multiply-accumulates."""
        return self.cost.macs

    @property
    def time_s(self) -> float:
        """Predicted seconds."""
        return self.cost.time_s

    @property
    def bound(self) -> str:
        """``"compute"`` or ``"memory"``."""
        return self.cost.bound

    def core_bytes(self) -> tuple[int, ...]:
        """Per-core device bytes of each operand (inputs, then output) on core 0."""
        d = self.division
        if d is None:
            return ()
        return tuple(d.core_bytes(i) for i in range(len(d.space.operands)))


@dataclass(frozen=True)
class FusedGroup:
    """A chain of ops the program runs as one kernel (found by ``device._fusion``).

    Attributes:
        index: its position in ``DeviceProgram.groups``.
        family: ``softmax``, ``layer_norm``, ``rms_norm``, ``attention`` or
            ``matmul_epilogue``.
        ops: the indices of its ops in the program (views between them included).
        source: the user's source line of the op naming it (``Fusion.anchor``).
        internal: the values made and read only inside it.
        in_lx: whether they stay in LX: a row of each (what one result of its
            reductions reads on a core, or the last dim) fits the LX budget together.
            If not, a softmax or a norm streams its rows in two passes (``passes``);
            an attention or an epilogue sends them through DDR.
        time_s: the kernel's predicted seconds (the sum of its ops' parts), every run.
        unfused_s: what its ops cost as kernels of their own.
        passes: how many times the kernel reads its inputs (2: rows over LX, streamed).
    """

    index: int
    family: str
    ops: tuple[int, ...]
    source: str
    internal: frozenset[str]
    in_lx: bool
    time_s: float
    unfused_s: float
    passes: int = 1

    @property
    def where(self) -> str:
        """Where its intermediates are: in LX, streamed in two passes, or through DDR.

        ``intermediates in LX``, ``two passes, rows over LX``, ``intermediates through DDR``.
        """
        if self.in_lx:
            return "intermediates in LX"
        if self.passes > 1:
            return f"{_PASSES.get(self.passes, self.passes)} passes, rows over LX"
        return "intermediates through DDR"

    def describe(self) -> str:
        """``softmax (8 ops, intermediates in LX)``, ``... two passes, rows over LX)``."""
        return f"{self.family} ({len(self.ops)} ops, {self.where})"


_PASSES = {2: "two", 3: "three"}


@dataclass(frozen=True)
class DeviceProgram:
    """A program planned for a machine.

    The ops of loop bodies and ``cond`` branches are listed too (``op.region`` says
    where). The totals (:attr:`time_s`, :attr:`macs`, :attr:`read_bytes`,
    :attr:`write_bytes`) sum the :attr:`counted` ops: a ``scan`` body's ops count every
    run, a ``while`` body (and its predicate) once, as a lower bound (:attr:`lower_bound`),
    and of a ``cond``'s branches only the costliest (by predicted time).

    Attributes:
        ops: the ops in program order.
        machine: the machine profile.
        lx: the LX placement of the intermediates.
        groups: the fused kernels (each op's ``group`` points here).
    """

    ops: tuple[DeviceOp, ...]
    machine: Machine
    lx: LXPlan
    groups: tuple[FusedGroup, ...] = ()

    @property
    def counted(self) -> tuple[DeviceOp, ...]:
        """The ops the totals count (all but those of the cheaper ``cond`` branches)."""
        return tuple(op for op in self.ops if op.runs)

    @property
    def lower_bound(self) -> bool:
        """Whether the totals are a lower bound: a ``while`` body counts once."""
        return any(r.kind == "while" for op in self.ops if op.region for r in op.region.chain())

    @property
    def time_s(self) -> float:
        """Predicted seconds: the sum of the counted ops' times."""
        return sum(op.time_s for op in self.counted)

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the counted ops."""
        return sum(op.macs for op in self.counted)

    @property
    def read_bytes(self) -> int:
        """DDR bytes the counted ops read."""
        return sum(op.read_bytes for op in self.counted)

    @property
    def write_bytes(self) -> int:
        """DDR bytes the counted ops write."""
        return sum(op.write_bytes for op in self.counted)

    @property
    def compute_ops(self) -> tuple[DeviceOp, ...]:
        """The divided ops."""
        return tuple(op for op in self.ops if op.division is not None)

    @property
    def lx_peak(self) -> int:
        """The LX bytes per core the program needs: the highest byte the LX plan places.

        Never above :attr:`lx_budget`; every op's ``lx_peak`` (the bytes in use while it
        runs) is at most this.
        """
        return self.lx.peak

    @property
    def lx_budget(self) -> int:
        """The usable LX bytes per core (``machine.lx_usable``)."""
        return self.machine.lx_usable

    @property
    def lx_fraction(self) -> float:
        """The backend's scratchpad budget the prediction was made with."""
        return self.machine.lx_fraction

    def residency(self, name: str) -> Residency:
        """Where the value ``name`` (an op's input or output) lives.

        In LX (the cores of the op writing it, its per-core address and aligned size)
        if the LX plan placed it there, else DDR.

        Raises:
            DeviceError: for a name no op reads or writes.
        """
        writers, read = self._values
        op = writers.get(name)
        if op is not None and op.division is not None and self.lx.in_lx(name):
            at, size = self.lx.address[name], self.lx.sizes[name]
            return Residency.lx(op.division.cores_used, at, size)
        if op is None and name not in read:
            raise DeviceError(f"DeviceProgram.residency: no op reads or writes a value {name!r}")
        return DDR

    @functools.cached_property
    def _values(self) -> tuple[dict[str, DeviceOp], frozenset[str]]:
        """The op writing each value, and the values ops read."""
        writers = {op.desc.output[0]: op for op in self.ops}
        return writers, frozenset(n for op in self.ops for n, _ in op.desc.inputs)

    def table(self) -> list[dict[str, object]]:
        """One row per op: what it is, where, its division and its predicted cost.

        ``relayout_us``: its in-group relayout's time (a 16 <-> 32-bit conversion in
        the standard order; 0 for most ops); ``note`` says so (:func:`_relayout_note`).
        """
        return [
            {
                "op": f"{op.index}_{op.opfunc}",
                "source": op.source,
                "division": op.division.describe() if op.division else op.desc.kind,
                "read_bytes": op.read_bytes,
                "write_bytes": op.write_bytes,
                "macs": op.macs,
                "lx_peak": op.lx_peak,
                "time_us": op.time_s * 1e6,
                "relayout_us": op.cost.relayout_s * 1e6,
                "note": _relayout_note(op),
                "bound": op.bound,
                "kernel": "" if op.group is None else f"#{op.group} {self.groups[op.group].family}",
                "loop": _where(op),
            }
            for op in self.ops
            if op.desc.kind != "view"
        ]

    def __str__(self) -> str:
        rows = self.table()
        m = self.machine
        out = [f"device model ({m.name}, {m.cores} cores, LX fraction {m.lx_fraction:g}):"]
        for r in rows:
            out.append(
                f"  {r['op']:<16} {r['division']:<40} read {r['read_bytes']:>10} B  write "
                f"{r['write_bytes']:>10} B  MACs {r['macs']:>12}  LX {r['lx_peak']:>8} B  "
                f"{r['time_us']:10.3f} us  {r['bound']}  [{r['source']}]"
                + (f"  {r['note']}" if r["note"] else "")
                + (f"  fused {r['kernel']}" if r["kernel"] else "")
                + (f"  {r['loop']}" if r["loop"] else "")
            )
        for g in self.groups:
            out.append(
                f"  fused kernel #{g.index}: {g.describe()} {g.time_s * 1e6:.3f} us "
                f"(as separate kernels {g.unfused_s * 1e6:.3f} us)  [{g.source}]"
            )
        bound = " (a lower bound: while loops counted once)" if self.lower_bound else ""
        out.append(f"  predicted time: {self.time_s * 1e6:.3f} us{bound}")
        return "\n".join(out)


def _relayout_note(op: DeviceOp) -> str:
    """What an op's row says of its in-group relayout (none: ``""``).

    An op alone pays it after its conversion: its time includes it. In a fused kernel
    it is part of the kernel's LX-port term, which overlaps its DDR and PT terms
    (``device._kernels``).
    """
    us = op.cost.relayout_s * 1e6
    if not us:
        return ""
    if op.group is None:
        return f"incl. {us:.3f} us in-group relayout"
    return f"in-group relayout {us:.3f} us in the kernel's LX term"


def _where(op: DeviceOp) -> str:
    """The loops and branches around an op, and whether the totals leave it out."""
    if op.region is None:
        return ""
    return op.region.describe() + ("" if op.runs else " (not counted: a cheaper branch)")
